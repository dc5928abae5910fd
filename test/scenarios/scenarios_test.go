package scenarios

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"linger/engine/alloc"
	"linger/internal/testbin"
	"linger/notebooks/nbformat"
	"linger/server/kernels"
	"linger/timeline"
	"linger/timeline/analyze"
	"linger/timeline/event"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testbin.Remove()
	os.Exit(code)
}

// notebookDir is where the notebooks live, from this package's directory.
const notebookDir = "../../examples"

// result is one headless run of a notebook.
type result struct {
	// Notebook is the executed notebook (outputs, execution counts).
	Notebook *nbformat.Notebook
	// Report is the analyzer's report over the whole trace, as linger run
	// --report wrote it.
	Report *analyze.Report
	// Holders are the kernel's retention paths for the lingering objects
	// still alive after the last cell.
	Holders []kernels.Holder
	// Objects are every object that became lingering, in order, replayed
	// from the trace with an analyze.Analyzer's OnLinger (the report's own
	// list is capped at the largest).
	Objects []lingeringObject
	// Cells is the allocator's allocated bytes per cell id: before the
	// cell, its maximum while the cell ran, and after it.
	Cells     map[string]cellMemory
	TracePath string
	Stdout    string
	Elapsed   time.Duration
}

// lingeringObject is an object that outlived its expected scope.
type lingeringObject struct {
	analyze.Object // names resolved
	Cell           string
	Line           int
	// Freed is set when it was freed later (a late free); otherwise it
	// was alive when the session ended (frees in the kernel's teardown do
	// not count).
	Freed bool
}

// cellMemory is the allocator's allocated bytes around one cell's run.
type cellMemory struct {
	Before, Peak, After uint64
}

// runNotebook runs examples/<name> headless with linger run on the
// target, fails the test on an invalid notebook or a cell error, and
// returns the result.
func runNotebook(t *testing.T, tg target, name string) *result {
	t.Helper()
	path := filepath.Join(notebookDir, name)
	checkCommitted(t, path)
	dir := t.TempDir()
	out := filepath.Join(dir, "out.ipynb")
	trace := filepath.Join(dir, "trace.ltrace")
	report := filepath.Join(dir, "report.json")
	cmd := exec.Command(testbin.Linger(t), append([]string{"run", path, "--out", out, "--trace", trace, "--report", report, "--timeout", "2m"}, tg.args...)...)
	if tg.env != nil {
		cmd.Env = append(os.Environ(), tg.env...)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	r := &result{TracePath: trace, Stdout: stdout.String(), Elapsed: time.Since(start)}
	if err != nil {
		t.Fatalf("linger run %s: %v\n%s%s", name, err, stdout.String(), stderr.String())
	}
	if r.Notebook, err = nbformat.ReadFile(out); err != nil {
		t.Fatalf("executed notebook: %v", err)
	}
	b, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Report       *analyze.Report  `json:"report"`
		Holders      []kernels.Holder `json:"holders"`
		HoldersError string           `json:"holders_error"`
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatalf("report: %v", err)
	}
	if rep.HoldersError != "" {
		t.Fatalf("holders: %s", rep.HoldersError)
	}
	r.Report, r.Holders = rep.Report, rep.Holders
	r.checkUnits(t)
	r.replay(t)
	if tg.Name != meta.Name {
		r.checkTarget(t, tg)
	}
	return r
}

// checkTarget checks that the run was on the target's device: the
// parameter linger run injected, and, at the end of the trace, device used
// − reserved is the device's context plus its engines' stream staging
// buffers (no notebook keeps memory outside the allocator at its end),
// which only the cuda device has. A staging buffer is 64 KiB and grows
// with a paged cache's page table (16 bytes a page): the scenarios' few
// engines hold well under StagingMax between them.
func (r *result) checkTarget(t *testing.T, tg target) {
	t.Helper()
	want := fmt.Sprintf("DEVICE = %q", tg.Name)
	if src := cellSource(t, r, "injected-parameters"); !strings.Contains(src, want) {
		t.Errorf("the injected parameters %q, want %s", src, want)
	}
	if end := r.Report.Tracks.End; end.OutsideGap < int64(tg.Context) || end.OutsideGap > int64(tg.Context+tg.StagingMax) {
		t.Errorf("at the end: device used %d − reserved %d = %d bytes, want the %s context's %d plus at most %d of staging buffers", end.DeviceUsed, end.Reserved, end.OutsideGap, tg.Name, tg.Context, tg.StagingMax)
	}
}

