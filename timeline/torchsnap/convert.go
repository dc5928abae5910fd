package torchsnap

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"linger/internal/units"
	"linger/timeline"
	"linger/timeline/event"
)

// ImportOptions direct Import.
type ImportOptions struct {
	// Device picks the device whose trace is imported; -1 (or a device
	// with no trace) takes the first trace read.
	Device int
	// Progress, if set, is called now and then with the bytes of the
	// snapshot read so far.
	Progress func(read int64)
	// Rules categorize the blocks and tell the user's frames from the
	// libraries'; nil is DefaultRules.
	Rules *RuleSet
	// Step names the steps: an annotation's name (a record_function
	// range; a path.Match pattern such as "ProfilerStep#*" names them
	// all) or a function of the user's frames ("forward", "generate").
	// "" takes the annotation recorded most often, if any; "none" makes
	// no steps.
	Step string
	// DeviceMemory, if set, is the device's total memory (the GPU's, as
	// torch.cuda.mem_get_info's second figure), which a snapshot never
	// records. With it, each oom entry's device_free says what the device
	// used then (DeviceMemory less device_free), and what of that the
	// allocator had not reserved is memory outside it (the CUDA context,
	// other processes, NCCL): a segment of event.PoolOutside from that
	// oom on, resized at the next (docs/pytorch.md).
	DeviceMemory uint64
}

// Imported is what Import read and wrote.
type Imported struct {
	Snapshot *Snapshot
	// Device is the device imported; Events the events written.
	Device int
	Events uint64
	// PreHistory is how many blocks and segments were alive before the
	// first trace entry (the snapshot's max_entries dropped the older
	// ones), written at the trace's start; 0 when the history is whole.
	PreHistory int
	// Other says, per other device with a trace, how many entries were
	// not imported.
	Other map[int]int
	// Truncated is why the snapshot ended early ("" when it did not).
	Truncated string
	// Steps are the trace's steps, in order, and StepsFrom what made
	// them ("annotation ProfilerStep#*", "frame forward"); NoSteps says,
	// when there are none, what the verdicts that need them would need.
	Steps     []StepSummary
	StepsFrom string
	NoSteps   string
	// OOMs are the oom entries' figures, in order.
	OOMs []OOMSummary
	// Categories are the blocks allocated (in the trace and before it)
	// by category; Unmatched the sites whose blocks no rule matched
	// (category other), most bytes first, the first ten.
	Categories map[event.Category]Count
	Unmatched  []SiteCount
}

// LabelOutside labels the segment of memory outside the allocator an
// import makes from an oom entry's device_free (ImportOptions.DeviceMemory).
const LabelOutside = "outside the allocator, as the OOM saw it: the device's memory (--device-memory) less device_free and what the allocator reserved"

// outsideAddr is that segment's address: past any a CUDA device maps.
const outsideAddr = 0xFFFF_FFFF_0000_0000

// OOMSummary is an oom entry: what was asked for, the device's free
// bytes then, what the allocator had reserved and, with
// ImportOptions.DeviceMemory, what the device used and what of it was
// outside the allocator (0 without it).
type OOMSummary struct {
	TimeNS              int64
	Size, DeviceFree    uint64
	Reserved            uint64
	DeviceUsed, Outside uint64
}

// StepSummary is what one step allocated and what of it outlived it.
type StepSummary struct {
	Label string
	// BeginNS and EndNS are its begin and end, nanoseconds from the
	// trace's start.
	BeginNS, EndNS int64
	// Allocated is what it allocated; LeftAlive what of that was alive
	// when it ended; AliveAtEnd what was still alive at the trace's end.
	Allocated, LeftAlive, AliveAtEnd Count
}

// Count is a number of blocks and their bytes.
type Count struct {
	Blocks int
	Bytes  uint64
}

func (c *Count) add(size uint64) { c.Blocks++; c.Bytes += size }
func (c *Count) sub(size uint64) { c.Blocks--; c.Bytes -= size }

// SiteCount is a site and its blocks.
type SiteCount struct {
	Site string
	Count
}

