package export

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"linger/timeline/event"
	"linger/timeline/event/eventtest"
	"linger/timeline/memstate"
)

func TestLong1(t *testing.T) {
	// LONG1 is the opcode 0x8a, a byte count, and the value's shortest
	// little-endian two's complement: a positive value whose top byte has
	// its high bit set needs a 0x00 more, a negative one stops at the
	// first byte that keeps the sign.
	tests := []struct {
		v    int64
		want string
	}{
		{0, "8a00"},
		{255, "8a02ff00"},
		{65535, "8a03ffff00"},
		{-1, "8a01ff"},
		{1 << 32, "8a050000000001"},
		{1 << 40, "8a06000000000001"},
		{-1 << 40, "8a060000000000ff"},
		{math.MaxInt64, "8a08ffffffffffffff7f"},
		{math.MinInt64, "8a080000000000000080"},
		{128, "8a028000"},
		{-128, "8a0180"},
		{-129, "8a027fff"},
	}
	for _, tt := range tests {
		t.Run(hex.EncodeToString([]byte{byte(tt.v)}), func(t *testing.T) {
			if got := hex.EncodeToString(appendLong1(nil, tt.v)); got != tt.want {
				t.Errorf("LONG1(%d) = %s, want %s", tt.v, got, tt.want)
			}
		})
	}
}

func TestPickleInt(t *testing.T) {
	tests := []struct {
		v    uint64
		want string
	}{
		{0, "4b00"},
		{255, "4bff"},
		{256, "4d0001"},
		{65535, "4dffff"},
		{65536, "4a00000100"},
		{math.MaxInt32, "4affffff7f"},
		{math.MaxInt32 + 1, "8a050000008000"}, // BININT is signed: 2^31 needs LONG1
		{1 << 32, "8a050000000001"},
		{math.MaxUint64, "8a09ffffffffffffffff00"},
	}
	for _, tt := range tests {
		if got := hex.EncodeToString(appendPickleUint(nil, tt.v)); got != tt.want {
			t.Errorf("int %d = %s, want %s", tt.v, got, tt.want)
		}
	}
	if got := hex.EncodeToString(appendPickleInt(nil, -5)); got != "4afbffffff" {
		t.Errorf("int -5 = %s", got)
	}
}

func exportMemviz(t *testing.T, tr Trace, opts MemvizOptions) (js, pk []byte) {
	t.Helper()
	var j, p bytes.Buffer
	if err := MemvizJSON(&j, tr, opts); err != nil {
		t.Fatal(err)
	}
	if err := MemvizPickle(&p, tr, opts); err != nil {
		t.Fatal(err)
	}
	return j.Bytes(), p.Bytes()
}

type snapshot struct {
	Segments []struct {
		Device        int    `json:"device"`
		Address       uint64 `json:"address"`
		TotalSize     uint64 `json:"total_size"`
		AllocatedSize uint64 `json:"allocated_size"`
		ActiveSize    uint64 `json:"active_size"`
		RequestedSize uint64 `json:"requested_size"`
		SegmentType   string `json:"segment_type"`
		PoolID        []int  `json:"segment_pool_id"`
		Expandable    bool   `json:"is_expandable"`
		Blocks        []struct {
			Address       uint64  `json:"address"`
			Size          uint64  `json:"size"`
			RequestedSize uint64  `json:"requested_size"`
			State         string  `json:"state"`
			Frames        []frame `json:"frames"`
			Category      string  `json:"category"`
			History       []struct {
				Addr     uint64  `json:"addr"`
				RealSize uint64  `json:"real_size"`
				Frames   []frame `json:"frames"`
			} `json:"history"`
		} `json:"blocks"`
	} `json:"segments"`
	DeviceTraces [][]struct {
		Action     string  `json:"action"`
		Addr       *uint64 `json:"addr"`
		Size       uint64  `json:"size"`
		Stream     *int    `json:"stream"`
		TimeUS     *int64  `json:"time_us"`
		Frames     []frame `json:"frames"`
		Category   string  `json:"category"`
		DeviceFree *uint64 `json:"device_free"`
	} `json:"device_traces"`
}

