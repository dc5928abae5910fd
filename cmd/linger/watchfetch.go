package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/pprof/profile"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"linger/internal/units"
	"linger/timeline/goheap"
)

// A watched service's endpoints (net/http/pprof's and the Prometheus
// client's), below its URL's path.
const (
	heapPath      = "debug/pprof/heap"
	goroutinePath = "debug/pprof/goroutine"
	metricsPath   = "metrics"
)

// errNoMetrics is a service without /metrics (404): no failure, the
// watch goes on without what it would have said.
var errNoMetrics = errors.New("no /metrics")

// statusError is an answer other than 200 OK.
type statusError struct {
	code int
	msg  string
}

func (e *statusError) Error() string { return e.msg }

// fetcher gets a service's endpoints, each answer at most maxBody bytes
// and waited for at most timeout. A sample asks one endpoint after
// another over one connection, kept between samples (HTTP/1.1 alone: the
// service reads the next request only once it has finished the one
// before, so what the watcher adds to the service's goroutines is its
// one connection's, the same at every sample). Each endpoint has at most
// one request outstanding: one not answered within timeout fails its
// sample but is left to end, on a connection of its own (cancelled after
// hardLimit times timeout, or when the watch ends), and the endpoint is
// not asked again until it has. A service too slow for the watch's pace
// is then asked once at a time, not once more every sample while it
// still works on the requests the watch gave up on (each a forced GC
// and a profile).
type fetcher struct {
	base    *url.URL // the service's URL, its credentials and query kept
	client  *http.Client
	headers http.Header
	timeout time.Duration
	maxBody int64
	// ctx is the requests' context: they outlive the sample that gave
	// up on them, and end with the watch (close).
	ctx    context.Context
	cancel context.CancelFunc

	mu   sync.Mutex
	busy map[string]chan struct{} // by endpoint: closed when its outstanding request ends
}

// gaveUp is a request not answered within --timeout: left to end, under
// way in the service.
type gaveUp struct{ msg string }

func (e *gaveUp) Error() string { return e.msg }

// errNextSampleDue is the cause of a sample's context's end when the
// next sample is due.
var errNextSampleDue = errors.New("the next sample is due")

// hardLimit is how many times --timeout a request is left to end after
// its sample gave up on it, before it is cancelled.
const hardLimit = 10

func newFetcher(base *url.URL, headers http.Header, timeout time.Duration, maxBody int64) *fetcher {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	// One idle connection kept; a request given up on keeps its own
	// meanwhile, and the next request dials another.
	tr.MaxIdleConnsPerHost = 1
	var h1 http.Protocols // an HTTP/2 stream's handler can outlive its answer
	h1.SetHTTP1(true)
	tr.Protocols = &h1
	if tr.TLSClientConfig != nil {
		tr.TLSClientConfig.NextProtos = nil // not h2 offered in TLS's handshake either
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &fetcher{base: base, client: &http.Client{Transport: tr}, headers: headers, timeout: timeout, maxBody: maxBody,
		ctx: ctx, cancel: cancel, busy: map[string]chan struct{}{}}
}

// take takes endpoint p's request slot (a channel to close when the
// request ends), or says false when the request before is outstanding.
func (f *fetcher) take(p string) (chan struct{}, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if b := f.busy[p]; b != nil {
		select {
		case <-b:
		default:
			return nil, false
		}
	}
	b := make(chan struct{})
	f.busy[p] = b
	return b, true
}

// outstanding says whether a request the watch gave up on has not ended.
func (f *fetcher) outstanding() bool {
	return len(f.pending()) > 0
}

func (f *fetcher) pending() []chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []chan struct{}
	for _, b := range f.busy {
		select {
		case <-b:
		default:
			out = append(out, b)
		}
	}
	return out
}

// settle waits, at most until ctx is done, for the requests outstanding
// to be answered: the final sample's GC and goroutine count then run
// alone in the service.
func (f *fetcher) settle(ctx context.Context) {
	for _, b := range f.pending() {
		select {
		case <-b:
		case <-ctx.Done():
			return
		}
	}
}