// Import reads the snapshot open opens and writes it to the trace file out as
// Linger events, one device's trace (ImportOptions.Device): each alloc a
// block with its stack as its site, each free_requested its free (the
// program let go of it; free_completed, when the allocator could reuse
// it, follows), segments as segments, an oom with the device's free bytes,
// a snapshot entry as a mark. Times are the entries' time_us from the
// first. What was alive before the first entry (a ring buffer that
// wrapped: blocks freed that the trace never allocated, blocks and
// segments alive at the end that it never allocated either) is
// allocated at the trace's start, marked as history that starts late.
//
// The trace is written once, streamed: the entries go to a temporary file
// beside out, then the start and the entries to out, so memory stays
// bounded by the blocks alive at a time, not by the trace's length.
func Import(open func() (io.ReadCloser, error), out string, opts ImportOptions) (*Imported, error) {
	res, want, err := importTrace(open, out, opts, 0)
	if err == nil && want > 0 {
		// The device asked for was not the first trace read, which is
		// the one a pass imports until it knows the devices: a second
		// pass takes it.
		res, _, err = importTrace(open, out, opts, want)
	}
	return res, err
}

// importTrace is one pass of Import, importing the trace read trace'th
// (Read's index). want is the index of the trace of the device asked
// for, when it is another.
func importTrace(open func() (io.ReadCloser, error), out string, opts ImportOptions, trace int) (*Imported, int, error) {
	r, err := open()
	if err != nil {
		return nil, 0, fmt.Errorf("import: %w", err)
	}
	defer r.Close()
	tmp, err := os.CreateTemp(filepath.Dir(out), ".~"+filepath.Base(out)+".*.tmp")
	if err != nil {
		return nil, 0, fmt.Errorf("import: %w", err)
	}
	tmpPath := tmp.Name()
	tmp.Close()
	defer os.Remove(tmpPath)
	body, err := timeline.Create(tmpPath)
	if err != nil {
		return nil, 0, err
	}
	c := newConverter(body, opts.Rules)
	chosen := -1 // the trace (Read's index) imported, once it comes
	others := map[int]int{}
	snap, rerr := Read(r, func(t int, e *Entry) error {
		if chosen < 0 && t >= trace {
			chosen = t
		}
		if t != chosen {
			others[t]++
			return nil
		}
		return c.entry(e)
	}, Options{Progress: opts.Progress})
	if snap == nil {
		body.Close()
		return nil, 0, rerr
	}
	res := &Imported{Snapshot: snap, Device: -1, Other: map[int]int{}}
	if rerr != nil {
		if !errors.Is(rerr, io.ErrUnexpectedEOF) && !isTruncated(rerr) {
			body.Close()
			return nil, 0, rerr
		}
		res.Truncated = rerr.Error()
	}
	if opts.Device >= 0 && (chosen < 0 || snap.Devices[chosen] != opts.Device) {
		body.Close()
		if t := slices.Index(snap.Devices, opts.Device); t >= 0 && trace == 0 {
			return nil, t, nil
		}
		return nil, 0, fmt.Errorf("import: the snapshot has no trace of device %d (its traces are of devices %v)", opts.Device, snap.Devices)
	}
	if chosen >= 0 && snap.Devices[chosen] == HostTrace {
		body.Close()
		return nil, 0, fmt.Errorf("import: the snapshot's only trace with entries is of host (pinned) memory, which this version does not import")
	}
	if chosen >= 0 {
		res.Device = snap.Devices[chosen]
		for t, n := range others {
			if snap.Devices[t] != HostTrace {
				res.Other[snap.Devices[t]] = n
			}
		}
	}
	if err := body.Close(); err != nil {
		return nil, 0, err
	}
	// What was alive at the end and never allocated in the trace was
	// there before it began.
	for _, s := range snap.Segments {
		if res.Device < 0 || s.Device != res.Device {
			continue // no trace, or another device's segment
		}
		c.atEnd(s)
	}
	var annotations []Annotation
	for _, a := range snap.Annotations {
		if a.Device == res.Device || a.Device < 0 {
			annotations = append(annotations, a)
		}
	}
	steps, err := c.steps(opts.Step, annotations)
	if err != nil {
		return nil, 0, err
	}
	c.deviceMemory = opts.DeviceMemory
	n, pre, err := c.write(out, tmpPath, res.Truncated, steps, res)
	if err != nil {
		return nil, 0, err
	}
	res.Events, res.PreHistory = n, pre
	return res, 0, nil
}

