package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"runtime"
	"slices"
	"sync"

	"linger/internal/units"
	"linger/server/httperr"
	"linger/timeline/analyze"
	"linger/timeline/traces"
	"linger/web"
)

// The ranks page: several ranks' saved traces of one distributed job
// (rank0.ltrace … rankN.ltrace, as `linger open` imports a job's
// snapshots), a row of figures each, the ranks not like the others
// pointed at by package analyze's rule (analyze.OddRanks), and any two
// of them compared in the compare view.

// MaxRanks bounds the traces of one ranks request: each is analyzed in
// the one pass the Set makes over it (a few at a time, rankWorkers), and
// a request for more would hold the server for their sum. One node's
// ranks, or a few nodes', fit; a larger job is opened a node at a time.
const MaxRanks = 64

// rankWorkers is how many of a request's traces are analyzed at once: no
// more than the Set keeps (traces.DefaultKeep, the server's), so that the
// indexes held while they are read are about what the Set holds anyway,
// and no more than there are CPUs to read them.
var rankWorkers = min(runtime.GOMAXPROCS(0), traces.DefaultKeep)

// ranksAnswer is the answer of GET /api/timeline/ranks: the ranks in
// order (analyze.OddRanks), each with what makes it odd, and the rank
// the odd ones are best compared with.
type ranksAnswer struct {
	Ranks []analyze.Rank `json:"ranks"`
	// Typical is the name of the rank that is not odd and whose peak is
	// nearest the median of those that are not: what an odd rank is
	// compared with.
	Typical string `json:"typical"`
}

// rankNames reads the trace names of a ranks request (?t=, repeated).
func rankNames(r *http.Request) ([]string, error) {
	names := r.URL.Query()["t"]
	switch {
	case len(names) < 2:
		return names, badRequest("the ranks page needs two or more saved traces, one per rank: ?t=rank0.ltrace&t=rank1.ltrace (one trace has its own page, /timeline/NAME); got %d", len(names))
	case len(names) > MaxRanks:
		return names, badRequest("the ranks page shows at most %d traces, got %d: open fewer at a time (one node's ranks, say)", MaxRanks, len(names))
	}
	for i, n := range names {
		if slices.Contains(names[:i], n) {
			return names, badRequest("trace %q is named twice: name each rank's trace once", n)
		}
	}
	return names, nil
}

