package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"linger/engine/tokenizer"
	"linger/internal/units"
)

// Bounds of linger load's flags: a load is bounded in time, count and
// size, whatever it is asked.
const (
	maxLoadConcurrency = 1024
	maxLoadDuration    = 24 * time.Hour
	maxLoadPromptBytes = 256 << 20
)

// loadConfig is linger load's command line.
type loadConfig struct {
	target       *url.URL
	concurrency  int
	duration     time.Duration
	requests     int // at most; 0: as many as the duration allows
	promptTokens int
	distinct     int // prompts cycle over this many; 0: every request its own
	tenants      int
	maxNew       int
	timeout      time.Duration // per request
	progress     time.Duration // 0: none
	seed         uint64
	allowRemote  bool
	json         bool
}

// runLoad is linger load: concurrent requests of long prompts to a
// service on this machine, for a bounded time and count; progress on
// stderr, a summary on stdout.
func runLoad(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("load", stderr)
	var c loadConfig
	fs.IntVar(&c.concurrency, "concurrency", 8, fmt.Sprintf("requests in flight at once (at most %d)", maxLoadConcurrency))
	fs.DurationVar(&c.duration, "duration", 30*time.Second, fmt.Sprintf("stop sending after this long (at most %v); requests in flight finish", maxLoadDuration))
	fs.IntVar(&c.requests, "requests", 0, "stop after this many requests (0: as many as --duration allows)")
	fs.IntVar(&c.promptTokens, "prompt-tokens", 131072, "each prompt's length in tokens of Linger's built-in tokenizer (4 bytes each)")
	fs.IntVar(&c.distinct, "distinct", 0, "prompts cycle over this many distinct texts (0: every request its own)")
	fs.IntVar(&c.tenants, "tenants", 1, "spread the prompts over this many tenants (tenant-0, tenant-1, …)")
	fs.IntVar(&c.maxNew, "max-new-tokens", 1, "tokens each request asks to generate")
	fs.DurationVar(&c.timeout, "timeout", time.Minute, "give up on a request after this long")
	fs.DurationVar(&c.progress, "progress", time.Second, "print progress on stderr this often (0: never)")
	fs.Func("seed", "seed of the prompts' texts (default 1)", func(s string) error {
		v, err := strconv.ParseUint(s, 10, 64)
		c.seed = v
		return err
	})
	c.seed = 1
	fs.BoolVar(&c.allowRemote, "allow-remote", false, "allow a target that is not on this machine's loopback interface")
	fs.BoolVar(&c.json, "json", false, "print the summary as one JSON object")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return fmt.Errorf("%w: load takes one URL (http://127.0.0.1:8080/v1/generate), got %d arguments", errUsage, len(pos))
	}
	if err := c.check(ctx, pos[0]); err != nil {
		return err
	}
	sum, err := load(ctx, c, stderr)
	if err != nil {
		return err
	}
	if c.json {
		b, err := json.Marshal(sum)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s\n", b)
	} else {
		sum.writeText(stdout)
	}
	if sum.OK == 0 && sum.Requests > 0 {
		return fmt.Errorf("no request succeeded (%d failed)", sum.Failed)
	}
	if sum.Failed > 0 {
		return fmt.Errorf("%d of %d requests failed", sum.Failed, sum.Requests)
	}
	return nil
}

// check validates the flags and the target: http or https, and on the
// loopback interface unless --allow-remote.
func (c *loadConfig) check(ctx context.Context, raw string) error {
	switch {
	case c.concurrency < 1 || c.concurrency > maxLoadConcurrency:
		return fmt.Errorf("%w: --concurrency %d: want 1 to %d", errUsage, c.concurrency, maxLoadConcurrency)
	case c.duration <= 0 || c.duration > maxLoadDuration:
		return fmt.Errorf("%w: --duration %v: want more than 0 and at most %v", errUsage, c.duration, maxLoadDuration)
	case c.requests < 0:
		return fmt.Errorf("%w: --requests %d: want 0 (no limit but the duration) or more", errUsage, c.requests)
	case c.promptTokens < 1 || c.promptTokens*4 > maxLoadPromptBytes:
		return fmt.Errorf("%w: --prompt-tokens %d: want 1 to %d", errUsage, c.promptTokens, maxLoadPromptBytes/4)
	case c.distinct < 0 || c.tenants < 1 || c.maxNew < 0 || c.timeout <= 0 || c.progress < 0:
		return fmt.Errorf("%w: --distinct and --max-new-tokens must be 0 or more, --tenants 1 or more, --timeout positive", errUsage)
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%w: target %q: want an http:// or https:// URL", errUsage, raw)
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = "/v1/generate"
	}
	c.target = u
	if c.allowRemote {
		return nil
	}
	host := u.Hostname()
	if ip := net.ParseIP(host); ip != nil {
		if !ip.IsLoopback() {
			return fmt.Errorf("%w: target %s is not on this machine's loopback interface (127.0.0.0/8, ::1): linger load sends load there only, unless --allow-remote", errUsage, host)
		}
		return nil
	}
	addrs, err := net.DefaultResolver.LookupIPAddr(ctx, host)
	if err != nil {
		return fmt.Errorf("target %s: %w", host, err)
	}
	for _, a := range addrs {
		if !a.IP.IsLoopback() {
			return fmt.Errorf("%w: target %s resolves to %s, not this machine's loopback interface: linger load sends load there only, unless --allow-remote", errUsage, host, a.IP)
		}
	}
	return nil
}

