package live

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"

	"linger/server/httperr"
	"linger/timeline"
	"linger/timeline/event"
	"linger/timeline/lod"
	"linger/timeline/traces"
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
// the client's acks and close, and tells the writer it is gone by
// cancelling ctx; everything sent comes from the writer, which owns the
// subscriptions.
type conn struct {
	h   *Handler
	ws  *websocket.Conn
	src traces.Source
	tr  *traces.Trace // src's, for catch-up summaries

	next     uint64 // Seq of the next live event the client needs
	lastTime int64  // Time of the last live event sent (or summarised)
	buf      []byte

	binary   bool // events as binary frames (?format=binary)
	backfill bool // a summary is followed by its events (?backfill=1)

	// Detail owed: ranges the client has only as a summary, oldest first,
	// and the subscription reading gaps[0] with what it read and has not
	// been sent yet.
	gaps  []gap
	bsub  traces.Subscription
	bpend []event.Event

	// Flow control, set from the query: maxDelay (ns of trace time, 0 off)
	// and, once the client acknowledges, window (events in flight).
	maxDelay   int64
	window     uint64
	summarised time.Time     // when the last summary was sent
	sent       uint64        // events sent, live and backfill
	acked      atomic.Uint64 // ackSeq: the last Seq handled; ackCount: events handled
	ackMode    atomic.Int32  // ackNone until the client first acknowledges
	ackedSeq   atomic.Uint64 // the last live Seq the client has handled
	marks      []mark        // the last live event of each batch (or summary) sent and not yet acknowledged, after the last one that is
	ack        chan struct{} // signalled by the reader on each ack
}

// gap is a range of sequence numbers, from..to inclusive.
type gap struct{ from, to uint64 }

// mark is the last live event of a batch sent.
type mark struct {
	seq  uint64
	time int64
}

const (
	ackNone  = iota
	ackSeq   // {"type":"ack","seq":N}: the live position only
	ackCount // {"type":"ack","events":N}: events handled on this connection
)

// maxGaps bounds the ranges a client may say it lacks when it resumes.
const maxGaps = 256

// maxWindow bounds the window a client may ask for (?window=).
const maxWindow = 1 << 20

// maxMarks bounds the batches noted for a client's lag.
const maxMarks = 1 << 12

// backfillChunk is the most backfill events sent at a time.
const backfillChunk = 4096

// backfillPause is how long after a summary backfill waits: a client that
// was just behind gets the live stream alone until it keeps up.
const backfillPause = 250 * time.Millisecond

func (h *Handler) serveStream(w http.ResponseWriter, r *http.Request) {
	src, err := h.source(r)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	q := r.URL.Query()
	var from uint64 = 1
	if s := q.Get("from"); s != "" {
		from, err = strconv.ParseUint(s, 10, 64)
		if err != nil {
			h.writeError(w, r, httperr.New(httperr.BadRequest, "from is not a sequence number"))
			return
		}
	}
	from = max(from, 1)
	gaps, err := parseGaps(q.Get("gaps"), from)
	if err != nil {
		h.writeError(w, r, httperr.Wrap(httperr.BadRequest, err))
		return
	}
	format := q.Get("format")
	if format != "" && format != "json" && format != "binary" {
		h.writeError(w, r, httperr.New(httperr.BadRequest, "format %q: want json or binary", format))
		return
	}
	up := websocket.Upgrader{CheckOrigin: h.opts.CheckOrigin}
	ws, err := up.Upgrade(w, r, nil)
	if err != nil {
		return // Upgrade has answered.
	}
	if q.Get("max_delay_ms") != "" {
		if _, err := strconv.ParseUint(q.Get("max_delay_ms"), 10, 64); err != nil {
			ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseUnsupportedData, "max_delay_ms is not a number"), time.Now().Add(writeWait))
			ws.Close()
			return
		}
	}
	c := &conn{h: h, ws: ws, src: src, tr: h.traces.Live(src), next: from, window: h.opts.Window, ack: make(chan struct{}, 1),
		binary: format == "binary", backfill: q.Get("backfill") == "1" || len(gaps) > 0, gaps: gaps}
	if ms, err := strconv.ParseInt(q.Get("max_delay_ms"), 10, 64); err == nil && ms > 0 {
		c.maxDelay = ms * int64(time.Millisecond)
	}
	// A client may ask for a wider window (a browser's pipeline from socket
	// to page holds more than a Go client's), up to maxWindow.
	if n, err := strconv.ParseUint(q.Get("window"), 10, 64); err == nil && n > c.window {
		c.window = min(n, maxWindow)
	}
	ctx, cancel := context.WithCancel(r.Context())
	read := make(chan struct{})
	go func() { c.readPump(cancel); close(read) }()
	err = c.writePump(ctx)
	if err == nil {
		// The trace ended: close with a handshake, so that the client reads
		// what was sent. Closing the socket with its acks unread would
		// reset the connection and could lose the last messages.
		ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, "trace ended"), time.Now().Add(writeWait))
		select {
		case <-read:
		case <-time.After(writeWait):
		}
	}
	cancel()
	if err != nil && !errors.Is(err, context.Canceled) {
		h.log.Info("timeline stream", "err", err)
	}
	ws.Close()
}

