package live

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"linger/timeline"
	"linger/timeline/event"
	"linger/timeline/traces"
)

// sliceSource is a trace that is not a kernel's and has no Recorder and
// no file: events held in memory, ended, as an import might hand them
// over. It serves Subscribe from any seq.
type sliceSource struct{ t *sliceTrace }

type sliceTrace struct {
	strings []timeline.StringDef
	sites   []timeline.SiteDef
	events  []event.Event // Seq 1..n
}

func (s sliceSource) Subscribe(from uint64) traces.Subscription {
	return &sliceSub{t: s.t, next: max(from, 1)}
}
func (s sliceSource) Head() uint64               { return uint64(len(s.t.events)) }
func (sliceSource) Flush() error                 { return nil }
func (sliceSource) Ended() (string, bool)        { return "", true }
func (sliceSource) HeldBy(uint64) (string, bool) { return "", false }
func (sliceSource) Log() (string, bool)          { return "", false }

type sliceSub struct {
	t     *sliceTrace
	next  uint64
	given bool // the definitions
}

func (s *sliceSub) Next(context.Context) (timeline.Batch, error) {
	n := uint64(len(s.t.events))
	if s.next > n {
		return timeline.Batch{}, io.EOF
	}
	b := timeline.Batch{Events: s.t.events[s.next-1 : min(n, s.next+999)]}
	if !s.given {
		b.Strings, b.Sites, s.given = s.t.strings, s.t.sites, true
	}
	s.next += uint64(len(b.Events))
	return b, nil
}
func (s *sliceSub) End() (string, bool) { return "", true }
func (s *sliceSub) Close() error        { return nil }

// sink collects what emit writes into a sliceTrace.
func (t *sliceTrace) DefineString(id event.StringID, v string) {
	t.strings = append(t.strings, timeline.StringDef{ID: id, Text: v})
}
func (t *sliceTrace) DefineSite(id event.SiteID, v event.Site) {
	t.sites = append(t.sites, timeline.SiteDef{ID: id, Site: v})
}
func (t *sliceTrace) Emit(e event.Event) { t.events = append(t.events, e) }

// A trace whose source is not a kernel plugs into the routes as a
// traces.Source: its stream delivers every event and ends, its
// level-of-detail and objects answers count them all, with no kernel,
// no Recorder and no file in sight.
func TestSourceWithoutKernel(t *testing.T) {
	const n = 5000
	tr := &sliceTrace{}
	emit(tr, 1, n)
	h := New(Options{Source: func(id string) (traces.Source, error) {
		if id != "k1" {
			return nil, ErrNotFound
		}
		return sliceSource{tr}, nil
	}})
	defer h.Close()
	mux := http.NewServeMux()
	h.Register(mux, "")
	srv := httptest.NewServer(mux)
	defer srv.Close()

	f := newFollower(t, true)
	readStream(t, f, f.url(srv.URL, 0))
	if len(f.got) != n {
		t.Errorf("stream delivered %d events, want %d", len(f.got), n)
	}
	for s := uint64(1); s <= n; s++ {
		if f.got[s] != tr.events[s-1] {
			t.Fatalf("event %d: got %+v, want %+v", s, f.got[s], tr.events[s-1])
		}
	}
	var body lodBody
	get(t, srv.URL+"/api/timeline/kernels/k1/lod", 200, &body)
	checkLOD(t, body, n, 1000)
	var objs struct{ Objects []struct{ Label string } }
	get(t, srv.URL+"/api/timeline/kernels/k1/objects?n=5", 200, &objs)
	if len(objs.Objects) != 5 || objs.Objects[0].Label != "block" {
		t.Errorf("objects %+v, want 5 labelled block", objs.Objects)
	}
}
