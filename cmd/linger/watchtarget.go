package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"linger/internal/units"
	"linger/timeline"
	"linger/timeline/goheap"
)

// watchSettings are what every target of a watch shares.
type watchSettings struct {
	every, timeout time.Duration
	maxBody        int64
	headers        http.Header
	// gcEvery forces a GC before every heap profile, not only the
	// baseline's and the final one's.
	gcEvery  bool
	limits   goheap.Options // the thresholds, tolerance and sites kept (Target set per target)
	recorder timeline.RecorderOptions
}

// target is one watched service: its fetcher, its trace and what its
// samples need from the one before (the GC histogram).
type target struct {
	id, name string // the source's id; the URL as shown (no credentials or query)
	fetch    *fetcher
	every    time.Duration
	rec      *timeline.Recorder
	trace    string // the trace's file name
	conv     *goheap.Converter
	gc       gcPauses
	metrics  *watchMetrics // nil: none
	log      io.Writer
	gcEvery  bool
	// noMetrics is set once the service said it has no /metrics (404),
	// said once on the terminal.
	noMetrics bool
	// final is set once the final sample is taken.
	final bool
	// gcSent is set once a heap profile after a forced GC has been
	// asked for and answered, or given up on while the service does it.
	gcSent bool
}

// parseTarget reads a target's URL: http or https (a bare host:port is
// http), with a host.
func parseTarget(s string) (*url.URL, error) {
	if !strings.Contains(s, "://") {
		s = "http://" + s
	}
	u, err := url.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("%w: target %q: %v", errUsage, s, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("%w: target %q: want an http or https URL with a host, as http://127.0.0.1:6060", errUsage, s)
	}
	u.Fragment = ""
	return u, nil
}

// shown is a target's URL as a person reads it, and as the trace and the
// metrics name it: without credentials or query (a token).
func shown(u *url.URL) string {
	return (&url.URL{Scheme: u.Scheme, Host: u.Host, Path: strings.TrimSuffix(u.Path, "/")}).String()
}

// sourceIDOf is the live source's id of a target: its host and port,
// in the characters a source id may have.
func sourceIDOf(u *url.URL) string {
	id := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '.', r == '-':
			return r
		case r >= 'A' && r <= 'Z':
			return r + 'a' - 'A'
		}
		return '-'
	}, u.Host+strings.TrimSuffix(u.Path, "/"))
	id = strings.Trim(id, "-.")
	if len(id) > 48 {
		id = id[:48]
	}
	if id == "" {
		id = "service"
	}
	return id
}

// newTarget makes target u's trace (a new file in dir, named after it and
// the time) and its converter.
func newTarget(u *url.URL, id, dir string, set watchSettings, m *watchMetrics, log io.Writer, now time.Time) (*target, error) {
	name := fmt.Sprintf("watch-%s-%s", id, now.Format("2006-01-02T15-04-05"))
	file := name + ".ltrace"
	for i := 2; ; i++ {
		if _, err := os.Lstat(filepath.Join(dir, file)); errors.Is(err, os.ErrNotExist) {
			break
		}
		file = fmt.Sprintf("%s-%d.ltrace", name, i)
	}
	rec, err := timeline.NewRecorder(filepath.Join(dir, file), set.recorder)
	if err != nil {
		return nil, err
	}
	t := &target{id: id, name: shown(u), every: set.every, rec: rec, trace: file, metrics: m, log: log, gcEvery: set.gcEvery,
		fetch: newFetcher(u, set.headers, set.timeout, set.maxBody)}
	opts := set.limits
	opts.Target = t.name
	t.conv = goheap.New(rec, now, opts)
	return t, nil
}