// close cancels the requests still outstanding and closes the idle
// connection.
func (f *fetcher) close() {
	f.cancel()
	f.client.CloseIdleConnections()
}

// get fetches the endpoint p of the service with the query q added to
// the URL's own. Its errors say the same for the same trouble (no size
// or time that differs from one sample to the next): each is a mark's
// text, which a trace keeps once.
func (f *fetcher) get(ctx context.Context, p string, q url.Values, accept string) ([]byte, error) {
	u := *f.base
	u.Path = path.Join("/", u.Path, p)
	u.RawPath = ""
	query := u.Query()
	for k, vs := range q {
		query[k] = vs
	}
	u.RawQuery = query.Encode()
	shown := (&url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path}).String()
	if ctx.Err() != nil { // the sample's time is up: nothing sent that no one waits for
		return nil, unanswered(ctx, shown)
	}
	busy, ok := f.take(p)
	if !ok {
		return nil, fmt.Errorf("GET %s: the request of an earlier sample has not been answered yet; not asked again until it is (or %d times --timeout has passed)", shown, hardLimit)
	}
	type answer struct {
		b   []byte
		err error
	}
	done := make(chan answer, 1)
	var headers atomic.Bool // the answer's status and headers came
	go func() {
		reqCtx, cancel := context.WithTimeout(f.ctx, hardLimit*f.timeout)
		b, err := f.do(reqCtx, u.String(), shown, p, accept, &headers)
		cancel()
		close(busy) // before the answer: its caller may ask again at once (?gc=1 refused)
		done <- answer{b, err}
	}()
	timer := time.NewTimer(f.timeout)
	defer timer.Stop()
	select {
	case a := <-done:
		return a.b, a.err
	case <-ctx.Done():
		// The next sample is due, or the watch ends: the request is left
		// to end (the final sample waits for it a while), not cancelled.
		return nil, unanswered(ctx, shown)
	case <-timer.C:
		if headers.Load() {
			return nil, &gaveUp{fmt.Sprintf("GET %s: the answer did not end within %v (--timeout)", shown, f.timeout)}
		}
		return nil, &gaveUp{fmt.Sprintf("GET %s: no answer within %v (--timeout)", shown, f.timeout)}
	}
}

// sameEach is err without what differs from one request to the next:
// the URL again (with its credentials) and a connection's local address
// and port ("read tcp 127.0.0.1:41234->…: connection reset by peer" is
// "read: connection reset by peer").
func sameEach(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Err != nil {
		return fmt.Errorf("%s: %w", oe.Op, oe.Err)
	}
	return err
}

// unanswered says why a sample whose context is done has not the answer.
func unanswered(ctx context.Context, shown string) error {
	if errors.Is(context.Cause(ctx), errNextSampleDue) {
		return fmt.Errorf("GET %s: not answered before the next sample was due (--every)", shown)
	}
	return fmt.Errorf("GET %s: not answered before the watch's end", shown)
}

// do makes the request and reads its answer, however long it takes until
// ctx is done (its errors then reach no sample: get has given up on it);
// headers is set when the answer's status and headers came.
func (f *fetcher) do(ctx context.Context, u, shown, p, accept string, headers *atomic.Bool) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", shown, err)
	}
	for k, vs := range f.headers {
		req.Header[k] = vs
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := f.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", shown, sameEach(err))
	}
	defer resp.Body.Close()
	headers.Store(true)
	if resp.StatusCode != http.StatusOK {
		snippet, _ := io.ReadAll(io.LimitReader(resp.Body, 200))
		// The rest read too (up to a bound), so that the connection is
		// kept, not closed and dialled again before the goroutines are
		// counted.
		io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		why := ""
		switch resp.StatusCode {
		case http.StatusUnauthorized, http.StatusForbidden:
			why = ": the service refused the watcher (give its token with --header 'Authorization: Bearer …', or credentials or a token in the URL)"
		case http.StatusNotFound:
			why = fmt.Sprintf(": the service has no /%s (is net/http/pprof registered on this address and path?)", p)
		}
		body := strings.Join(strings.Fields(string(snippet)), " ")
		if body != "" {
			body = " (" + body + ")"
		}
		var err error = &statusError{resp.StatusCode, fmt.Sprintf("GET %s: %s%s%s", shown, resp.Status, body, why)}
		if resp.StatusCode == http.StatusNotFound && p == metricsPath {
			err = fmt.Errorf("%w: %w", errNoMetrics, err)
		}
		return nil, err
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, f.maxBody+1))
	if err != nil {
		return nil, fmt.Errorf("GET %s: reading the answer: %w", shown, sameEach(err))
	}
	if int64(len(b)) > f.maxBody {
		return nil, fmt.Errorf("GET %s: the answer is over %s (--max-body)", shown, units.Format(uint64(f.maxBody)))
	}
	return b, nil
}

