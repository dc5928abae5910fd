package soak

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/gorilla/websocket"

	"linger/server/live"
)

// A viewer is one subscriber to a kernel's live timeline stream, as a
// browser tab's timeline is. It checks the stream's own promise
// (docs/timeline-stream.md): every sequence number arrives exactly once,
// in a live frame that continues the last, or inside a catch-up's
// from..to and later in a backfill frame.
type viewer struct {
	name string // the kernel and the viewer's mode, for messages
	mode viewMode

	seen   []uint64 // a bit per sequence number received
	events uint64   // events received, live and backfill
	summed uint64   // events only summarised: a catch-up's range without backfill
	dups   uint64   // sequence numbers received more than once
	order  uint64   // live events or catch-ups that did not continue the last
	stray  uint64   // backfill events outside every catch-up's range

	next     uint64 // the next live sequence number due
	owed     [][2]uint64
	catchups int
	backfill uint64 // events received in backfill frames

	ended  bool // an end message came
	last   uint64
	reason string
	closed int   // the close code after end (websocket.CloseNormalClosure when clean)
	err    error // why reading stopped otherwise
}

// viewMode is how a viewer asks for the stream and reads it.
type viewMode int

const (
	// viewJSON asks for JSON events and sends no acks: it gets every
	// event live unless it falls MaxLag behind.
	viewJSON viewMode = iota
	// viewBrowser asks as the browser does (binary frames, backfill,
	// window) and acknowledges each message, with max_delay_ms=50, below
	// the browser's 150, so that summaries and backfill come sooner.
	viewBrowser
	// viewSlow is viewBrowser that takes a millisecond over each frame,
	// so it falls behind and is caught up with summaries and backfill.
	viewSlow
)

func (m viewMode) String() string { return [...]string{"json", "browser", "slow"}[m] }

// readTimeout bounds a wait for the next message: a kernel between cells
// is quiet for far less.
const readTimeout = 30 * time.Second

// dialViewer opens a viewer's stream from the first event.
func (s *server) dialViewer(kid string, mode viewMode) (*websocket.Conn, error) {
	q := "?from=1"
	if mode != viewJSON {
		q += "&format=binary&backfill=1&max_delay_ms=50&window=262144"
	}
	u := "ws" + strings.TrimPrefix(s.base, "http") + "/api/timeline/kernels/" + kid + "/stream" + q
	d := websocket.Dialer{HandshakeTimeout: 10 * time.Second}
	ws, resp, err := d.Dial(u, http.Header{"Authorization": {"token " + s.token}})
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w (%v)", u, err, resp)
	}
	return ws, nil
}

// run reads the stream until it ends (or fails) and closes ws.
func (v *viewer) run(ws *websocket.Conn) {
	defer ws.Close()
	for {
		ws.SetReadDeadline(time.Now().Add(readTimeout))
		typ, p, err := ws.ReadMessage()
		if err != nil {
			var ce *websocket.CloseError
			if v.ended && errors.As(err, &ce) {
				v.closed = ce.Code
			} else {
				v.err = fmt.Errorf("%s: read: %w", v.name, err)
			}
			return
		}
		if v.ended {
			v.err = fmt.Errorf("%s: a message after end: %.100s", v.name, p)
			return
		}
		if err := v.handle(typ, p); err != nil {
			v.err = fmt.Errorf("%s: %w", v.name, err)
			return
		}
		if v.mode == viewSlow && typ == websocket.BinaryMessage {
			time.Sleep(time.Millisecond)
		}
		if v.mode != viewJSON {
			ack := fmt.Sprintf(`{"type":"ack","seq":%d,"events":%d}`, v.next-1, v.events)
			if err := ws.WriteMessage(websocket.TextMessage, []byte(ack)); err != nil {
				v.err = fmt.Errorf("%s: ack: %w", v.name, err)
				return
			}
		}
	}
}

// streamMsg is every JSON message of the stream, the fields each uses.
type streamMsg struct {
	Type     string     `json:"type"`
	From     uint64     `json:"from"`
	To       uint64     `json:"to"`
	Last     uint64     `json:"last"`
	Reason   string     `json:"reason"`
	Backfill bool       `json:"backfill"`
	Events   [][]uint64 `json:"events"`
}

func (v *viewer) handle(typ int, p []byte) error {
	if typ == websocket.BinaryMessage {
		evs, backfill, err := live.DecodeFrame(p)
		if err != nil {
			return fmt.Errorf("binary frame: %w", err)
		}
		for _, e := range evs {
			v.event(e.Seq, backfill)
		}
		return nil
	}
	var m streamMsg
	if err := json.Unmarshal(p, &m); err != nil {
		return fmt.Errorf("message %.100s: %w", p, err)
	}
	switch m.Type {
	case "start":
		v.next = m.From
	case "events":
		for _, e := range m.Events {
			if len(e) == 0 {
				return fmt.Errorf("an empty event in %.100s", p)
			}
			v.event(e[0], m.Backfill)
		}
	case "catchup":
		if m.From != v.next || m.To < m.From {
			v.order++
		}
		v.catchups++
		v.owed = append(v.owed, [2]uint64{m.From, m.To})
		if !m.Backfill {
			// Without backfill a summary stands in for its events for
			// good (docs/timeline.md): they count as delivered.
			v.summed += m.To - m.From + 1
			for seq := m.From; seq <= m.To; seq++ {
				v.mark(seq)
			}
		}
		v.next = m.To + 1
	case "end":
		v.ended, v.last, v.reason = true, m.Last, m.Reason
	case "defs":
	default:
		return fmt.Errorf("unknown message %.100s", p)
	}
	return nil
}

// event notes one event received.
func (v *viewer) event(seq uint64, backfill bool) {
	v.events++
	if backfill {
		v.backfill++
		if !v.isOwed(seq) {
			v.stray++
		}
	} else {
		if seq != v.next {
			v.order++
		}
		v.next = seq + 1
	}
	v.mark(seq)
}

// mark notes seq as delivered, counting it if it already was.
func (v *viewer) mark(seq uint64) {
	w, bit := seq/64, uint64(1)<<(seq%64)
	for uint64(len(v.seen)) <= w {
		v.seen = append(v.seen, make([]uint64, len(v.seen)+1024)...)
	}
	if v.seen[w]&bit != 0 {
		v.dups++
	}
	v.seen[w] |= bit
}

func (v *viewer) isOwed(seq uint64) bool {
	for _, r := range v.owed {
		if seq >= r[0] && seq <= r[1] {
			return true
		}
	}
	return false
}

// gaps counts the sequence numbers 1..last never received (nor, without
// backfill, summarised).
func (v *viewer) gaps(last uint64) uint64 {
	var n uint64
	for seq := uint64(1); seq <= last; seq++ {
		if w := seq / 64; w >= uint64(len(v.seen)) || v.seen[w]&(1<<(seq%64)) == 0 {
			n++
		}
	}
	return n
}
