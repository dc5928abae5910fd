package analyze

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"

	"linger/timeline/event"
)

const MiB = 1 << 20

// TestGrowthSlope: live bytes of one site grow by a constructed slope per
// step plus noise; the fitted slope is within 1 % of it, per step and per
// second. A noisy flat series is not reported.
func TestGrowthSlope(t *testing.T) {
	const steps, slope, stepNS = 200, 24 * MiB, 10_000_000 // 10 ms per step
	s := newStream()
	s.tr.DefineSite(1, event.Site{Cell: "grow", Line: 1})
	s.tr.DefineSite(2, event.Site{Cell: "flat", Line: 2})
	rng := rand.New(rand.NewPCG(1, 2))
	var addr uint64
	var flat []uint64
	s.begin(event.ScopeRequest)
	for i := 0; i < steps; i++ {
		s.time += stepNS
		s.begin(event.ScopeStep)
		addr++
		// each step keeps 24 MiB ± 4 MiB of noise, rounded to 512 B
		size := uint64(slope+rng.IntN(8*MiB)-4*MiB) / 512 * 512
		s.emit(event.Event{Kind: event.KindAlloc, Addr: addr, Size: size, Category: event.CategoryKVCache, Expect: event.ScopeRequest, Site: 1})
		// a flat site: alive around 100 MiB, up and down
		addr++
		s.emit(event.Event{Kind: event.KindAlloc, Addr: addr, Size: uint64(90*MiB + rng.IntN(20*MiB)), Category: event.CategoryActivation, Expect: event.ScopeRequest, Site: 2})
		flat = append(flat, addr)
		if len(flat) > 1 {
			s.emit(event.Event{Kind: event.KindFree, Addr: flat[0]})
			flat = flat[1:]
		}
		s.end()
	}
	rep, err := Run(s.tr, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.GrowthUnit != "step" {
		t.Errorf("growth unit %q, want step", rep.GrowthUnit)
	}
	var got []Growth
	for _, g := range rep.Growth {
		if g.Site != "" {
			got = append(got, g)
		}
	}
	if len(got) != 1 || !strings.HasPrefix(got[0].Site, "cell grow") {
		t.Fatalf("growing sites %+v, want only cell grow", got)
	}
	g := got[0]
	if !near(g.BytesPerStep, slope, 0.01) {
		t.Errorf("slope %.0f B/step, want %d ± 1 %%", g.BytesPerStep, slope)
	}
	if !near(g.BytesPerSecond, slope*1e9/stepNS, 0.01) {
		t.Errorf("slope %.0f B/s, want %.0f ± 1 %%", g.BytesPerSecond, float64(slope)*1e9/stepNS)
	}
	if g.R2 < 0.99 || g.Samples != steps {
		t.Errorf("R² %.3f over %d samples", g.R2, g.Samples)
	}
	var text bytes.Buffer
	rep.WriteText(&text)
	if !strings.Contains(text.String(), "+24.0 MiB/step") {
		t.Errorf("text lacks +24.0 MiB/step:\n%s", text.String())
	}
}

// TestGrowthFallback: a trace without steps is sampled at request ends.
func TestGrowthFallback(t *testing.T) {
	s := newStream()
	var addr uint64
	for i := 0; i < 20; i++ {
		s.time += 1e6
		s.begin(event.ScopeRequest)
		addr++
		s.emit(event.Event{Kind: event.KindAlloc, Addr: addr, Size: 2 * MiB, Category: event.CategoryKVCache, Expect: event.ScopeCell, Site: 1})
		s.end()
	}
	rep, _ := Run(s.tr, Options{})
	if rep.GrowthUnit != "request" || len(rep.Growth) == 0 || !near(rep.Growth[0].BytesPerStep, 2*MiB, 1e-9) {
		t.Fatalf("unit %q growth %+v", rep.GrowthUnit, rep.Growth)
	}
}

// TestDuplicates: a mask allocated and freed in every one of 2048 steps
// is 2048 duplicates; one buffer reused in every step is none, and so are
// blocks of categories whose content differs from block to block (KV
// blocks, per-layer workspace).
func TestDuplicates(t *testing.T) {
	b := newBuilder(t)
	em := b.em
	mask, buf, kv, act := b.site("mask", 1), b.site("buf", 2), b.site("kv", 3), b.site("act", 4)
	req := em.Begin(event.ScopeRequest, "r")
	reused := b.alloc(4*MiB, event.CategoryAttnMask, event.ScopeRequest, "full mask", buf)
	_ = reused
	for i := 0; i < 2048; i++ {
		st := em.Begin(event.ScopeStep, "step")
		m := b.alloc(uint64(1+i%4)*MiB, event.CategoryAttnMask, event.ScopeStep, "mask", mask)
		if i%16 == 0 {
			b.alloc(MiB, event.CategoryKVCache, event.ScopeRequest, "kv block", kv)
		}
		for l := 0; l < 2; l++ {
			b.free(b.alloc(MiB, event.CategoryWorkspace, event.ScopeStep, "per layer", act))
		}
		b.free(m)
		em.End(st)
	}
	em.End(req)
	rep := b.run(Options{})
	if len(rep.Duplicates) != 1 {
		t.Fatalf("duplicates %+v, want the mask only", rep.Duplicates)
	}
	d := rep.Duplicates[0]
	if d.Count != 2048 || d.Steps != 2048 || d.Category != "attn_mask" || !strings.HasPrefix(d.Site, "cell mask:1") {
		t.Errorf("duplicate %+v", d)
	}
	if d.MinSize != MiB || d.MaxSize != 4*MiB || d.TotalBytes != 512*(1+2+3+4)*MiB {
		t.Errorf("sizes %d–%d total %d", d.MinSize, d.MaxSize, d.TotalBytes)
	}
}

// TestPeak: what was alive at the first instant of the maximum, exactly,
// after monotone growth, a fall and a second climb to a lower top.
func TestPeak(t *testing.T) {
	b := newBuilder(t)
	w, kv, m := b.site("w", 1), b.site("kv", 2), b.site("m", 3)
	var kvs []uint64
	for i := 0; i < 1000; i++ { // monotone growth: a new peak every event
		kvs = append(kvs, b.alloc(512, event.CategoryKVCache, event.ScopeNone, "kv", kv))
	}
	b.alloc(10*MiB, event.CategoryWeights, event.ScopeNone, "w", w)
	mask := b.alloc(2*MiB, event.CategoryAttnMask, event.ScopeNone, "mask", m)
	peakSeq := b.em.Seq()
	b.free(mask)
	for _, a := range kvs[:500] {
		b.free(a)
	}
	b.alloc(MiB, event.CategoryAttnMask, event.ScopeNone, "mask", m) // lower than the peak
	rep := b.run(Options{})
	p := rep.Peak
	if p.Bytes != 1000*512+12*MiB || p.Seq != peakSeq || p.Objects != 1002 {
		t.Fatalf("peak %d bytes at seq %d in %d objects; want %d at %d in 1002", p.Bytes, p.Seq, p.Objects, 1000*512+12*MiB, peakSeq)
	}
	want := map[string][2]uint64{"weights": {10 * MiB, 1}, "attn_mask": {2 * MiB, 1}, "kv_cache": {1000 * 512, 1000}}
	if len(p.ByCategory) != 3 {
		t.Fatalf("by category %+v", p.ByCategory)
	}
	for _, s := range p.ByCategory {
		if w := want[s.Category]; s.Bytes != w[0] || s.Count != w[1] {
			t.Errorf("%s: %d bytes in %d, want %d in %d", s.Category, s.Bytes, s.Count, w[0], w[1])
		}
	}
	if p.BySite[0].Category != "weights" || p.ByLabel[2].Label != "kv" || p.ByLabel[2].Bytes != 1000*512 {
		t.Errorf("by site %+v by label %+v", p.BySite, p.ByLabel)
	}
	for _, s := range rep.Sites {
		if s.Category == "attn_mask" && (s.PeakBytes != 2*MiB || s.LiveBytes != MiB) {
			t.Errorf("mask site: peak %d live %d", s.PeakBytes, s.LiveBytes)
		}
	}
}

// TestTracks: which track grows tells a true leak from cache retention
// from memory outside the allocator.
func TestTracks(t *testing.T) {
	tests := []struct {
		name    string
		step    func(s *stream, i int, addr *uint64)
		verdict string
		goHeap  bool
	}{
		{"leak", func(s *stream, i int, addr *uint64) {
			*addr++
			s.emit(event.Event{Kind: event.KindSegmentAlloc, Addr: *addr << 32, Size: 20 * MiB, Extra: event.PoolLarge})
			s.emit(event.Event{Kind: event.KindAlloc, Addr: *addr << 32, Size: 20 * MiB, Category: event.CategoryKVCache, Site: 1})
		}, VerdictAllocated, false},
		{"cache retention", func(s *stream, i int, addr *uint64) {
			*addr++
			s.emit(event.Event{Kind: event.KindSegmentAlloc, Addr: *addr << 32, Size: 20 * MiB, Extra: event.PoolLarge})
			s.emit(event.Event{Kind: event.KindAlloc, Addr: *addr << 32, Size: 20 * MiB, Category: event.CategoryActivation, Site: 1})
			s.emit(event.Event{Kind: event.KindFree, Addr: *addr << 32})
		}, VerdictReserved, false},
		{"outside", func(s *stream, i int, addr *uint64) {
			*addr++
			s.emit(event.Event{Kind: event.KindSegmentAlloc, Addr: *addr << 32, Size: 2 * MiB, Extra: event.PoolOutside})
		}, VerdictDevice, false},
		{"device counter, go heap", func(s *stream, i int, addr *uint64) {
			s.emit(event.Event{Kind: event.KindCounter, Label: 1, Size: uint64(100+i) * MiB})
			s.emit(event.Event{Kind: event.KindCounter, Label: 2, Size: uint64(10+3*i) * MiB})
		}, VerdictDevice, true},
		{"flat", func(s *stream, i int, addr *uint64) {
			*addr++
			s.emit(event.Event{Kind: event.KindAlloc, Addr: *addr, Size: MiB, Category: event.CategoryActivation, Site: 1})
			s.emit(event.Event{Kind: event.KindFree, Addr: *addr})
		}, VerdictFlat, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newStream()
			s.tr.DefineString(1, event.CounterDeviceUsed)
			s.tr.DefineString(2, event.CounterGoHeap)
			var addr uint64
			s.begin(event.ScopeRequest)
			for i := 0; i < 30; i++ {
				s.time += 1e6
				s.begin(event.ScopeStep)
				tc.step(s, i, &addr)
				s.end()
			}
			rep, _ := Run(s.tr, Options{MaxPoints: 16})
			tk := rep.Tracks
			if tk.Verdict != tc.verdict || tk.GoHeapGrows != tc.goHeap {
				t.Errorf("verdict %s, go heap grows %v; want %s, %v", tk.Verdict, tk.GoHeapGrows, tc.verdict, tc.goHeap)
			}
			if len(tk.Points) > 16 || len(tk.Points) < 8 {
				t.Errorf("%d points, want 8–16", len(tk.Points))
			}
			var n uint64
			for _, p := range tk.Points {
				n += p.Events
			}
			if n != rep.Events {
				t.Errorf("points cover %d events of %d", n, rep.Events)
			}
			last := tk.Points[len(tk.Points)-1]
			in := func(v, lo, hi uint64) bool { return lo <= v && v <= hi }
			if !in(tk.End.Allocated, last.AllocatedMin, last.AllocatedMax) || !in(tk.End.DeviceUsed, last.DeviceMin, last.DeviceMax) {
				t.Errorf("last point %+v, end %+v", last, tk.End)
			}
		})
	}
}

