package live

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"

	"linger/timeline"
	"linger/timeline/lod"
)

var errEOF = io.EOF

const (
	writeWait  = 10 * time.Second
	pongWait   = 60 * time.Second
	pingPeriod = pongWait * 9 / 10
)

// conn is one browser's timeline stream.
//
// Concurrency, as in gorilla's chat example: exactly one goroutine reads
// (readPump, started by serveStream) and exactly one writes (writePump,
// on the handler's goroutine). The reader only reads control frames and
// the client's close, and tells the writer it is gone by cancelling ctx;
// everything sent comes from the writer, which owns the subscription.
type conn struct {
	h   *Handler
	ws  *websocket.Conn
	rec *timeline.Recorder
	ki  *kernelIndex

	next     uint64 // Seq of the next event the client needs
	lastTime int64  // Time of the last event sent (or skipped over)
	buf      []byte

	// Flow control, set from the query: maxDelay (ns of trace time, 0 off)
	// and, once the client acknowledges, window (events in flight).
	maxDelay int64
	window   uint64
	acked    atomic.Uint64 // the last Seq the client says it has handled
	acking   atomic.Bool   // the client has sent an ack
	ack      chan struct{} // signalled by the reader on each ack
}

func (h *Handler) serveStream(w http.ResponseWriter, r *http.Request) {
	rec, err := h.recorder(r)
	if err != nil {
		writeError(w, err)
		return
	}
	var from uint64 = 1
	if s := r.URL.Query().Get("from"); s != "" {
		from, err = strconv.ParseUint(s, 10, 64)
		if err != nil {
			writeError(w, errors.Join(errBadRequest, errors.New("from is not a sequence number")))
			return
		}
	}
	up := websocket.Upgrader{CheckOrigin: h.opts.CheckOrigin}
	ws, err := up.Upgrade(w, r, nil)
	if err != nil {
		return // Upgrade has answered.
	}
	if r.URL.Query().Get("max_delay_ms") != "" {
		if _, err := strconv.ParseUint(r.URL.Query().Get("max_delay_ms"), 10, 64); err != nil {
			ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseUnsupportedData, "max_delay_ms is not a number"), time.Now().Add(writeWait))
			ws.Close()
			return
		}
	}
	c := &conn{h: h, ws: ws, rec: rec, ki: h.kernelIndex(rec), next: max(from, 1), window: h.opts.Window, ack: make(chan struct{}, 1)}
	if ms, err := strconv.ParseInt(r.URL.Query().Get("max_delay_ms"), 10, 64); err == nil && ms > 0 {
		c.maxDelay = ms * int64(time.Millisecond)
	}
	ctx, cancel := context.WithCancel(r.Context())
	go c.readPump(cancel)
	err = c.writePump(ctx)
	cancel()
	if err != nil && !errors.Is(err, context.Canceled) {
		h.log.Info("timeline stream", "err", err)
	}
	ws.Close()
}

// readPump reads acknowledgements ({"type":"ack","seq":N}) until the
// client goes, then cancels the writer. Anything else is ignored.
func (c *conn) readPump(cancel context.CancelFunc) {
	defer cancel()
	c.ws.SetReadLimit(4096)
	c.ws.SetReadDeadline(time.Now().Add(pongWait))
	c.ws.SetPongHandler(func(string) error { return c.ws.SetReadDeadline(time.Now().Add(pongWait)) })
	for {
		_, p, err := c.ws.ReadMessage()
		if err != nil {
			return
		}
		c.ws.SetReadDeadline(time.Now().Add(pongWait))
		var m struct {
			Type string `json:"type"`
			Seq  uint64 `json:"seq"`
		}
		if json.Unmarshal(p, &m) == nil && m.Type == "ack" {
			c.acked.Store(m.Seq)
			c.acking.Store(true)
			select {
			case c.ack <- struct{}{}:
			default:
			}
		}
	}
}

// waitWindow blocks, once the client acknowledges what it has handled,
// while more than window events are in flight to it: events then pile up
// in the trace rather than in socket buffers, and the client is caught up
// with a summary instead of lagging further.
func (c *conn) waitWindow(ctx context.Context) error {
	for c.window > 0 && c.acking.Load() && c.next-1 > c.acked.Load()+c.window {
		select {
		case <-c.ack:
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pingPeriod):
			c.ws.SetWriteDeadline(time.Now().Add(writeWait))
			if err := c.ws.WriteMessage(websocket.PingMessage, nil); err != nil {
				return err
			}
		}
	}
	return nil
}

// writePump sends the stream: a start message, then definitions and
// events batch by batch, catch-up summaries when the client has fallen
// more than MaxLag events behind, and an end message when the trace ends.
func (c *conn) writePump(ctx context.Context) error {
	sub := c.rec.Subscribe(c.next)
	defer func() { sub.Close() }()
	if err := c.send(startMsg{Type: "start", From: c.next, Head: c.rec.Stats().LastSeq}); err != nil {
		return err
	}
	lastPing := time.Now()
	for {
		wait, cancel := context.WithTimeout(ctx, pingPeriod)
		b, err := sub.Next(wait)
		cancel()
		switch {
		case err == nil:
		case errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
		case errors.Is(err, io.EOF):
			reason, _ := sub.End()
			return c.send(endMsg{Type: "end", Last: c.next - 1, Reason: reason})
		default:
			return err
		}
		if time.Since(lastPing) >= pingPeriod {
			c.ws.SetWriteDeadline(time.Now().Add(writeWait))
			if err := c.ws.WriteMessage(websocket.PingMessage, nil); err != nil {
				return err
			}
			lastPing = time.Now()
		}
		if len(b.Events) == 0 && len(b.Strings) == 0 && len(b.Sites) == 0 {
			continue
		}
		if err := c.waitWindow(ctx); err != nil {
			return err
		}
		// A batch the client is too far behind for is not sent: a summary
		// replaces it and what followed it, and the stream goes on from
		// the index's last event (the new subscription's first batch
		// carries every definition, this batch's too).
		if len(b.Events) > 0 {
			if to, ok := c.behind(b.Events[0].Time); ok && to >= b.Events[len(b.Events)-1].Seq {
				if err := c.catchup(to); err != nil {
					return err
				}
				sub.Close()
				sub = c.rec.Subscribe(c.next)
				continue
			}
		}
		if err := c.writeBatch(b); err != nil {
			return err
		}
	}
}

