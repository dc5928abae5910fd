package probe_test

import (
	"net/http/httptest"
	"strings"
	"testing"

	"linger/internal/promtest"
	"linger/probe"
	"linger/timeline/event"
)

// TestMetrics: the handler's exposition holds the live and lingering bytes
// and the allocations by category as the service made them, Prometheus's
// own checker reads it as a scraper would and lints it (a counter's
// _total, units in the names, HELP and TYPE), and a nil probe serves the
// same names at zero.
func TestMetrics(t *testing.T) {
	p, err := probe.New(probe.Options{Name: "gateway"})
	if err != nil {
		t.Fatal(err)
	}
	req := p.Begin(event.ScopeRequest, "r")
	kept := req.Alloc(event.CategoryBatchScratch, "prompt buffer", 3000, event.ScopeRequest)
	req.Alloc(event.CategoryBatchScratch, "prompt buffer", 500, event.ScopeRequest).Free()
	cache := p.Alloc(event.CategoryTokenizerCache, "tokens", 7000, event.ScopeNone)
	req.End()
	defer kept.Free()
	defer cache.Free()

	for _, c := range []struct {
		p    *probe.Probe
		want []string
	}{
		{p, []string{
			`linger_probe_live_bytes{category="batch_scratch"} 3000`,
			`linger_probe_live_bytes{category="tokenizer_cache"} 7000`,
			`linger_probe_allocations_total{category="batch_scratch"} 2`,
			`linger_probe_allocations_total{category="tokenizer_cache"} 1`,
			"linger_probe_lingering_bytes 3000",
			"linger_probe_events_dropped_total 0",
			"linger_probe_events_sent_total 0",
		}},
		{nil, []string{"linger_probe_lingering_bytes 0", "linger_probe_events_sent_total 0", "# TYPE linger_probe_live_bytes gauge"}},
	} {
		rr := httptest.NewRecorder()
		c.p.MetricsHandler().ServeHTTP(rr, httptest.NewRequest("GET", "/metrics", nil))
		b := rr.Body.Bytes()
		if ct := rr.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
			t.Errorf("Content-Type %q", ct)
		}
		for _, w := range c.want {
			if !strings.Contains(string(b), w+"\n") {
				t.Errorf("metrics lack %s:\n%s", w, b)
			}
		}
		promtest.CheckMetrics(t, b)
	}
}
