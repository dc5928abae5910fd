package server

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"linger/server/httperr"
	"linger/timeline/analyze"
	"linger/timeline/event"
	"linger/web"
)

// The compare view: two saved traces (a leaky run and a fixed one, say)
// analyzed side by side. The API answers package analyze's Diff with both
// traces' summaries; the page shows the same as tables, with both
// traces' timelines side by side, each framing its own run, on one memory
// scale.

// compareSummary is what a person compares first between two runs.
type compareSummary struct {
	Name       string `json:"name"`
	Events     uint64 `json:"events"`
	DurationNS int64  `json:"duration_ns"`
	Truncated  string `json:"truncated,omitempty"`
	PeakBytes  uint64 `json:"peak_bytes"`
	PeakTimeNS int64  `json:"peak_time_ns"`
	// Lingering objects, their bytes, and the bytes of those never freed.
	LingeringCount uint64 `json:"lingering_count"`
	LingeringBytes uint64 `json:"lingering_bytes"`
	LeakedBytes    uint64 `json:"leaked_bytes"`
	// LingeringByCategory holds every category with lingering objects,
	// most bytes first.
	LingeringByCategory []analyze.Total     `json:"lingering_by_category"`
	Duplicates          []analyze.Duplicate `json:"duplicates"`
	// Verdict is the tracks' verdict (analyze.Tracks.Verdict), e.g.
	// "allocated_grows" or "flat".
	Verdict string `json:"verdict"`
}

// comparison is the answer of GET /api/timeline/compare: trace A is the
// baseline, B the new run, and Diff what changed from A to B.
type comparison struct {
	A    compareSummary      `json:"a"`
	B    compareSummary      `json:"b"`
	Diff *analyze.DiffReport `json:"diff"`

	reports [2]*analyze.Report
}

// compareNames reads the two trace names of a compare request.
func compareNames(r *http.Request) (a, b string, err error) {
	q := r.URL.Query()
	a, b = q.Get("a"), q.Get("b")
	if a == "" || b == "" {
		return a, b, badRequest("compare needs two saved traces: ?a=NAME.ltrace&b=NAME.ltrace")
	}
	return a, b, nil
}

// compare analyzes the saved traces named a and b (resolved as the
// timeline routes resolve names; each analysis is the one the trace's
// other routes share) and compares them.
func (s *Server) compare(ctx context.Context, a, b string) (*comparison, error) {
	var paths [2]string
	for i, name := range []string{a, b} {
		p, err := s.tracePath(name)
		if err != nil {
			return nil, err
		}
		paths[i] = p
	}
	c := &comparison{}
	var errs [2]error
	var wg sync.WaitGroup
	for i := range paths {
		wg.Go(func() {
			rep, err := s.savedReport(ctx, paths[i])
			if err != nil {
				errs[i] = fmt.Errorf("analyze %s: %w", filepath.Base(paths[i]), err)
				return
			}
			c.reports[i] = rep
		})
	}
	wg.Wait()
	if err := errors.Join(errs[:]...); err != nil {
		return nil, err
	}
	c.A, c.B = summarize(a, c.reports[0]), summarize(b, c.reports[1])
	c.Diff = analyze.Diff(c.reports[0], c.reports[1])
	return c, nil
}

func summarize(name string, r *analyze.Report) compareSummary {
	return compareSummary{
		Name: name, Events: r.Events, DurationNS: r.DurationNS, Truncated: r.Truncated,
		PeakBytes: r.Peak.Bytes, PeakTimeNS: r.Peak.TimeNS,
		LingeringCount: r.Lingering.Count, LingeringBytes: r.Lingering.Bytes, LeakedBytes: r.Lingering.LeakedBytes,
		LingeringByCategory: r.Lingering.ByCategory, Duplicates: r.Duplicates, Verdict: r.Tracks.Verdict,
	}
}

// handleCompare answers the comparison of two saved traces (?a=, ?b=).
func (s *Server) handleCompare(w http.ResponseWriter, r *http.Request) {
	a, b, err := compareNames(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	c, err := s.compare(r.Context(), a, b)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, c)
}