type frame struct {
	Filename string `json:"filename"`
	Line     int    `json:"line"`
	Name     string `json:"name"`
}

// checkSnapshot checks what memory_viz relies on: blocks that tile their
// segment exactly (it recomputes their addresses by adding sizes), sizes
// that add up, a category on every entry and block with "unknown" among
// them, and the fields of each action; and what PyTorch 1.13's reader
// needs of an allocated block: a history of one with its address,
// requested bytes and frames.
func checkSnapshot(t *testing.T, data []byte) snapshot {
	t.Helper()
	var s snapshot
	if err := json.Unmarshal(data, &s); err != nil {
		t.Fatalf("not JSON: %v", err)
	}
	for _, g := range s.Segments {
		addr := g.Address
		var alloc, req uint64
		for _, b := range g.Blocks {
			if b.Address != addr {
				t.Errorf("segment %#x: block at %#x, want %#x", g.Address, b.Address, addr)
			}
			addr += b.Size
			if b.Category == "" || (b.State != "active_allocated" && b.State != "inactive") {
				t.Errorf("block %#x: category %q, state %q", b.Address, b.Category, b.State)
			}
			if b.State == "active_allocated" {
				alloc += b.Size
				req += b.RequestedSize
				if h := b.History; len(h) != 1 || h[0].Addr != b.Address || h[0].RealSize != b.RequestedSize || !slices.Equal(h[0].Frames, b.Frames) {
					t.Errorf("block %#x: history %+v, want one entry with its address, requested size and frames", b.Address, h)
				}
			} else if b.History != nil {
				t.Errorf("free block %#x has a history", b.Address)
			}
		}
		if addr != g.Address+g.TotalSize || alloc != g.AllocatedSize || alloc != g.ActiveSize || req != g.RequestedSize {
			t.Errorf("segment %#x: blocks end at %#x of %#x, allocated %d/%d/%d, requested %d/%d", g.Address, addr,
				g.Address+g.TotalSize, alloc, g.AllocatedSize, g.ActiveSize, req, g.RequestedSize)
		}
		if (g.SegmentType != "small" && g.SegmentType != "large") || len(g.PoolID) != 2 {
			t.Errorf("segment %#x: type %q, pool %v", g.Address, g.SegmentType, g.PoolID)
		}
	}
	if len(s.DeviceTraces) != 1 {
		t.Fatalf("%d device traces", len(s.DeviceTraces))
	}
	unknown := false
	for i, e := range s.DeviceTraces[0] {
		if e.Category == "" || e.Stream == nil || e.TimeUS == nil || e.Frames == nil {
			t.Errorf("entry %d (%s): missing category, stream, time_us or frames", i, e.Action)
		}
		unknown = unknown || e.Category == "unknown"
		switch e.Action {
		case "oom":
			if e.DeviceFree == nil || e.Addr != nil {
				t.Errorf("entry %d: oom with device_free %v, addr %v", i, e.DeviceFree, e.Addr)
			}
		case "alloc", "free_requested", "free_completed", "segment_alloc", "segment_free", "segment_map", "segment_unmap", "snapshot":
			if e.Addr == nil {
				t.Errorf("entry %d (%s): no addr", i, e.Action)
			}
		default:
			t.Errorf("entry %d: action %q", i, e.Action)
		}
	}
	if len(s.DeviceTraces[0]) > 0 && !unknown {
		t.Error(`no entry has category "unknown"; memory_viz fails to load such a snapshot`)
	}
	return s
}

