package export

import (
	"cmp"
	"fmt"
	"io"
	"slices"

	"github.com/google/pprof/profile"

	"linger/timeline/analyze"
	"linger/timeline/event"
)

// Pprof writes a heap profile (gzipped protobuf, as runtime/pprof writes
// them) of tr at the instant at, for go tool pprof. Sample types are
// alloc_objects/count and alloc_space/bytes (everything allocated up to
// the instant) and inuse_objects/count and inuse_space/bytes (what is alive
// at it, in allocated, rounded bytes); inuse_space is the default. There
// is one sample per site, label and category, labelled "category" and
// "label". A sample's stack is the site: its notebook frames first,
// innermost first (locations are leaf first), each a function in file
// "cell:<id>": for a cell's top level, named as the page names the cell
// ("In [4], cell 8"; analyze.CellNames), its system name "cell <id>";
// else the Starlark function's name; then the Go frames, innermost first. A helper defined
// in one cell and called from another has the helper's line as the leaf
// and the calling cell's line below it, above the Go frames. The
// interpreter's own frames are folded into one function, FoldedFunc, the
// root of every stack that had them, unless opts.Frames is FramesAll
// (Fold).
func Pprof(w io.Writer, tr Trace, opts PprofOptions) error {
	p, err := heapProfile(tr, opts)
	if err != nil {
		return fmt.Errorf("pprof export: %w", err)
	}
	if err := p.Write(w); err != nil {
		return fmt.Errorf("pprof export: write: %w", err)
	}
	return nil
}

// PprofOptions configures Pprof.
type PprofOptions struct {
	// At is the instant of the profile; the zero value is the end.
	At At
	// Frames chooses the Go frames of each stack: by default the
	// interpreter's own are folded into one (Fold).
	Frames Frames
}

type heapKey struct {
	site  event.SiteID
	label event.StringID
	cat   event.Category
}

type heapValue struct {
	allocObjects, allocBytes, inuseObjects, inuseBytes int64
}

func heapProfile(tr Trace, opts PprofOptions) (*profile.Profile, error) {
	at := opts.At
	in, err := resolve(tr, at)
	if err != nil {
		return nil, err
	}
	vals, first, cells, err := heapValues(tr, in)
	if err != nil {
		return nil, err
	}
	p := newHeapProfile(at, in, first)
	stacks := newStackBuilder(p, tr, cells, opts.Frames)
	keys := make([]heapKey, 0, len(vals))
	for k := range vals {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b heapKey) int {
		return cmp.Or(cmp.Compare(a.site, b.site), cmp.Compare(a.label, b.label), cmp.Compare(a.cat, b.cat))
	})
	for _, k := range keys {
		v := vals[k]
		labels := map[string][]string{"category": {categoryName(k.cat)}}
		if l := tr.String(k.label); l != "" {
			labels["label"] = []string{l}
		}
		p.Sample = append(p.Sample, &profile.Sample{
			Location: stacks.stack(k.site),
			Value:    []int64{v.allocObjects, v.allocBytes, v.inuseObjects, v.inuseBytes},
			Label:    labels,
		})
	}
	if err := p.CheckValid(); err != nil {
		return nil, fmt.Errorf("build profile: %w", err)
	}
	return p, nil
}

// heapValues replays tr up to the instant in and sums, per site, label and
// category, what was allocated until then and what is alive at it. first
// is the time of the trace's first event, cells the namer of the cells
// run until then.
func heapValues(tr Trace, in instant) (vals map[heapKey]*heapValue, first int64, cells *analyze.CellNames, err error) {
	st := newState(tr)
	var runs analyze.CellRuns
	vals = make(map[heapKey]*heapValue)
	value := func(k heapKey) *heapValue {
		v := vals[k]
		if v == nil {
			v = &heapValue{}
			vals[k] = v
		}
		return v
	}
	started := false
	err = tr.Replay(func(e event.Event) error {
		if e.Seq > in.seq {
			return errStop
		}
		if !started {
			first, started = e.Time, true
		}
		st.apply(e)
		runs.Add(&e)
		if e.Kind == event.KindAlloc {
			v := value(heapKey{e.Site, e.Label, e.Category})
			v.allocObjects++
			v.allocBytes += int64(e.Size)
		}
		return nil
	})
	if err != nil && err != errStop {
		return nil, 0, nil, err
	}
	for _, o := range st.objs {
		// A key of its own only for an object whose category this reader
		// does not know: state files it under CategoryNone.
		v := value(heapKey{o.site, o.label, o.cat})
		v.inuseObjects++
		v.inuseBytes += int64(o.size)
	}
	return vals, first, runs.Names(tr), nil
}