// parseGaps parses ?gaps=A-B,C-D: ranges below from, ascending and
// disjoint, that the client has only as summaries.
func parseGaps(s string, from uint64) ([]gap, error) {
	if s == "" {
		return nil, nil
	}
	parts := strings.Split(s, ",")
	if len(parts) > maxGaps {
		return nil, fmt.Errorf("more than %d gaps", maxGaps)
	}
	var gaps []gap
	for _, p := range parts {
		a, b, ok := strings.Cut(p, "-")
		x, err1 := strconv.ParseUint(a, 10, 64)
		y, err2 := strconv.ParseUint(b, 10, 64)
		if !ok || err1 != nil || err2 != nil || x == 0 || y < x || y >= from || (len(gaps) > 0 && x <= gaps[len(gaps)-1].to) {
			return nil, fmt.Errorf("gaps: %q is not a range A-B of sequence numbers below from=%d, after the one before", p, from)
		}
		gaps = append(gaps, gap{x, y})
	}
	return gaps, nil
}

// readPump reads acknowledgements until the client goes, then cancels
// the writer. Anything else is ignored.
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
		a, ok := parseAck(p)
		if !ok {
			continue
		}
		c.ackedSeq.Store(a.seq)
		c.acked.Store(a.acked)
		c.ackMode.Store(a.mode)
		select {
		case c.ack <- struct{}{}:
		default:
		}
	}
}

// ack is a client's acknowledgement: the last live Seq it has handled,
// and what acked holds in its mode (that Seq, or the events it has
// handled on this connection).
type ack struct {
	seq, acked uint64
	mode       int32
}

// parseAck reads a message from the client: {"type":"ack","seq":N} or
// {"type":"ack","seq":N,"events":M}; ok is false for anything else.
func parseAck(p []byte) (a ack, ok bool) {
	var m struct {
		Type   string  `json:"type"`
		Seq    uint64  `json:"seq"`
		Events *uint64 `json:"events"`
	}
	if json.Unmarshal(p, &m) != nil || m.Type != "ack" {
		return ack{}, false
	}
	if m.Events != nil {
		return ack{seq: m.Seq, acked: *m.Events, mode: ackCount}, true
	}
	return ack{seq: m.Seq, acked: m.Seq, mode: ackSeq}, true
}

// inflight reports how many events are sent and not yet acknowledged,
// and whether the client acknowledges at all.
func (c *conn) inflight() (uint64, bool) {
	a := c.acked.Load()
	switch c.ackMode.Load() {
	case ackSeq:
		return c.next - 1 - min(a, c.next-1), true
	case ackCount:
		return c.sent - min(a, c.sent), true
	}
	return 0, false
}

// room is how many backfill events may be sent now: backfill keeps to a
// quarter of the window, so that a live batch never waits behind much of
// it in the client's queue.
func (c *conn) room() uint64 {
	n, ok := c.inflight()
	if !ok || c.window == 0 {
		return backfillChunk
	}
	if limit := c.window / 4; n < limit {
		return min(limit-n, backfillChunk)
	}
	return 0
}