// handleComparePage renders the compare view. Without two names it shows
// the picker of saved traces; a name that is not a saved trace is said on
// the page, with the picker, under the status the API would answer.
func (s *Server) handleComparePage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	v := web.CompareView{Page: s.page("Compare traces"), A: q.Get("a"), B: q.Get("b"), Axes: q.Get("axes")}
	traces, err := s.savedTraces()
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	v.Traces = traces
	code := http.StatusOK
	if v.A != "" && v.B != "" {
		c, err := s.compare(r.Context(), v.A, v.B)
		if err != nil {
			code = httperr.Status(classify(err))
			if code >= 500 {
				s.writeError(w, r, err)
				return
			}
			v.Message = s.errw.Paths.Scrub(err.Error())
		} else {
			s.compareView(&v, c)
		}
	}
	s.renderStatus(w, r, code, web.Compare(v))
}

// savedTraces lists the saved traces by name, newest first.
func (s *Server) savedTraces() ([]string, error) {
	ts, err := s.savedTraceList()
	names := make([]string, len(ts))
	for i, t := range ts {
		names[i] = t.Name
	}
	return names, err
}

// savedTraceList lists the saved traces, newest first (ties by name):
// TraceDir's, then KernelTraceDir's of other names (Kernel set).
func (s *Server) savedTraceList() ([]web.TraceView, error) {
	var ts []web.TraceView
	seen := map[string]bool{}
	for i, dir := range []string{s.opts.TraceDir, s.opts.KernelTraceDir} {
		if dir == "" {
			continue
		}
		entries, err := os.ReadDir(dir)
		if err != nil {
			if i == 1 && errors.Is(err, os.ErrNotExist) {
				continue // no Jupyter kernel has written one yet
			}
			return nil, fmt.Errorf("list traces: %w", err)
		}
		for _, e := range entries {
			name := e.Name()
			if e.Type().IsRegular() && strings.HasSuffix(name, ".ltrace") && !strings.HasPrefix(name, ".") && !seen[name] {
				info, err := e.Info()
				if err != nil {
					continue // removed meanwhile
				}
				seen[name] = true
				ts = append(ts, web.TraceView{Name: name, Modified: info.ModTime(), Size: info.Size(), Kernel: i == 1})
			}
		}
	}
	slices.SortFunc(ts, func(x, y web.TraceView) int {
		return cmp.Or(y.Modified.Compare(x.Modified), cmp.Compare(x.Name, y.Name))
	})
	return ts, nil
}

// verdicts says the tracks' verdicts in words.
var verdicts = map[string]string{
	analyze.VerdictAllocated: "allocated grows (live objects accumulate)",
	analyze.VerdictReserved:  "reserved grows (the cache keeps freed memory)",
	analyze.VerdictDevice:    "device memory grows outside the allocator",
	analyze.VerdictFlat:      "flat",
}

