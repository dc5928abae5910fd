// Package torchsnap reads the memory snapshots PyTorch writes
// (torch.cuda.memory._dump_snapshot, or _snapshot() pickled by the user),
// as PyTorch's own code defines them (torch/cuda/memory.py's Snapshot,
// Segment, Block, TraceEntry and Frame; torch/csrc/cuda/memory_snapshot.cpp):
// pickles of protocols 2 to 5, JSON, either gzipped. It reads them as a
// stream: the segments at dump time are kept, the trace entries of each
// device are handed to the caller one at a time and let go, so a snapshot
// of ten million entries is read in memory bounded by its segments and
// its distinct stacks, not by its length.
package torchsnap

import (
	"bufio"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/big"
	"slices"
	"sort"

	"linger/timeline/pickle"
)

// Frame is one stack frame of a block or trace entry: Python frames, and
// C++ ones when the history was recorded with stacks="all".
type Frame struct {
	Filename string `json:"filename"`
	Line     int    `json:"line"`
	Name     string `json:"name"`
}

// Block is one block of a segment at dump time.
type Block struct {
	Address       uint64  `json:"address"`
	Size          uint64  `json:"size"`
	RequestedSize uint64  `json:"requested_size"`
	State         string  `json:"state"` // active_allocated, active_pending_free, inactive
	Frames        []Frame `json:"frames"`
}

// Segment is one segment the allocator held at dump time.
type Segment struct {
	Device        int     `json:"device"`
	Address       uint64  `json:"address"`
	TotalSize     uint64  `json:"total_size"`
	AllocatedSize uint64  `json:"allocated_size"`
	ActiveSize    uint64  `json:"active_size"`
	RequestedSize uint64  `json:"requested_size"`
	Stream        int64   `json:"stream"`
	SegmentType   string  `json:"segment_type"` // small or large
	PoolID        []int64 `json:"segment_pool_id"`
	Expandable    bool    `json:"is_expandable"`
	Frames        []Frame `json:"frames"`
	Blocks        []Block `json:"blocks"`
}

// Entry is one trace entry of a device (TraceEntry).
type Entry struct {
	Action string `json:"action"` // alloc, free_requested, free_completed, segment_alloc, segment_free, segment_map, segment_unmap, snapshot, oom
	// Addr is the block's or segment's address; for an oom, the device's
	// free bytes as CUDA reported them.
	Addr   uint64  `json:"addr"`
	Size   uint64  `json:"size"`
	Stream int64   `json:"stream"`
	TimeUS int64   `json:"time_us"`
	Frames []Frame `json:"frames"`
	// DeviceFree is an oom's free bytes (HasDeviceFree says it was there).
	DeviceFree     uint64 `json:"device_free"`
	HasDeviceFree  bool   `json:"-"`
	CompileContext string `json:"-"`
	UserMetadata   string `json:"-"`
}

// Annotation is one recorded annotation (record_function ranges and
// the like, "external_annotations"): a stage (START or END) of a named
// range on a device.
type Annotation struct {
	Stage  string `json:"stage"`
	Name   string `json:"name"`
	Device int    `json:"device"`
	TimeUS int64  `json:"time_us"`
}

// Snapshot is what a snapshot holds besides its trace entries, which
// Read hands on as it reads them.
type Snapshot struct {
	Segments    []Segment
	Annotations []Annotation
	// Settings are the allocator's settings, as recorded
	// ("allocator_settings"), their values as text.
	Settings map[string]string
	// Devices is, per trace Read handed on (its index), the device whose
	// trace it was; Entries how many entries it had.
	Devices []int
	Entries []int
	// Skipped names the fields that were not known to this reader and
	// were skipped, each once ("segments[].new_field").
	Skipped []string
	// Format is how the file was written: "pickle protocol N" or "json",
	// with ", gzip" when it was compressed.
	Format string
}