func isTruncated(err error) bool {
	return strings.Contains(err.Error(), "cut short")
}

// block is a block or segment the converter knows alive.
type block struct {
	size     uint64
	category event.Category
	site     event.SiteID
	label    event.StringID
}

// converter turns trace entries into events, written to body with
// sequence numbers from 1, and gathers what the trace shows was alive
// before it began. The strings and sites the events name are kept in
// defs, not written to body: write puts them before the events, and
// body, read back, is then events alone (no reader's copy of every
// stack).
type converter struct {
	body    *timeline.Writer
	rules   *RuleSet
	seq     uint64
	t0      int64 // the first entry's time_us
	last    int64 // the latest event's time, ns
	started bool

	strings map[string]event.StringID
	sites   map[string]event.SiteID
	// frameIDs numbers the distinct frames, which a stack's key in sites
	// names (4 bytes a frame, not its text).
	frameIDs map[Frame]uint32
	key      []byte
	// bySlice finds a stack's site by its frames' slice: the reader gives
	// one slice per stack PyTorch shared, so the key is built once.
	bySlice map[*Frame]siteInfo
	defs    []any // definitions made, to write again before the start
	// entryRules says the rules read entries' metadata or compile
	// context; byEntry keeps what EntryMatches said of each pair seen.
	entryRules bool
	byEntry    map[[2]string]uint64
	// deviceMemory is ImportOptions.DeviceMemory.
	deviceMemory uint64

	alive    map[uint64]block // blocks alive now, by address
	segs     map[uint64]block // segments alive now
	seen     map[uint64]bool  // addresses the trace allocated, block or segment
	preBlock map[uint64]block // blocks alive before the first entry
	preSeg   map[uint64]block // segments alive before it
	freed    map[uint64]bool  // blocks whose free was requested and not yet completed
	mapped   []rng            // the ranges of expandable segments mapped in the trace and not unmapped, sorted
}

// rng is a range of addresses, [lo, hi).
type rng struct{ lo, hi uint64 }

// addRange adds r to the sorted, disjoint ranges rs, merging.
func addRange(rs []rng, r rng) []rng {
	out := make([]rng, 0, len(rs)+1)
	for _, x := range rs {
		switch {
		case x.hi < r.lo || x.lo > r.hi:
			out = append(out, x)
		default:
			r = rng{min(r.lo, x.lo), max(r.hi, x.hi)}
		}
	}
	out = append(out, r)
	slices.SortFunc(out, func(a, b rng) int { return cmp.Compare(a.lo, b.lo) })
	return out
}

// removeRange removes r from rs and says how many of its bytes rs held.
func removeRange(rs []rng, r rng) ([]rng, uint64) {
	var out []rng
	var held uint64
	for _, x := range rs {
		lo, hi := max(x.lo, r.lo), min(x.hi, r.hi)
		if lo >= hi {
			out = append(out, x)
			continue
		}
		held += hi - lo
		if x.lo < lo {
			out = append(out, rng{x.lo, lo})
		}
		if hi < x.hi {
			out = append(out, rng{hi, x.hi})
		}
	}
	return out, held
}

// overlap is how many bytes of r the ranges rs hold.
func overlap(rs []rng, r rng) uint64 {
	var n uint64
	for _, x := range rs {
		if lo, hi := max(x.lo, r.lo), min(x.hi, r.hi); lo < hi {
			n += hi - lo
		}
	}
	return n
}

// ImportMarker is the first string every import defines (ID 1), used by
// no event: what tells an import from a trace a kernel, linger generate
// or linger watch wrote (IsImport).
const ImportMarker = "linger: imported from a PyTorch memory snapshot"

// IsImport reports whether the trace at path is an import of a PyTorch
// snapshot: its first string is ImportMarker. A watched directory's
// import of a snapshot replaces only such a trace of the same name.
func IsImport(path string) bool {
	r, err := timeline.OpenRegular(path)
	if err != nil {
		return false
	}
	defer r.Close()
	r.ReadEvent() // the definitions before the first event, or all of them
	return r.String(1) == ImportMarker
}

