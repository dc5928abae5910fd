package analyze

import "linger/timeline/event"

// Growth is fitted at the ends of the finest scopes a trace has (steps:
// the engine's prefill chunks and decode steps, or a notebook's own
// timeline.scope("step", …)), which says little to a reader who counts
// requests or cells. The same live bytes are fitted at the ends of
// requests and cells too, so that a growth finding also says its rate per
// request and per cell (Growth.Per).

// wideKinds are the scope kinds growth is also fitted at.
var wideKinds = [...]event.ScopeKind{event.ScopeRequest, event.ScopeCell}

// wideFits are an aggregate's fits at the ends of each of wideKinds.
type wideFits struct {
	fit, reqFit [len(wideKinds)]fit
}

// scopeSamples are the analyzer's samples at scope ends beyond the
// finest kind's: how many at each of wideKinds, and each cell run's
// tracks (phases.go).
type scopeSamples struct {
	n      [len(wideKinds)]uint64
	cell   cellTracks
	phases []Phase
}

// Rate is a growth's rate per scope of a wider kind than its samples'.
type Rate struct {
	Unit         string  `json:"unit"` // request or cell
	Samples      int     `json:"samples"`
	BytesPer     float64 `json:"bytes_per"`
	RequestedPer float64 `json:"requested_per"`
	R2           float64 `json:"r2"`
}

// scopeEnding samples every aggregate's live bytes at the end of a
// request or a cell, and the tracks of the cell running (e, before end
// forgets the scope).
func (a *Analyzer) scopeEnding(e *event.Event) {
	s := a.scopes[event.ScopeID(e.Addr)]
	if s == nil {
		return
	}
	a.cellTracks(s, e)
	for i, k := range wideKinds {
		if s.kind != k {
			continue
		}
		x, ts := float64(a.wide.n[i]), float64(e.Time)/1e9
		a.wide.n[i]++
		for c := range a.cats {
			if g := &a.cats[c]; g.allocs > 0 {
				g.wide.fit[i].add(x, ts, float64(g.live))
				g.wide.reqFit[i].add(x, ts, float64(g.liveReq))
			}
		}
		for _, g := range a.keyOrd {
			g.wide.fit[i].add(x, ts, float64(g.live))
			g.wide.reqFit[i].add(x, ts, float64(g.liveReq))
		}
	}
}

// minWideSamples is the fewest ends of a request or cell a rate per
// request or per cell is fitted over.
const minWideSamples = 3

// wideRates returns g's growth per request and per cell, for those kinds
// wider than the finest samples at whose ends it grows too (by the growth
// rule, over minWideSamples ends or more): a growth that happens inside
// one cell has no rate per cell.
func (a *Analyzer) wideRates(g *agg) []Rate {
	var rates []Rate
	rule := a.opts.Growth
	rule.MinSamples = minWideSamples
	for i, k := range wideKinds {
		f := &g.wide.fit[i]
		if k <= a.sampleKind || !f.growing(rule) {
			continue
		}
		per, _, r2 := f.slope()
		req, _, _ := g.wide.reqFit[i].slope()
		rates = append(rates, Rate{Unit: k.String(), Samples: int(f.n), BytesPer: per, RequestedPer: req, R2: r2})
	}
	return rates
}
