package hub

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"linger/notebooks/msg"
)

// ReportActivity posts last to the hub's activity URL, for this server
// and for its user, as jupyterhub-singleuser's notify_activity; the hub's
// idle culler reads it.
func (a *Auth) ReportActivity(ctx context.Context, last time.Time) error {
	ts := msg.FormatDate(last) // what /api/status says, and the hub parses
	body, _ := json.Marshal(map[string]any{
		"servers":       map[string]any{a.cfg.ServerName: map[string]string{"last_activity": ts}},
		"last_activity": ts,
	})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.cfg.ActivityURL, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "token "+a.cfg.APIToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := a.do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode >= 300 {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("%s: %s", resp.Status, bytes.TrimSpace(msg))
	}
	return nil
}

// RunActivity reports last() at once and then every ActivityInterval
// until ctx is done. A failed report is logged and tried again sooner
// (after 1 s, doubling up to the interval), so a hub that restarts
// hears from the server when it is back. Without an activity URL it
// returns at once.
func (a *Auth) RunActivity(ctx context.Context, last func() time.Time, log *slog.Logger) {
	if a.cfg.ActivityURL == "" {
		return
	}
	retry := time.Second
	for {
		wait := a.cfg.ActivityInterval
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := a.ReportActivity(rctx, last())
		cancel()
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			log.Warn("report activity to the hub", "url", a.cfg.ActivityURL, "err", err, "retry_in", min(retry, wait))
			wait = min(retry, wait)
			retry *= 2
		default:
			retry = time.Second
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}