func TestMemvizHandTrace(t *testing.T) {
	tr := handTrace()
	t.Run("end", func(t *testing.T) {
		js, _ := exportMemviz(t, tr, MemvizOptions{})
		s := checkSnapshot(t, js)
		var actions []string
		for _, e := range s.DeviceTraces[0] {
			actions = append(actions, e.Action)
		}
		want := []string{"segment_alloc", "alloc", "alloc", "segment_alloc", "alloc", "free_requested", "free_completed",
			"free_requested", "free_completed", "oom", "snapshot"}
		if !equalStrings(actions, want) {
			t.Errorf("actions %q\nwant %q", actions, want)
		}
		if len(s.Segments) != 2 || len(s.Segments[0].Blocks) != 1 || len(s.Segments[1].Blocks) != 2 {
			t.Fatalf("segments %+v", s.Segments)
		}
		if b := s.Segments[1].Blocks[0]; b.State != "active_allocated" || b.Size != 5<<29 || b.Category != "kv_cache" {
			t.Errorf("large segment's first block %+v", b)
		}
		alloc := s.DeviceTraces[0][1]
		if alloc.Size != 500 || len(alloc.Frames) != 2 || alloc.Frames[0] != (frame{"cell c1", 3, "<toplevel>"}) ||
			alloc.Frames[1].Name != "linger/engine.(*Engine).Generate" {
			t.Errorf("first alloc %+v", alloc)
		}
		if oom := s.DeviceTraces[0][9]; *oom.DeviceFree != 5<<30 || oom.Size != 1<<40-7 || oom.Category != "activation" {
			t.Errorf("oom %+v", oom)
		}
	})
	t.Run("at", func(t *testing.T) {
		js, _ := exportMemviz(t, tr, MemvizOptions{At: AtSeq(7)})
		s := checkSnapshot(t, js)
		if n := len(s.DeviceTraces[0]); n != 6 {
			t.Errorf("%d entries up to event 7, want 5 and the snapshot", n)
		}
		var states []string
		for _, b := range s.Segments[0].Blocks {
			states = append(states, b.State)
		}
		if want := []string{"active_allocated", "inactive", "active_allocated", "inactive"}; !equalStrings(states, want) {
			t.Errorf("small segment's blocks %q, want %q", states, want)
		}
	})
	t.Run("window", func(t *testing.T) {
		js, _ := exportMemviz(t, tr, MemvizOptions{MaxEntries: 3})
		s := checkSnapshot(t, js)
		if n := len(s.DeviceTraces[0]); n != 4 {
			t.Errorf("%d entries, want the last 3 and the snapshot", n)
		}
	})
	t.Run("bad instant", func(t *testing.T) {
		if err := MemvizJSON(&bytes.Buffer{}, tr, MemvizOptions{At: AtSeq(99)}); err == nil {
			t.Error("instant past the end accepted")
		}
	})
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// pickleCheck loads a pickle and a JSON snapshot in Python and compares
// them, tuples read as lists.
const pickleCheck = `
import json, pickle, pickletools, sys
# Only opcodes memory_viz's JavaScript unpickler knows; never text INT/LONG.
allowed = {'PROTO', 'EMPTY_DICT', 'MARK', 'SETITEMS', 'EMPTY_LIST', 'APPENDS', 'BININT', 'BININT1', 'BININT2',
           'LONG1', 'SHORT_BINUNICODE', 'BINUNICODE', 'MEMOIZE', 'BINGET', 'LONG_BINGET', 'NEWTRUE', 'NEWFALSE',
           'TUPLE2', 'STOP'}
with open(sys.argv[1], 'rb') as f:
    ops = {op.name for op, _, _ in pickletools.genops(f.read())}
assert ops <= allowed, ops - allowed
def lists(v):
    if isinstance(v, (list, tuple)):
        return [lists(x) for x in v]
    if isinstance(v, dict):
        return {k: lists(x) for k, x in v.items()}
    return v
with open(sys.argv[1], 'rb') as f:
    p = pickle.load(f)
with open(sys.argv[2]) as f:
    j = json.load(f)
assert isinstance(p['segments'][0]['segment_pool_id'], tuple) if p['segments'] else True
assert lists(p) == j, 'pickle differs from JSON'
print(len(p['device_traces'][0]), 'entries', len(p['segments']), 'segments')
`

func TestMemvizPickleLoadsInPython(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not on PATH")
	}
	cases := []struct {
		name string
		tr   func(*testing.T) Trace
		opts MemvizOptions
	}{
		{"hand", func(*testing.T) Trace { return handTrace() }, MemvizOptions{}},
		{"hand at 7", func(*testing.T) Trace { return handTrace() }, MemvizOptions{At: AtSeq(7)}},
		{"engine kept cache", func(t *testing.T) Trace { return engineTrace(t, true) }, MemvizOptions{}},
		{"engine at peak", func(t *testing.T) Trace { return engineTrace(t, false) }, MemvizOptions{At: AtPeak}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			js, pk := exportMemviz(t, c.tr(t), c.opts)
			checkSnapshot(t, js)
			dir := t.TempDir()
			pp, jp := filepath.Join(dir, "s.pickle"), filepath.Join(dir, "s.json")
			if err := os.WriteFile(pp, pk, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(jp, js, 0o644); err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command(py, "-c", pickleCheck, pp, jp).CombinedOutput()
			if err != nil {
				t.Fatalf("python: %v\n%s", err, out)
			}
			t.Logf("python: %s", bytes.TrimSpace(out))
		})
	}
}