// TestDiff: two traces that differ by a known amount at one site.
func TestDiff(t *testing.T) {
	trace := func(keep int) *Report {
		b := newBuilder(t)
		kv, act := b.site("kv", 1), b.site("act", 2)
		for r := 0; r < 4; r++ {
			req := b.em.Begin(event.ScopeRequest, "r")
			k := b.alloc(4*MiB, event.CategoryKVCache, event.ScopeRequest, "kv", kv)
			b.free(b.alloc(MiB, event.CategoryActivation, event.ScopeStep, "act", act))
			if r >= keep {
				b.free(k)
			}
			b.em.End(req)
		}
		return b.run(Options{})
	}
	leaky, fixed := trace(4), trace(0)
	d := Diff(leaky, fixed)
	if d.LingeringBytes != (Change{16 * MiB, 0, -16 * MiB}) || d.LingeringCount != (Change{4, 0, -4}) {
		t.Errorf("lingering %+v %+v", d.LingeringBytes, d.LingeringCount)
	}
	if d.PeakBytes != (Change{17 * MiB, 5 * MiB, -12 * MiB}) {
		t.Errorf("peak %+v", d.PeakBytes)
	}
	if len(d.Sites) != 1 {
		t.Fatalf("changed sites %+v, want the kv site only", d.Sites)
	}
	r := d.Sites[0]
	if r.Category != "kv_cache" || r.Allocs != (Change{4, 4, 0}) || r.LingeringBytes != (Change{16 * MiB, 0, -16 * MiB}) ||
		r.Lingering != (Change{4, 0, -4}) || r.PeakBytes != (Change{16 * MiB, 4 * MiB, -12 * MiB}) {
		t.Errorf("kv row %+v", r)
	}
	if Diff(leaky, leaky).Sites == nil || len(Diff(leaky, leaky).Sites) != 0 {
		t.Errorf("a trace differs from itself")
	}
	js, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{`"lingering_bytes":{"a":16777216,"b":0,"delta":-16777216}`, `"peak_bytes"`, `"sites"`} {
		if !bytes.Contains(js, []byte(k)) {
			t.Errorf("diff JSON lacks %s: %s", k, js)
		}
	}
	var text bytes.Buffer
	d.WriteText(&text)
	if !strings.Contains(text.String(), "lingering: 4 → 0 objects, 16.0 MiB → 0 B (−16.0 MiB)") {
		t.Errorf("diff text:\n%s", text.String())
	}
}