// loopbackOnly refuses, at connect time, any address beyond loopback: a
// name that resolved to loopback when checked cannot be sent elsewhere.
func loopbackOnly(network, address string, _ syscall.RawConn) error {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return err
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("linger load: refusing to connect to %s, beyond loopback (--allow-remote)", address)
	}
	return nil
}

// loadSummary is what linger load prints at the end (--json: as is).
type loadSummary struct {
	Target      string  `json:"target"`
	Concurrency int     `json:"concurrency"`
	ElapsedS    float64 `json:"elapsed_s"`
	Requests    uint64  `json:"requests"` // answered or failed; not those cut short by an interrupt
	OK          uint64  `json:"ok"`
	Failed      uint64  `json:"failed"`
	// Errors counts the failures by kind: "HTTP 500", "timeout",
	// "connection refused", …
	Errors   map[string]uint64 `json:"errors"`
	Canceled uint64            `json:"canceled"` // cut short by an interrupt
	PerS     float64           `json:"requests_per_s"`
	// Latency of the requests answered 2xx, in milliseconds.
	Latency struct {
		P50  float64 `json:"p50"`
		P90  float64 `json:"p90"`
		P99  float64 `json:"p99"`
		Max  float64 `json:"max"`
		Mean float64 `json:"mean"`
	} `json:"latency_ms"`
	PromptTokens int    `json:"prompt_tokens"`
	PromptBytes  int    `json:"prompt_bytes"` // each prompt's body
	SentBytes    uint64 `json:"sent_bytes"`
	// Distinct is the distinct prompts sent; DistinctOK those answered
	// 2xx at least once.
	Distinct   uint64 `json:"distinct"`
	DistinctOK uint64 `json:"distinct_ok"`
	// Cache counts the responses' "cache" field (a Linger gateway's
	// embedding cache: hit, miss, error, off), when they have one.
	Cache map[string]uint64 `json:"cache,omitempty"`
}

func (s *loadSummary) writeText(w io.Writer) {
	fmt.Fprintf(w, "target     %s, %d concurrent, prompts of %d tokens (%s)\n", s.Target, s.Concurrency, s.PromptTokens, units.Format(uint64(s.PromptBytes)))
	fmt.Fprintf(w, "requests   %d in %.1fs (%.1f/s): %d ok, %d failed", s.Requests, s.ElapsedS, s.PerS, s.OK, s.Failed)
	if s.Canceled > 0 {
		fmt.Fprintf(w, ", %d cut short by the interrupt", s.Canceled)
	}
	fmt.Fprintln(w)
	if s.OK > 0 {
		l := s.Latency
		fmt.Fprintf(w, "latency    p50 %s  p90 %s  p99 %s  max %s  mean %s\n", ms(l.P50), ms(l.P90), ms(l.P99), ms(l.Max), ms(l.Mean))
	}
	for _, k := range slices.Sorted(maps.Keys(s.Errors)) {
		fmt.Fprintf(w, "error      %s: %d\n", k, s.Errors[k])
	}
	fmt.Fprintf(w, "prompts    %d distinct (%d answered), %s sent\n", s.Distinct, s.DistinctOK, units.Format(s.SentBytes))
	if len(s.Cache) > 0 {
		var parts []string
		for _, k := range slices.Sorted(maps.Keys(s.Cache)) {
			parts = append(parts, fmt.Sprintf("%s %d", k, s.Cache[k]))
		}
		fmt.Fprintf(w, "cache      %s\n", strings.Join(parts, ", "))
	}
}

func ms(v float64) string {
	d := time.Duration(v * float64(time.Millisecond))
	switch {
	case d >= time.Second:
		return d.Round(10 * time.Millisecond).String()
	case d >= 10*time.Millisecond:
		return d.Round(time.Millisecond).String()
	}
	return d.Round(10 * time.Microsecond).String()
}