// TestPickleBatches checks lists longer than one APPENDS batch.
func TestPickleBatches(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not on PATH")
	}
	var b bytes.Buffer
	p := newPickler(&b)
	p.beginDict()
	p.key("xs")
	p.beginList()
	for i := range 2500 {
		p.shared(int64(i%3), func() {
			p.beginList()
			p.int(int64(i % 3))
			p.endList()
		})
	}
	p.endList()
	p.endDict()
	if err := p.close(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "b.pickle")
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(py, "-c", `
import pickle, sys
d = pickle.load(open(sys.argv[1], 'rb'))
assert d['xs'] == [[i % 3] for i in range(2500)], d['xs'][:10]
print('ok')`, path).CombinedOutput()
	if err != nil {
		t.Fatalf("python: %v\n%s", err, out)
	}
}

// A snapshot whose JSON would pass MemvizJSONLimit is refused with a
// message naming the pickle, having written no more than the limit; the
// pickle of the same snapshot is written as usual.
func TestMemvizJSONTooBig(t *testing.T) {
	tr := engineTrace(t, true)
	var whole bytes.Buffer
	if err := MemvizJSON(&whole, tr, MemvizOptions{}); err != nil {
		t.Fatal(err)
	}
	defer func(l int64) { MemvizJSONLimit = l }(MemvizJSONLimit)
	for _, limit := range []int64{int64(whole.Len()) - 1, 4 << 10} {
		MemvizJSONLimit = limit
		var b bytes.Buffer
		err := MemvizJSON(&b, tr, MemvizOptions{})
		if !errors.Is(err, ErrTooBig) || !strings.Contains(err.Error(), "memviz-pickle") {
			t.Fatalf("limit %d below the JSON's %d bytes: %v, want ErrTooBig naming memviz-pickle", limit, whole.Len(), err)
		}
		if int64(b.Len()) > limit {
			t.Errorf("limit %d: %d bytes written", limit, b.Len())
		}
		if err := MemvizPickle(io.Discard, tr, MemvizOptions{}); err != nil {
			t.Errorf("pickle under the JSON limit: %v", err)
		}
	}
	MemvizJSONLimit = int64(whole.Len())
	if err := MemvizJSON(io.Discard, tr, MemvizOptions{}); err != nil {
		t.Errorf("JSON of exactly the limit: %v", err)
	}
}