// TestReportJSON: the report encodes with stable lower_snake names and
// decodes back to the same value.
func TestReportJSON(t *testing.T) {
	b := newBuilder(t)
	req := b.em.Begin(event.ScopeRequest, "request 1")
	b.alloc(MiB, event.CategoryKVCache, event.ScopeRequest, "kv", b.site("c", 1))
	b.em.End(req)
	rep := b.run(Options{Truncated: "torn tail at byte 123"})
	js, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{`"events"`, `"truncated":"torn tail at byte 123"`, `"lingering":{"count":1`, `"leaked_bytes":1048576`,
		`"growth":[]`, `"duplicates":[]`, `"peak":{"bytes":1048576`, `"tracks":{"points"`, `"verdict"`, `"sites":[`, `"scope_label":"request 1"`} {
		if !bytes.Contains(js, []byte(k)) {
			t.Errorf("JSON lacks %s", k)
		}
	}
	var back Report
	if err := json.Unmarshal(js, &back); err != nil {
		t.Fatal(err)
	}
	js2, _ := json.Marshal(&back)
	if !bytes.Equal(js, js2) {
		t.Errorf("JSON round trip differs:\n%s\n%s", js, js2)
	}
	var text bytes.Buffer
	rep.WriteText(&text)
	lines := strings.Split(text.String(), "\n")
	if !strings.HasPrefix(lines[0], "TRUNCATED: torn tail") || !strings.HasPrefix(lines[2], "lingering: 1 objects, 1.0 MiB") ||
		!strings.Contains(lines[3], "kv_cache") || !strings.Contains(lines[3], "cell c, line 1") {
		t.Errorf("text:\n%s", text.String())
	}
}