// waitWindow blocks, once the client acknowledges what it has handled,
// while more than window events are in flight to it, or (with maxDelay)
// more than maxDelay of trace time: events then pile up in the trace
// rather than in socket buffers, and the client is caught up with a
// summary instead of lagging further.
func (c *conn) waitWindow(ctx context.Context) error {
	for {
		n, ok := c.inflight()
		full := c.window > 0 && ok && n > c.window
		if lag, ok := c.lag(); ok && c.maxDelay > 0 && lag > c.maxDelay {
			full = true
		}
		if !full {
			return nil
		}
		if err := c.waitAck(ctx, pingPeriod); err != nil {
			return err
		}
	}
}

// mark notes the last live event sent, for lag (the marks the client has
// acknowledged go; a client that does not acknowledge keeps the latest
// maxMarks).
func (c *conn) mark(seq uint64, t int64) {
	if c.maxDelay == 0 {
		return
	}
	if len(c.marks) >= maxMarks {
		c.marks = append(c.marks[:0], c.marks[maxMarks/2:]...)
	}
	c.marks = append(c.marks, mark{seq, t})
}

// lag is the trace time in flight: from the last live event the client
// has acknowledged to the last one sent; false while it has acknowledged
// none.
func (c *conn) lag() (int64, bool) {
	if c.ackMode.Load() == ackNone {
		return 0, false
	}
	a := c.ackedSeq.Load()
	i := 0
	for i+1 < len(c.marks) && c.marks[i+1].seq <= a {
		i++
	}
	c.marks = c.marks[i:]
	if len(c.marks) == 0 || c.marks[0].seq > a {
		return 0, false
	}
	return c.marks[len(c.marks)-1].time - c.marks[0].time, true
}

// waitAck waits for the next acknowledgement, at most d, pinging the
// client if d is the ping period.
func (c *conn) waitAck(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-c.ack:
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		if d >= pingPeriod {
			c.ws.SetWriteDeadline(time.Now().Add(writeWait))
			return c.ws.WriteMessage(websocket.PingMessage, nil)
		}
	}
	return nil
}

// writePump sends the stream: a start message, then definitions and
// events batch by batch, catch-up summaries when the client has fallen
// behind, the events of those summaries (with ?backfill=1) as it catches
// up, and an end message when the trace ends and nothing is owed.
//
// Live events come first: each round sends the next live batch if there
// is one, or else, if the window has room, one chunk of the oldest range
// still owed; so detail fills the time the live stream leaves (a Recorder
// publishes every FlushInterval) and never delays it. While detail is
// owed the live subscription is only polled.
func (c *conn) writePump(ctx context.Context) error {
	sub := c.src.Subscribe(c.next)
	defer func() {
		sub.Close()
		if c.bsub != nil {
			c.bsub.Close()
		}
	}()
	if err := c.send(startMsg{Type: "start", From: c.next, Head: c.src.Head(), Gaps: gapPairs(c.gaps)}); err != nil {
		return err
	}
	lastPing := time.Now()
	live, reason := true, ""
	for {
		progressed := false
		if live {
			// With detail owed, wait for a live batch only while backfill
			// pauses.
			d := pingPeriod
			if len(c.gaps) > 0 {
				d = max(0, backfillPause-time.Since(c.summarised))
			}
			wait, cancel := context.WithTimeout(ctx, d)
			b, err := sub.Next(wait)
			cancel()
			switch {
			case err == nil:
			case errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
			case errors.Is(err, io.EOF):
				live = false
				reason, _ = sub.End()
			default:
				return err
			}
			if len(b.Events) > 0 || len(b.Strings) > 0 || len(b.Sites) > 0 {
				progressed = true
				resubscribe, err := c.live(ctx, b)
				if err != nil {
					return err
				}
				if resubscribe {
					sub.Close()
					sub = c.src.Subscribe(c.next)
				}
			}
		}
		if time.Since(lastPing) >= pingPeriod {
			c.ws.SetWriteDeadline(time.Now().Add(writeWait))
			if err := c.ws.WriteMessage(websocket.PingMessage, nil); err != nil {
				return err
			}
			lastPing = time.Now()
		}
		if len(c.gaps) == 0 {
			if !live {
				return c.send(endMsg{Type: "end", Last: c.next - 1, Reason: reason})
			}
			continue
		}
		if progressed || (live && time.Since(c.summarised) < backfillPause) {
			continue
		}
		if n := c.room(); n > 0 {
			if err := c.sendBackfill(ctx, n); err != nil {
				return err
			}
			progressed = true
		}
		if !progressed {
			// Detail is owed but the window is full and nothing is live:
			// wait for the client.
			d := 5 * time.Millisecond
			if !live {
				d = pingPeriod
			}
			if err := c.waitAck(ctx, d); err != nil {
				return err
			}
		}
	}
}