// loadRun is one run's state, shared by its workers.
type loadRun struct {
	c      loadConfig
	words  []string
	client *http.Client
	next   atomic.Int64 // the next request's index
	flight atomic.Int64

	mu       sync.Mutex
	lat      latencies
	sum      loadSummary
	answered map[int]bool // prompts answered 2xx, with --distinct
}

// load runs the load and returns its summary. It stops sending at the
// duration or the count, waits for the requests in flight (each bounded
// by --timeout), and closes its connections, so that the target's
// goroutines can go back to their baseline.
func load(ctx context.Context, c loadConfig, progress io.Writer) (*loadSummary, error) {
	words, err := singleTokenWords()
	if err != nil {
		return nil, err
	}
	dialer := &net.Dialer{Timeout: 5 * time.Second}
	if !c.allowRemote {
		dialer.Control = loopbackOnly
	}
	tr := &http.Transport{DialContext: dialer.DialContext, MaxIdleConnsPerHost: c.concurrency, DisableCompression: true, IdleConnTimeout: 30 * time.Second}
	defer tr.CloseIdleConnections()
	r := &loadRun{c: c, words: words, client: &http.Client{Transport: tr, Timeout: c.timeout}, answered: map[int]bool{}}
	r.sum = loadSummary{Target: c.target.String(), Concurrency: c.concurrency, Errors: map[string]uint64{}, Cache: map[string]uint64{},
		PromptTokens: c.promptTokens, PromptBytes: 4 * c.promptTokens}

	start := time.Now()
	stopAt := start.Add(c.duration)
	var wg sync.WaitGroup
	for range c.concurrency {
		wg.Go(func() { r.worker(ctx, stopAt) })
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	if c.progress > 0 {
		t := time.NewTicker(c.progress)
	wait:
		for {
			select {
			case <-done:
				break wait
			case <-t.C:
				r.printProgress(progress, time.Since(start))
			}
		}
		t.Stop()
	}
	<-done
	elapsed := time.Since(start)

	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.sum
	s.ElapsedS = elapsed.Seconds()
	s.PerS = float64(s.Requests) / elapsed.Seconds()
	s.Latency.P50, s.Latency.P90, s.Latency.P99 = r.lat.quantile(0.5), r.lat.quantile(0.9), r.lat.quantile(0.99)
	s.Latency.Max, s.Latency.Mean = r.lat.max, r.lat.mean()
	if c.distinct > 0 {
		s.Distinct = uint64(min(int64(c.distinct), r.next.Load()))
		s.DistinctOK = uint64(len(r.answered))
	} else {
		s.Distinct = s.Requests + s.Canceled
		s.DistinctOK = s.OK
	}
	if len(s.Cache) == 0 {
		s.Cache = nil
	}
	return &s, nil
}

func (r *loadRun) worker(ctx context.Context, stopAt time.Time) {
	for ctx.Err() == nil && time.Now().Before(stopAt) {
		i := int(r.next.Add(1) - 1)
		if r.c.requests > 0 && i >= r.c.requests {
			return
		}
		r.one(ctx, i)
	}
}

// one sends request i.
func (r *loadRun) one(ctx context.Context, i int) {
	p := i
	if r.c.distinct > 0 {
		p = i % r.c.distinct
	}
	body := r.prompt(p)
	q := url.Values{"tenant": {"tenant-" + strconv.Itoa(p%r.c.tenants)}, "max_new_tokens": {strconv.Itoa(r.c.maxNew)}}
	u := *r.c.target
	if u.RawQuery != "" {
		u.RawQuery += "&"
	}
	u.RawQuery += q.Encode()
	r.flight.Add(1)
	defer r.flight.Add(-1)
	start := time.Now()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), strings.NewReader(body))
	if err != nil {
		r.record(i, p, 0, 0, "bad request: "+err.Error(), "", false)
		return
	}
	req.Header.Set("Content-Type", "text/plain; charset=utf-8")
	resp, err := r.client.Do(req)
	if err != nil {
		r.record(i, p, len(body), 0, errorKind(err), "", ctx.Err() != nil)
		return
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	lat := time.Since(start)
	switch {
	case err != nil:
		r.record(i, p, len(body), 0, "reading the response: "+errorKind(err), "", ctx.Err() != nil)
	case resp.StatusCode/100 != 2:
		r.record(i, p, len(body), 0, "HTTP "+strconv.Itoa(resp.StatusCode), "", false)
	default:
		var ans struct {
			Cache string `json:"cache"`
		}
		json.Unmarshal(b, &ans)
		r.record(i, p, len(body), lat, "", ans.Cache, false)
	}
}