// behind reports whether the client, about to be sent the event c.next
// (at trace time t), is more than MaxLag events or maxDelay of trace time
// behind the trace, and the last event a catch-up summary can cover: the
// last one the index has seen.
func (c *conn) behind(t int64) (uint64, bool) {
	_, seq, last := c.ki.ix.Last()
	head := c.rec.Stats().LastSeq
	late := head >= c.next && head-(c.next-1) > c.h.opts.MaxLag
	if c.maxDelay > 0 && last-t > c.maxDelay {
		late = true
	}
	return seq, late && seq >= c.next
}

// catchup tells the client that events next..to are skipped and sends
// their summary instead.
func (c *conn) catchup(to uint64) error {
	_, seq, t1 := c.ki.ix.Last()
	if seq < to {
		to = seq
	}
	m := catchupMsg{Type: "catchup", From: c.next, To: to, T0: c.lastTime, T1: t1 + 1}
	m.Buckets = c.ki.ix.Query(m.T0, m.T1, c.h.opts.CatchupBuckets)
	m.Categories = categoryNames()
	c.next, c.lastTime = to+1, t1
	return c.send(m)
}

type startMsg struct {
	Type string `json:"type"`
	From uint64 `json:"from"`
	Head uint64 `json:"head"`
}

type endMsg struct {
	Type   string `json:"type"`
	Last   uint64 `json:"last"`
	Reason string `json:"reason"`
}

type catchupMsg struct {
	Type       string       `json:"type"`
	From       uint64       `json:"from"`
	To         uint64       `json:"to"`
	T0         int64        `json:"t0"`
	T1         int64        `json:"t1"`
	Categories []string     `json:"categories"`
	Buckets    []lod.Bucket `json:"buckets"`
}

func (c *conn) send(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return c.write(b)
}

func (c *conn) write(b []byte) error {
	c.ws.SetWriteDeadline(time.Now().Add(writeWait))
	return c.ws.WriteMessage(websocket.TextMessage, b)
}

// writeBatch sends a batch's definitions, then its events, in the compact
// JSON of docs/timeline.md, written by hand: it is the hot path.
func (c *conn) writeBatch(b timeline.Batch) error {
	if len(b.Strings) > 0 || len(b.Sites) > 0 {
		p := append(c.buf[:0], `{"type":"defs","strings":[`...)
		for i, d := range b.Strings {
			if i > 0 {
				p = append(p, ',')
			}
			p = append(p, '[')
			p = strconv.AppendUint(p, uint64(d.ID), 10)
			p = append(p, ',')
			p = appendString(p, d.Text)
			p = append(p, ']')
		}
		p = append(p, `],"sites":[`...)
		for i, d := range b.Sites {
			if i > 0 {
				p = append(p, ',')
			}
			p = append(p, '[')
			p = strconv.AppendUint(p, uint64(d.ID), 10)
			p = append(p, ',')
			p = appendString(p, d.Site.Cell)
			p = append(p, ',')
			p = strconv.AppendInt(p, int64(d.Site.Line), 10)
			p = append(p, ",["...)
			for j, f := range d.Site.Frames {
				if j > 0 {
					p = append(p, ',')
				}
				p = append(p, '[')
				p = appendString(p, f.Func)
				p = append(p, ',')
				p = appendString(p, f.File)
				p = append(p, ',')
				p = strconv.AppendInt(p, int64(f.Line), 10)
				p = append(p, ']')
			}
			p = append(p, "]]"...)
		}
		p = append(p, "]}"...)
		c.buf = p
		if err := c.write(p); err != nil {
			return err
		}
	}
	if len(b.Events) == 0 {
		return nil
	}
	p := append(c.buf[:0], `{"type":"events","events":[`...)
	for i, e := range b.Events {
		if i > 0 {
			p = append(p, ',')
		}
		p = append(p, '[')
		for j, v := range [...]uint64{e.Seq, uint64(e.Time), uint64(e.Kind), uint64(e.Category), uint64(e.Expect),
			e.Addr, e.Size, e.Requested, uint64(e.Scope), uint64(e.Site), uint64(e.Label), e.Extra} {
			if j > 0 {
				p = append(p, ',')
			}
			if j == 1 {
				p = strconv.AppendInt(p, int64(v), 10)
			} else {
				p = strconv.AppendUint(p, v, 10)
			}
		}
		p = append(p, ']')
	}
	p = append(p, "]}"...)
	c.buf = p
	last := b.Events[len(b.Events)-1]
	c.next, c.lastTime = last.Seq+1, last.Time
	return c.write(p)
}

func appendString(p []byte, s string) []byte {
	q, _ := json.Marshal(s)
	return append(p, q...)
}