// checkCommitted validates the committed notebook (nbformat 4.5 schema)
// and the conventions every notebook follows: an "intro" markdown cell
// first, code cell ids by part, no outputs, no execution counts.
func checkCommitted(t *testing.T, path string) {
	t.Helper()
	nb, err := nbformat.ReadFile(path)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var ids struct {
		NBFormatMinor int `json:"nbformat_minor"`
		Cells         []struct {
			ID string `json:"id"`
		} `json:"cells"`
	}
	if err := json.Unmarshal(raw, &ids); err != nil {
		t.Fatal(err)
	}
	if ids.NBFormatMinor < 5 {
		t.Errorf("%s: nbformat_minor %d, want 4.5 with cell ids", path, ids.NBFormatMinor)
	}
	for i, c := range ids.Cells {
		if c.ID == "" {
			t.Errorf("%s: cell %d has no id", path, i)
		}
	}
	if ks, ok := nb.KernelSpec(); !ok || ks.Name != nbformat.LingerKernelSpec.Name {
		t.Errorf("%s: kernelspec %+v, want %q", path, ks, nbformat.LingerKernelSpec.Name)
	}
	if len(nb.Cells) == 0 || nb.Cells[0].ID != "intro" || nb.Cells[0].Type != nbformat.CellMarkdown {
		t.Errorf("%s: the first cell must be the markdown cell \"intro\"", path)
	}
	checkParameters(t, path, nb)
	prefixes := []string{"setup-", "leaky-", "fixed-", "check-", "notes-"}
	for _, c := range nb.Cells {
		if c.Type != nbformat.CellCode {
			continue
		}
		if !slices.ContainsFunc(prefixes, func(p string) bool { return strings.HasPrefix(c.ID, p) }) {
			t.Errorf("%s: code cell %q: id must start with one of %v", path, c.ID, prefixes)
		}
		if len(c.Outputs) > 0 || c.ExecutionCount != nil {
			t.Errorf("%s: cell %s is committed with outputs or an execution count", path, c.ID)
		}
	}
}

// checkParameters checks the device convention: a notebook that makes
// engines takes their device from one parameter cell, its first code cell
// (id "setup-parameters", tagged "parameters" as papermill expects), which
// sets DEVICE = "meta"; no other cell names a device, so that the notebook
// runs unchanged on "cuda" under the Linger (CUDA) kernel.
func checkParameters(t *testing.T, path string, nb *nbformat.Notebook) {
	t.Helper()
	var code []*nbformat.Cell
	engines := false
	for _, c := range nb.Cells {
		if c.Type == nbformat.CellCode {
			code = append(code, c)
			engines = engines || strings.Contains(c.Source, "engine(")
		}
	}
	if !engines {
		return
	}
	p := code[0]
	var tags []string
	if _, err := p.Metadata.Get("tags", &tags); err != nil || p.ID != "setup-parameters" || !slices.Contains(tags, "parameters") {
		t.Errorf("%s: the first code cell must be \"setup-parameters\", tagged \"parameters\"; it is %q, tags %v", path, p.ID, tags)
	}
	if !regexp.MustCompile(`(?m)^DEVICE = "meta"`).MatchString(p.Source) {
		t.Errorf("%s: the parameter cell must set DEVICE = \"meta\": %q", path, p.Source)
	}
	literal := regexp.MustCompile(`device\s*=\s*["']`)
	for _, c := range code[1:] {
		if literal.MatchString(c.Source) {
			t.Errorf("%s: cell %s names a device; use device=DEVICE", path, c.ID)
		}
	}
}