// live sends one live batch, or, if the client is too far behind for it, a
// summary instead; it reports whether the live subscription must start
// again at c.next.
func (c *conn) live(ctx context.Context, b timeline.Batch) (bool, error) {
	if len(b.Events) == 0 {
		return false, c.writeBatch(b, false)
	}
	if err := c.waitWindow(ctx); err != nil {
		return false, err
	}
	// A batch the client is too far behind for is not sent: a summary
	// replaces it and what followed it, and the stream goes on from the
	// index's last event (the new subscription's first batch carries
	// every definition, this batch's too).
	if to, ok := c.behind(b.Events[0].Time); ok && to >= b.Events[len(b.Events)-1].Seq {
		return true, c.catchup()
	}
	return false, c.writeBatch(b, false)
}

// sendBackfill sends at most n events of the oldest range owed.
func (c *conn) sendBackfill(ctx context.Context, n uint64) error {
	g := &c.gaps[0]
	if len(c.bpend) == 0 {
		if c.bsub == nil {
			c.bsub = c.src.Subscribe(g.from)
		}
		b, err := c.bsub.Next(ctx)
		if errors.Is(err, io.EOF) {
			return fmt.Errorf("the trace ends before %d, owed to the client", g.from)
		}
		if err != nil {
			return err
		}
		// Definitions the client has from the live stream, unless it is
		// owed events older than its first live batch: send them (again:
		// an id always has the same meaning).
		if len(b.Strings) > 0 || len(b.Sites) > 0 {
			if err := c.writeDefs(b); err != nil {
				return err
			}
		}
		c.bpend = b.Events
	}
	evs := c.bpend
	i := 0
	for i < len(evs) && evs[i].Seq < g.from {
		i++
	}
	j := i
	for j < len(evs) && evs[j].Seq <= g.to && uint64(j-i) < n {
		j++
	}
	c.bpend = evs[j:]
	if j > i {
		if err := c.writeEvents(evs[i:j], true); err != nil {
			return err
		}
		g.from = evs[j-1].Seq + 1
	}
	if g.from > g.to || (len(c.bpend) > 0 && c.bpend[0].Seq > g.to) {
		c.gaps = c.gaps[1:]
		c.bsub.Close()
		c.bsub, c.bpend = nil, nil
	}
	return nil
}

// behind reports whether the client, about to be sent the event c.next
// (at trace time t), is more than MaxLag events or maxDelay of trace time
// behind the trace, and the last event a catch-up summary can cover: the
// last one the index has seen.
func (c *conn) behind(t int64) (uint64, bool) {
	_, seq, last := c.tr.Index().Last()
	head := c.src.Head()
	late := head >= c.next && head-(c.next-1) > c.h.opts.MaxLag
	if c.maxDelay > 0 && last-t > c.maxDelay {
		late = true
	}
	return seq, late && seq >= c.next
}

// catchup tells the client that events next..to are summarised and sends
// their summary instead; with backfill, their events are owed. to is the
// index's last event (asked again: it may have moved on since behind).
func (c *conn) catchup() error {
	_, to, t1 := c.tr.Index().Last()
	m := catchupMsg{Type: "catchup", From: c.next, To: to, T0: c.lastTime, T1: t1 + 1, Backfill: c.backfill}
	m.Buckets = c.tr.Index().Query(m.T0, m.T1, c.h.opts.CatchupBuckets)
	m.Categories = lod.CategoryNames()
	if c.backfill {
		if k := len(c.gaps) - 1; k >= 0 && c.gaps[k].to+1 == c.next {
			c.gaps[k].to = to
		} else {
			c.gaps = append(c.gaps, gap{c.next, to})
		}
	}
	c.next, c.lastTime, c.summarised = to+1, t1, time.Now()
	c.mark(to, t1)
	return c.send(m)
}

