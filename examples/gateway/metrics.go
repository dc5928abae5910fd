package gateway

import (
	"bytes"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"linger/probe"
)

// metrics are the gateway's Prometheus metrics, on a registry of its own
// beside the Go and process collectors; /metrics serves them with the
// probe's.
type metrics struct {
	reg          *prometheus.Registry
	requests     *prometheus.CounterVec
	latency      prometheus.Histogram
	cache        *prometheus.CounterVec
	chunks       prometheus.Counter
	redisUp      prometheus.Gauge
	cacheEntries prometheus.Gauge
	evicted      prometheus.Counter
	probe        *probe.Probe
}

func newMetrics(p *probe.Probe, docs *index) *metrics {
	reg := prometheus.NewRegistry()
	m := &metrics{reg: reg, probe: p,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gateway_requests_total", Help: "Requests to POST /v1/generate, by status code."}, []string{"code"}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "gateway_request_duration_seconds", Help: "Time to answer POST /v1/generate.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 14)}),
		cache:        prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gateway_embedding_cache_lookups_total", Help: "Embedding cache lookups, by result: hit, miss, error (Redis did not answer) or off (no Redis)."}, []string{"result"}),
		chunks:       prometheus.NewCounter(prometheus.CounterOpts{Name: "gateway_prompt_chunks_total", Help: "Prompt chunks cut and tokenized."}),
		redisUp:      prometheus.NewGauge(prometheus.GaugeOpts{Name: "gateway_redis_up", Help: "1 while Redis answers the embedding cache's commands, 0 after one failed."}),
		cacheEntries: prometheus.NewGauge(prometheus.GaugeOpts{Name: "gateway_embedding_cache_entries", Help: "Embedding cache entries this gateway wrote that Redis holds, as far as it knows."}),
		evicted:      prometheus.NewCounter(prometheus.CounterOpts{Name: "gateway_embedding_cache_evicted_total", Help: "Entries the namespaced eviction unlinked."}),
	}
	reg.MustRegister(
		// Go's runtime metrics for the GC's pauses beside the classic
		// memstats: docs/alerts.md's GC pause p99 reads the histogram.
		collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(collectors.MetricsGC,
			collectors.GoRuntimeMetricsRule{Matcher: regexp.MustCompile(`^/sched/pauses/total/gc:seconds$`)})),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.requests, m.latency, m.cache, m.chunks, m.redisUp, m.cacheEntries, m.evicted,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "gateway_documents", Help: "Documents in the document index."}, func() float64 { return float64(docs.len()) }),
	)
	return m
}

func (m *metrics) observe(code int, d time.Duration) {
	m.requests.WithLabelValues(strconv.Itoa(code)).Inc()
	m.latency.Observe(d.Seconds())
}

// handler serves the registry's metrics and the probe's together, in
// whatever format the scraper asks for.
func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(prometheus.Gatherers{m.reg, prometheus.GathererFunc(m.gatherProbe)}, promhttp.HandlerOpts{})
}

// gatherProbe reads the probe's metrics (Prometheus text, written by the
// probe's MetricsHandler) as metric families.
func (m *metrics) gatherProbe() ([]*dto.MetricFamily, error) {
	if m.probe == nil {
		return nil, nil
	}
	w := &textWriter{header: http.Header{}}
	m.probe.MetricsHandler().ServeHTTP(w, &http.Request{Method: http.MethodGet})
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(&w.buf)
	if err != nil {
		return nil, fmt.Errorf("probe metrics: %w", err)
	}
	out := make([]*dto.MetricFamily, 0, len(fams))
	for _, f := range fams {
		out = append(out, f)
	}
	return out, nil
}

// textWriter is the ResponseWriter the probe's handler writes to.
type textWriter struct {
	header http.Header
	buf    bytes.Buffer
}

func (w *textWriter) Header() http.Header         { return w.header }
func (w *textWriter) Write(b []byte) (int, error) { return w.buf.Write(b) }
func (w *textWriter) WriteHeader(int)             {}