// HostTrace is the device of a host (pinned memory) trace in
// Snapshot.Devices (PyTorch 2.14's host_traces).
const HostTrace = -2

// ErrNotSnapshot is a file that is not a PyTorch memory snapshot.
var ErrNotSnapshot = errors.New("not a PyTorch memory snapshot")

// EntryFunc receives each trace entry in order: trace is the index of the
// device trace it belongs to (Snapshot.Devices says which device), e is
// valid only during the call.
type EntryFunc func(trace int, e *Entry) error

// Options bound a Read.
type Options struct {
	// Pickle bounds the pickle decoder (its defaults if zero).
	Pickle pickle.Options
	// Progress, if set, is called now and then with the bytes read of
	// the file (compressed, for a gzipped one).
	Progress func(read int64)
}

// countingReader counts the bytes read from r.
type countingReader struct {
	r        io.Reader
	n        int64
	progress func(int64)
	last     int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	if c.progress != nil && c.n-c.last >= 1<<22 {
		c.last = c.n
		c.progress(c.n)
	}
	return n, err
}

// Read reads a snapshot from r, handing each trace entry to fn, and
// returns the rest of it. A file cut short reads to its last whole entry
// and returns what it read with an error wrapping pickle.ErrTruncated (or
// io.ErrUnexpectedEOF for JSON).
func Read(r io.Reader, fn EntryFunc, opts Options) (*Snapshot, error) {
	cr := &countingReader{r: r, progress: opts.Progress}
	br := bufio.NewReaderSize(cr, 1<<16)
	head, err := br.Peek(2)
	if err != nil && len(head) == 0 {
		return nil, fmt.Errorf("%w: the file is empty", ErrNotSnapshot)
	}
	gz := ""
	var src io.Reader = br
	if len(head) == 2 && head[0] == 0x1f && head[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("%w: gzip: %v", ErrNotSnapshot, err)
		}
		defer zr.Close()
		gz = ", gzip"
		zb := bufio.NewReaderSize(zr, 1<<16)
		if head, err = zb.Peek(1); err != nil {
			return nil, fmt.Errorf("%w: the gzipped file is empty", ErrNotSnapshot)
		}
		src = zb
	}
	var snap *Snapshot
	if first := skipSpace(src); first == '{' {
		snap, err = readJSON(src, fn)
		if snap != nil {
			snap.Format = "json" + gz
		}
	} else {
		snap, err = readPickle(src, fn, opts)
		if snap != nil {
			snap.Format += gz
		}
	}
	if opts.Progress != nil {
		opts.Progress(cr.n)
	}
	return snap, err
}

// skipSpace returns the first byte that is not white space, unread.
func skipSpace(r io.Reader) byte {
	br := r.(*bufio.Reader)
	for {
		b, err := br.Peek(1)
		if err != nil {
			return 0
		}
		switch b[0] {
		case ' ', '\t', '\n', '\r':
			br.ReadByte()
		default:
			return b[0]
		}
	}
}

// known are the fields this reader knows, by where they are; others are
// reported in Snapshot.Skipped.
var known = map[string][]string{
	"":           {"segments", "device_traces", "allocator_settings", "external_annotations"},
	"segments[]": {"device", "address", "total_size", "allocated_size", "active_size", "requested_size", "stream", "segment_type", "segment_pool_id", "is_expandable", "expandable", "frames", "blocks"},
	"blocks[]":   {"address", "size", "requested_size", "state", "frames", "history"},
	"entry":      {"action", "addr", "size", "stream", "time_us", "frames", "device_free", "compile_context", "user_metadata"},
}

// skipped records unknown fields, once each.
type skipped map[string]bool

func (s skipped) note(where, key string) {
	if !slices.Contains(known[where], key) {
		s[where+"."+key] = true
	}
}