func gapPairs(gs []gap) [][2]uint64 {
	out := make([][2]uint64, len(gs))
	for i, g := range gs {
		out[i] = [2]uint64{g.from, g.to}
	}
	return out
}

type startMsg struct {
	Type string      `json:"type"`
	From uint64      `json:"from"`
	Head uint64      `json:"head"`
	Gaps [][2]uint64 `json:"gaps"` // the ranges owed, from ?gaps
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
	Backfill   bool         `json:"backfill"` // from..to's events follow
	Categories []string     `json:"categories"`
	Buckets    []lod.Bucket `json:"buckets"`
}

func (c *conn) send(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return c.write(websocket.TextMessage, b)
}

func (c *conn) write(typ int, b []byte) error {
	c.ws.SetWriteDeadline(time.Now().Add(writeWait))
	return c.ws.WriteMessage(typ, b)
}

// writeBatch sends a live batch's definitions, then its events.
func (c *conn) writeBatch(b timeline.Batch, backfill bool) error {
	if len(b.Strings) > 0 || len(b.Sites) > 0 {
		if err := c.writeDefs(b); err != nil {
			return err
		}
	}
	if len(b.Events) == 0 {
		return nil
	}
	if err := c.writeEvents(b.Events, backfill); err != nil {
		return err
	}
	last := b.Events[len(b.Events)-1]
	c.next, c.lastTime = last.Seq+1, last.Time
	c.mark(last.Seq, last.Time)
	return nil
}

// writeDefs sends a batch's definitions in the JSON of docs/timeline.md,
// written by hand.
func (c *conn) writeDefs(b timeline.Batch) error {
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
		p = append(p, ',')
		p = appendFrames(p, d.Site.Frames)
		if len(d.Site.Stack) > 0 {
			// The notebook call stack, outermost first, [func, cell, line] each.
			p = append(p, ',')
			p = appendFrames(p, d.Site.Stack)
		}
		p = append(p, ']')
	}
	p = append(p, "]}"...)
	c.buf = p
	return c.write(websocket.TextMessage, p)
}

// appendFrames appends frames as a JSON array of [func, file, line].
func appendFrames(p []byte, frames []event.Frame) []byte {
	p = append(p, '[')
	for j, f := range frames {
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
	return append(p, ']')
}

// writeEvents sends events, live or backfill, as JSON or binary frames
// (docs/timeline-stream.md): it is the hot path, written by hand.
func (c *conn) writeEvents(evs []event.Event, backfill bool) error {
	c.sent += uint64(len(evs))
	if !c.binary {
		p := append(c.buf[:0], `{"type":"events",`...)
		if backfill {
			p = append(p, `"backfill":true,`...)
		}
		p = append(p, `"events":[`...)
		for i, e := range evs {
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
		return c.write(websocket.TextMessage, p)
	}
	// A frame holds consecutive sequence numbers (as a Recorder delivers
	// them) within int32 nanoseconds; split where they are not.
	for len(evs) > 0 {
		n := frameRun(evs)
		c.buf = AppendFrame(c.buf[:0], evs[:n], backfill)
		if err := c.write(websocket.BinaryMessage, c.buf); err != nil {
			return err
		}
		if f := onLiveFrame.Load(); f != nil && !backfill {
			(*f)(evs[n-1].Seq)
		}
		evs = evs[n:]
	}
	return nil
}

func appendString(p []byte, s string) []byte {
	q, _ := json.Marshal(s)
	return append(p, q...)
}

// onLiveFrame, when set (by TestBrowserLive, before any stream), is told
// the last sequence number of each live events frame once written to the
// socket: where a live event's way to the screen is spent, on the server
// or in the page.
var onLiveFrame atomic.Pointer[func(seq uint64)]