// heap fetches and reads the heap profile, after a forced GC when gc is
// set and the service allows it (the profile's in-use figures are then
// up to date, not those of the last GC): a service, or a proxy before
// it, that refuses ?gc=1 with a 400 or 405 is asked again without it.
func (f *fetcher) heap(ctx context.Context, gc bool) (*profile.Profile, error) {
	q := url.Values{}
	if gc {
		q.Set("gc", "1")
	}
	b, err := f.get(ctx, heapPath, q, "")
	var se *statusError
	if gc && errors.As(err, &se) && (se.code == http.StatusBadRequest || se.code == http.StatusMethodNotAllowed) {
		b, err = f.get(ctx, heapPath, nil, "")
	}
	if err != nil {
		return nil, err
	}
	p, err := profile.ParseData(b)
	if err != nil {
		return nil, fmt.Errorf("a malformed heap profile: %w", err)
	}
	return p, nil
}

// goroutines fetches the goroutine profile and counts its goroutines.
func (f *fetcher) goroutines(ctx context.Context) (int64, error) {
	b, err := f.get(ctx, goroutinePath, url.Values{"debug": {"0"}}, "")
	if err != nil {
		return -1, err
	}
	p, err := profile.ParseData(b)
	if err != nil {
		return -1, fmt.Errorf("a malformed goroutine profile: %w", err)
	}
	i := slices.IndexFunc(p.SampleType, func(t *profile.ValueType) bool { return t != nil && t.Type == "goroutine" })
	if i < 0 {
		return -1, errors.New("the goroutine profile counts no goroutines (no goroutine sample type)")
	}
	var n int64
	for _, s := range p.Sample {
		if s != nil && i < len(s.Value) {
			n += s.Value[i]
		}
	}
	return n, nil
}

// metrics fetches /metrics in Prometheus's text format.
func (f *fetcher) metrics(ctx context.Context) (map[string]*dto.MetricFamily, error) {
	b, err := f.get(ctx, metricsPath, nil, "text/plain;version=0.0.4")
	if err != nil {
		return nil, err
	}
	fams, err := parseMetricsText(string(b))
	if err != nil {
		return nil, fmt.Errorf("malformed /metrics: %w", err)
	}
	return fams, nil
}

// parseMetricsText reads Prometheus's text exposition format.
func parseMetricsText(s string) (map[string]*dto.MetricFamily, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	return parser.TextToMetricFamilies(strings.NewReader(s))
}

// The Go collector's GC pause distributions: a histogram (the runtime's
// /sched/pauses/total/gc:seconds or, before Go 1.22, /gc/pauses:seconds,
// which client_golang exposes when asked for runtime metrics), else the
// summary every Go collector has.
var gcHistograms = []string{"go_sched_pauses_total_gc_seconds", "go_gc_pauses_seconds"}

const gcSummary = "go_gc_duration_seconds"

// gcPauses turns a service's /metrics, one sample after another, into
// goheap.Metrics: the GC pauses' p99 over the interval since the last
// sample, from the histogram's buckets' increase (the p99 since the
// start when no pause happened in between), else the summary's highest
// quantile, its largest recent pause: an upper bound of the p99.
type gcPauses struct {
	prev []bucket // the histogram at the previous sample
}

