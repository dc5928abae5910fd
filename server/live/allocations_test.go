package live

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"linger/timeline"
	"linger/timeline/event"
)

// churnTrace writes scenario 02's shape to sink: a cell whose line 4
// makes an attention mask each chunk, freed before the next (masks masks
// of chunk×(chunk·(i+1)) bf16 elements, at most 256 KiB), then the fix's
// line 9: one mask of 512 MiB, an event every step ns. It returns the
// events, for brute force.
func churnTrace(sink event.Sink, masks int, step int64) []event.Event {
	sink.DefineString(1, "mask")
	sink.DefineString(2, "mask.whole")
	sink.DefineSite(1, event.Site{Cell: "leaky", Line: 4})
	sink.DefineSite(2, event.Site{Cell: "fixed", Line: 9})
	var evs []event.Event
	seq, now := uint64(0), int64(1000)
	emit := func(e event.Event) {
		seq++
		now += step
		e.Seq, e.Time = seq, now
		evs = append(evs, e)
		sink.Emit(e)
	}
	const chunk = 64
	for i := range masks {
		size := uint64(chunk * chunk * (i%32 + 1) * 2) // up to 256 KiB
		emit(event.Event{Kind: event.KindAlloc, Addr: uint64(1 + i%2), Size: size, Requested: size, Category: event.CategoryAttnMask, Site: 1, Label: 1})
		emit(event.Event{Kind: event.KindFree, Addr: uint64(1 + i%2), Size: size, Requested: size, Category: event.CategoryAttnMask})
	}
	emit(event.Event{Kind: event.KindAlloc, Addr: 99, Size: 512 << 20, Requested: 512 << 20, Category: event.CategoryAttnMask, Site: 2, Label: 2})
	return evs
}

// bySite counts the allocations of evs in [t0, t1) by site, and how many
// of them were freed in it.
func bySite(evs []event.Event, t0, t1 int64) map[event.SiteID][3]uint64 {
	out := map[event.SiteID][3]uint64{}
	site := map[uint64]event.SiteID{}
	for _, e := range evs {
		if e.Time < t0 || e.Time >= t1 {
			continue
		}
		switch e.Kind {
		case event.KindAlloc:
			c := out[e.Site]
			c[0]++
			c[1] += e.Size
			out[e.Site] = c
			site[e.Addr] = e.Site
		case event.KindFree:
			if s, ok := site[e.Addr]; ok {
				c := out[s]
				c[2]++
				out[s] = c
				delete(site, e.Addr)
			}
		}
	}
	return out
}

func checkAllocations(t *testing.T, what string, got allocationsAnswer, want map[event.SiteID][3]uint64) {
	t.Helper()
	if len(got.Sites) != len(want) {
		t.Fatalf("%s: %d sites %+v, want %d", what, len(got.Sites), got.Sites, len(want))
	}
	var count, bytes uint64
	for i, s := range got.Sites {
		w := want[event.SiteID(s.SiteID)]
		if s.Count != w[0] || s.Bytes != w[1] || s.Freed != w[2] {
			t.Errorf("%s: site %d: %d allocations of %d bytes, %d freed; want %d, %d, %d", what, s.SiteID, s.Count, s.Bytes, s.Freed, w[0], w[1], w[2])
		}
		if i > 0 && s.Count > got.Sites[i-1].Count {
			t.Errorf("%s: sites not by count: %+v", what, got.Sites)
		}
		if s.Category != "attn_mask" || s.Site == nil {
			t.Errorf("%s: site %d: category %q, site %+v", what, s.SiteID, s.Category, s.Site)
		}
		count += w[0]
		bytes += w[1]
	}
	if got.Allocations != count || got.Bytes != bytes || got.Partial {
		t.Errorf("%s: %d allocations of %d bytes (partial %v), want %d of %d", what, got.Allocations, got.Bytes, got.Partial, count, bytes)
	}
}

// TestAllocationsBySite: churn that never shows on the memory chart is
// counted by the line that made it, over any window, from a saved trace
// and a live one.
func TestAllocationsBySite(t *testing.T) {
	const masks = 2048
	dir := t.TempDir()
	w, err := timeline.Create(filepath.Join(dir, "churn.ltrace"))
	if err != nil {
		t.Fatal(err)
	}
	// Ten events to an index bucket of 1 µs: a window's edge cuts buckets.
	evs := churnTrace(w, masks, 100)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	srv, release, _ := heldServer(t, dir, nil)
	release()
	base := srv.URL + "/api/timeline/traces/churn.ltrace/allocations"

	var all allocationsAnswer
	get(t, base, 200, &all)
	checkAllocations(t, "the whole trace", all, bySite(evs, 0, 1<<62))
	if s := all.Sites[0]; s.SiteID != 1 || s.Site.Cell != "leaky" || s.Site.Line != 4 || s.Label != "mask" || s.Max != 256<<10 || s.Min != 8<<10 {
		t.Errorf("the churning site: %+v (site %+v); want the leaky cell's line 4, masks of 8 to 256 KiB", s, s.Site)
	}
	// Windows that cut the churn anywhere, the trace's index bucketing
	// them as it will.
	last := evs[len(evs)-1].Time
	// Windows cut inside the index's buckets too, so that the events
	// skipped by bucket and those read and skipped by time meet.
	wins := [][2]int64{{0, last / 3}, {last / 3, 2 * last / 3}, {evs[1001].Time, evs[1001].Time + 1}, {last, last + 1}, {last + 1, last + 10}}
	for _, k := range []int{1, 2047, 2048, 3001, 4095, 4096} {
		for _, off := range []int64{-1, 1, 33, 99} {
			wins = append(wins, [2]int64{evs[k].Time + off, evs[k].Time + off + 2345})
		}
	}
	for _, win := range wins {
		var a allocationsAnswer
		get(t, fmt.Sprintf("%s?t0=%d&t1=%d", base, win[0], win[1]), 200, &a)
		checkAllocations(t, fmt.Sprintf("[%d, %d)", win[0], win[1]), a, bySite(evs, win[0], win[1]))
	}
	var top allocationsAnswer
	get(t, base+"?n=1", 200, &top)
	if len(top.Sites) != 1 || top.More != 1 || top.Sites[0].SiteID != 1 {
		t.Errorf("n=1: %+v, more %d; want the churning site, one more", top.Sites, top.More)
	}
	resp, err := http.Get(base + "?t0=x")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 400 {
		t.Errorf("t0=x: %s, want 400", resp.Status)
	}

	// Live: the Recorder's file as written so far.
	rec, mux := liveRoutes(t, dir)
	ls := httptest.NewServer(mux)
	defer ls.Close()
	levs := churnTrace(rec, 300, 1000)
	var live allocationsAnswer
	get(t, ls.URL+"/api/timeline/kernels/k1/allocations", 200, &live)
	checkAllocations(t, "a live trace", live, bySite(levs, 0, 1<<62))
}