func newConverter(body *timeline.Writer, rules *RuleSet) *converter {
	if rules == nil {
		rules = DefaultRules()
	}
	c := &converter{body: body, rules: rules, strings: map[string]event.StringID{}, sites: map[string]event.SiteID{}, frameIDs: map[Frame]uint32{}, bySlice: map[*Frame]siteInfo{},
		entryRules: len(rules.entryRules()) > 0, byEntry: map[[2]string]uint64{},
		alive: map[uint64]block{}, segs: map[uint64]block{}, seen: map[uint64]bool{},
		preBlock: map[uint64]block{}, preSeg: map[uint64]block{}, freed: map[uint64]bool{}}
	c.str(ImportMarker)
	return c
}

func (c *converter) str(s string) event.StringID {
	if s == "" {
		return 0
	}
	if id, ok := c.strings[s]; ok {
		return id
	}
	id := event.StringID(len(c.strings) + 1)
	c.strings[s] = id
	c.defs = append(c.defs, timeline.StringDef{ID: id, Text: s}) // written once, by write; the body is events only
	return id
}

// entryMatches is the rules' EntryMatches of an alloc entry, worked out
// once per pair of metadata and compile context.
func (c *converter) entryMatches(e *Entry) uint64 {
	if e.UserMetadata == "" && (e.CompileContext == "" || e.CompileContext == "N/A") {
		return 0
	}
	k := [2]string{e.UserMetadata, e.CompileContext}
	m, ok := c.byEntry[k]
	if !ok {
		m = c.rules.EntryMatches(e.UserMetadata, e.CompileContext)
		if len(c.byEntry) >= 1<<12 {
			clear(c.byEntry)
		}
		c.byEntry[k] = m
	}
	return m
}

// siteInfo is what a stack gives a block: its site, category and label.
type siteInfo struct {
	site     event.SiteID
	category event.Category
	label    event.StringID
	n        int
}

// stack returns the site, category and label of a stack, worked out once
// per slice of frames.
func (c *converter) stack(frames []Frame) siteInfo {
	if len(frames) == 0 {
		return siteInfo{category: event.CategoryOther}
	}
	if si, ok := c.bySlice[&frames[0]]; ok && si.n == len(frames) {
		return si
	}
	cat, _ := c.rules.Categorize(frames, Context{})
	si := siteInfo{site: c.site(frames), category: cat, label: c.str(c.rules.label(frames)), n: len(frames)}
	if len(c.bySlice) >= 1<<16 {
		clear(c.bySlice)
	}
	c.bySlice[&frames[0]] = si
	return si
}

// site interns a stack as a site: its frames innermost first, as PyTorch
// gives them, and the user's own frames among them, outermost first, as
// its Stack (what names it: event.Site).
func (c *converter) site(frames []Frame) event.SiteID {
	if len(frames) == 0 {
		return 0
	}
	c.key = c.key[:0]
	for _, f := range frames {
		id, ok := c.frameIDs[f]
		if !ok {
			id = uint32(len(c.frameIDs))
			c.frameIDs[f] = id
		}
		c.key = binary.LittleEndian.AppendUint32(c.key, id)
	}
	if id, ok := c.sites[string(c.key)]; ok {
		return id
	}
	id := event.SiteID(len(c.sites) + 1)
	c.sites[string(c.key)] = id
	s := event.Site{Frames: make([]event.Frame, len(frames))}
	for i, f := range frames {
		s.Frames[i] = event.Frame{Func: f.Name, File: f.Filename, Line: f.Line}
	}
	if user := c.rules.UserFrames(frames); len(user) > 0 {
		s.Stack = make([]event.Frame, len(user))
		for i, f := range user {
			s.Stack[i] = event.Frame{Func: f.Name, File: f.Filename, Line: f.Line}
		}
	}
	c.defs = append(c.defs, timeline.SiteDef{ID: id, Site: s})
	return id
}

func (c *converter) emit(e event.Event, timeUS int64) {
	if !c.started {
		c.t0, c.started = timeUS, true
	}
	t := (timeUS-c.t0)*1000 + 1 // the history before the first entry is at 0
	if t < c.last {
		t = c.last // entries of several streams can be a little out of order
	}
	c.last = t
	c.seq++
	e.Seq, e.Time = c.seq, t
	c.body.Emit(e)
}