// bucket is a histogram's cumulative count up to an upper bound.
type bucket struct {
	upper float64
	count uint64
}

// read returns what the families say, nil when none is the Go
// collector's.
func (g *gcPauses) read(fams map[string]*dto.MetricFamily) *goheap.Metrics {
	m := &goheap.Metrics{}
	any := false
	if v, ok := gauge(fams["go_memstats_heap_inuse_bytes"]); ok {
		m.HeapInuse, m.HasHeapInuse, any = uint64(max(v, 0)), true, true
	}
	if v, ok := gauge(fams["process_start_time_seconds"]); ok {
		m.StartTime = v
	}
	for _, name := range gcHistograms {
		if bs := histogram(fams[name]); bs != nil {
			now := bs
			if g.prev != nil && len(g.prev) == len(bs) && bs[len(bs)-1].count > g.prev[len(bs)-1].count {
				now = make([]bucket, len(bs))
				for i := range bs {
					now[i] = bucket{bs[i].upper, bs[i].count - min(g.prev[i].count, bs[i].count)}
				}
			}
			g.prev = bs
			if p, ok := quantile(0.99, now); ok {
				m.GCPauseP99, m.HasGCPause, any = seconds(p), true, true
			}
			return m
		}
	}
	if f := fams[gcSummary]; f != nil && len(f.GetMetric()) > 0 {
		if s := f.GetMetric()[0].GetSummary(); s != nil {
			best := -1.0
			for _, q := range s.GetQuantile() {
				if q.GetQuantile() >= 0.99 && (best < 0 || q.GetQuantile() < best) && !math.IsNaN(q.GetValue()) {
					best, m.GCPauseP99, m.HasGCPause, any = q.GetQuantile(), seconds(q.GetValue()), true, true
				}
			}
		}
	}
	if !any {
		return nil
	}
	return m
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// gauge is a family's first value (a gauge's, a counter's or an
// untyped one's).
func gauge(f *dto.MetricFamily) (float64, bool) {
	if f == nil || len(f.GetMetric()) == 0 {
		return 0, false
	}
	m := f.GetMetric()[0]
	switch {
	case m.GetGauge() != nil:
		return m.GetGauge().GetValue(), true
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue(), true
	case m.GetUntyped() != nil:
		return m.GetUntyped().GetValue(), true
	}
	return 0, false
}

// histogram is a family's first histogram's cumulative buckets, +Inf
// last; nil if it has none.
func histogram(f *dto.MetricFamily) []bucket {
	if f == nil || len(f.GetMetric()) == 0 || f.GetMetric()[0].GetHistogram() == nil {
		return nil
	}
	h := f.GetMetric()[0].GetHistogram()
	var bs []bucket
	for _, b := range h.GetBucket() {
		bs = append(bs, bucket{b.GetUpperBound(), b.GetCumulativeCount()})
	}
	if len(bs) == 0 || !math.IsInf(bs[len(bs)-1].upper, 1) {
		bs = append(bs, bucket{math.Inf(1), h.GetSampleCount()})
	}
	slices.SortFunc(bs, func(a, b bucket) int { return cmpFloat(a.upper, b.upper) })
	return bs
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// quantile is the q-quantile of cumulative buckets, interpolated
// linearly inside its bucket as Prometheus's histogram_quantile does (the
// highest finite bound when it falls in the +Inf bucket); false without
// observations.
func quantile(q float64, bs []bucket) (float64, bool) {
	if len(bs) == 0 || bs[len(bs)-1].count == 0 {
		return 0, false
	}
	rank := q * float64(bs[len(bs)-1].count)
	lower, below := 0.0, uint64(0)
	for i, b := range bs {
		if float64(b.count) >= rank {
			if math.IsInf(b.upper, 1) {
				if i > 0 {
					return bs[i-1].upper, true
				}
				return 0, true
			}
			if b.count == below {
				return b.upper, true
			}
			return lower + (b.upper-lower)*(rank-float64(below))/float64(b.count-below), true
		}
		lower, below = b.upper, b.count
	}
	return lower, true
}
