package goheap

import (
	"bytes"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"linger/timeline/analyze"
	"linger/timeline/event"
	"linger/timeline/event/eventtest"
)

const mib = 1 << 20

// fr is a frame of a test stack: function, file, line.
type fr struct {
	fn, file string
	line     int64
}

// stack is a heap profile's sample: its frames, innermost first, and
// values.
type stack struct {
	frames                []fr
	inuse, allocB, allocO int64
}

var (
	leakFrames  = []fr{{"main.leak", "/src/svc/leak.go", 12}, {"net/http.HandlerFunc.ServeHTTP", "/usr/local/go/src/net/http/server.go", 2220}, {"net/http.(*conn).serve", "/usr/local/go/src/net/http/server.go", 2000}}
	cacheFrames = []fr{{"main.(*cache).put", "/src/svc/cache.go", 5}, {"main.main", "/src/svc/main.go", 30}}
	bufioFrames = []fr{{"bufio.NewReaderSize", "/usr/local/go/src/bufio/bufio.go", 57}, {"net/http.(*conn).serve", "/usr/local/go/src/net/http/server.go", 1990}}
)

// heapProfile is a Go heap profile of stacks, written and parsed again
// as the watcher reads one.
func heapProfile(t testing.TB, stacks ...stack) *profile.Profile {
	t.Helper()
	p := &profile.Profile{
		SampleType: []*profile.ValueType{{Type: "alloc_objects", Unit: "count"}, {Type: "alloc_space", Unit: "bytes"},
			{Type: "inuse_objects", Unit: "count"}, {Type: "inuse_space", Unit: "bytes"}},
		PeriodType: &profile.ValueType{Type: "space", Unit: "bytes"}, Period: 512 * 1024,
	}
	fns := map[string]*profile.Function{}
	locs := map[fr]*profile.Location{}
	for _, s := range stacks {
		var ls []*profile.Location
		for _, f := range s.frames {
			l := locs[f]
			if l == nil {
				fn := fns[f.fn+f.file]
				if fn == nil {
					fn = &profile.Function{ID: uint64(len(fns) + 1), Name: f.fn, SystemName: f.fn, Filename: f.file}
					fns[f.fn+f.file] = fn
					p.Function = append(p.Function, fn)
				}
				l = &profile.Location{ID: uint64(len(locs) + 1), Address: uint64(0x1000 + len(locs)), Line: []profile.Line{{Function: fn, Line: f.line}}}
				locs[f] = l
				p.Location = append(p.Location, l)
			}
			ls = append(ls, l)
		}
		p.Sample = append(p.Sample, &profile.Sample{Location: ls, Value: []int64{s.allocO, s.allocB, s.inuse / 1024, s.inuse}})
	}
	var b bytes.Buffer
	if err := p.Write(&b); err != nil {
		t.Fatal(err)
	}
	q, err := profile.ParseData(b.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	return q
}

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// at is sample k's time: k seconds in.
func at(k int) time.Time { return t0.Add(time.Duration(k) * time.Second) }

// leaky is sample k of a service whose leak holds k MiB, beside a steady
// cache of 4 MiB and 64 KiB of the standard library's buffers; each
// sample allocated 1 MiB more at the leak, in 1 object.
func leaky(t testing.TB, k int) *profile.Profile {
	return heapProfile(t,
		stack{leakFrames, int64(k) * mib, int64(k) * mib, int64(k)},
		stack{cacheFrames, 4 * mib, 4 * mib, 4},
		stack{bufioFrames, 64 << 10, int64(k) * 64 << 10, int64(k)})
}

func run(t *testing.T, sink *eventtest.Sink) *analyze.Report {
	t.Helper()
	if err := sink.Err(); err != nil {
		t.Fatal(err)
	}
	rep, err := analyze.Run(sink, analyze.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// A leak of 1 MiB per sample grows at its site, which the service's own
// frame names, by exactly 1 MiB per step with a perfect fit; the steady
// site and the standard library's buffers do not; the comparison sets
// the first, a third of the way and the last sample side by side; the
// heap threshold trips from the sample it is crossed at; the goroutines
// end at their baseline.
func TestGrowthPerSite(t *testing.T) {
	sink := eventtest.Strict(t)
	c := New(sink, t0, Options{Target: "http://svc:6060", MaxHeap: 10 * mib, MaxGCPause: 200 * time.Millisecond, GoroutineTolerance: 0.05})
	const n = 12
	for k := 1; k <= n; k++ {
		res, err := c.Add(Sample{Start: at(k).Add(-time.Millisecond), End: at(k), Heap: leaky(t, k), Goroutines: 10,
			Metrics: &Metrics{GCPauseP99: time.Duration(k) * time.Millisecond, HasGCPause: true}})
		if err != nil {
			t.Fatal(err)
		}
		if want := uint64(k*mib + 4*mib + 64<<10); !res.HasHeapInuse || res.HeapInuse != want || res.Profiled != want {
			t.Errorf("sample %d: heap in use %d (%v), profiled %d; want %d", k, res.HeapInuse, res.HasHeapInuse, res.Profiled, want)
		}
		if over := res.HeapInuse > 10*mib; over != (len(res.Breaches) == 1) {
			t.Errorf("sample %d: breaches %q", k, res.Breaches)
		}
		if k > 1 && (!res.HasRates || math.Abs(res.AllocBytesRate-(mib+64<<10)) > 1 || math.Abs(res.AllocObjectsRate-2) > 1e-9) {
			t.Errorf("sample %d: rates %v B/s %v objects/s (%v), want 1 MiB + 64 KiB and 2 a second", k, res.AllocBytesRate, res.AllocObjectsRate, res.HasRates)
		}
	}
	rep := run(t, sink)
	var leak *analyze.Growth
	for i, g := range rep.Growth {
		name := rep.CellNames().Short(rep.Site(g.SiteID))
		if strings.Contains(name, "main.leak") {
			leak = &rep.Growth[i]
		} else if g.Site != "" {
			t.Errorf("growth at %s: only the leak grows", name)
		}
	}
	if leak == nil {
		t.Fatalf("no growth at main.leak: %+v", rep.Growth)
	}
	if leak.BytesPerStep != mib || leak.R2 < 0.999999 || leak.Samples != n || leak.First != mib || leak.Last != n*mib {
		t.Errorf("leak growth %+v; want +1 MiB a step over %d steps, R² 1, 1 → %d MiB", *leak, n, n)
	}
	if math.Abs(leak.BytesPerSecond-mib) > 1 {
		t.Errorf("leak growth %.0f B/s, want 1 MiB/s (a sample a second)", leak.BytesPerSecond)
	}
	site := rep.Site(leak.SiteID)
	if len(site.Stack) != 1 || site.Stack[0].Func != "main.leak" || len(site.Frames) != 3 {
		t.Errorf("leak's site %+v: its own frame main.leak alone, the whole stack of 3 frames kept", site)
	}
	if got := rep.Tracks.Last.Allocated; got != n*mib+4*mib+64<<10 {
		t.Errorf("allocated at the last sample %d, want the profile's in-use total", got)
	}

	s := rep.Service
	if s == nil {
		t.Fatal("no service section")
	}
	if s.Target != "http://svc:6060" || s.Samples != n || s.Failed != 0 || s.RestartCount != 0 {
		t.Errorf("service %q, %d samples, %d failed, %d restarts", s.Target, s.Samples, s.Failed, s.RestartCount)
	}
	c3 := s.Comparison
	if len(c3.Points) != 3 || c3.Points[0].Sample != 1 || c3.Points[1].Sample != 5 || c3.Points[2].Sample != n {
		t.Fatalf("compared samples %+v, want 1, 5 (a third of the way) and %d", c3.Points, n)
	}
	row := c3.Rows[0]
	if !strings.Contains(row.Site, "main.leak") || fmt.Sprint(row.Bytes) != fmt.Sprint([]uint64{mib, 5 * mib, n * mib}) || row.Change != (n-1)*mib || !row.Grew {
		t.Errorf("first row %+v, want the leak: 1, 5, %d MiB, +%d MiB, grew", row, n, n-1)
	}
	if len(c3.Rows) != 3 || c3.Rows[1].Grew || c3.Rows[1].Change != 0 {
		t.Errorf("rows %+v, want the leak, then the cache and bufio unchanged", c3.Rows)
	}
	g := s.Goroutines
	if g == nil || g.Baseline != 10 || g.Last != 10 || !g.Within || g.TolerancePPM != 50000 || g.Allowed != 1 {
		t.Errorf("goroutines %+v, want 10 against a baseline of 10, within ±5 %% (at least 1)", g)
	}
	if len(s.Thresholds) != 2 {
		t.Fatalf("thresholds %+v, want heap and GC pause", s.Thresholds)
	}
	heap := s.Thresholds[0]
	if heap.Counter != event.CounterGoHeap || heap.Limit != 10*mib || !heap.Breached || !heap.OverNow || heap.Over != 7 || heap.FirstOverNS != int64(6*time.Second) || heap.Samples != n {
		t.Errorf("heap threshold %+v, want over 10 MiB from sample 6 on (7 of %d)", heap, n)
	}
	if gc := s.Thresholds[1]; gc.Counter != event.CounterGCPauseP99 || gc.Breached || gc.Max != uint64(n*time.Millisecond) {
		t.Errorf("GC threshold %+v, want never over 200 ms, max %d ms", gc, n)
	}
	if len(s.Series) != n || s.Series[n-1].HeapInuse != n*mib+4*mib+64<<10 || s.Series[n-1].Goroutines != 10 || s.Series[0].AllocBytes != -1 || s.Series[1].AllocBytes != mib+64<<10 {
		t.Errorf("series %+v", s.Series)
	}
	var text strings.Builder
	if err := rep.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"service http://svc:6060: 12 samples", "sample 1 (1.0 s), sample 5 (5.0 s), sample 12 (12.0 s)", "grew",
		"goroutines: 10 at the last sample", "within ±1", "threshold go_heap_inuse over 10.0 MiB: BREACHED at 7 of 12 samples, first at 6.0 s", "+1.0 MiB/sample"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text report lacks %q:\n%s", want, text.String())
		}
	}
}

// Goroutines that end far from their baseline are judged so.
func TestGoroutinesBaseline(t *testing.T) {
	for _, c := range []struct {
		base, last int64
		within     bool
	}{{100, 105, true}, {100, 106, false}, {100, 95, true}, {100, 94, false}, {4, 5, true}, {4, 6, false}} {
		sink := eventtest.Strict(t)
		conv := New(sink, t0, Options{Target: "svc", GoroutineTolerance: 0.05})
		conv.Add(Sample{Start: at(1), End: at(1), Heap: leaky(t, 1), Goroutines: c.base})
		conv.Add(Sample{Start: at(2), End: at(2), Heap: leaky(t, 1), Goroutines: c.last})
		g := run(t, sink).Service.Goroutines
		if g == nil || g.Baseline != uint64(c.base) || g.Last != uint64(c.last) || g.Within != c.within {
			t.Errorf("%d against %d: %+v, want within %v", c.last, c.base, g, c.within)
		}
	}
}

// The largest sites are kept apart, those kept before while among the
// twice as many largest; the rest fold into "other sites", so that the
// blocks still add up to the profile's in-use total.
func TestTopSites(t *testing.T) {
	sink := eventtest.Strict(t)
	c := New(sink, t0, Options{Target: "svc", TopSites: 2})
	sites := func(sizes ...int64) *profile.Profile {
		var ss []stack
		for i, n := range sizes {
			ss = append(ss, stack{[]fr{{fmt.Sprintf("main.f%d", i), "/src/svc/f.go", int64(i + 1)}}, n, n, 1})
		}
		return heapProfile(t, ss...)
	}
	// f0 and f1 the largest; then f2 rises, f1 falls to fourth (kept:
	// among the 4 largest), f3 third (not kept before: folded); then f1
	// falls to fifth (folded).
	for k, p := range []*profile.Profile{sites(100, 90, 10, 5, 1), sites(100, 50, 80, 70, 1), sites(100, 5, 80, 70, 60)} {
		if _, err := c.Add(Sample{Start: at(k), End: at(k), Heap: p, Goroutines: -1}); err != nil {
			t.Fatal(err)
		}
	}
	// The blocks alive after each sample, by label.
	alive := map[string]uint64{}
	var got []string
	for _, e := range sink.Events() {
		switch e.Kind {
		case event.KindAlloc:
			alive[sink.String(e.Label)] = e.Size
		case event.KindFree:
			delete(alive, sink.String(e.Label))
		case event.KindScopeEnd:
			var total uint64
			for _, n := range alive {
				total += n
			}
			got = append(got, fmt.Sprint(len(alive), " ", total))
		}
	}
	if want := "[3 206 4 301 3 315]"; fmt.Sprint(got) != want {
		t.Errorf("blocks and their total after each sample %v, want %s", got, want)
	}
	if n := len(sink.Kind(event.KindAlloc)); n != 3+4+3 {
		t.Errorf("%d allocs, want every block allocated again at each sample: 3 + 4 + 3", n)
	}
}

// A service restarted mid-watch (its profile's allocations since start
// went back, or its start time changed) is marked, and no rate spans the
// restart: none is negative, none counts the old process's allocations.
func TestRestart(t *testing.T) {
	sink := eventtest.Strict(t)
	c := New(sink, t0, Options{Target: "svc"})
	m := func(start float64) *Metrics { return &Metrics{StartTime: start} }
	var restarted []string
	for k, s := range []Sample{
		{Heap: leaky(t, 5), Metrics: m(1000)},
		{Heap: leaky(t, 6), Metrics: m(1000)},
		{Heap: leaky(t, 1), Metrics: m(1000)}, // allocations went back
		{Heap: leaky(t, 2), Metrics: m(1000)},
		{Heap: leaky(t, 3), Metrics: m(2000)}, // a new process, seen by its start time
		{Heap: leaky(t, 4), Metrics: m(2000)},
	} {
		s.Start, s.End, s.Goroutines = at(k), at(k), 5
		res, err := c.Add(s)
		if err != nil {
			t.Fatal(err)
		}
		if res.Restarted != "" {
			restarted = append(restarted, fmt.Sprint(k))
		}
		if res.HasRates != (k == 1 || k == 3 || k == 5) {
			t.Errorf("sample %d: rates %v, want them only where a sample of the same process came before", k, res.HasRates)
		}
	}
	if fmt.Sprint(restarted) != "[2 4]" {
		t.Errorf("restarts at samples %v, want 2 and 4", restarted)
	}
	for _, e := range sink.Counters(event.CounterAllocBytesRate) {
		if e.Size > 2*mib {
			t.Errorf("a rate of %d B/s spans a restart", e.Size)
		}
	}
	s := run(t, sink).Service
	if s.RestartCount != 2 || !strings.Contains(s.Restarts[0].Text, "went back") || !strings.Contains(s.Restarts[1].Text, "process_start_time_seconds") {
		t.Errorf("restarts %+v", s.Restarts)
	}
}

// A sample whose heap profile failed, or is no heap profile, is marked
// and makes no step: the growth fits see whole samples only.
func TestFailedSample(t *testing.T) {
	sink := eventtest.Strict(t)
	c := New(sink, t0, Options{Target: "svc"})
	c.Add(Sample{Start: at(1), End: at(1), Heap: leaky(t, 1), Goroutines: 3})
	c.Add(Sample{Start: at(2), End: at(2), Goroutines: 3, Errors: []string{"heap: GET http://svc/debug/pprof/heap: 404 Not Found"}})
	goroutine := &profile.Profile{SampleType: []*profile.ValueType{{Type: "goroutine", Unit: "count"}}}
	if _, err := c.Add(Sample{Start: at(3), End: at(3), Heap: goroutine, Goroutines: -1}); err == nil || !strings.Contains(err.Error(), "not a Go heap profile") {
		t.Errorf("a goroutine profile as the heap: %v", err)
	}
	rep := run(t, sink)
	s := rep.Service
	if s.Samples != 1 || s.Failed != 2 || len(s.Failures) != 2 || !strings.Contains(s.Failures[0].Text, "404") || !strings.Contains(s.Failures[1].Text, "not a Go heap profile") {
		t.Errorf("service %+v: 1 sample, 2 failures", s)
	}
	if n := len(sink.Kind(event.KindScopeBegin)); n != 1 {
		t.Errorf("%d steps, want 1", n)
	}
}

// However many samples, with new stacks and new messages at each, a
// trace defines at most MaxSites sites and MaxStrings strings.
func TestBounds(t *testing.T) {
	sink := eventtest.Strict(t)
	c := New(sink, t0, Options{Target: "svc", TopSites: 4, MaxSites: 8, MaxStrings: 32})
	for k := range 200 {
		var ss []stack
		for i := range 6 {
			ss = append(ss, stack{[]fr{{fmt.Sprintf("main.f%d_%d", k, i), "/src/f.go", 1}}, int64(100 + i), 1, 1})
		}
		c.Add(Sample{Start: at(k), End: at(k), Heap: heapProfile(t, ss...), Goroutines: 1, Errors: []string{fmt.Sprintf("metrics: error %d", k)}})
	}
	if got := len(c.sites); got > 8 {
		t.Errorf("%d sites defined, want at most 8", got)
	}
	if got := len(c.strs); got > 32 {
		t.Errorf("%d strings defined, want at most 32", got)
	}
	rep := run(t, sink)
	if rep.Service.Failed != 200 || rep.Service.Samples != 200 || rep.Tracks.Last.Allocated != 615 {
		t.Errorf("failed %d, samples %d, allocated %d", rep.Service.Failed, rep.Service.Samples, rep.Tracks.Last.Allocated)
	}
}

func TestOwnFrames(t *testing.T) {
	for _, c := range []struct {
		fn, pkg string
		std     bool
	}{
		{"net/http.(*conn).serve", "net/http", true},
		{"runtime.mallocgc", "runtime", true},
		{"main.leak", "main", false},
		{"linger/cmd/linger.leakHandler", "linger/cmd/linger", false},
		{"github.com/a/b.(*T).M[go.shape.*github.com/x/y.Z]", "github.com/a/b", false},
		{"encoding/json.Marshal", "encoding/json", true},
		{"type:.eq.main.T", "type:", true},
		{"example.com/internal/x.F", "example.com/internal/x", false},
	} {
		if got := Package(c.fn); got != c.pkg && !strings.HasPrefix(c.fn, "type:") {
			t.Errorf("Package(%q) = %q, want %q", c.fn, got, c.pkg)
		}
		if got := Std(c.fn); got != c.std {
			t.Errorf("Std(%q) = %v, want %v", c.fn, got, c.std)
		}
	}
	fs := []event.Frame{
		{Func: "github.com/redis/go-redis/v9.(*Client).Get", File: "/root/go/pkg/mod/github.com/redis/go-redis/v9@v9.7.0/commands.go"},
		{Func: "main.embed", File: "/src/svc/embed.go", Line: 9},
		{Func: "main.handler", File: "/src/svc/main.go", Line: 40},
		{Func: "net/http.HandlerFunc.ServeHTTP", File: "/usr/local/go/src/net/http/server.go"},
	}
	own := Own(fs)
	if len(own) != 2 || own[0].Func != "main.handler" || own[1].Func != "main.embed" {
		t.Errorf("Own = %+v, want main.handler then main.embed (outermost first)", own)
	}
	// Built from the module cache, a service's own code is there too.
	own = Own([]event.Frame{fs[0], fs[3]})
	if len(own) != 1 || own[0].Func != fs[0].Func {
		t.Errorf("Own without code outside the module cache = %+v", own)
	}
	if got := label(newSite([]event.Frame{fs[3], fs[1]})); got != "main.embed (embed.go:9)" {
		t.Errorf("label %q", got)
	}
}

// BenchmarkAdd is a sample of a service whose heap profile has 2000
// stacks of 24 frames: what a sample costs the watcher, the profile
// parsed already.
func BenchmarkAdd(b *testing.B) {
	var ss []stack
	for i := range 2000 {
		var fs []fr
		for j := range 20 {
			fs = append(fs, fr{fmt.Sprintf("net/http.f%d", j), "/usr/local/go/src/net/http/server.go", int64(j)})
		}
		fs = append([]fr{{fmt.Sprintf("main.f%d", i%300), "/src/svc/main.go", int64(i)}, {"main.g", "/src/svc/g.go", 1}, {"main.h", "/src/svc/h.go", 2}, {"main.main", "/src/svc/main.go", 9}}, fs...)
		ss = append(ss, stack{fs, int64(i+1) * 1000, int64(i+1) * 5000, 10})
	}
	p := heapProfile(b, ss...)
	c := New(eventtest.Discard, t0, Options{Target: "svc"})
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		c.Add(Sample{Start: at(i), End: at(i), Heap: p, Goroutines: 100})
	}
}