func (c *converter) entry(e *Entry) error {
	switch e.Action {
	case "alloc":
		if old, ok := c.alive[e.Addr]; ok { // its free fell out of the ring
			c.emit(event.Event{Kind: event.KindFree, Addr: e.Addr, Size: old.size, Category: old.category}, e.TimeUS)
		}
		si := c.stack(e.Frames)
		b := block{size: e.Size, category: si.category, site: si.site, label: si.label}
		var entry uint64 // which rules over metadata and compile context match
		if c.entryRules {
			entry = c.entryMatches(e)
			if entry != 0 {
				b.category, _ = c.rules.Categorize(e.Frames, Context{Entry: entry})
			}
		}
		c.alive[e.Addr] = b
		c.seen[e.Addr] = true
		delete(c.freed, e.Addr)
		// Extra carries entry to the second pass (write), which may
		// categorize the block again with the annotations open, and
		// clears it.
		c.emit(event.Event{Kind: event.KindAlloc, Addr: e.Addr, Size: e.Size, Requested: e.Size, Category: b.category, Site: b.site, Label: b.label, Extra: entry}, e.TimeUS)
	case "free_requested", "free_completed":
		if e.Action == "free_completed" && c.freed[e.Addr] {
			delete(c.freed, e.Addr)
			return nil
		}
		b, ok := c.alive[e.Addr]
		if !ok {
			if c.seen[e.Addr] {
				return nil // freed already
			}
			// Allocated before the first entry.
			si := c.stack(e.Frames)
			b = block{size: e.Size, category: si.category, site: si.site, label: si.label}
			c.preBlock[e.Addr] = b
			c.seen[e.Addr] = true
		}
		delete(c.alive, e.Addr)
		if e.Action == "free_requested" {
			c.freed[e.Addr] = true
		}
		c.emit(event.Event{Kind: event.KindFree, Addr: e.Addr, Size: b.size, Category: b.category}, e.TimeUS)
	case "segment_map":
		// Expandable segments map and unmap ranges of pages: an unmap
		// may span several maps, or part of one. Reserved memory follows
		// the bytes of each entry; the ranges say what was mapped before
		// the trace began (memory_viz's map_segment/unmap_segment).
		c.mapped = addRange(c.mapped, rng{e.Addr, e.Addr + e.Size})
		c.emit(event.Event{Kind: event.KindSegmentAlloc, Addr: e.Addr, Size: e.Size, Extra: pool(e.Size), Site: c.stack(e.Frames).site, Label: c.str(event.LabelExpandable)}, e.TimeUS)
	case "segment_unmap":
		var inTrace uint64
		c.mapped, inTrace = removeRange(c.mapped, rng{e.Addr, e.Addr + e.Size})
		if before := e.Size - inTrace; before > 0 {
			c.preSeg[e.Addr] = block{size: c.preSeg[e.Addr].size + before, label: c.str(event.LabelExpandable)}
		}
		c.emit(event.Event{Kind: event.KindSegmentFree, Addr: e.Addr, Size: e.Size, Extra: pool(e.Size), Label: c.str(event.LabelExpandable)}, e.TimeUS)
	case "segment_alloc":
		b := block{size: e.Size, site: c.stack(e.Frames).site}
		c.segs[e.Addr] = b
		c.seen[e.Addr|1<<63] = true
		c.emit(event.Event{Kind: event.KindSegmentAlloc, Addr: e.Addr, Size: e.Size, Extra: pool(e.Size), Site: b.site}, e.TimeUS)
	case "segment_free":
		b, ok := c.segs[e.Addr]
		if !ok && !c.seen[e.Addr|1<<63] {
			b = block{size: e.Size}
			c.preSeg[e.Addr] = b
			c.seen[e.Addr|1<<63] = true
		}
		delete(c.segs, e.Addr)
		c.emit(event.Event{Kind: event.KindSegmentFree, Addr: e.Addr, Size: b.size, Extra: pool(b.size)}, e.TimeUS)
	case "oom":
		free := e.DeviceFree
		if !e.HasDeviceFree {
			free = e.Addr
		}
		si := c.stack(e.Frames)
		c.emit(event.Event{Kind: event.KindOOM, Size: e.Size, Requested: e.Size, Category: si.category, Site: si.site, Extra: free}, e.TimeUS)
	case "snapshot":
		c.emit(event.Event{Kind: event.KindMark, Label: c.str("snapshot")}, e.TimeUS)
	default:
		// An action of a later PyTorch: skipped, as its fields are.
	}
	return nil
}

