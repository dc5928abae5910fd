package server

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"linger/notebooks/msg"
	"linger/server/kernels"
)

func TestRateLimit(t *testing.T) {
	parent := msg.New(msg.Shell, "execute_request", "s", nil)
	stream := func(text string) *msg.Message {
		return parent.Reply(msg.IOPub, "stream", map[string]any{"name": "stdout", "text": text})
	}
	idle := parent.Reply(msg.IOPub, "status", map[string]any{"execution_state": "idle"})
	t0 := time.Unix(1000, 0)
	for _, tc := range []struct {
		name         string
		limit        rateLimit
		text         string
		sent, notice string // how many go out before the limit, and its notice
		resumeAfter  time.Duration
	}{
		{"messages", rateLimit{msgRate: 10, window: time.Second}, "x", "10", "IOPub message rate exceeded.", 1200 * time.Millisecond},
		{"data", rateLimit{dataRate: 1000, window: 2 * time.Second}, strings.Repeat("x", 100), "", "IOPub data rate exceeded.", 2 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.limit
			sent, notices := 0, 0
			for range 100 {
				ok, n := r.allow(stream(tc.text), t0)
				if ok {
					sent++
				}
				if n != nil {
					notices++
					var c struct{ Name, Text string }
					_ = n.DecodeContent(&c)
					if c.Name != "stderr" || !strings.HasPrefix(c.Text, tc.notice) || n.ParentHeader != parent.Header {
						t.Errorf("notice %s %q", c.Name, c.Text)
					}
				}
			}
			if notices != 1 || sent == 0 || sent >= 100 {
				t.Fatalf("%d of 100 sent, %d notices", sent, notices)
			}
			if tc.sent != "" && tc.sent != strconv.Itoa(sent) {
				t.Errorf("%d sent, want %s", sent, tc.sent)
			}
			if ok, _ := r.allow(parent.Reply(msg.IOPub, "execute_input", map[string]any{}), t0); !ok {
				t.Error("execute_input was limited")
			}
			if ok, _ := r.allow(stream(tc.text), t0.Add(tc.resumeAfter/2)); ok {
				t.Error("resumed inside the window")
			}
			if ok, _ := r.allow(stream(tc.text), t0.Add(tc.resumeAfter)); !ok {
				t.Error("did not resume once the window passed")
			}
			r2 := tc.limit
			for range 100 {
				r2.allow(stream(tc.text), t0)
			}
			r2.allow(idle, t0)
			if ok, _ := r2.allow(stream(tc.text), t0); !ok {
				t.Error("did not resume at idle")
			}
		})
	}
}

// floodCell prints a million lines, 6.9 MB.
const floodCell = "for i in range(1000000):\n    print(i)\n"

// A flood of prints costs a client a few messages, all its text, in
// seconds; before, 10^6 messages over a minute or more.
func TestE2EPrintFlood(t *testing.T) {
	for _, tc := range []struct {
		name    string
		limits  func(*Options)
		limited bool
	}{
		{"no limits", func(o *Options) { o.IOPubMsgRateLimit, o.IOPubDataRateLimit = -1, -1 }, false},
		{"default limits", func(*Options) {}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := newE2EServerSpecs(t, []kernels.Spec{kernels.LingerSpec(linger(t), "kernel")}, tc.limits)
			kid := ts.startKernel(t)
			c := dialKernel(t, ts, kid, true, "flood")
			start := time.Now()
			ms := c.execute(t, floodCell)
			took := time.Since(start)
			var out, errs strings.Builder
			var parts []string // the stdout messages' texts, in order
			streams := 0
			for _, m := range ms {
				var s struct{ Name, Text string }
				if m.Header.MsgType != "stream" || m.DecodeContent(&s) != nil {
					continue
				}
				streams++
				if s.Name == "stderr" {
					errs.WriteString(s.Text)
				} else {
					out.WriteString(s.Text)
					parts = append(parts, s.Text)
				}
			}
			var want strings.Builder
			for i := range 1000000 {
				want.WriteString(strconv.Itoa(i) + "\n")
			}
			if !strings.Contains(types(ms), "execute_reply") {
				t.Errorf("no execute_reply: %s", types(ms))
			}
			if streams > 300 {
				t.Errorf("%d stream messages reached the client, want a few hundred at most", streams)
			}
			if took > 20*time.Second {
				t.Errorf("the flood took %v", took)
			}
			if !tc.limited {
				if out.String() != want.String() || errs.Len() > 0 {
					t.Errorf("got %d bytes of stdout (want %d), stderr %q", out.Len(), want.Len(), errs.String())
				}
			} else {
				// As in Jupyter Server, a message dropped over the limit does
				// not count, so a later, smaller one may pass: what arrives
				// is whole messages of the text, in order, with gaps.
				rest, inOrder := want.String(), true
				for _, p := range parts {
					i := strings.Index(rest, p)
					if i < 0 {
						inOrder = false
						break
					}
					rest = rest[i+len(p):]
				}
				if !strings.HasPrefix(errs.String(), "IOPub data rate exceeded.") || !inOrder || out.Len() == 0 || out.Len() >= want.Len() {
					t.Errorf("got %d bytes of stdout in %d messages (want pieces of the %d, in order, some dropped), stderr %q", out.Len(), len(parts), want.Len(), errs.String())
				}
			}
			t.Logf("10^6 prints: %d messages to the client, %d of them stream, %d bytes of text, %v", len(ms), streams, out.Len(), took)
		})
	}
}
