package server

import (
	"bufio"
	"context"
	"linger/timeline/traces"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the server's Prometheus metrics. Kernel states and event
// counts are read from the Manager at scrape time rather than kept in step
// with it, so they cannot drift.
type metrics struct {
	requests    *prometheus.CounterVec
	duration    *prometheus.HistogramVec
	wsOpen      prometheus.Gauge
	wsTotal     prometheus.Counter
	relayed     *prometheus.CounterVec
	wsRefused   *prometheus.CounterVec
	traceReads  prometheus.Counter
	kernelState *prometheus.Desc
	kernelEvent *prometheus.Desc
	// The tracks of every live trace (a kernel's, a watched service's,
	// a probe's), labelled source (its id) and kind.
	allocated, reserved, deviceUsed, goHeap *prometheus.Desc
	s                                       *Server
}

// newMetrics registers the server's metrics with reg.
func newMetrics(reg prometheus.Registerer, s *Server) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "linger_http_requests_total", Help: "HTTP requests by route pattern and status code.",
		}, []string{"route", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "linger_http_request_duration_seconds", Help: "HTTP request latency by route pattern (websockets: connection lifetime).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 4, 10),
		}, []string{"route"}),
		wsOpen: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "linger_websocket_connections", Help: "Open kernel websocket connections.",
		}),
		wsTotal: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "linger_websocket_connections_total", Help: "Kernel websocket connections accepted.",
		}),
		relayed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "linger_messages_relayed_total", Help: "Jupyter messages relayed, by direction (to_kernel, to_client, and rate_limited: kept from a client by the iopub rate limits) and channel.",
		}, []string{"direction", "channel"}),
		wsRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "linger_websocket_messages_refused_total", Help: "Client websocket messages refused, by reason (malformed, too_large, send).",
		}, []string{"reason"}),
		traceReads: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "linger_trace_file_reads_total", Help: "Saved trace files read to index and analyze them: once per version of a file while it stays cached.",
		}),
		kernelState: prometheus.NewDesc("linger_kernels", "Kernels by execution state.", []string{"state"}, nil),
		kernelEvent: prometheus.NewDesc("linger_kernel_events_received_total",
			"Memory events received from a kernel's current process and recorded in its trace.", []string{"kernel"}, nil),
		allocated:  prometheus.NewDesc("linger_source_allocated_bytes", "Bytes of a live trace's objects alive now (the allocated track), by source: a kernel, a watched service, a probe.", []string{"source", "kind"}, nil),
		reserved:   prometheus.NewDesc("linger_source_reserved_bytes", "Bytes a live trace's allocator holds from its device (the reserved track), by source.", []string{"source", "kind"}, nil),
		deviceUsed: prometheus.NewDesc("linger_source_device_used_bytes", "Bytes of the device a live trace's source uses, its allocator's and outside it (the device-used track), by source.", []string{"source", "kind"}, nil),
		goHeap:     prometheus.NewDesc("linger_source_go_heap_bytes", "The Go heap in use a live trace records (a kernel's, a watched service's), by source.", []string{"source", "kind"}, nil),
		s:          s,
	}
	for _, c := range []prometheus.Collector{m.requests, m.duration, m.wsOpen, m.wsTotal, m.relayed, m.wsRefused, m.traceReads, m} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Describe implements prometheus.Collector for the scrape-time metrics.
func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- m.kernelState
	ch <- m.kernelEvent
	ch <- m.allocated
	ch <- m.reserved
	ch <- m.deviceUsed
	ch <- m.goHeap
}

// Collect implements prometheus.Collector for the scrape-time metrics.
func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	states := map[string]int{"starting": 0, "idle": 0, "busy": 0, "restarting": 0, "dead": 0}
	for _, k := range m.s.kernels.List() {
		states[k.ExecutionState()]++
		if rec := k.Recorder(); rec != nil {
			ch <- prometheus.MustNewConstMetric(m.kernelEvent, prometheus.CounterValue, float64(rec.Stats().Events), k.ID())
		}
	}
	for st, n := range states {
		ch <- prometheus.MustNewConstMetric(m.kernelState, prometheus.GaugeValue, float64(n), st)
	}
	// The tracks as of each trace's head when the scrape began: a trace
	// the server has not followed yet is caught up first, for at most a
	// second in all; one still behind then gives no sample this scrape,
	// never a stale one (a first 0, then the real figure, would look like
	// growth to an alert).
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	tracks := func(id, kind string, src traces.Source) {
		head := src.Head()
		t := m.s.traces.Current(ctx, src)
		if _, seq, _ := t.Index().Last(); seq < head {
			return
		}
		v := t.Index().Now()
		for _, t := range []struct {
			d *prometheus.Desc
			v uint64
		}{{m.allocated, v.Allocated}, {m.reserved, v.Reserved}, {m.deviceUsed, v.DeviceUsed}, {m.goHeap, v.GoHeap}} {
			ch <- prometheus.MustNewConstMetric(t.d, prometheus.GaugeValue, float64(t.v), id, kind)
		}
	}
	for _, k := range m.s.kernels.List() {
		if rec := k.Recorder(); rec != nil && k.ExecutionState() != "dead" {
			tracks(k.ID(), "kernel", traces.FromRecorder(rec))
		}
	}
	for _, src := range m.s.sourceEntries() {
		if src.Live {
			tracks(src.ID, src.Kind, traces.FromRecorder(src.Recorder))
		}
	}
}

// statusWriter remembers the status a handler wrote.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach Flush and Hijack (websocket
// upgrades, pprof's streaming).
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Flush passes through for fgprof and pprof, which stream.
func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Hijack passes through for websocket upgrades.
func (w *statusWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	w.code = http.StatusSwitchingProtocols
	return http.NewResponseController(w.ResponseWriter).Hijack()
}

// instrument counts requests to the route pattern by status.
func (s *Server) instrument(route string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		h.ServeHTTP(sw, r)
		code := sw.code
		if code == 0 {
			code = http.StatusOK
		}
		s.metrics.requests.WithLabelValues(route, strconv.Itoa(code)).Inc()
		s.metrics.duration.WithLabelValues(route).Observe(time.Since(start).Seconds())
		if route != "GET /api/status" && route != "GET /metrics" {
			s.touch()
		}
	})
}
