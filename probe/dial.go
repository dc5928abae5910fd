package probe

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"linger/timeline/event"
)

// The protocol between a probe and the server (docs/probe.md): a probe
// posts each batch to
//
//	POST {server}/api/probes/{name}/events?instance=I&from=SEQ[&defs=all][&end=1]
//	Authorization: token T
//	Content-Type: application/x-linger-events
//
// with an event.Batch payload as its body: the definitions the server does
// not have yet (all of them with defs=all), then the events from SEQ on,
// consecutive. instance tells this Probe from others of the same name (a
// replica, the same service restarted). end=1 says the probe closed after
// this batch. The server answers 200 with an Answer naming the next seq
// it wants; 409 with one when SEQ is not that seq (a batch out of order,
// resent or after a gap: the probe resumes from Next) or, with Defs set,
// when it does not know the instance and needs every definition first.
const (
	// ContentType is the media type of a batch.
	ContentType = "application/x-linger-events"
	// MaxBatchEvents is the most events a Probe posts at once.
	MaxBatchEvents = 4096
)

// EventsPath is the path, below the server's base URL, a probe named name
// posts its batches to.
func EventsPath(name string) string { return "/api/probes/" + name + "/events" }

// Answer is the JSON body of the server's answer to a batch (200 or 409).
type Answer struct {
	// Next is the seq of the event the server wants next: one past the
	// last it has.
	Next uint64 `json:"next"`
	// Defs, on a 409, asks for every definition again (defs=all).
	Defs bool `json:"defs,omitempty"`
	// Source and Trace are the probe's live source id on the server and
	// its trace's file name.
	Source string `json:"source,omitempty"`
	Trace  string `json:"trace,omitempty"`
	// Message says what was wrong, on an error.
	Message string `json:"message,omitempty"`
}

const (
	maxBackoff = 5 * time.Second
	// heartbeat is how often a Probe with nothing to send posts an empty
	// batch, so that the server, whose idle timeout is longer, keeps its
	// trace open.
	heartbeat = 30 * time.Second
)

