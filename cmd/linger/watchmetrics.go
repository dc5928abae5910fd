package main

import (
	"github.com/prometheus/client_golang/prometheus"

	"linger/timeline/goheap"
)

// watchMetrics are linger watch's own metrics, per target (its URL), on
// the server's /metrics: what each sample found, for a Prometheus that
// scrapes the watcher rather than each service (docs/watch.md).
type watchMetrics struct {
	heap, goroutines, baseline, gcP99, allocRate *prometheus.GaugeVec
	samples                                      *prometheus.CounterVec
}

func newWatchMetrics(reg prometheus.Registerer) *watchMetrics {
	gauge := func(name, help string) *prometheus.GaugeVec {
		g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, []string{"target"})
		reg.MustRegister(g)
		return g
	}
	m := &watchMetrics{
		heap:       gauge("linger_watch_heap_inuse_bytes", "Heap in use of the watched service at its last sample (go_memstats_heap_inuse_bytes, else the heap profile's in-use total)."),
		goroutines: gauge("linger_watch_goroutines", "Goroutines of the watched service at its last sample."),
		baseline:   gauge("linger_watch_goroutines_baseline", "Goroutines of the watched service at its first sample, after a forced GC: the baseline."),
		gcP99:      gauge("linger_watch_gc_pause_p99_seconds", "99th percentile of the watched service's GC pauses since the sample before (the largest recent pause where /metrics has only the summary)."),
		allocRate:  gauge("linger_watch_alloc_bytes_per_second", "Bytes the watched service allocated per second between its last two samples (heap profile's alloc_space)."),
		samples: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "linger_watch_samples_total",
			Help: "Samples taken of the watched service, by result: ok, or error when any part failed."}, []string{"target", "result"}),
	}
	reg.MustRegister(m.samples)
	return m
}

// observe sets target's metrics from a sample's result; failed says a
// part of the sample failed.
func (m *watchMetrics) observe(target string, r goheap.Result, failed bool) {
	result := "ok"
	if failed {
		result = "error"
	}
	m.samples.WithLabelValues(target, result).Inc()
	if r.HasHeapInuse {
		m.heap.WithLabelValues(target).Set(float64(r.HeapInuse))
	}
	if r.Goroutines >= 0 {
		m.goroutines.WithLabelValues(target).Set(float64(r.Goroutines))
	}
	if r.Baseline >= 0 {
		m.baseline.WithLabelValues(target).Set(float64(r.Baseline))
	}
	if r.HasGCPause {
		m.gcP99.WithLabelValues(target).Set(r.GCPauseP99.Seconds())
	}
	if r.HasRates {
		m.allocRate.WithLabelValues(target).Set(r.AllocBytesRate)
	}
}