// run samples the target every interval until ctx is done: the first at
// once.
func (t *target) run(ctx context.Context) {
	tick := time.NewTicker(t.every)
	defer tick.Stop()
	for {
		t.sample(ctx)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// sample takes one sample and records it. Until the goroutine baseline is
// taken, for the final sample, and for every sample with --gc, the heap
// profile is asked for after a forced GC (?gc=1), and the goroutines
// after it: what remains then is what the service holds (without it a
// heap profile's in-use figures are those of the last GC the service
// made).
func (t *target) sample(ctx context.Context) goheap.Result {
	s := goheap.Sample{Start: time.Now(), Goroutines: -1}
	// A forced GC until one has been asked for (the baseline's, whose
	// count comes once no request of the watch's runs in the service),
	// then for the final sample, and for every one with --gc.
	gc := !t.gcSent || t.final || t.gcEvery
	busyAtStart := t.fetch.outstanding()
	var heapErr, gorErr, mErr error
	// A sample ends before the next is due: what it has not read by then
	// fails (the final sample has its own time).
	sctx := ctx
	if !t.final {
		var cancel context.CancelFunc
		sctx, cancel = context.WithDeadlineCause(ctx, s.Start.Add(t.every), errNextSampleDue)
		defer cancel()
	}
	// One request after another, over the one connection: what runs in
	// the service besides its own work is one request of the watch's.
	s.Heap, heapErr = t.fetch.heap(sctx, gc)
	if g := (*gaveUp)(nil); gc && (heapErr == nil || errors.As(heapErr, &g)) {
		t.gcSent = true // asked for, and done or under way in the service
	}
	f, mErr := t.fetch.metrics(sctx)
	if mErr == nil {
		s.Metrics = t.gc.read(f)
	}
	// The goroutines last, and not while a request the watch gave up on
	// still runs in the service: its goroutines would be counted with
	// the service's (and, at the first count, as its baseline).
	if busyAtStart || t.fetch.outstanding() { // one ended meanwhile may have left its connection closing
		gorErr = errors.New("not counted while a request the watch gave up on still runs in the service (it would be counted with the service's goroutines)")
	} else {
		s.Goroutines, gorErr = t.fetch.goroutines(sctx)
	}
	s.End = time.Now()
	if ctx.Err() != nil && !t.final {
		return goheap.Result{} // stopped mid-sample: the final sample follows
	}
	for _, e := range []struct {
		what string
		err  error
	}{{"heap", heapErr}, {"goroutines", gorErr}, {"metrics", mErr}} {
		if e.err == nil {
			continue
		}
		if errors.Is(e.err, errNoMetrics) {
			if !t.noMetrics {
				t.noMetrics = true
				fmt.Fprintf(t.log, "%s: no /metrics (404): no GC pauses, and heap in use from the heap profile alone\n", t.name)
			}
			continue
		}
		s.Errors = append(s.Errors, e.what+": "+e.err.Error())
	}
	if s.Metrics == nil && mErr == nil && !t.noMetrics {
		t.noMetrics = true
		fmt.Fprintf(t.log, "%s: /metrics has no Go collector (go_memstats_heap_inuse_bytes, go_gc_duration_seconds): no GC pauses\n", t.name)
	}
	res, _ := t.conv.Add(s)
	if t.metrics != nil {
		t.metrics.observe(t.name, res, len(s.Errors) > 0)
	}
	t.say(res, s.Errors)
	return res
}

// say writes the sample on the terminal: one line of figures, then what
// failed and what is over its limit.
func (t *target) say(r goheap.Result, errs []string) {
	var parts []string
	if r.HasHeapInuse {
		parts = append(parts, "heap in use "+units.Format(r.HeapInuse))
	}
	if len(r.Top) > 0 {
		parts = append(parts, fmt.Sprintf("largest %s %s", r.Top[0].Label, units.Format(r.Top[0].Bytes)))
	}
	if r.Goroutines >= 0 {
		parts = append(parts, fmt.Sprintf("goroutines %d (baseline %d)", r.Goroutines, r.Baseline))
	}
	if r.HasGCPause {
		parts = append(parts, fmt.Sprintf("GC pause p99 %v", r.GCPauseP99))
	}
	if r.HasRates {
		parts = append(parts, fmt.Sprintf("allocating %s/s", units.Format(uint64(r.AllocBytesRate))))
	}
	what := "sample"
	if t.final {
		what = "final sample (after a forced GC)"
	}
	if len(parts) == 0 {
		parts = append(parts, "nothing read")
	}
	fmt.Fprintf(t.log, "%s %s %d: %s\n", t.name, what, r.N, strings.Join(parts, ", "))
	for _, e := range errs {
		fmt.Fprintf(t.log, "%s sample %d failed: %s; the watch goes on\n", t.name, r.N, e)
	}
	if r.Restarted != "" {
		fmt.Fprintf(t.log, "%s restarted: %s\n", t.name, r.Restarted)
	}
	for _, b := range r.Breaches {
		fmt.Fprintf(t.log, "%s OVER A LIMIT: %s\n", t.name, b)
	}
}

// stop takes the final sample (after a forced GC) and ends the trace:
// it waits up to a request's timeout for the requests the watch gave up
// on to be answered, then gives the final sample four (the heap, asked
// again without ?gc=1 when a proxy refuses it, /metrics, the
// goroutines).
func (t *target) stop(timeout time.Duration) {
	settle, cancelSettle := context.WithTimeout(context.Background(), timeout)
	t.fetch.settle(settle)
	cancelSettle()
	ctx, cancel := context.WithTimeout(context.Background(), 4*timeout)
	defer cancel()
	t.final = true
	t.sample(ctx)
	if err := t.rec.Close(); err != nil {
		fmt.Fprintf(t.log, "%s: closing its trace: %v\n", t.name, err)
	}
	t.fetch.close()
}
