package export

import (
	"cmp"
	"errors"
	"fmt"
	"io"

	"linger/timeline/analyze"
	"linger/timeline/event"
)

// DefaultMaxEntries is how many device trace entries a memory_viz snapshot
// keeps by default: the last ones before the instant, as PyTorch's
// recording ring buffer does.
const DefaultMaxEntries = 1_000_000

// MemvizJSONLimit is the largest snapshot MemvizJSON writes, in bytes:
// memory_viz decodes a file with the browser's TextDecoder, which returns
// nothing for text past 512 MiB, and the viewer then fails to parse it.
// The pickle of the same snapshot is about a twentieth of the size (its
// strings and frames are memoized) and opens. A variable so that tests
// can lower it.
var MemvizJSONLimit int64 = 512 << 20

// ErrTooBig is returned (wrapped) by MemvizJSON when the snapshot would
// pass MemvizJSONLimit. Whatever was written to w by then is a prefix of
// the JSON, never a whole document: callers write to a temporary file and
// drop it.
var ErrTooBig = errors.New("snapshot too big for memory_viz")

// MemvizOptions configures MemvizJSON and MemvizPickle.
type MemvizOptions struct {
	// At is the instant of the snapshot: segments hold what was alive
	// then, and device_traces end there. The zero value is the end.
	At At
	// MaxEntries bounds device_traces to the last entries before At.
	// 0 means DefaultMaxEntries; negative keeps them all.
	MaxEntries int
	// Frames chooses the Go frames of each stack: by default the
	// interpreter's own are folded into one (Fold).
	Frames Frames
}

// snapEncoder is what a snapshot is written to: JSON or pickle.
type snapEncoder interface {
	beginDict()
	key(k string)
	endDict()
	beginList()
	endList()
	str(s string)
	int(v int64)
	uint(v uint64)
	bool(v bool)
	pair(a, b int64)
	// shared writes the list write writes; values with the same key may
	// be written as references to the first.
	shared(key int64, write func())
	// failed is the first write error, so that a long export stops at it.
	failed() error
	close() error
}

// MemvizJSON writes a PyTorch memory snapshot of tr as JSON: the value
// torch.cuda.memory._snapshot() returns, which memory_viz draws:
//
//	{"segments": [{"device", "address", "total_size", "allocated_size",
//	  "active_size", "requested_size", "stream", "segment_type" (small or
//	  large), "segment_pool_id", "is_expandable", "frames", "blocks":
//	  [{"address", "size", "requested_size", "state" (active_allocated or
//	  inactive), "frames", "category", "history" (allocated blocks:
//	  [{"addr", "real_size", "frames"}])}]}],
//	 "device_traces": [[{"action", "addr", "size", "stream", "time_us",
//	  "frames", "category"}]]}
//
// Segments are those of the allocator alive at opts.At, each cut into
// blocks that cover it exactly; memory taken outside the allocator is left
// out. The mapped ranges of an expandable segment (event.LabelExpandable)
// that lie end to end are one segment, is_expandable, as PyTorch lists
// them. Trace actions are alloc, free_requested then free_completed for a
// free, segment_alloc and segment_free (segment_map and segment_unmap for
// an expandable segment's ranges), oom (with device_free instead of addr)
// and a last "snapshot" entry at the instant, as PyTorch records one when
// a snapshot is taken. An allocated block's history is the one entry
// PyTorch 1.13 wrote (its address, requested bytes and frames), which
// 1.13's torch.cuda._memory_viz reads; the current viewer reads the
// block's own frames and requested_size. Frames are the notebook frames first,
// innermost first, each with its cell as filename, named as the page
// names it ("In [4], cell 8"; analyze.CellNames), and its function as
// name ("<toplevel>" for the cell's own code), then Go frames, innermost
// first, the interpreter's own folded into one frame, {"filename":
// "(folded)", "line": 0, "name": "15 interpreter frames"}, unless
// opts.Frames is FramesAll (Fold).
// Every entry and block has a category; segments, free space and
// uncategorized blocks are "unknown", which the viewer needs among the
// categories whenever there are any. Sizes of alloc and free entries are
// requested bytes, as PyTorch records them; blocks have both.
//
// A snapshot that would pass MemvizJSONLimit is refused with ErrTooBig
// and a message naming the pickle, rather than cut: entries beyond
// MaxEntries already go as PyTorch's ring buffer drops them, and cutting
// more would lose the history the pickle keeps whole.
func MemvizJSON(w io.Writer, tr Trace, opts MemvizOptions) error {
	lw := &limitWriter{w: w, left: MemvizJSONLimit}
	if err := memviz(newJSONSnap(lw), tr, opts); err != nil {
		if errors.Is(err, ErrTooBig) {
			return fmt.Errorf("memviz json export: %w: the JSON passes %s, more than memory_viz can open "+
				"(the browser's text decoder returns nothing for a larger file); export the memviz-pickle format instead: "+
				"the same snapshot in a fraction of the size, which memory_viz opens", ErrTooBig, mib(MemvizJSONLimit))
		}
		return fmt.Errorf("memviz json export: %w", err)
	}
	return nil
}