// Dial makes the Probe post what it records to the Linger server at
// rawURL (its base URL, e.g. "http://linger:8888/"), with the server's
// token. It records from now on; events wait in the ring (Options.
// RingEvents) until the server acknowledges them. It returns at once:
// the server may be down, and the Probe keeps trying (FlushInterval,
// doubling to 5 s), keeping what fits in its ring and counting what does
// not; when the server answers again, it resumes exactly where the
// server's trace stops and first records a mark saying how many events
// were dropped, then the frees and scope ends among them whose
// allocations and beginnings the trace has, so that the trace does not
// take a freed object for a leak.
//
// The service dials out and the server never connects to it: a service
// behind a firewall, a NAT or a load balancer, and any number of its
// replicas, reach one server with no port opened and nothing to
// discover.
//
// Dial fails on a URL that is not http or https, on a Probe with a Sink,
// one already dialed, or a closed one (ErrClosed).
func (p *Probe) Dial(rawURL, token string) error {
	if p == nil {
		return errors.New("probe: Dial on a nil Probe")
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return fmt.Errorf("probe %s: server URL: %w", p.name, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("probe %s: server URL %q: want http://host[:port][/base/]", p.name, rawURL)
	}
	u.Path = strings.TrimSuffix(u.Path, "/") + EventsPath(p.name)
	u.RawQuery, u.Fragment = "", ""
	client := p.opts.Client
	if client == nil {
		client = &http.Client{Timeout: 10 * time.Second}
	}
	ctx, cancel := context.WithCancel(context.Background())
	t := &sender{
		p: p, url: u.String(), token: token, client: client, instance: newInstance(),
		wake: make(chan struct{}, 1), closing: make(chan struct{}), done: make(chan struct{}),
		ctx: ctx, cancel: cancel, full: true, wait: p.opts.FlushInterval,
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.closed:
		cancel()
		return ErrClosed
	case p.sink != nil:
		cancel()
		return fmt.Errorf("probe %s: Dial with a Sink: one or the other", p.name)
	case p.tx != nil:
		cancel()
		return fmt.Errorf("probe %s: dialed already", p.name)
	}
	n := 1 << bits.Len(uint(max(p.opts.RingEvents, 64)-1))
	p.ring = make([]event.Event, n)
	p.mask = uint64(n - 1)
	p.acked = p.seq
	p.kickAt = uint64(min(MaxBatchEvents, n/2))
	p.tx = t
	go t.run()
	return nil
}

func newInstance() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// sender is a dialed Probe's goroutine: the one reader of the ring.
type sender struct {
	p        *Probe
	url      string
	token    string
	client   *http.Client
	wake     chan struct{}
	closing  chan struct{} // closed by Close
	done     chan struct{} // closed when run returns
	ctx      context.Context
	cancel   context.CancelFunc
	instance string
	sentDefs int           // definitions the server has
	full     bool          // the next batch carries every definition
	wait     time.Duration // before the next try, after a failure
	last     time.Time     // the last batch the server took
	failing  bool
	// Under p.mu, for Stats:
	err           error
	source, trace string
	// ended: the server took the last batch, end=1.
	ended bool
}

// kick wakes the sender: a batch's worth of events waits.
func (t *sender) kick() {
	select {
	case t.wake <- struct{}{}:
	default:
	}
}

func (t *sender) run() {
	defer close(t.done)
	tick := time.NewTicker(t.p.opts.FlushInterval)
	defer tick.Stop()
	closing := false
	for {
		if !closing {
			select {
			case <-tick.C:
			case <-t.wake:
			case <-t.closing:
				closing = true
			}
		}
		for {
			more, err := t.post(closing)
			if t.ended {
				return
			}
			if err != nil || (closing && !more) {
				if !t.sleep(&closing) {
					return
				}
				continue
			}
			if !more {
				break
			}
		}
	}
}

// sleep waits before the next try after a failure, doubling the wait. A
// Close meanwhile ends the wait (and the sender goes on trying, closing,
// until Close's timeout cancels it); sleep reports false once cancelled.
func (t *sender) sleep(closing *bool) bool {
	timer := time.NewTimer(t.wait)
	defer timer.Stop()
	t.wait = min(2*t.wait, maxBackoff)
	c := t.closing
	if *closing {
		c = nil
	}
	select {
	case <-timer.C:
		return true
	case <-c:
		*closing = true
		return true
	case <-t.ctx.Done():
		return false
	}
}

// post sends the next batch, if there is anything to send (or the
// heartbeat is due, or the probe closes), and reports whether more waits.
func (t *sender) post(end bool) (more bool, err error) {
	p := t.p
	now := p.now()
	p.mu.Lock()
	if end && (p.lost > 0 || len(p.repairs) > 0) {
		// Closed: no event comes to carry the mark and the repairs in.
		p.repairLocked(now, 0)
	}
	from := p.acked + 1
	to := min(p.seq, p.acked+MaxBatchEvents) // the last event to send
	defs := p.defs
	ring, mask := p.ring, p.mask
	last := end && to == p.seq && p.lost == 0 && len(p.repairs) == 0
	p.mu.Unlock()
	start := t.sentDefs
	if t.full {
		start = 0
	}
	if from > to && start == len(defs) && !last && time.Since(t.last) < heartbeat {
		return false, nil
	}
	var b event.Batch
	for _, d := range defs[start:] {
		d.apply(&b)
	}
	for seq := from; seq <= to; seq++ {
		b.Emit(ring[seq&mask])
	}
	q := url.Values{"instance": {t.instance}, "from": {strconv.FormatUint(from, 10)}}
	if t.full {
		q.Set("defs", "all")
	}
	if last {
		q.Set("end", "1")
	}
	ans, code, err := t.do(q, b.Take())
	switch {
	case err != nil:
		t.full = true // the server may have restarted
		return false, t.failed(err)
	case code == http.StatusOK:
		t.ok(ans, len(defs))
		t.ended = last
		p.mu.Lock()
		more = p.seq > p.acked
		p.mu.Unlock()
		return more && !last, nil
	case code == http.StatusConflict && ans.Next > 0:
		// Not the seq the server wants, or an instance it does not know:
		// resume from its Next, and with every definition if it asks.
		p.mu.Lock()
		if ans.Next-1 < p.acked || ans.Next-1 > p.seq {
			// It wants what this Probe no longer has (or never had): a
			// new instance, so that the server starts a new trace.
			t.instance = newInstance()
			t.full = true
		} else {
			t.ackLocked(ans.Next - 1)
			t.full = ans.Defs
		}
		p.mu.Unlock()
		return true, nil
	case (code == http.StatusBadRequest || code == http.StatusRequestEntityTooLarge) && from <= to:
		// The server refuses these events and would refuse them again
		// (a body it cannot take, over its bound): they are dropped and
		// counted, as a full ring's are, so that the rest still goes.
		t.full = true
		p.mu.Lock()
		if to <= p.seq && from == p.acked+1 {
			n := to - p.acked
			p.acked = to
			p.dropped += n
			p.lost += n
		}
		p.mu.Unlock()
		return false, t.failed(fmt.Errorf("server refused events %d to %d, dropped (%d): %s", from, to, code, ans.Message))
	default:
		t.full = true
		return false, t.failed(fmt.Errorf("server answered %d: %s", code, ans.Message))
	}
}

// do posts one batch and reads the answer.
func (t *sender) do(q url.Values, body []byte) (Answer, int, error) {
	var ans Answer
	req, err := http.NewRequestWithContext(t.ctx, http.MethodPost, t.url+"?"+q.Encode(), bytes.NewReader(body))
	if err != nil {
		return ans, 0, err
	}
	req.Header.Set("Content-Type", ContentType)
	req.Header.Set("Authorization", "token "+t.token)
	resp, err := t.client.Do(req)
	if err != nil {
		return ans, 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return ans, 0, err
	}
	if err := json.Unmarshal(b, &ans); err != nil && (resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusConflict) {
		return ans, 0, fmt.Errorf("server answered %d with %q: %w", resp.StatusCode, b, err)
	}
	if ans.Message == "" && resp.StatusCode != http.StatusOK {
		ans.Message = strings.TrimSpace(string(b))
	}
	return ans, resp.StatusCode, nil
}

// ok takes a 200: the server has every event before ans.Next and the
// ndefs definitions sent so far.
func (t *sender) ok(ans Answer, ndefs int) {
	p := t.p
	t.sentDefs, t.full = ndefs, false
	t.wait = p.opts.FlushInterval
	t.last = time.Now()
	if t.failing {
		t.failing = false
		p.log.Info("probe: the server takes events again", "probe", p.name, "url", t.url)
	}
	now := p.now()
	p.mu.Lock()
	defer p.mu.Unlock()
	t.err, t.source, t.trace = nil, ans.Source, ans.Trace
	if ans.Next > 0 && ans.Next-1 >= p.acked && ans.Next-1 <= p.seq {
		t.ackLocked(ans.Next - 1)
	}
	if p.lost > 0 || len(p.repairs) > 0 {
		// Room again: the mark and the repairs of a gap go in now, not
		// at the next event, which may be long in coming.
		p.repairLocked(now, 0)
	}
}

// ackLocked records that the server has every event up to seq. p.mu held.
func (t *sender) ackLocked(seq uint64) {
	p := t.p
	p.sent += seq - p.acked
	p.acked = seq
}

func (t *sender) failed(err error) error {
	p := t.p
	if !t.failing {
		t.failing = true
		p.log.Warn("probe: cannot post events; keeping them in the ring", "probe", p.name, "url", t.url, "err", err)
	}
	p.mu.Lock()
	t.err = err
	p.mu.Unlock()
	return err
}

// close asks the sender to post the rest with end=1 and waits for it, at
// most timeout.
func (t *sender) close(timeout time.Duration) error {
	close(t.closing)
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-t.done:
	case <-timer.C:
		t.cancel()
		<-t.done
	}
	t.cancel()
	p := t.p
	p.mu.Lock()
	defer p.mu.Unlock()
	if !t.ended {
		err := t.err
		if err == nil {
			err = errors.New("timed out")
		}
		return fmt.Errorf("probe %s: closed with %d events the server did not take: %w", p.name, p.seq-p.acked, err)
	}
	return nil
}
