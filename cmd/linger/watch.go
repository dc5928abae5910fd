package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"linger/internal/units"
	"linger/server"
	"linger/timeline"
	"linger/timeline/goheap"
)

// The field report's thresholds (SCENARIOS.md), watch's defaults.
const (
	defaultMaxHeap            = "1.8GB"
	defaultMaxGCPause         = 200 * time.Millisecond
	defaultGoroutineTolerance = 0.05
)

// minEvery is the shortest --every: each sample is three requests.
const minEvery = 50 * time.Millisecond

// runWatch is linger watch URL...: Go services with net/http/pprof
// sampled every interval (heap profile, goroutines, /metrics), each a
// live trace of the server it runs, listed on its root page and opened
// in the browser (docs/watch.md).
func runWatch(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("watch", stderr)
	c := serveConfig{baseURL: "/"}
	fs.StringVar(&c.dir, "dir", ".", "notebook root directory the server also serves (traces in DIR/.linger/traces unless --trace-dir)")
	fs.StringVar(&c.addr, "addr", "127.0.0.1:0", "listen address (port 0 picks a free port); loopback only")
	targets := fs.String("targets", "", "also watch the URLs in `FILE`, one a line (# starts a comment)")
	// A sample is a few dozen events: a short tail in memory serves a
	// live page (one further behind reads the file), so that many
	// targets cost little each.
	set := watchSettings{headers: http.Header{}, recorder: timeline.RecorderOptions{RingSize: 1024, TailSize: 4096}}
	fs.DurationVar(&set.every, "every", 30*time.Second, "sample every `D`")
	fs.DurationVar(&set.timeout, "timeout", 0, "wait at most `D` for each answer (default: half of --every, at most 10s; less than --every); a request given up on is not sent again until it is answered")
	maxBody := uint64(64 << 20)
	fs.Func("max-body", "the largest answer read from a service (`SIZE`, default 64MiB): a larger one fails that part of the sample", func(s string) error {
		n, err := units.Parse(s)
		maxBody = n
		return err
	})
	fs.Func("header", "send `NAME: VALUE` with every request (repeatable), e.g. 'Authorization: Bearer TOKEN'", func(s string) error {
		k, v, ok := strings.Cut(s, ":")
		if !ok || strings.TrimSpace(k) == "" {
			return fmt.Errorf("%q is not NAME: VALUE", s)
		}
		set.headers.Add(strings.TrimSpace(k), strings.TrimSpace(v))
		return nil
	})
	lim := &set.limits
	lim.MaxHeap, _ = units.Parse(defaultMaxHeap)
	fs.Func("max-heap", "a finding when heap in use is over `SIZE` (default "+defaultMaxHeap+"; 0: none)", func(s string) error {
		n, err := units.Parse(s)
		lim.MaxHeap = n
		return err
	})
	fs.DurationVar(&lim.MaxGCPause, "max-gc-pause", defaultMaxGCPause, "a finding when the GC pauses' p99 is over `D` (0: none)")
	fs.Func("max-alloc-rate", "a finding when allocations are over `[FUNC=]RATE` (repeatable): RATE objects a second (1200/s) or bytes (64MiB/s), of the stacks with a function whose name contains FUNC, or of all", func(s string) error {
		r, err := parseAllocRate(s)
		lim.AllocRates = append(lim.AllocRates, r)
		return err
	})
	lim.GoroutineTolerance = defaultGoroutineTolerance
	fs.Func("goroutine-tolerance", "how far from its baseline (the first sample) the goroutine count may end: `PCT` (default 5%)", func(s string) error {
		v, err := parsePercent(s)
		lim.GoroutineTolerance = v
		return err
	})
	fs.IntVar(&lim.TopSites, "top", goheap.DefaultTopSites, "keep the `N` largest sites apart at each sample, the rest folded into \"other sites\"")
	fs.BoolVar(&set.gcEvery, "gc", false, "force a GC in the service before every heap profile (?gc=1), not only the first and the last: exact in-use bytes, a GC a sample")
	noBrowser := fs.Bool("no-browser", false, "print the page's URL, do not open a browser")
	c.kernelFlags.register(fs)
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if *targets != "" {
		more, err := readTargets(*targets)
		if err != nil {
			return err
		}
		pos = append(pos, more...)
	}
	if len(pos) == 0 {
		return fmt.Errorf("%w: watch takes the URL of a Go service with net/http/pprof (http://127.0.0.1:6060), several, or --targets FILE", errUsage)
	}
	if set.every < minEvery {
		return fmt.Errorf("%w: --every %v is under %v", errUsage, set.every, minEvery)
	}
	if set.timeout == 0 {
		set.timeout = min(set.every/2, 10*time.Second)
	}
	if set.timeout <= 0 || set.timeout >= set.every {
		return fmt.Errorf("%w: --timeout %v must be positive and less than --every %v: an answer is waited for less than an interval", errUsage, set.timeout, set.every)
	}
	if maxBody == 0 {
		return fmt.Errorf("%w: --max-body must be positive", errUsage)
	}
	set.maxBody = int64(min(maxBody, 1<<40))
	if lim.TopSites <= 0 {
		return fmt.Errorf("%w: --top must be positive", errUsage)
	}
	urls := make([]*url.URL, len(pos))
	ids := make([]string, len(pos))
	for i, p := range pos {
		if urls[i], err = parseTarget(p); err != nil {
			return err
		}
		ids[i] = sourceIDOf(urls[i])
		for n, j := 2, 0; j < i; j++ { // two targets of one host and port: one id each
			if ids[j] == ids[i] {
				ids[i], j = fmt.Sprintf("%s-%d", sourceIDOf(urls[i]), n), -1
				n++
			}
		}
	}
	if host, _, err := net.SplitHostPort(c.addr); err == nil {
		if err := checkBind(c.addr, host, false); err != nil {
			return err
		}
	}
	if len(urls) == 1 {
		c.page = "timeline/live/" + ids[0]
	}
	var targetsRun []*target
	c.start = func(srv *server.Server, reg prometheus.Registerer, traceDir string) (func(), error) {
		m := newWatchMetrics(reg)
		now := time.Now()
		for i, u := range urls {
			t, err := newTarget(u, ids[i], traceDir, set, m, stderr, now)
			if err != nil {
				for _, t := range targetsRun {
					t.rec.Close()
				}
				return nil, err
			}
			targetsRun = append(targetsRun, t)
			if err := srv.AddSource(server.LiveSource{ID: t.id, Name: t.name, Kind: "watch", Trace: t.trace, Recorder: t.rec}); err != nil {
				return nil, err
			}
			fmt.Fprintf(stderr, "watching %s every %v: trace %s\n", t.name, set.every, t.trace)
		}
		wctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for _, t := range targetsRun {
			wg.Go(func() { t.run(wctx) })
		}
		return func() {
			cancel()
			wg.Wait()
			var fin sync.WaitGroup
			for _, t := range targetsRun {
				fin.Go(func() { t.stop(set.timeout) })
			}
			fin.Wait()
		}, nil
	}
	if !*noBrowser {
		c.opened = openBrowser(stderr)
	}
	return serve(ctx, c, stdout, stderr)
}

