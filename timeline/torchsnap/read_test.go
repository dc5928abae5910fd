package torchsnap

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"

	"linger/timeline/pickle"
)

type expected struct {
	Segments int
	Devices  []int
	Entries  []int
	Traces   [][][]any
	Skipped  []string
}

func readExpected(t *testing.T) expected {
	t.Helper()
	b, err := os.ReadFile("testdata/expected.json")
	if err != nil {
		t.Fatal(err)
	}
	var e expected
	if err := json.Unmarshal(b, &e); err != nil {
		t.Fatal(err)
	}
	return e
}

// row is an entry as gen.py's expected.json writes it.
func row(e *Entry) []any {
	addr := e.Addr
	if e.Action == "oom" {
		addr = e.DeviceFree
	}
	fs := []any{}
	for _, f := range e.Frames {
		fs = append(fs, fmt.Sprintf("%s:%d %s", f.Filename, f.Line, f.Name))
	}
	return []any{e.Action, float64(addr), float64(e.Size), float64(e.TimeUS), float64(e.Stream), fs}
}

// Every way PyTorch's snapshots are written reads to the snapshot gen.py
// built: pickles of protocols 2 to 5, a gzipped pickle, gzipped JSON.
// The trace entries come one at a time, per device trace, as built; the
// device of each trace is resolved past an empty one; an oom's free bytes
// come from device_free; unknown fields are named, once.
func TestRead(t *testing.T) {
	want := readExpected(t)
	for _, name := range []string{"snap.p2.pickle", "snap.p3.pickle", "snap.p4.pickle", "snap.p5.pickle", "snap.p4.pickle.gz", "snap.json.gz"} {
		t.Run(name, func(t *testing.T) {
			f, err := os.Open("testdata/" + name)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			got := make([][][]any, 2)
			snap, err := Read(f, func(trace int, e *Entry) error {
				got[trace] = append(got[trace], row(e))
				return nil
			}, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if len(snap.Segments) != want.Segments || !reflect.DeepEqual(snap.Devices, want.Devices) || !reflect.DeepEqual(snap.Entries, want.Entries) {
				t.Errorf("%d segments, devices %v, entries %v; want %d, %v, %v", len(snap.Segments), snap.Devices, snap.Entries, want.Segments, want.Devices, want.Entries)
			}
			for i := range want.Traces {
				if !reflect.DeepEqual(got[i], want.Traces[i]) {
					n := 0
					for n < len(got[i]) && n < len(want.Traces[i]) && reflect.DeepEqual(got[i][n], want.Traces[i][n]) {
						n++
					}
					t.Errorf("trace %d differs at entry %d of %d: got %v, want %v", i, n, len(want.Traces[i]), at(got[i], n), at(want.Traces[i], n))
				}
			}
			if !reflect.DeepEqual(snap.Skipped, want.Skipped) {
				t.Errorf("skipped %v, want %v", snap.Skipped, want.Skipped)
			}
			s := snap.Segments[1]
			if s.Device != 2 || s.SegmentType != "small" || !s.Expandable || !reflect.DeepEqual(s.PoolID, []int64{1, 3}) {
				t.Errorf("segment 1: %+v", s)
			}
			if b := snap.Segments[0].Blocks[0]; b.State != "active_allocated" || b.RequestedSize != 2<<20-100 || len(b.Frames) != 3 {
				t.Errorf("block 0: %+v", b)
			}
			if snap.Settings["PYTORCH_CUDA_ALLOC_CONF"] != "expandable_segments:True" {
				t.Errorf("settings %v", snap.Settings)
			}
		})
	}
}

func at(rows [][]any, i int) any {
	if i < len(rows) {
		return rows[i]
	}
	return "(none)"
}

// A snapshot cut short reads to its last whole entry, with an error that
// says so; what is not a snapshot is refused naming why.
func TestBadSnapshots(t *testing.T) {
	whole, _ := os.ReadFile("testdata/snap.p4.pickle")
	var n int
	_, err := Read(bytes.NewReader(whole[:len(whole)*2/3]), func(int, *Entry) error { n++; return nil }, Options{})
	if !errors.Is(err, pickle.ErrTruncated) || n == 0 {
		t.Errorf("cut short: %v after %d entries; want ErrTruncated after some", err, n)
	}
	for _, c := range []struct {
		name string
		in   []byte
		want error
	}{
		{"empty", nil, ErrNotSnapshot},
		{"text", []byte("hello"), ErrNotSnapshot},
		{"a list", []byte("\x80\x04]."), ErrNotSnapshot},
		{"a dict of something else", []byte("\x80\x04}\x8c\x01a\x94K\x01s."), ErrNotSnapshot},
		{"json of something else", []byte(`{"a": 1}`), ErrNotSnapshot},
		{"code", []byte("\x80\x02cos\nsystem\n."), pickle.ErrRefused},
	} {
		_, err := Read(bytes.NewReader(c.in), func(int, *Entry) error { return nil }, Options{})
		if !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
}

// Snapshots built apart from this package (testdata/peer_make_snapshots.py,
// written from PyTorch's sources: Python's pickler at protocol 5, the
// TorchScript pickler's protocol 2 of _memory_snapshot_pickled, memory_viz's
// NUL padding after STOP, fields of PyTorch 2.14) read as Python's own
// pickle.load reads them (testdata/peer-expected.json, written by it):
// the same segments and entries per device; PyTorch 1.13's list of
// segments is refused, naming what it lacks.
func TestPeerSnapshots(t *testing.T) {
	b, err := os.ReadFile("testdata/peer-expected.json")
	if err != nil {
		t.Fatal(err)
	}
	var want map[string]struct {
		Segments int
		Entries  []int
		Devices  []int
		Version  string
	}
	if err := json.Unmarshal(b, &want); err != nil {
		t.Fatal(err)
	}
	for name, w := range want {
		f, err := os.Open("testdata/" + name)
		if err != nil {
			t.Fatal(err)
		}
		snap, err := Read(f, func(int, *Entry) error { return nil }, Options{})
		f.Close()
		if w.Version != "" {
			if !errors.Is(err, ErrNotSnapshot) || !strings.Contains(err.Error(), "device_traces") {
				t.Errorf("%s: %v, want refused naming device_traces", name, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if len(snap.Segments) != w.Segments || !reflect.DeepEqual(snap.Entries, w.Entries) || !reflect.DeepEqual(snap.Devices, w.Devices) {
			t.Errorf("%s: %d segments, entries %v on devices %v; Python reads %d, %v on %v", name, len(snap.Segments), snap.Entries, snap.Devices, w.Segments, w.Entries, w.Devices)
		}
	}
}

// Hostile values where a snapshot has plain ones: a list that holds
// itself and a value shared 2^64 ways in allocator_settings print
// bounded; a pickle of a bare list of entries is no snapshot. Neither
// may crash the reader.
func TestHostileSnapshots(t *testing.T) {
	f, _ := os.Open("testdata/bad-cycle.pickle")
	snap, err := Read(f, func(int, *Entry) error { return nil }, Options{})
	f.Close()
	if err != nil || len(snap.Settings["loop"]) > 200 || len(snap.Settings["dag"]) > 2000 {
		t.Errorf("cycle: %v, settings %q", err, snap.Settings)
	}
	f, _ = os.Open("testdata/bad-toplist.pickle")
	_, err = Read(f, func(int, *Entry) error { return nil }, Options{})
	f.Close()
	if !errors.Is(err, ErrNotSnapshot) {
		t.Errorf("a bare list of entries: %v, want ErrNotSnapshot", err)
	}
}

// PyTorch 2.0's blocks carry no address: they lie one after the other
// from their segment's, as memory_viz walks them.
func TestBlocksWithoutAddress(t *testing.T) {
	f, _ := os.Open("testdata/peer-v20.p4.pickle")
	defer f.Close()
	snap, err := Read(f, func(int, *Entry) error { return nil }, Options{})
	if err != nil {
		t.Fatal(err)
	}
	s := snap.Segments[0]
	addr := s.Address
	for i, b := range s.Blocks {
		if b.Address != addr {
			t.Errorf("block %d at %#x, want %#x (its segment's %#x plus the blocks before it)", i, b.Address, addr, s.Address)
		}
		addr += b.Size
	}
}