// pool is the pool of a segment of size bytes: PyTorch's small pool takes
// segments of 2 MiB (kSmallBuffer), the large pool anything else.
func pool(size uint64) uint64 {
	if size == 2<<20 {
		return event.PoolSmall
	}
	return event.PoolLarge
}

// atEnd takes a segment as the snapshot saw it at dump time: it and its
// allocated blocks that the trace never allocated were there before it.
func (c *converter) atEnd(s Segment) {
	if s.Expandable {
		// Whatever of it the trace did not map was mapped before.
		if inTrace := overlap(c.mapped, rng{s.Address, s.Address + s.TotalSize}); inTrace < s.TotalSize {
			c.preSeg[s.Address] = block{size: c.preSeg[s.Address].size + s.TotalSize - inTrace, site: c.site(s.Frames), label: c.str(event.LabelExpandable)}
		}
	} else if !c.seen[s.Address|1<<63] {
		c.preSeg[s.Address] = block{size: s.TotalSize, site: c.site(s.Frames)}
	}
	for _, b := range s.Blocks {
		if b.State != "active_allocated" {
			continue // a block pending free was let go by the program (memory_viz counts only allocated ones)
		}
		if !c.seen[b.Address] {
			si := c.stack(b.Frames)
			c.preBlock[b.Address] = block{size: b.Size, category: si.category, site: si.site, label: si.label}
		}
	}
}