// newHeapProfile returns a profile with the sample types and the one
// mapping of a Linger heap profile, and no samples yet.
func newHeapProfile(at At, in instant, first int64) *profile.Profile {
	p := &profile.Profile{
		SampleType: []*profile.ValueType{
			{Type: "alloc_objects", Unit: "count"},
			{Type: "alloc_space", Unit: "bytes"},
			{Type: "inuse_objects", Unit: "count"},
			{Type: "inuse_space", Unit: "bytes"},
		},
		DefaultSampleType: "inuse_space",
		PeriodType:        &profile.ValueType{Type: "space", Unit: "bytes"},
		Period:            1,
		DurationNanos:     in.time - first,
		Comments:          []string{fmt.Sprintf("linger heap at %s: event %d, %d ns into the trace", at, in.seq, in.time)},
	}
	// One mapping that says symbols are already there, so pprof does not
	// try to symbolize addresses that are not.
	p.Mapping = []*profile.Mapping{{ID: 1, File: "linger", HasFunctions: true, HasFilenames: true, HasLineNumbers: true}}
	return p
}

// stackBuilder turns sites into pprof stacks, adding each function and
// location to the profile once.
type stackBuilder struct {
	p      *profile.Profile
	names  Names
	cells  *analyze.CellNames
	fold   Frames
	fns    map[fnKey]*profile.Function
	locs   map[locKey]*profile.Location
	stacks map[event.SiteID][]*profile.Location
}

type fnKey struct{ name, file string }

type locKey struct {
	fn   fnKey
	line int
}

func newStackBuilder(p *profile.Profile, n Names, cells *analyze.CellNames, fold Frames) *stackBuilder {
	return &stackBuilder{p: p, names: n, cells: cells, fold: fold, fns: make(map[fnKey]*profile.Function),
		locs: make(map[locKey]*profile.Location), stacks: make(map[event.SiteID][]*profile.Location)}
}

// stack is the site's stack: the notebook frames, innermost first, then
// the Go frames, innermost first, the interpreter's own folded into
// FoldedFunc unless b.fold is FramesAll; "unknown" when the site is.
func (b *stackBuilder) stack(id event.SiteID) []*profile.Location {
	if s, ok := b.stacks[id]; ok {
		return s
	}
	var out []*profile.Location
	if s, ok := b.names.Site(id); ok && id != 0 {
		st := s.Starlark()
		for i := len(st) - 1; i >= 0; i-- {
			f := st[i]
			name, system := f.Func, f.Func
			if name == "" || name == "<toplevel>" {
				name, system = b.cells.Cell(f.File, 0), "cell "+f.File
			}
			out = append(out, b.location(name, system, "cell:"+f.File, f.Line))
		}
		kept, folded := Fold(s, b.fold)
		for _, f := range kept {
			out = append(out, b.location(f.Func, f.Func, f.File, f.Line))
		}
		if folded > 0 {
			out = append(out, b.location(FoldedFunc, FoldedFunc, "", 0))
		}
	}
	if len(out) == 0 {
		out = append(out, b.location("unknown", "unknown", "", 0))
	}
	b.stacks[id] = out
	return out
}

// location is the location of line in the function name (as people read
// it; system as the trace has it) of file, added to the profile once.
func (b *stackBuilder) location(name, system, file string, line int) *profile.Location {
	fk := fnKey{name, file}
	fn := b.fns[fk]
	if fn == nil {
		fn = &profile.Function{ID: uint64(len(b.p.Function) + 1), Name: name, SystemName: system, Filename: file}
		b.fns[fk] = fn
		b.p.Function = append(b.p.Function, fn)
	}
	lk := locKey{fk, line}
	loc := b.locs[lk]
	if loc == nil {
		loc = &profile.Location{ID: uint64(len(b.p.Location) + 1), Mapping: b.p.Mapping[0], Line: []profile.Line{{Function: fn, Line: int64(line)}}}
		b.locs[lk] = loc
		b.p.Location = append(b.p.Location, loc)
	}
	return loc
}