// MemvizJSONSize returns how many bytes MemvizJSON would write for tr
// under opts, whatever MemvizJSONLimit: it replays tr as MemvizJSON
// does, but formats each site's frames once and counts them after, so
// that a snapshot too big to open is known without writing it.
func MemvizJSONSize(tr Trace, opts MemvizOptions) (int64, error) {
	s := newJSONSnap(io.Discard)
	s.sizes = make(map[int64]int64)
	if err := memviz(s, tr, opts); err != nil {
		return 0, fmt.Errorf("memviz json size: %w", err)
	}
	return s.j.n + s.skipped, nil
}

// limitWriter passes writes to w until left bytes have gone, then fails
// with ErrTooBig.
type limitWriter struct {
	w    io.Writer
	left int64
}

func (l *limitWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > l.left {
		return 0, ErrTooBig
	}
	n, err := l.w.Write(p)
	l.left -= int64(n)
	return n, err
}

// mib formats a limit of n bytes in MiB or KiB when it is a whole number
// of them.
func mib(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

// MemvizPickle writes the snapshot of MemvizJSON as a pickle (protocol 4),
// the file torch.cuda.memory._dump_snapshot writes and memory_viz loads by
// drag and drop. Integers that do not fit 32 signed bits are LONG1 (the
// viewer's unpickler knows no text INT or LONG); strings and frames lists
// are memoized; segment_pool_id is a tuple, as in PyTorch. Loaded with
// pickle.load it equals the JSON export, tuples read as lists.
func MemvizPickle(w io.Writer, tr Trace, opts MemvizOptions) error {
	if err := memviz(newPickler(w), tr, opts); err != nil {
		return fmt.Errorf("memviz pickle export: %w", err)
	}
	return nil
}

// memvizEntries is how many trace entries e becomes.
func memvizEntries(e event.Event) uint64 {
	switch e.Kind {
	case event.KindAlloc, event.KindOOM:
		return 1
	case event.KindFree:
		return 2
	case event.KindSegmentAlloc, event.KindSegmentFree:
		if !e.SegmentView().Outside() {
			return 1
		}
	}
	return 0
}

func memviz(enc snapEncoder, tr Trace, opts MemvizOptions) error {
	in, err := resolve(tr, opts.At)
	if err != nil {
		return err
	}
	var total uint64
	var cells analyze.CellRuns
	err = tr.Replay(func(e event.Event) error {
		if e.Seq > in.seq {
			return errStop
		}
		total += memvizEntries(e)
		cells.Add(&e)
		return nil
	})
	if err != nil && err != errStop {
		return err
	}
	var skip uint64
	if max := opts.MaxEntries; max >= 0 {
		if max == 0 {
			max = DefaultMaxEntries
		}
		if total > uint64(max) {
			skip = total - uint64(max)
		}
	}

	m := &memvizWriter{enc: enc, tr: tr, st: newState(tr), cells: cells.Names(tr), fold: opts.Frames}
	enc.beginDict()
	enc.key("device_traces")
	enc.beginList()
	enc.beginList()
	var n uint64
	err = tr.Replay(func(e event.Event) error {
		if e.Seq > in.seq {
			return errStop
		}
		m.event(e, n >= skip)
		n += memvizEntries(e)
		if e.Seq%4096 == 0 {
			return enc.failed()
		}
		return nil
	})
	if err != nil && err != errStop {
		return err
	}
	enc.beginDict()
	m.entryHead("snapshot", 0, 0, in.time)
	enc.key("frames")
	enc.beginList()
	enc.endList()
	enc.key("category")
	enc.str("unknown")
	enc.endDict()
	enc.endList()
	enc.endList()
	enc.key("segments")
	m.segments()
	enc.endDict()
	return enc.close()
}

type memvizWriter struct {
	enc   snapEncoder
	tr    Trace
	st    *state
	cells *analyze.CellNames
	fold  Frames
}

// event applies e and, if write, writes its trace entries. A free whose
// two entries straddle the window's start is left out whole.
func (m *memvizWriter) event(e event.Event, write bool) {
	switch e.Kind {
	case event.KindAlloc:
		m.st.apply(e)
		if write {
			m.entry("alloc", e.Addr, requested(e.Size, e.Requested), e.Time, e.Site, categoryName(e.Category))
		}
	case event.KindFree:
		o := m.st.apply(e)
		if !write {
			return
		}
		cat, size := "unknown", requested(e.Size, e.Requested)
		if o != nil {
			cat = categoryName(o.cat)
		}
		m.entry("free_requested", e.Addr, size, e.Time, e.Site, cat)
		m.entry("free_completed", e.Addr, size, e.Time, e.Site, cat)
	case event.KindSegmentAlloc, event.KindSegmentFree:
		m.st.apply(e)
		if write && !e.SegmentView().Outside() {
			action := e.Kind.String()
			if m.st.expandable(e) {
				action = map[event.Kind]string{event.KindSegmentAlloc: "segment_map", event.KindSegmentFree: "segment_unmap"}[e.Kind]
			}
			m.entry(action, e.Addr, e.Size, e.Time, e.Site, "unknown")
		}
	case event.KindOOM:
		if !write {
			return
		}
		m.enc.beginDict()
		m.enc.key("action")
		m.enc.str("oom")
		m.enc.key("size")
		m.enc.uint(requested(e.Size, e.Requested))
		m.enc.key("stream")
		m.enc.int(0)
		m.enc.key("time_us")
		m.enc.int(e.Time / 1000)
		m.enc.key("frames")
		m.frames(e.Site)
		m.enc.key("category")
		m.enc.str(categoryName(e.Category))
		m.enc.key("device_free")
		m.enc.uint(e.OOMView().Free())
		m.enc.endDict()
	}
}

// requested is the bytes asked for, or the rounded size when the event
// does not say.
func requested(size, req uint64) uint64 {
	if req == 0 {
		return size
	}
	return req
}

func (m *memvizWriter) entryHead(action string, addr, size uint64, t int64) {
	m.enc.key("action")
	m.enc.str(action)
	m.enc.key("addr")
	m.enc.uint(addr)
	m.enc.key("size")
	m.enc.uint(size)
	m.enc.key("stream")
	m.enc.int(0)
	m.enc.key("time_us")
	m.enc.int(t / 1000)
}

func (m *memvizWriter) entry(action string, addr, size uint64, t int64, site event.SiteID, cat string) {
	m.enc.beginDict()
	m.entryHead(action, addr, size, t)
	m.enc.key("frames")
	m.frames(site)
	m.enc.key("category")
	m.enc.str(cat)
	m.enc.endDict()
}

// frames writes a site's frames: the notebook frames, innermost first
// (a helper's line, then the line of the cell that called it), then Go
// frames, the interpreter's own folded into one unless m.fold is
// FramesAll.
func (m *memvizWriter) frames(id event.SiteID) {
	m.enc.shared(int64(id), func() {
		m.enc.beginList()
		if s, ok := m.tr.Site(id); ok && id != 0 {
			st := s.Starlark()
			for i := len(st) - 1; i >= 0; i-- {
				m.frame(m.cells.Cell(st[i].File, 0), st[i].Line, cmp.Or(st[i].Func, "<toplevel>"))
			}
			kept, folded := Fold(s, m.fold)
			for _, f := range kept {
				m.frame(f.File, f.Line, f.Func)
			}
			if folded > 0 {
				m.frame("(folded)", 0, fmt.Sprintf("%d interpreter frames", folded))
			}
		}
		m.enc.endList()
	})
}

func (m *memvizWriter) frame(file string, line int, name string) {
	m.enc.beginDict()
	m.enc.key("filename")
	m.enc.str(file)
	m.enc.key("line")
	m.enc.int(int64(line))
	m.enc.key("name")
	m.enc.str(name)
	m.enc.endDict()
}

// segments writes the live allocator segments, each cut into blocks that
// cover it exactly: live objects, and inactive blocks for the gaps. The
// viewer finds a block's address by adding up the sizes before it.
func (m *memvizWriter) segments() {
	objs := m.st.liveObjects()
	m.enc.beginList()
	i := 0
	for _, g := range m.st.allocatorSegments() {
		if g.pool == event.PoolOutside {
			continue
		}
		var inSeg []*object
		inSeg, i = objectsIn(g, objs, i)
		m.segment(g, inSeg)
	}
	m.enc.endList()
}

// objectsIn returns the objects of objs[i:], which is sorted by address,
// that the viewer can place in g, and the index of the first past g. It
// skips those before g, which lie outside every segment, and those that
// overlap a neighbour or the segment's end, since blocks must tile the
// segment.
func objectsIn(g *segment, objs []*object, i int) (in []*object, next int) {
	end := g.addr + g.size
	for i < len(objs) && objs[i].addr < g.addr {
		i++
	}
	cur := g.addr
	for ; i < len(objs) && objs[i].addr < end; i++ {
		o := objs[i]
		if o.addr < cur || o.addr+o.size > end {
			continue
		}
		in = append(in, o)
		cur = o.addr + o.size
	}
	return in, i
}

// segment writes g, whose blocks are objs, as objectsIn gave them, and
// the free space between.
func (m *memvizWriter) segment(g *segment, objs []*object) {
	var alloc, req uint64
	for _, o := range objs {
		alloc += o.size
		req += requested(o.size, o.requested)
	}
	typ := "large"
	if g.pool == event.PoolSmall {
		typ = "small"
	}
	enc := m.enc
	enc.beginDict()
	enc.key("device")
	enc.int(0)
	enc.key("address")
	enc.uint(g.addr)
	enc.key("total_size")
	enc.uint(g.size)
	enc.key("allocated_size")
	enc.uint(alloc)
	enc.key("active_size")
	enc.uint(alloc)
	enc.key("requested_size")
	enc.uint(req)
	enc.key("stream")
	enc.int(0)
	enc.key("segment_type")
	enc.str(typ)
	enc.key("segment_pool_id")
	enc.pair(0, 0)
	enc.key("is_expandable")
	enc.bool(g.mapped)
	enc.key("frames")
	m.frames(g.site)
	enc.key("blocks")
	enc.beginList()
	cur, end := g.addr, g.addr+g.size
	for _, o := range objs {
		if o.addr > cur {
			m.freeBlock(cur, o.addr-cur)
		}
		m.activeBlock(o)
		cur = o.addr + o.size
	}
	if cur < end {
		m.freeBlock(cur, end-cur)
	}
	enc.endList()
	enc.endDict()
}

func (m *memvizWriter) activeBlock(o *object) {
	enc := m.enc
	enc.beginDict()
	enc.key("address")
	enc.uint(o.addr)
	enc.key("size")
	enc.uint(o.size)
	enc.key("requested_size")
	enc.uint(requested(o.size, o.requested))
	enc.key("state")
	enc.str("active_allocated")
	enc.key("frames")
	m.frames(o.site)
	enc.key("category")
	enc.str(categoryName(o.cat))
	// PyTorch 1.13's block, for its torch.cuda._memory_viz: the
	// allocation's address, requested bytes and stack in a history of
	// one. The current viewer reads frames and requested_size, when a
	// block has them, and passes over it.
	enc.key("history")
	enc.beginList()
	enc.beginDict()
	enc.key("addr")
	enc.uint(o.addr)
	enc.key("real_size")
	enc.uint(requested(o.size, o.requested))
	enc.key("frames")
	m.frames(o.site)
	enc.endDict()
	enc.endList()
	enc.endDict()
}

func (m *memvizWriter) freeBlock(addr, size uint64) {
	enc := m.enc
	enc.beginDict()
	enc.key("address")
	enc.uint(addr)
	enc.key("size")
	enc.uint(size)
	enc.key("requested_size")
	enc.int(0)
	enc.key("state")
	enc.str("inactive")
	enc.key("frames")
	enc.beginList()
	enc.endList()
	enc.key("category")
	enc.str("unknown")
	enc.endDict()
}
