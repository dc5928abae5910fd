package engine

import (
	"io"
	"testing"
	"time"

	"linger/timeline"
	"linger/timeline/event"
)

// BenchmarkRecordingOverhead measures what recording costs a decode loop,
// as a ratio taken in one run: two engines of the same model, one
// recording every event into a real trace log writer (encoding included,
// written to io.Discard) and one not, decode in alternating blocks of
// steps, so that whatever else the machine does falls on both alike. The
// reported "ratio" is tokens/s with recording over tokens/s without; the
// target is ≥ 0.97.
func BenchmarkRecordingOverhead(b *testing.B) {
	for _, c := range []struct {
		model  string
		ctxLen int
	}{{"tiny", 128}, {"small", 512}} {
		b.Run(c.model, func(b *testing.B) {
			w := timeline.NewWriter(io.Discard)
			type side struct {
				e     *Engine
				cache KVCache
				smp   *sampler
				tok   int
				spent time.Duration
			}
			mk := func(em *event.Emitter) *side {
				e := newTestEngine(b, preset(b, c.model), KVPaged, em)
				cache, err := e.NewKVCache(c.ctxLen + 1)
				if err != nil {
					b.Fatal(err)
				}
				l, err := e.Forward(prompt(c.ctxLen, e.cfg.Vocab, 1), cache, nil)
				if err != nil {
					b.Fatal(err)
				}
				l.Free()
				return &side{e: e, cache: cache, smp: e.newSampler(&Request{}), tok: 1}
			}
			off, on := mk(nil), mk(event.NewEmitter(w, event.EmitterOptions{}))
			step := func(s *side, i int) {
				start := time.Now()
				sc := s.e.em.Begin(event.ScopeStep, labelDecode.get(i&1023))
				tok, err := s.e.decode(s.cache, s.tok, i&1023, s.smp)
				s.e.em.End(sc)
				s.spent += time.Since(start)
				if err != nil {
					b.Fatal(err)
				}
				s.tok = tok
				s.cache.setLen(c.ctxLen)
			}
			const block = 16
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				first, second := off, on
				if (i/block)%2 == 1 {
					first, second = on, off
				}
				step(first, i)
				step(second, i)
			}
			b.StopTimer()
			if err := w.Close(); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(b.N)/off.spent.Seconds(), "tokens/s-off")
			b.ReportMetric(float64(b.N)/on.spent.Seconds(), "tokens/s-on")
			b.ReportMetric(off.spent.Seconds()/on.spent.Seconds(), "ratio")
		})
	}
}
