package live

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// What a timeline stream's client sends: its acknowledgements, and the
// gaps it lacks when it resumes (?gaps=). FuzzDecodeFrame (stream_test.go)
// covers what the server sends.

// FuzzParseAck: only a JSON object of type "ack" is an acknowledgement,
// and one reads back the same from the message a client would write for
// it.
func FuzzParseAck(f *testing.F) {
	f.Add([]byte(`{"type":"ack","seq":4096,"events":4096}`))
	f.Add([]byte(`{"type":"ack","seq":17}`))
	f.Add([]byte(`{"type":"hello"}`))
	f.Add([]byte(`{"type":"ack","seq":-1}`))
	f.Fuzz(func(t *testing.T, p []byte) {
		a, ok := parseAck(p)
		if !ok {
			if a != (ack{}) {
				t.Fatalf("refused %q with %+v", p, a)
			}
			return
		}
		// encoding/json matches keys without regard to case: "Type" is
		// "type" too.
		var m map[string]any
		if err := json.Unmarshal(p, &m); err != nil {
			t.Fatalf("took %q as an ack (%v)", p, err)
		}
		var again string
		switch a.mode {
		case ackSeq:
			if a.acked != a.seq {
				t.Fatalf("%q: seq ack %+v", p, a)
			}
			again = fmt.Sprintf(`{"type":"ack","seq":%d}`, a.seq)
		case ackCount:
			again = fmt.Sprintf(`{"type":"ack","seq":%d,"events":%d}`, a.seq, a.acked)
		default:
			t.Fatalf("%q: mode %d", p, a.mode)
		}
		if b, ok := parseAck([]byte(again)); !ok || b != a {
			t.Fatalf("%q: %+v; %s reads back as %+v", p, a, again, b)
		}
	})
}

// FuzzParseGaps: what parseGaps takes is at most maxGaps ranges, each
// from 1 up and below from, ascending and disjoint, and it reads back
// the same from its own form; what it refuses gives no ranges.
func FuzzParseGaps(f *testing.F) {
	f.Add("3-7,12-12", uint64(20))
	f.Add("1-4096", uint64(4097))
	f.Add("5-3", uint64(10))
	f.Add("2-9,9-12", uint64(20))
	f.Add("0-1", uint64(5))
	f.Fuzz(func(t *testing.T, s string, from uint64) {
		from = max(from, 1) // as serveStream passes it
		gaps, err := parseGaps(s, from)
		if err != nil {
			if gaps != nil {
				t.Fatalf("parseGaps(%q, %d): %v with %v", s, from, gaps, err)
			}
			return
		}
		if len(gaps) > maxGaps {
			t.Fatalf("parseGaps(%q, %d): %d gaps", s, from, len(gaps))
		}
		var parts []string
		for i, g := range gaps {
			if g.from == 0 || g.to < g.from || g.to >= from || i > 0 && g.from <= gaps[i-1].to {
				t.Fatalf("parseGaps(%q, %d): gap %d is %+v after %v", s, from, i, g, gaps[:i])
			}
			parts = append(parts, fmt.Sprintf("%d-%d", g.from, g.to))
		}
		again, err := parseGaps(strings.Join(parts, ","), from)
		if err != nil || !slices.Equal(again, gaps) {
			t.Fatalf("parseGaps(%q, %d) = %v; its form reads back as %v, %v", s, from, gaps, again, err)
		}
	})
}
