package probe

import (
	"bufio"
	"net/http"
	"strconv"

	"linger/timeline/event"
)

// MetricsHandler returns a handler that answers with the Probe's metrics
// in Prometheus's text exposition format (version 0.0.4), for the
// service to serve beside its own (at /metrics, or a path of its own for
// a second scrape job):
//
//	linger_probe_live_bytes{category}          gauge: bytes of the recorded objects alive now
//	linger_probe_allocations_total{category}   counter: objects recorded
//	linger_probe_lingering_bytes               gauge: bytes of objects alive past the scope they were expected to die with
//	linger_probe_events_dropped_total          counter: events dropped because the ring was full
//	linger_probe_events_sent_total             counter: events the server acknowledged
//
// The only label is category, one of event.Category's names, so the
// series are bounded whatever the service labels its objects. The
// lingering bytes are what the probe itself can tell (the scope ended,
// the Handle not freed); the server's analysis of the trace says which
// objects, with their labels and sites. The handler is safe for
// concurrent use and works on a nil Probe (all zero).
func (p *Probe) MetricsHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var live, allocs [event.NumCategories]uint64
		var lingering, dropped, sent uint64
		if p != nil {
			p.mu.Lock()
			live, allocs = p.live, p.allocs
			lingering, dropped, sent = p.lingering, p.dropped, p.sent
			p.mu.Unlock()
		}
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		b := bufio.NewWriter(w)
		byCategory := func(name, typ, help string, v *[event.NumCategories]uint64) {
			head(b, name, typ, help)
			for c := event.Category(1); c < event.NumCategories; c++ {
				if allocs[c] == 0 {
					continue // never used: no series
				}
				b.WriteString(name + `{category="` + c.String() + `"} `)
				b.WriteString(strconv.FormatUint(v[c], 10) + "\n")
			}
		}
		one := func(name, typ, help string, v uint64) {
			head(b, name, typ, help)
			b.WriteString(name + " " + strconv.FormatUint(v, 10) + "\n")
		}
		byCategory("linger_probe_live_bytes", "gauge", "Bytes of the objects the probe records that are alive now, by category.", &live)
		byCategory("linger_probe_allocations_total", "counter", "Objects the probe recorded, by category.", &allocs)
		one("linger_probe_lingering_bytes", "gauge", "Bytes of the objects alive past the end of the scope they were expected to die with.", lingering)
		one("linger_probe_events_dropped_total", "counter", "Events the probe dropped because its ring was full (the server away or too slow).", dropped)
		one("linger_probe_events_sent_total", "counter", "Events the Linger server acknowledged.", sent)
		b.Flush()
	})
}

func head(b *bufio.Writer, name, typ, help string) {
	b.WriteString("# HELP " + name + " " + help + "\n# TYPE " + name + " " + typ + "\n")
}