// expandableTrace maps four 20 MiB pages of an expandable segment
// (event.LabelExpandable, as torchsnap imports PyTorch's segment_map and
// segment_unmap) and a plain segment right after them; blocks fill the
// first page and the start of the third and fourth; then the second
// page, free, is unmapped, and a last unmap takes the fourth page's free
// tail.
func expandableTrace() *eventtest.Sink {
	const page, base = 20 << 20, 0x7f20_0000_0000
	m := new(eventtest.Sink)
	m.DefineString(1, event.LabelExpandable)
	m.DefineSite(1, event.Site{Frames: []event.Frame{{Func: "train_step", File: "/home/u/train.py", Line: 33}}})
	for i := range uint64(4) {
		m.Append(event.Event{Kind: event.KindSegmentAlloc, Addr: base + i*page, Size: page, Extra: event.PoolLarge, Label: 1})
	}
	m.Append(event.Event{Kind: event.KindSegmentAlloc, Addr: base + 4*page, Size: 2 << 20, Extra: event.PoolSmall})
	m.Append(event.Event{Kind: event.KindAlloc, Addr: base, Size: page, Site: 1})
	m.Append(event.Event{Kind: event.KindAlloc, Addr: base + 2*page, Size: 4 << 20, Site: 1})
	m.Append(event.Event{Kind: event.KindAlloc, Addr: base + 3*page, Size: 4 << 20, Site: 1})
	m.Append(event.Event{Kind: event.KindSegmentFree, Addr: base + page, Size: page, Extra: event.PoolLarge, Label: 1})
	m.Append(event.Event{Kind: event.KindSegmentFree, Addr: base + 3*page + 8<<20, Size: page - 8<<20, Extra: event.PoolLarge, Label: 1})
	for i := range m.Len() {
		m.Events()[i].Time = int64(i) * 1000
	}
	return m
}

// An expandable segment's unmaps cut what was mapped wherever they fall,
// and the contiguous mapped ranges left are one segment each, as
// PyTorch's snapshot lists them: the first page alone (the second was
// unmapped), then the third page and the fourth's first 8 MiB, with its
// two blocks and the free space after each; the plain segment after
// them stays its own. Maps and unmaps are written as such, and the
// reserved bytes follow them: 80 MiB mapped and 2 MiB plain, less the
// 20 MiB page and the 12 MiB tail unmapped.
func TestMemvizExpandable(t *testing.T) {
	const page, base = 20 << 20, 0x7f20_0000_0000
	tr := expandableTrace()
	js, _ := exportMemviz(t, tr, MemvizOptions{})
	s := checkSnapshot(t, js)
	type seg struct {
		addr, size uint64
		expandable bool
		blocks     int
	}
	var got []seg
	for _, g := range s.Segments {
		got = append(got, seg{g.Address, g.TotalSize, g.Expandable, len(g.Blocks)})
	}
	want := []seg{{base, page, true, 1}, {base + 2*page, page + 8<<20, true, 4}, {base + 4*page, 2 << 20, false, 1}}
	if !slices.Equal(got, want) {
		t.Errorf("segments %+v\nwant     %+v", got, want)
	}
	var actions []string
	for _, e := range s.DeviceTraces[0] {
		actions = append(actions, e.Action)
	}
	if w := []string{"segment_map", "segment_map", "segment_map", "segment_map", "segment_alloc", "alloc", "alloc", "alloc", "segment_unmap", "segment_unmap", "snapshot"}; !slices.Equal(actions, w) {
		t.Errorf("actions %q\nwant    %q", actions, w)
	}
	st, err := Allocator(tr, AtEnd)
	if err != nil {
		t.Fatal(err)
	}
	var mem memstate.State
	for _, e := range tr.Events() {
		mem.Apply(&e)
	}
	if reserved := uint64(4*page + 2<<20 - page - (page - 8<<20)); st.Reserved != reserved || len(st.Segments) != 3 || mem.Tracks[memstate.Reserved] != reserved {
		t.Errorf("allocator state: %d segments, %d reserved (the trace's track %d); want 3, %d", len(st.Segments), st.Reserved, mem.Tracks[memstate.Reserved], reserved)
	}
}