// compareView fills the page's view model from a comparison.
func (s *Server) compareView(v *web.CompareView, c *comparison) {
	v.AURL = s.opts.BaseURL + "api/timeline/traces/" + url.PathEscape(c.A.Name)
	v.BURL = s.opts.BaseURL + "api/timeline/traces/" + url.PathEscape(c.B.Name)
	verdict := func(x string) string { return cmp.Or(verdicts[x], x, "–") }
	d := c.Diff
	n := func(x uint64) int64 { return int64(x) }
	v.Summary = []web.CompareFigure{
		{Label: "Lingering", Unit: web.UnitBytes, A: n(d.LingeringBytes.A), B: n(d.LingeringBytes.B)},
		{Label: "Lingering objects", Unit: web.UnitCount, A: n(d.LingeringCount.A), B: n(d.LingeringCount.B)},
		{Label: "Leaked (never freed)", Unit: web.UnitBytes, A: n(d.LeakedBytes.A), B: n(d.LeakedBytes.B)},
		{Label: "Peak allocated", Unit: web.UnitBytes, A: n(d.PeakBytes.A), B: n(d.PeakBytes.B)},
		{Label: "Duplicate copies", Unit: web.UnitCount, A: n(d.Duplicates.A), B: n(d.Duplicates.B)},
		{Label: "Memory tracks", TextA: verdict(c.A.Verdict), TextB: verdict(c.B.Verdict)},
		{Label: "Duration", Unit: web.UnitDuration, A: c.A.DurationNS, B: c.B.DurationNS},
		{Label: "Events", Unit: web.UnitCount, A: n(d.Events.A), B: n(d.Events.B)},
	}
	// Duplicate copies per (site, category) and per category (site 0),
	// each side; a site row counts those of every site it adds up.
	type key struct {
		cat  string
		site event.SiteID
	}
	var dups [2]map[key]uint64
	for i, r := range c.reports {
		dups[i] = map[key]uint64{}
		for _, x := range r.Duplicates {
			if x.SiteID != 0 {
				dups[i][key{x.Category, x.SiteID}] += x.Count
			}
			dups[i][key{x.Category, 0}] += x.Count
		}
	}
	sitesDups := func(i int, cat string, ids []event.SiteID) int64 {
		var c uint64
		for _, id := range ids {
			c += dups[i][key{cat, id}]
		}
		return n(c)
	}
	// Each site's trace form (with its cell ids), each side, for the
	// rows' titles.
	var forms [2]map[event.SiteID]string
	for i, r := range c.reports {
		forms[i] = make(map[event.SiteID]string, len(r.Sites))
		for _, s := range r.Sites {
			forms[i][s.SiteID] = s.Site
		}
	}
	names := [2]*analyze.CellNames{c.reports[0].CellNames(), c.reports[1].CellNames()}
	row := func(r analyze.DiffRow) web.DiffRowView {
		v := web.DiffRowView{Category: r.Category, Key: r.Site,
			LingeringA: n(r.LingeringBytes.A), LingeringB: n(r.LingeringBytes.B),
			PeakA: n(r.PeakBytes.A), PeakB: n(r.PeakBytes.B)}
		if r.SiteAID == 0 && r.SiteBID == 0 {
			v.Site = r.Site
			v.DuplicatesA, v.DuplicatesB = n(dups[0][key{r.Category, 0}]), n(dups[1][key{r.Category, 0}])
			return v
		}
		v.DuplicatesA, v.DuplicatesB = sitesDups(0, r.Category, r.SiteAIDs), sitesDups(1, r.Category, r.SiteBIDs)
		// The row shows its line as B's user saw it (A's when only A
		// has it), with the Go frames of its largest site after it; each
		// side's own name of the line when the two differ (the runs'
		// execution counts do); the sites of both traces, with their
		// cell ids, in its title.
		i, id := 1, r.SiteBID
		if id == 0 {
			i, id = 0, r.SiteAID
		}
		v.Site = names[i].Site(c.reports[i].Site(id))
		v.NameA, v.NameB = r.NameA, r.NameB
		v.Paths = max(len(r.SiteAIDs), len(r.SiteBIDs))
		var title []string
		for i, ids := range [2][]event.SiteID{r.SiteAIDs, r.SiteBIDs} {
			for _, id := range ids {
				title = append(title, "AB"[i:i+1]+": "+cmp.Or(forms[i][id], names[i].Site(c.reports[i].Site(id))))
			}
		}
		v.Title = strings.Join(title, "\n")
		return v
	}
	for _, r := range d.Categories {
		v.Categories = append(v.Categories, row(r))
	}
	for _, r := range d.Sites[:min(len(d.Sites), maxSiteRows)] {
		v.Sites = append(v.Sites, row(r))
	}
	v.SitesOmitted = len(d.Sites) - len(v.Sites)
	v.APIURL = s.opts.BaseURL + "api/timeline/compare?" + url.Values{"a": {c.A.Name}, "b": {c.B.Name}}.Encode()
}

// maxSiteRows bounds the sites the page lists (a notebook may have
// hundreds); the largest changes come first.
const maxSiteRows = 25
