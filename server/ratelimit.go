package server

import (
	"fmt"
	"strconv"
	"time"

	"linger/notebooks/msg"
)

// Jupyter Server's iopub rate limits, with the values classic Notebook
// shipped (jupyter_server 2 ships them off): above them a client's output
// is dropped, with a notice, until the rate falls back to 80% of the limit
// or the kernel goes idle.
const (
	DefaultIOPubMsgRateLimit  = 1000    // messages per second
	DefaultIOPubDataRateLimit = 1000000 // stream bytes per second
	DefaultRateLimitWindow    = 3 * time.Second
)

// rateLimit is one connection's iopub limits, kept as Jupyter Server's
// ZMQChannelsWebsocketConnection keeps them: a message (other than status,
// comm_open and execute_input) counts for the window after it was sent,
// with its content's bytes when it is a stream. Only the connection's
// writer uses it.
type rateLimit struct {
	msgRate, dataRate float64 // per second; 0: no limit
	window            time.Duration

	queue              []rateEntry
	msgs, bytes        int
	msgsOver, dataOver bool
}

type rateEntry struct {
	until time.Time
	bytes int
}

// allow says whether m goes to the client at now; notice, when not nil, is
// the stderr stream the client gets instead, once as a limit is crossed.
func (r *rateLimit) allow(m *msg.Message, now time.Time) (ok bool, notice *msg.Message) {
	if m.Channel != msg.IOPub || (r.msgRate <= 0 && r.dataRate <= 0) {
		return true, nil
	}
	switch m.Header.MsgType {
	case "status":
		// Reset at idle, so that running all cells does not meet the
		// limit early.
		var s struct {
			State string `json:"execution_state"`
		}
		if m.DecodeContent(&s) == nil && s.State == "idle" {
			*r = rateLimit{msgRate: r.msgRate, dataRate: r.dataRate, window: r.window, queue: r.queue[:0]}
		}
		return true, nil
	case "comm_open", "execute_input":
		return true, nil
	}
	i := 0
	for ; i < len(r.queue) && !now.Before(r.queue[i].until); i++ {
		r.msgs--
		r.bytes -= r.queue[i].bytes
	}
	r.queue = r.queue[:copy(r.queue, r.queue[i:])]
	n := 0
	if m.Header.MsgType == "stream" {
		n = len(m.Content)
	}
	r.msgs++
	r.bytes += n
	secs := r.window.Seconds()
	msgRate, dataRate := float64(r.msgs)/secs, float64(r.bytes)/secs
	if r.msgRate > 0 && msgRate > r.msgRate {
		if !r.msgsOver {
			r.msgsOver = true
			notice = r.notice(m, "message", "--iopub-msg-rate-limit", r.msgRate, "msgs/sec")
		}
	} else if r.msgsOver && msgRate < 0.8*r.msgRate {
		r.msgsOver = false
	}
	if r.dataRate > 0 && dataRate > r.dataRate {
		if !r.dataOver {
			r.dataOver = true
			if notice == nil {
				notice = r.notice(m, "data", "--iopub-data-rate-limit", r.dataRate, "bytes/sec")
			}
		}
	} else if r.dataOver && dataRate < 0.8*r.dataRate {
		r.dataOver = false
	}
	if r.msgsOver || r.dataOver {
		// Not sent: it does not count.
		r.msgs--
		r.bytes -= n
		return false, notice
	}
	r.queue = append(r.queue, rateEntry{until: now.Add(r.window), bytes: n})
	return true, nil
}

// notice is Jupyter Server's text for a crossed limit, naming Linger's
// flags, as a stderr stream to m's parent.
func (r *rateLimit) notice(m *msg.Message, what, flag string, limit float64, unit string) *msg.Message {
	text := fmt.Sprintf("IOPub %s rate exceeded.\n"+
		"The Jupyter server will temporarily stop sending output\n"+
		"to the client in order to avoid crashing it.\n"+
		"To change this limit, set the config variable\n"+
		"`%s` (linger serve).\n\n"+
		"Current values:\n"+
		"%s=%s (%s)\n"+
		"--rate-limit-window=%s (secs)\n",
		what, flag, flag, strconv.FormatFloat(limit, 'f', 1, 64), unit, strconv.FormatFloat(r.window.Seconds(), 'f', 1, 64))
	n := msg.New(msg.IOPub, "stream", m.Header.Session, map[string]any{"name": "stderr", "text": text})
	n.ParentHeader = m.ParentHeader
	return n
}