func (r *loadRun) record(i, p, sent int, lat time.Duration, fail, cache string, canceled bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sum.SentBytes += uint64(sent)
	switch {
	case canceled:
		r.sum.Canceled++
		return
	case fail != "":
		r.sum.Failed++
		r.sum.Errors[fail]++
	default:
		r.sum.OK++
		r.lat.add(lat)
		if r.c.distinct > 0 {
			r.answered[p] = true
		}
		if cache != "" {
			r.sum.Cache[cache]++
		}
	}
	r.sum.Requests++
}

func (r *loadRun) printProgress(w io.Writer, elapsed time.Duration) {
	r.mu.Lock()
	s := r.sum
	p50, p99 := r.lat.quantile(0.5), r.lat.quantile(0.99)
	r.mu.Unlock()
	fmt.Fprintf(w, "%6.1fs  %d requests (%d ok, %d failed)  %.1f/s  %d in flight", elapsed.Seconds(), s.Requests, s.OK, s.Failed,
		float64(s.Requests)/elapsed.Seconds(), r.flight.Load())
	if s.OK > 0 {
		fmt.Fprintf(w, "  p50 %s  p99 %s", ms(p50), ms(p99))
	}
	fmt.Fprintln(w)
}

var errnoText = regexp.MustCompile(`(connection refused|connection reset by peer|broken pipe|no route to host|i/o timeout|EOF)`)

// errorKind names a failed request's error by kind, without the
// addresses and ports that would make every one its own.
func errorKind(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) && ue.Timeout() {
		return "timeout"
	}
	if m := errnoText.FindString(err.Error()); m != "" {
		return m
	}
	return err.Error()
}

// prompt returns prompt p's text: promptTokens words that are each one
// token of Linger's built-in tokenizer (" the", " and", …, 4 bytes
// each), drawn from a generator seeded with --seed and p, so that the
// same p is the same text and two are distinct.
func (r *loadRun) prompt(p int) string {
	rng := rand.New(rand.NewPCG(r.c.seed, uint64(p)))
	var b strings.Builder
	b.Grow(4 * r.c.promptTokens)
	for range r.c.promptTokens {
		b.WriteString(r.words[rng.IntN(len(r.words))])
	}
	return b.String()
}

var singleWords = sync.OnceValues(func() ([]string, error) {
	tok := tokenizer.Default().WithOptions(tokenizer.Options{NoCache: true})
	word := regexp.MustCompile(`^ [a-z]{3}$`)
	var out []string
	for id := range tok.VocabSize() {
		s := tok.Decode([]int{id})
		if word.MatchString(s) && slices.Equal(tok.Encode(s), []int{id}) {
			out = append(out, s)
		}
	}
	if len(out) < 16 {
		return nil, fmt.Errorf("the built-in tokenizer has %d single-token words of 4 bytes; a prompt needs at least 16", len(out))
	}
	return out, nil
})

// singleTokenWords are the words of four bytes (a space and three
// letters) that the built-in tokenizer encodes as one token each: a text
// of N of them is N tokens, however they follow each other, since the
// pre-tokenizer cuts before each space.
func singleTokenWords() ([]string, error) { return singleWords() }

// latencies is a histogram of latencies in buckets 1 % apart, from 10 µs
// to well over an hour: bounded memory whatever the count, quantiles
// within 1 %.
type latencies struct {
	counts []uint64
	n      uint64
	sum    float64 // ms
	max    float64 // ms
}

const latBase, latRatio = 0.01, 1.01 // ms

func (l *latencies) add(d time.Duration) {
	v := float64(d) / float64(time.Millisecond)
	i := 0
	if v > latBase {
		i = int(math.Ceil(math.Log(v/latBase) / math.Log(latRatio)))
	}
	if i >= len(l.counts) {
		l.counts = append(l.counts, make([]uint64, i+1-len(l.counts))...)
	}
	l.counts[i]++
	l.n++
	l.sum += v
	l.max = max(l.max, v)
}

// quantile returns the q-quantile in ms (the upper bound of its bucket,
// at most the largest seen); 0 with no samples.
func (l *latencies) quantile(q float64) float64 {
	if l.n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(l.n)))
	var seen uint64
	i := 0
	for i = range l.counts {
		seen += l.counts[i]
		if seen >= rank {
			break
		}
	}
	return min(latBase*math.Pow(latRatio, float64(i)), l.max)
}

func (l *latencies) mean() float64 {
	if l.n == 0 {
		return 0
	}
	return l.sum / float64(l.n)
}