// readTargets reads a targets file: one URL a line, blank lines and what
// follows a # ignored.
func readTargets(name string) ([]string, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, fmt.Errorf("--targets: %w", err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line, _, _ := strings.Cut(sc.Text(), "#")
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		if strings.ContainsAny(line, " \t") {
			return nil, fmt.Errorf("%w: %s:%d: one URL a line, not %q", errUsage, name, n, line)
		}
		out = append(out, line)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("--targets: %w", err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: %s names no target", errUsage, name)
	}
	return out, nil
}

// parseAllocRate reads --max-alloc-rate's [FUNC=]RATE: RATE is a number
// of objects a second ("1200/s") or a byte size a second ("64MiB/s").
func parseAllocRate(s string) (goheap.AllocRate, error) {
	var r goheap.AllocRate
	spec := s
	if pat, rate, ok := strings.Cut(s, "="); ok {
		r.Pattern, spec = strings.TrimSpace(pat), rate
		if r.Pattern == "" {
			return r, fmt.Errorf("%q: an empty FUNC before =", s)
		}
	}
	num, ok := strings.CutSuffix(strings.TrimSpace(spec), "/s")
	if !ok {
		return r, fmt.Errorf("%q: a rate ends in /s (1200/s objects, 64MiB/s bytes)", s)
	}
	if v, err := strconv.ParseFloat(num, 64); err == nil {
		if v <= 0 {
			return r, fmt.Errorf("%q: a rate must be positive", s)
		}
		r.Limit, r.Objects = v, true
		return r, nil
	}
	n, err := units.Parse(num)
	if err != nil || n == 0 {
		return r, fmt.Errorf("%q: RATE is objects (1200/s) or bytes (64MiB/s) a second", s)
	}
	r.Limit = float64(n)
	return r, nil
}

// parsePercent reads "5%" or "0.05".
func parsePercent(s string) (float64, error) {
	t := strings.TrimSpace(s)
	pct := strings.HasSuffix(t, "%")
	v, err := strconv.ParseFloat(strings.TrimSuffix(t, "%"), 64)
	if err != nil || v < 0 {
		return 0, errors.New("want a percentage, as 5%")
	}
	if pct {
		v /= 100
	}
	return v, nil
}