// write writes out: the definitions, what was alive before the first
// entry (at time 0, with a mark saying the history starts late), then
// the entries' events from the temporary trace, renumbered after them,
// with the steps as scopes around them (see stepper), and the blocks
// allocated under annotations categorized again when a rule needs them.
func (c *converter) write(out, tmp, truncated string, steps *stepper, res *Imported) (uint64, int, error) {
	// Written beside out under a hidden name, renamed into place once
	// whole: a file already at out is kept if the import fails.
	part, err := os.CreateTemp(filepath.Dir(out), ".~"+filepath.Base(out)+".*.part")
	if err != nil {
		return 0, 0, fmt.Errorf("import: %w", err)
	}
	// A trace as os.Create would have made it, readable by the others
	// sharing the directory (CreateTemp's is the owner's alone).
	err = part.Chmod(0o644)
	part.Close()
	if err != nil {
		os.Remove(part.Name())
		return 0, 0, fmt.Errorf("import: %w", err)
	}
	w, err := timeline.Create(part.Name())
	if err != nil {
		os.Remove(part.Name())
		return 0, 0, err
	}
	fail := func(err error) (uint64, int, error) {
		w.Close()
		os.Remove(part.Name())
		return 0, 0, err
	}
	for _, d := range c.defs {
		switch d := d.(type) {
		case timeline.StringDef:
			w.DefineString(d.ID, d.Text)
		case timeline.SiteDef:
			w.DefineSite(d.ID, d.Site)
		}
	}
	nextString := event.StringID(len(c.strings))
	define := func(s string) event.StringID {
		nextString++
		w.DefineString(nextString, s)
		return nextString
	}
	tally := newTally(c)
	var seq uint64
	// What the allocator has reserved, and the memory outside it that
	// the last oom's device_free showed (with deviceMemory).
	var reserved, outside uint64
	track := func(e *event.Event) {
		switch {
		case e.Kind == event.KindSegmentAlloc && e.Extra != event.PoolOutside:
			reserved += e.Size
		case e.Kind == event.KindSegmentFree && e.Extra != event.PoolOutside:
			reserved -= min(e.Size, reserved)
		}
	}
	pre := len(c.preSeg) + len(c.preBlock)
	if pre > 0 {
		seq++
		w.Emit(event.Event{Seq: seq, Kind: event.KindMark, Label: define("history starts late: the snapshot's trace had dropped its oldest entries (max_entries); what was alive before its first entry is allocated here")})
		for _, a := range slices.Sorted(maps.Keys(c.preSeg)) {
			b := c.preSeg[a]
			seq++
			e := event.Event{Seq: seq, Kind: event.KindSegmentAlloc, Addr: a, Size: b.size, Extra: pool(b.size), Site: b.site, Label: b.label}
			track(&e)
			w.Emit(e)
		}
		for _, a := range slices.Sorted(maps.Keys(c.preBlock)) {
			b := c.preBlock[a]
			seq++
			e := event.Event{Seq: seq, Kind: event.KindAlloc, Addr: a, Size: b.size, Requested: b.size, Category: b.category, Site: b.site, Label: b.label}
			tally.alloc(&e, nil)
			w.Emit(e)
		}
	}
	emit := func(e event.Event) {
		seq++
		e.Seq = seq
		track(&e)
		w.Emit(e)
	}
	var outsideLabel event.StringID
	if steps.none != "" {
		emit(event.Event{Kind: event.KindMark, Label: define(steps.none)})
	}
	steps.define, steps.emit, steps.onEnd = define, emit, tally.stepEnded
	r, err := timeline.Open(tmp)
	if err != nil {
		return fail(err)
	}
	defer r.Close()
	var last int64
	for {
		e, err := r.ReadEvent()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fail(fmt.Errorf("import: read back: %w", err))
		}
		steps.before(&e)
		switch e.Kind {
		case event.KindAlloc:
			tally.alloc(&e, steps)
			if id, _ := steps.current(); id != 0 {
				e.Scope = id
				if e.Category != event.CategoryWeights && e.Category != event.CategoryKVCache {
					// Weights and KV caches are meant to outlive a step
					// (a cache that grows is growth); the rest is the
					// step's own, or handed to the next one.
					e.Expect = event.ScopeStep
				}
			}
		case event.KindFree:
			tally.free(&e)
		case event.KindOOM:
			if id, _ := steps.current(); id != 0 {
				e.Scope = id
			}
			free := e.OOMView().Free()
			o := OOMSummary{TimeNS: e.Time, Size: e.Size, DeviceFree: free, Reserved: reserved}
			if c.deviceMemory > 0 {
				if free > c.deviceMemory || c.deviceMemory-free < reserved {
					return fail(fmt.Errorf("import: the device's memory of %s (--device-memory) is less than the free bytes (%s) and the allocator's reserved bytes (%s) at an out-of-memory entry: give the card's total memory",
						units.Format(c.deviceMemory), units.Format(free), units.Format(reserved)))
				}
				o.DeviceUsed = c.deviceMemory - free
				o.Outside = o.DeviceUsed - reserved
				if o.Outside != outside {
					// Outside the allocator: what the device used less
					// what the allocator reserved, as the oom saw it.
					if outside > 0 {
						emit(event.Event{Kind: event.KindSegmentFree, Time: e.Time, Addr: outsideAddr, Size: outside, Extra: event.PoolOutside, Label: outsideLabel})
					}
					if o.Outside > 0 {
						if outsideLabel == 0 {
							outsideLabel = define(LabelOutside)
						}
						emit(event.Event{Kind: event.KindSegmentAlloc, Time: e.Time, Addr: outsideAddr, Size: o.Outside, Extra: event.PoolOutside, Label: outsideLabel})
					}
					outside = o.Outside
				}
			}
			res.OOMs = append(res.OOMs, o)
		}
		last = e.Time
		emit(e)
	}
	steps.finish(last)
	res.Steps, res.StepsFrom, res.NoSteps = tally.steps(steps), steps.from, steps.none
	res.Categories, res.Unmatched = tally.cats, tally.unmatched()
	if truncated != "" {
		err = w.CloseWithReason("snapshot cut short: " + truncated)
	} else {
		err = w.Close()
	}
	if err == nil {
		err = os.Rename(part.Name(), out)
	}
	if err != nil {
		os.Remove(part.Name())
		return 0, 0, err
	}
	return seq, pre, nil
}