// ranks analyzes the saved traces names (resolved as the timeline routes
// resolve names; each analysis the one the trace's other routes share,
// made in the Set's pass over it), rankWorkers at a time, and keeps of
// each report only its figures.
func (s *Server) ranks(ctx context.Context, names []string) (*ranksAnswer, error) {
	paths := make([]string, len(names))
	for i, name := range names {
		p, err := s.tracePath(name)
		if err != nil {
			return nil, err
		}
		paths[i] = p
	}
	ranks := make([]analyze.Rank, len(names))
	errs := make([]error, len(names))
	sem := make(chan struct{}, rankWorkers)
	var wg sync.WaitGroup
	for i := range paths {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			rep, err := s.savedFindings(ctx, paths[i])
			if err != nil {
				errs[i] = fmt.Errorf("analyze %s: %w", names[i], err)
				return
			}
			ranks[i] = analyze.NewRank(names[i], rep)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	analyze.OddRanks(ranks)
	return &ranksAnswer{Ranks: ranks, Typical: typicalRank(ranks)}, nil
}

// typicalRank is the name of the rank not pointed at whose peak is
// nearest the median peak of those not pointed at (the first of a tie).
func typicalRank(ranks []analyze.Rank) string {
	var peaks []uint64
	for _, r := range ranks {
		if len(r.Odd) == 0 {
			peaks = append(peaks, r.PeakBytes)
		}
	}
	if len(peaks) == 0 {
		return ""
	}
	slices.Sort(peaks)
	m := peaks[len(peaks)/2]
	best, dist := "", uint64(0)
	for _, r := range ranks {
		d := max(r.PeakBytes, m) - min(r.PeakBytes, m)
		if len(r.Odd) == 0 && (best == "" || d < dist) {
			best, dist = r.Name, d
		}
	}
	return best
}

// handleRanks answers the ranks of saved traces (?t=, repeated).
func (s *Server) handleRanks(w http.ResponseWriter, r *http.Request) {
	names, err := rankNames(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	a, err := s.ranks(r.Context(), names)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, a)
}

// handleRanksPage renders the ranks page. Without names it shows the
// picker of saved traces; names it cannot show (one only, one not found)
// are said on the page, with the picker, under the status the API would
// answer.
func (s *Server) handleRanksPage(w http.ResponseWriter, r *http.Request) {
	v := web.RanksView{Page: s.page("Ranks"), Chosen: r.URL.Query()["t"]}
	traces, err := s.savedTraces()
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	v.Traces = traces
	code := http.StatusOK
	if len(v.Chosen) > 0 {
		a, err := func() (*ranksAnswer, error) {
			names, err := rankNames(r)
			if err != nil {
				return nil, err
			}
			return s.ranks(r.Context(), names)
		}()
		if err != nil {
			code = httperr.Status(classify(err))
			if code >= 500 {
				s.writeError(w, r, err)
				return
			}
			v.Message = s.errw.Paths.Scrub(err.Error())
		} else {
			s.ranksView(&v, a)
		}
	}
	s.renderStatus(w, r, code, web.Ranks(v))
}

// oddRule is the odd-rank rule in words, as the page says it under the
// table (analyze.OddRanks has it in full).
var oddRule = fmt.Sprintf("A rank is pointed at when its peak, its lingering bytes or its bytes allocated at the end are more than %d median absolute deviations of the other ranks from their median, and the difference is at least %.0f%% of that median and at least %s; and only when fewer than half the ranks are, with three ranks or more. "+
	"Step by step, the same rule is applied to what each rank allocated since its first step began, at each step's end: a rank departs at the first step from which it is odd at every step to the last, two steps or more. "+
	"A rank with OOMs is pointed at when fewer than half the ranks had any.",
	analyze.OddMADs, 100*analyze.OddFraction, units.Format(analyze.OddMinBytes))

// ranksView fills the page's view model from the ranks.
func (s *Server) ranksView(v *web.RanksView, a *ranksAnswer) {
	labels := map[string]string{}
	for _, r := range a.Ranks {
		labels[r.Name] = r.Label
	}
	var names []string
	for _, r := range a.Ranks {
		names = append(names, r.Name)
		rv := web.RankView{Name: r.Name, Label: r.Label,
			Peak: int64(r.PeakBytes), Lingering: int64(r.LingeringBytes), Leaked: int64(r.LeakedBytes), LateFree: int64(r.LateFreeBytes), End: int64(r.EndBytes),
			OOMs: r.OOMs, Events: r.Events, Truncated: r.Truncated}
		if r.Growth > 0 {
			rv.Growth, rv.GrowthSite = units.FormatSigned(r.Growth)+"/"+r.GrowthUnit+" ("+r.GrowthCategory+")", r.GrowthSite
		}
		for _, o := range r.Odd {
			rv.Reasons = append(rv.Reasons, o.Reason)
		}
		if s := r.Steps; s.Unit == "step" && len(s.Allocated) > 0 {
			l := web.StepLine{Name: r.Name, Label: r.Label}
			for i, b := range s.Allocated {
				l.Steps, l.Bytes = append(l.Steps, s.Step(i)), append(l.Bytes, int64(b))
			}
			for _, o := range r.Odd {
				if o.Departure != nil {
					l.Departs, l.Depart, l.Reason = true, o.Departure.Step, o.Reason
				}
			}
			v.Steps.Lines = append(v.Steps.Lines, l)
		}
		if len(r.Odd) > 0 && a.Typical != "" {
			rv.CompareWith, rv.CompareWithLabel = a.Typical, labels[a.Typical]
		}
		if v.B == "" && len(r.Odd) > 0 {
			v.B = r.Name
		}
		v.Ranks = append(v.Ranks, rv)
	}
	v.A = a.Typical
	if v.B == "" || v.A == "" {
		v.A, v.B = names[0], names[1]
	}
	v.Rule = oddRule
	v.APIURL = s.opts.BaseURL + "api/timeline/ranks?" + url.Values{"t": names}.Encode()
}