// replay reads the trace once more to list every lingering object (with
// its cell and line) and the allocated bytes around each cell.
func (r *result) replay(t *testing.T) {
	t.Helper()
	f, err := timeline.OpenFile(r.TracePath)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Stop(); err != nil {
		t.Fatalf("trace: %v", err)
	}
	type live struct {
		size uint64
		obj  int // index in r.Objects, -1 when not lingering
	}
	alive := map[uint64]*live{}
	var allocated uint64
	cellScopes := map[uint64]string{}
	cell := ""
	teardown := false
	r.Cells = map[string]cellMemory{}
	a := analyze.New(analyze.Options{Names: f, OnLinger: func(o analyze.Object) {
		site, _ := f.Site(o.SiteID)
		o.Label, o.Site, o.ScopeLabel = f.String(o.LabelID), site.String(), f.String(o.ScopeLabelID)
		o.Category = o.CategoryID.String()
		if l := alive[o.Addr]; l != nil {
			l.obj = len(r.Objects)
		}
		r.Objects = append(r.Objects, lingeringObject{Object: o, Cell: site.Cell, Line: site.Line})
	}})
	err = f.Replay(func(e event.Event) error {
		switch e.Kind {
		case event.KindAlloc:
			alive[e.Addr] = &live{size: e.Size, obj: -1}
			allocated += e.Size
			if cell != "" {
				m := r.Cells[cell]
				m.Peak = max(m.Peak, allocated)
				r.Cells[cell] = m
			}
		case event.KindFree:
			if l := alive[e.Addr]; l != nil {
				allocated -= l.size
				if l.obj >= 0 && !teardown {
					r.Objects[l.obj].Freed = true
				}
				delete(alive, e.Addr)
			}
		case event.KindScopeBegin:
			teardown = teardown || e.ScopeView().Teardown()
			if e.Expect == event.ScopeCell {
				cell = f.String(e.Label)
				cellScopes[e.Addr] = cell
				r.Cells[cell] = cellMemory{Before: allocated, Peak: allocated}
			}
		case event.KindScopeEnd:
			if id, ok := cellScopes[e.Addr]; ok {
				m := r.Cells[id]
				m.After = allocated
				r.Cells[id] = m
				cell = ""
			}
		}
		a.Add(e)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// objects are the lingering objects of category cat (all when "") made in
// a cell whose id starts with cellPrefix.
func (r *result) objects(cellPrefix, cat string) []lingeringObject {
	var out []lingeringObject
	for _, o := range r.Objects {
		if strings.HasPrefix(o.Cell, cellPrefix) && (cat == "" || o.Category == cat) {
			out = append(out, o)
		}
	}
	return out
}

// lingering is the bytes and count of objects of category cat that became
// lingering and were made in a cell whose id starts with cellPrefix (late
// frees included).
func (r *result) lingering(cellPrefix, cat string) (bytes uint64, count int) {
	for _, o := range r.objects(cellPrefix, cat) {
		bytes += o.Size
		count++
	}
	return bytes, count
}

// leaked is lingering restricted to the objects still alive at the end of
// the trace.
func (r *result) leaked(cellPrefix, cat string) (bytes uint64, count int) {
	for _, o := range r.objects(cellPrefix, cat) {
		if !o.Freed {
			bytes += o.Size
			count++
		}
	}
	return bytes, count
}

// lines are the distinct "cell:line" sites of those lingering objects.
func (r *result) lines(cellPrefix, cat string) []string {
	var out []string
	for _, o := range r.objects(cellPrefix, cat) {
		s := fmt.Sprintf("%s:%d", o.Cell, o.Line)
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// holders are the distinct retention paths of the objects alive after the
// last cell, of category cat, made in a cell whose id starts with
// cellPrefix.
func (r *result) holders(cellPrefix, cat string) []string {
	var out []string
	for _, h := range r.Holders {
		if (cat == "" || h.Category == cat) && inCell(h.Site, cellPrefix) && !slices.Contains(out, h.Path) {
			out = append(out, h.Path)
		}
	}
	return out
}

// output is the text of a cell's outputs in the executed notebook: streams,
// text/plain results and displays, and errors.
func (r *result) output(cellID string) string {
	var b strings.Builder
	for _, c := range r.Notebook.Cells {
		if c.ID != cellID {
			continue
		}
		for _, o := range c.Outputs {
			switch o.Type {
			case nbformat.OutputStream:
				b.WriteString(o.Text)
			case nbformat.OutputError:
				fmt.Fprintf(&b, "%s: %s\n", o.EName, o.EValue)
			default:
				if s, ok := o.Data.Text("text/plain"); ok {
					b.WriteString(s)
					b.WriteString("\n")
				}
			}
		}
	}
	return b.String()
}

// decimalBytes is a byte figure in decimal units, as a notebook's own
// arithmetic might print it ("3.09 GB", "512 MB").
var decimalBytes = regexp.MustCompile(`\b[0-9]+(\.[0-9]+)? ?[kKMGTP]B\b`)

// checkUnits fails a notebook whose outputs print memory in decimal
// units: the timeline and the kernel print binary ones (GiB, MiB), and a
// notebook beside them says the same (issue 26: 07 printed GB while the
// page printed GiB).
func (r *result) checkUnits(t *testing.T) {
	t.Helper()
	for _, c := range r.Notebook.Cells {
		if m := decimalBytes.FindString(r.output(c.ID)); m != "" {
			t.Errorf("cell %s prints %q: say GiB, MiB or KiB, as the timeline does", c.ID, m)
		}
	}
}

// inCell reports whether a site string's notebook place is in a cell
// whose id starts with cellPrefix (with ":N " after it, at line N): the
// innermost notebook frame, where a helper allocated, not the lines that
// called it, which a site string names first ("cell b:2 → cell a:3 (f)
// ← ...").
func inCell(site, cellPrefix string) bool {
	return strings.HasPrefix(innermost(site), "cell "+cellPrefix)
}

// innermost drops the calling lines from a site string: "cell b:2 →
// cell a:3 (f) ← go frames" reads "cell a:3 ← go frames".
func innermost(site string) string {
	head, tail := site, ""
	if i := strings.Index(site, " ← "); i >= 0 {
		head, tail = site[:i], site[i:]
	}
	if j := strings.LastIndex(head, " → "); j >= 0 {
		head = head[j+len(" → "):]
		if k := strings.Index(head, " ("); k >= 0 {
			head = head[:k]
		}
	}
	return head + tail
}

// duplicates is the blocks allocated by the analyzer's duplicate families
// of category cat (all when "") whose site is in a cell starting with
// cellPrefix.
func (r *result) duplicates(cellPrefix, cat string) (allocs int) {
	for _, d := range r.duplicateFamilies(cellPrefix, cat) {
		allocs += int(d.Count)
	}
	return allocs
}

// duplicateFamilies are those families themselves.
func (r *result) duplicateFamilies(cellPrefix, cat string) []analyze.Duplicate {
	var out []analyze.Duplicate
	for _, d := range r.Report.Duplicates {
		if inCell(d.Site, cellPrefix) && (cat == "" || d.Category == cat) {
			out = append(out, d)
		}
	}
	return out
}

// allocs is the allocations (count and bytes) of category cat made in
// cells starting with cellPrefix, from the report's per-site totals.
func (r *result) allocs(cellPrefix, cat string) (count int, bytes uint64) {
	for _, s := range r.Report.Sites {
		if inCell(s.Site, cellPrefix) && s.Category == cat {
			count += int(s.Allocs)
			bytes += s.AllocBytes
		}
	}
	return count, bytes
}

// cellPeak is the most allocated bytes while any cell starting with
// cellPrefix ran.
func (r *result) cellPeak(cellPrefix string) uint64 {
	var p uint64
	for id, m := range r.Cells {
		if strings.HasPrefix(id, cellPrefix) {
			p = max(p, m.Peak)
		}
	}
	return p
}

// line is the 1-based line of the committed cell cellID whose text
// contains substr (0 when none does): where a test expects a site.
func (r *result) line(t *testing.T, cellID, substr string) int {
	t.Helper()
	for _, c := range r.Notebook.Cells {
		if c.ID != cellID {
			continue
		}
		for i, l := range strings.Split(c.Source, "\n") {
			if strings.Contains(l, substr) {
				return i + 1
			}
		}
	}
	t.Fatalf("no line of cell %s contains %q", cellID, substr)
	return 0
}

func itoa(n int) string { return fmt.Sprint(n) }

// constant is the integer a top-level assignment "NAME = 123" in cell
// cellID of the notebook sets, so a test computes its expected figures
// from the loop the notebook really runs.
func (r *result) constant(t *testing.T, cellID, name string) int {
	t.Helper()
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `\s*=\s*([0-9_]+)\b`)
	for _, c := range r.Notebook.Cells {
		if c.ID != cellID {
			continue
		}
		if m := re.FindStringSubmatch(c.Source); m != nil {
			n, err := strconv.Atoi(strings.ReplaceAll(m[1], "_", ""))
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("cell %s sets no %s = <int>", cellID, name)
	return 0
}

// rounded is a request's size as the caching allocator hands it out.
func rounded(n uint64) uint64 {
	return (n + alloc.MinBlockSize - 1) / alloc.MinBlockSize * alloc.MinBlockSize
}

// The helpers below (notebooks 04, 05 and 07) give the analyzer's verdict
// at a point of the run (the end of a cell, a mark, the OOM), as the live
// findings panel showed it then.

// point matches an event of a trace; it sees every event from the first,
// in order, so it may keep state.
type point func(f *timeline.File, e event.Event) bool

// cellStart is the scope_begin of the cell with this id.
func cellStart(id string) point {
	return func(f *timeline.File, e event.Event) bool {
		return e.Kind == event.KindScopeBegin && e.Expect == event.ScopeCell && f.String(e.Label) == id
	}
}

// cellEnd is the scope_end of the cell with this id.
func cellEnd(id string) point {
	var scope uint64
	return func(f *timeline.File, e event.Event) bool {
		switch {
		case e.Kind == event.KindScopeBegin && e.Expect == event.ScopeCell && f.String(e.Label) == id:
			scope = e.Addr
		case e.Kind == event.KindScopeEnd && scope != 0 && e.Addr == scope:
			return true
		}
		return false
	}
}

// markAt is the mark with this text.
func markAt(text string) point {
	return func(f *timeline.File, e event.Event) bool {
		return e.Kind == event.KindMark && f.String(e.Label) == text
	}
}

// firstOf is the first event of kind k.
func firstOf(k event.Kind) point {
	return func(_ *timeline.File, e event.Event) bool { return e.Kind == k }
}

var errStopReplay = errors.New("stop replay")

// window feeds a fresh analyzer the trace's events from the first one
// from matches (nil: the first event) up to and including the first one
// after it that to matches (nil: the last event), and returns its report.
// A window that starts mid-trace knows nothing of the blocks and segments
// made before it (their frees count as anomalies; allocated and reserved
// start at zero), but it starts with the latest readings of the counters
// (the device's own view of memory in use, the Go heap), as a live
// stream joining late would.
func (r *result) window(t *testing.T, from, to point) *analyze.Report {
	t.Helper()
	f, err := timeline.OpenFile(r.TracePath)
	if err != nil {
		t.Fatal(err)
	}
	a := analyze.New(analyze.Options{Names: f})
	started, ended := from == nil, false
	counters := map[event.StringID]event.Event{}
	var order []event.StringID
	err = f.Replay(func(e event.Event) error {
		if !started && e.Kind == event.KindCounter {
			if _, ok := counters[e.Label]; !ok {
				order = append(order, e.Label)
			}
			counters[e.Label] = e
		}
		if !started && from(f, e) {
			started = true
			for i, id := range order {
				c := counters[id]
				c.Seq, c.Time = e.Seq-uint64(len(order)-i), e.Time
				a.Add(c)
			}
		}
		end := to != nil && to(f, e)
		if started {
			a.Add(e)
			if end {
				ended = true
				return errStopReplay
			}
		}
		return nil
	})
	if err != nil && !errors.Is(err, errStopReplay) {
		t.Fatal(err)
	}
	if !started || (to != nil && !ended) {
		t.Fatalf("trace %s: window not found (started %t, ended %t)", r.TracePath, started, ended)
	}
	return a.Report(f)
}

// liveAt is the live blocks and bytes of category cat at the sites in
// cells whose "id:line" starts with cellPrefix, in a report.
func liveAt(rep *analyze.Report, cellPrefix, cat string) (count, bytes uint64) {
	for _, s := range rep.Sites {
		if inCell(s.Site, cellPrefix) && s.Category == cat {
			count += s.LiveCount
			bytes += s.LiveBytes
		}
	}
	return count, bytes
}

// growthAt is the report's growth verdict for category cat at a site in
// a cell starting with cellPrefix.
func growthAt(rep *analyze.Report, cellPrefix, cat string) (analyze.Growth, bool) {
	for _, g := range rep.Growth {
		if g.Site != "" && inCell(g.Site, cellPrefix) && g.Category == cat {
			return g, true
		}
	}
	return analyze.Growth{}, false
}

// categoryLive is the live blocks and bytes of a category in a report.
func categoryLive(rep *analyze.Report, cat string) (count, bytes uint64) {
	for _, c := range rep.Categories {
		if c.Category == cat {
			return c.LiveCount, c.LiveBytes
		}
	}
	return 0, 0
}

// cellSource is the source of the committed notebook's cell id (the
// executed notebook keeps the sources).
func cellSource(t *testing.T, r *result, id string) string {
	t.Helper()
	for _, c := range r.Notebook.Cells {
		if c.ID == id {
			return c.Source
		}
	}
	t.Fatalf("no cell %q", id)
	return ""
}

// lineOf is the 1-based line of the cell's source that contains s (the
// first such line).
func lineOf(t *testing.T, r *result, cellID, s string) int {
	t.Helper()
	for i, l := range strings.Split(cellSource(t, r, cellID), "\n") {
		if strings.Contains(l, s) {
			return i + 1
		}
	}
	t.Fatalf("cell %s has no line with %q", cellID, s)
	return 0
}