func (s skipped) list() []string {
	out := make([]string, 0, len(s))
	for k := range s {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// readPickle reads a pickled snapshot, streaming the trace entries.
func readPickle(r io.Reader, fn EntryFunc, opts Options) (*Snapshot, error) {
	snap := &Snapshot{}
	sk := skipped{}
	traces := map[*pickle.List]int{}
	frames := newStackTable() // stacks, converted once and shared
	var e Entry
	po := opts.Pickle
	po.Stream = func(first any) bool {
		d, ok := first.(*pickle.Dict)
		if !ok {
			return false
		}
		_, action := d.Get("action")
		return action
	}
	// What the memo keeps of a streamed entry's parts, which later
	// entries may refer to: its stack, converted once (PyTorch shares
	// one list per traceback, and each frame dict between them), and
	// strings. The entry dict itself goes.
	po.Compact = func(v any) any {
		switch x := v.(type) {
		case *pickle.List:
			return frames.list(x)
		case *pickle.Dict:
			if f := frames.frame(x); f != nil {
				return f
			}
			return nil
		}
		return v
	}
	po.Item = func(l *pickle.List, i int, v any) error {
		t, ok := traces[l]
		if !ok {
			t = len(snap.Entries)
			traces[l] = t
			snap.Entries = append(snap.Entries, 0)
			snap.Devices = append(snap.Devices, -1)
		}
		d, ok := v.(*pickle.Dict)
		if !ok {
			return fmt.Errorf("%w: trace entry %d of trace %d is a %T, not a dict", ErrNotSnapshot, i, t, v)
		}
		e = Entry{}
		if err := pickledEntry(d, &e, frames, sk); err != nil {
			return fmt.Errorf("trace entry %d: %w", i, err)
		}
		snap.Entries[t]++
		return fn(t, &e)
	}
	dec := pickle.NewDecoder(r, po)
	v, err := dec.Decode()
	snap.Format = fmt.Sprintf("pickle protocol %d", dec.Protocol())
	snap.Skipped = sk.list()
	if err != nil {
		if errors.Is(err, pickle.ErrTruncated) {
			return snap, fmt.Errorf("snapshot cut short after %d bytes, read to its last whole trace entry: %w", dec.Offset(), err)
		}
		if errors.Is(err, pickle.ErrNotPickle) {
			return nil, fmt.Errorf("%w: neither a pickle nor JSON (%v)", ErrNotSnapshot, err)
		}
		return snap, err
	}
	root, ok := v.(*pickle.Dict)
	if l, isList := v.(*pickle.List); isList && !l.Streamed() && (l.Len() == 0 || isDictWith(l.Items[0], "total_size")) {
		return nil, fmt.Errorf("%w of this version: a list of segments, as PyTorch 1.13 and before wrote (torch.cuda.memory_snapshot()), has no device_traces; record with torch.cuda.memory._record_memory_history() and dump with _dump_snapshot() (PyTorch 2.0 or later)", ErrNotSnapshot)
	}
	if !ok {
		return nil, fmt.Errorf("%w: the pickle holds a %T, not a dict of segments and device_traces", ErrNotSnapshot, v)
	}
	segs, hasSegs := root.Get("segments")
	dts, hasTraces := root.Get("device_traces")
	if !hasSegs && !hasTraces {
		return nil, fmt.Errorf("%w: the dict has neither segments nor device_traces", ErrNotSnapshot)
	}
	for _, it := range root.Items {
		if k, ok := it.Key.(string); ok {
			sk.note("", k)
		}
	}
	if l, ok := segs.(*pickle.List); ok {
		for i, sv := range l.Items {
			sd, ok := sv.(*pickle.Dict)
			if !ok {
				return nil, fmt.Errorf("%w: segment %d is a %T", ErrNotSnapshot, i, sv)
			}
			snap.Segments = append(snap.Segments, pickledSegment(sd, frames, sk))
		}
	} else if hasSegs {
		return nil, fmt.Errorf("%w: segments is a %T, not a list", ErrNotSnapshot, segs)
	}
	if l, ok := dts.(*pickle.List); ok {
		for dev, tv := range l.Items {
			tl, ok := tv.(*pickle.List)
			if !ok {
				return nil, fmt.Errorf("%w: device_traces[%d] is a %T, not a list", ErrNotSnapshot, dev, tv)
			}
			if t, ok := traces[tl]; ok {
				snap.Devices[t] = dev
			} else if tl.Len() > 0 {
				return nil, fmt.Errorf("%w: device_traces[%d] holds %T, not trace entries", ErrNotSnapshot, dev, tl.Items[0])
			}
		}
	}
	// PyTorch 2.14's host (pinned memory) traces look like a device's;
	// they are not a device's trace.
	if hl, ok := root.Get("host_traces"); ok {
		if l, ok := hl.(*pickle.List); ok {
			for _, tv := range l.Items {
				if tl, ok := tv.(*pickle.List); ok {
					if t, ok := traces[tl]; ok {
						snap.Devices[t] = HostTrace
					}
				}
			}
		}
	}
	if d, ok := root.Get("allocator_settings"); ok {
		snap.Settings = settings(d)
	}
	if a, ok := root.Get("external_annotations"); ok {
		if l, ok := a.(*pickle.List); ok {
			for _, av := range l.Items {
				if ad, ok := av.(*pickle.Dict); ok {
					snap.Annotations = append(snap.Annotations, Annotation{Stage: str(ad, "stage"), Name: str(ad, "name"), Device: int(num(ad, "device")), TimeUS: int64(num(ad, "time_us"))})
				}
			}
		}
	}
	snap.Skipped = sk.list()
	return snap, nil
}

func pickledEntry(d *pickle.Dict, e *Entry, frames *stackTable, sk skipped) error {
	for _, it := range d.Items {
		k, _ := it.Key.(string)
		switch k {
		case "action":
			s, ok := it.Value.(string)
			if !ok {
				return fmt.Errorf("%w: action is a %T", ErrNotSnapshot, it.Value)
			}
			e.Action = s
		case "addr":
			e.Addr = unum(it.Value)
		case "size":
			e.Size = unum(it.Value)
		case "stream":
			e.Stream = int64(unum(it.Value))
		case "time_us":
			e.TimeUS = int64(unum(it.Value))
		case "frames":
			e.Frames = pickledFrames(it.Value, frames)
		case "device_free":
			e.DeviceFree, e.HasDeviceFree = unum(it.Value), true
		case "compile_context":
			e.CompileContext, _ = it.Value.(string)
		case "user_metadata":
			e.UserMetadata, _ = it.Value.(string)
		default:
			sk.note("entry", k)
		}
	}
	if e.Action == "" {
		return fmt.Errorf("%w: a trace entry without an action", ErrNotSnapshot)
	}
	return nil
}

func pickledSegment(d *pickle.Dict, frames *stackTable, sk skipped) Segment {
	var s Segment
	for _, it := range d.Items {
		k, _ := it.Key.(string)
		sk.note("segments[]", k)
		switch k {
		case "device":
			s.Device = int(unum(it.Value))
		case "address":
			s.Address = unum(it.Value)
		case "total_size":
			s.TotalSize = unum(it.Value)
		case "allocated_size":
			s.AllocatedSize = unum(it.Value)
		case "active_size":
			s.ActiveSize = unum(it.Value)
		case "requested_size":
			s.RequestedSize = unum(it.Value)
		case "stream":
			s.Stream = int64(unum(it.Value))
		case "segment_type":
			s.SegmentType, _ = it.Value.(string)
		case "segment_pool_id":
			if t, ok := it.Value.(pickle.Tuple); ok {
				for _, x := range t {
					s.PoolID = append(s.PoolID, int64(unum(x)))
				}
			}
		case "is_expandable", "expandable":
			s.Expandable, _ = it.Value.(bool)
		case "frames":
			s.Frames = pickledFrames(it.Value, frames)
		case "blocks":
			if l, ok := it.Value.(*pickle.List); ok {
				for _, bv := range l.Items {
					bd, ok := bv.(*pickle.Dict)
					if !ok {
						continue
					}
					var b Block
					if _, has := bd.Get("address"); !has {
						// PyTorch 2.0's blocks have none: they lie one after
						// the other from the segment's address (as
						// memory_viz walks them), their stack in history.
						b.Address = noAddress
						if h, ok := bd.Get("history"); ok {
							if hl, ok := h.(*pickle.List); ok && len(hl.Items) > 0 {
								if hd, ok := hl.Items[0].(*pickle.Dict); ok {
									if fv, ok := hd.Get("frames"); ok {
										b.Frames = pickledFrames(fv, frames)
									}
								}
							}
						}
					}
					for _, bit := range bd.Items {
						bk, _ := bit.Key.(string)
						sk.note("blocks[]", bk)
						switch bk {
						case "address":
							b.Address = unum(bit.Value)
						case "size":
							b.Size = unum(bit.Value)
						case "requested_size":
							b.RequestedSize = unum(bit.Value)
						case "state":
							b.State, _ = bit.Value.(string)
						case "frames":
							b.Frames = pickledFrames(bit.Value, frames)
						}
					}
					s.Blocks = append(s.Blocks, b)
				}
			}
		}
	}
	addr := s.Address
	for i := range s.Blocks {
		if s.Blocks[i].Address == noAddress {
			s.Blocks[i].Address = addr
		}
		addr = s.Blocks[i].Address + s.Blocks[i].Size
	}
	return s
}

// noAddress marks a block whose address is to be walked from its
// segment's.
const noAddress = ^uint64(0)

// stack is a list of frames converted, as the memo keeps it once the
// entry that first held it has been streamed: one per distinct stack
// (stackTable), however many lists PyTorch wrote of it.
type stack struct{ frames []Frame }

// frameRef is a frame dict converted, as the memo keeps it: its frame and
// an id that names it in a stack's key.
type frameRef struct {
	Frame
	id uint32
}

// stackTable converts frame dicts and lists of them, and keeps one copy
// of each distinct stack. PyTorch's writer (py_symbolize) makes one dict
// per distinct frame, shared, but one list per traceback it gathered:
// every allocation gathers its own, so most entries bring a list of
// their own, and its free entries refer to it again, however much later.
// The memo must keep each list; kept as the one copy of its stack, a
// list costs the memo's slot and nothing more, whatever the trace's
// length.
type stackTable struct {
	// byKey holds each distinct stack, by its frames' ids.
	byKey map[string]*stack
	key   []byte
	// Within a batch of entries (before the memo is compacted), the dicts
	// and lists met, converted: a dict or list met again in the batch is
	// the same value, and the memo then keeps what was made of it.
	dicts  map[*pickle.Dict]*frameRef
	lists  map[*pickle.List]*stack
	nextID uint32
}

func newStackTable() *stackTable {
	return &stackTable{byKey: map[string]*stack{}, dicts: map[*pickle.Dict]*frameRef{}, lists: map[*pickle.List]*stack{}}
}

// frame converts a frame dict ({filename, line, name}), once per dict; nil
// for a dict that is not a frame.
func (t *stackTable) frame(d *pickle.Dict) *frameRef {
	if f, ok := t.dicts[d]; ok {
		return f
	}
	fr, ok := pickledFrame(d)
	if !ok {
		return nil
	}
	t.nextID++
	f := &frameRef{Frame: fr, id: t.nextID}
	if len(t.dicts) >= 1<<14 {
		clear(t.dicts) // it saves work within a batch; the memo keeps the rest (frameRef)
	}
	t.dicts[d] = f
	return f
}

// list converts a list of frame dicts to the one copy of its stack.
func (t *stackTable) list(l *pickle.List) *stack {
	if s, ok := t.lists[l]; ok {
		return s
	}
	refs := make([]*frameRef, 0, len(l.Items))
	t.key = t.key[:0]
	for _, fv := range l.Items {
		var f *frameRef
		switch x := fv.(type) {
		case *pickle.Dict:
			f = t.frame(x)
		case *frameRef:
			f = x
		}
		if f == nil {
			continue
		}
		refs = append(refs, f)
		t.key = binary.LittleEndian.AppendUint32(t.key, f.id)
	}
	s, ok := t.byKey[string(t.key)]
	if !ok {
		fs := make([]Frame, len(refs))
		for i, f := range refs {
			fs[i] = f.Frame
		}
		s = &stack{fs}
		t.byKey[string(t.key)] = s
	}
	if len(t.lists) >= 1<<12 {
		clear(t.lists)
	}
	t.lists[l] = s
	return s
}

// pickledFrames is a stack's frames: a list of frame dicts, or one the
// memo kept (stack).
func pickledFrames(v any, t *stackTable) []Frame {
	switch x := v.(type) {
	case *stack:
		return x.frames
	case *pickle.List:
		return t.list(x).frames
	}
	return nil
}

// pickledFrame is a frame dict ({filename, line, name}) as a Frame.
func pickledFrame(d *pickle.Dict) (Frame, bool) {
	if _, ok := d.Get("filename"); !ok {
		return Frame{}, false
	}
	return Frame{Filename: str(d, "filename"), Line: int(num(d, "line")), Name: str(d, "name")}, true
}

func str(d *pickle.Dict, k string) string {
	v, _ := d.Get(k)
	s, _ := v.(string)
	return s
}

func num(d *pickle.Dict, k string) int64 {
	v, _ := d.Get(k)
	return int64(unum(v))
}

// unum is an integer value as a uint64 (two's complement for a negative
// one; an integer beyond 64 bits, its low 64).
func unum(v any) uint64 {
	switch x := v.(type) {
	case int64:
		return uint64(x)
	case *big.Int:
		return new(big.Int).And(x, new(big.Int).SetUint64(^uint64(0))).Uint64()
	case bool:
		if x {
			return 1
		}
	case float64:
		return uint64(x)
	}
	return 0
}

// settings turns allocator_settings into text values.
func settings(v any) map[string]string {
	d, ok := v.(*pickle.Dict)
	if !ok {
		return nil
	}
	out := map[string]string{}
	for _, it := range d.Items {
		k, _ := it.Key.(string)
		out[k] = fmt.Sprint(plain(it.Value))
	}
	return out
}

// plain is a setting's value for printing: scalars as they are,
// containers to a depth of 3 and 64 parts in all (a pickle may nest or
// share its values without end; what is past the budget is "…").
func plain(v any) any {
	budget := 64
	return plainAt(v, 3, &budget)
}

func plainAt(v any, depth int, budget *int) any {
	switch v.(type) {
	case *pickle.List, pickle.Tuple, *pickle.Dict, *pickle.Set:
		if depth == 0 || *budget <= 0 {
			return "…"
		}
	}
	*budget--
	switch x := v.(type) {
	case *pickle.List:
		out := []any{}
		for _, e := range x.Items {
			out = append(out, plainAt(e, depth-1, budget))
		}
		return out
	case pickle.Tuple:
		out := []any{}
		for _, e := range x {
			out = append(out, plainAt(e, depth-1, budget))
		}
		return out
	case *pickle.Dict:
		out := map[string]any{}
		for _, it := range x.Items {
			out[fmt.Sprint(plainAt(it.Key, depth-1, budget))] = plainAt(it.Value, depth-1, budget)
		}
		return out
	case *pickle.Set:
		return fmt.Sprintf("set of %d", len(x.Items))
	}
	return v
}

// isDictWith reports whether v is a dict with the string key key.
func isDictWith(v any, key string) bool {
	d, ok := v.(*pickle.Dict)
	if !ok {
		return false
	}
	_, has := d.Get(key)
	return has
}
