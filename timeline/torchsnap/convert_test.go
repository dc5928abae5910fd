package torchsnap

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"linger/timeline"
	"linger/timeline/event"
	"linger/timeline/memstate"
)

func opener(path string) func() (io.ReadCloser, error) {
	return func() (io.ReadCloser, error) { return os.Open(path) }
}

// Another device's trace imports in a second pass: device 2's 50 blocks
// of 512 B, allocated and never freed, in its segment, which its trace
// never allocated (so it was there before: the late-history mark and the
// segment come first), and the mark saying there are no steps; device 0's 1206 entries (a segment, 400 blocks'
// alloc, free_requested and free_completed, and five more) are skipped.
// A device without a trace is an error naming the devices there are.
func TestImportDevice(t *testing.T) {
	out := filepath.Join(t.TempDir(), "snap.ltrace")
	res, err := Import(opener("testdata/snap.p4.pickle"), out, ImportOptions{Device: 2})
	if err != nil {
		t.Fatal(err)
	}
	c := readCounts(t, out)
	if res.Device != 2 || c.byKind[event.KindAlloc] != 50 || c.events != 53 || res.PreHistory != 1 || res.Other[0] != 1+3*400+5 {
		t.Errorf("device %d: %d allocs of %d events, pre-history %d, others %v; want device 2, 50 of 52, 1, device 0's 1206 skipped", res.Device, c.byKind[event.KindAlloc], c.events, res.PreHistory, res.Other)
	}
	if _, err := Import(opener("testdata/snap.p4.pickle"), out, ImportOptions{Device: 1}); err == nil || !strings.Contains(err.Error(), "[0 2]") {
		t.Errorf("device 1: %v, want an error naming devices [0 2]", err)
	}
}

// counts are the events of a trace by kind, and the OOM's free bytes.
type counts struct {
	byKind  map[event.Kind]int
	oomFree uint64
	marks   []string
	events  int
}

func readCounts(t *testing.T, path string) counts {
	t.Helper()
	r, err := timeline.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	c := counts{byKind: map[event.Kind]int{}}
	var last uint64
	for {
		e, err := r.ReadEvent()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if e.Seq != last+1 {
			t.Fatalf("seq %d after %d", e.Seq, last)
		}
		last = e.Seq
		c.events++
		c.byKind[e.Kind]++
		switch e.Kind {
		case event.KindOOM:
			c.oomFree = e.OOMView().Free()
		case event.KindMark:
			c.marks = append(c.marks, r.String(e.Label))
		}
	}
	return c
}

// A snapshot imports as gen.py built device 0's trace: 400 blocks
// allocated (and the 401st left alive) and freed once each (the free
// requested; its completion is the same block), a segment mapped and
// unmapped beside the one allocated, an oom with the 3 MiB the device
// had free, a snapshot mark; device 2's 50 entries are counted, not
// imported.
func TestImport(t *testing.T) {
	for _, name := range []string{"snap.p2.pickle", "snap.p5.pickle", "snap.json.gz"} {
		out := filepath.Join(t.TempDir(), "snap.ltrace")
		res, err := Import(opener("testdata/"+name), out, ImportOptions{Device: -1})
		if err != nil {
			t.Fatal(err)
		}
		c := readCounts(t, out)
		want := map[event.Kind]int{event.KindAlloc: 401, event.KindFree: 400, event.KindSegmentAlloc: 2, event.KindSegmentFree: 1, event.KindOOM: 1, event.KindMark: 2}
		for k, n := range want {
			if c.byKind[k] != n {
				t.Errorf("%s: %d %s events, want %d", name, c.byKind[k], k, n)
			}
		}
		// The marks: the snapshot entry's, and the one that says there
		// are no steps (no annotation).
		if len(c.marks) != 2 || !strings.HasPrefix(c.marks[0], "no steps") || c.marks[1] != "snapshot" {
			t.Errorf("%s: marks %q, want no steps, then the snapshot", name, c.marks)
		}
		if c.oomFree != 3<<20 || res.Device != 0 || res.Other[2] != 50 || res.PreHistory != 0 || uint64(c.events) != res.Events {
			t.Errorf("%s: oom free %d, device %d, other %v, pre-history %d, events %d of %d", name, c.oomFree, res.Device, res.Other, res.PreHistory, c.events, res.Events)
		}
	}
}

// A ring that wrapped: what was alive before the first entry (the 10th
// block, whose free completes first, and the segment at base, which the
// trace never allocated) is allocated at the start, after a mark that
// says the history starts late.
func TestImportWrapped(t *testing.T) {
	out := filepath.Join(t.TempDir(), "snap.ltrace")
	res, err := Import(opener("testdata/snap.wrapped.p4.pickle"), out, ImportOptions{Device: -1})
	if err != nil {
		t.Fatal(err)
	}
	c := readCounts(t, out)
	if res.PreHistory != 2 || len(c.marks) < 1 || c.marks[0][:len("history starts late")] != "history starts late" {
		t.Errorf("pre-history %d, marks %q; want 2 and the late-history mark first", res.PreHistory, c.marks)
	}
	// 390 blocks allocated in the trace, 391 with the 401st; plus the one
	// from before it.
	if c.byKind[event.KindAlloc] != 391+1 || c.byKind[event.KindSegmentAlloc] != 1+1 {
		t.Errorf("%d allocs, %d segment allocs; want 392 and 2", c.byKind[event.KindAlloc], c.byKind[event.KindSegmentAlloc])
	}
}

// reservedAfter imports a JSON snapshot and returns the reserved bytes
// after each segment event, and the pre-history count.
func reservedAfter(t *testing.T, snapshot string) ([]uint64, int) {
	t.Helper()
	dir := t.TempDir()
	in := filepath.Join(dir, "snap.json")
	os.WriteFile(in, []byte(snapshot), 0o644)
	out := filepath.Join(dir, "snap.ltrace")
	res, err := Import(opener(in), out, ImportOptions{Device: -1})
	if err != nil {
		t.Fatal(err)
	}
	r, err := timeline.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var st memstate.State
	var got []uint64
	for {
		e, err := r.ReadEvent()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		st.Apply(&e)
		if e.Kind == event.KindSegmentAlloc || e.Kind == event.KindSegmentFree {
			got = append(got, st.Tracks[memstate.Reserved]>>20)
		}
	}
	return got, res.PreHistory
}

// Expandable segments map and unmap ranges: reserved memory follows the
// bytes of each entry, however the unmaps cut the maps, and what the
// trace never mapped of a segment alive at the end was mapped before it.
// (Figures in MiB, from the entries' sizes.)
func TestExpandableSegments(t *testing.T) {
	const B = 1 << 40
	entry := func(action string, addr, mib uint64) string {
		return fmt.Sprintf(`{"action": %q, "addr": %d, "size": %d, "stream": 0, "time_us": 1, "frames": []}`, action, addr, mib<<20)
	}
	snap := func(segments string, entries ...string) string {
		return `{"segments": [` + segments + `], "device_traces": [[` + strings.Join(entries, ", ") + `]]}`
	}
	for _, c := range []struct {
		name string
		snap string
		want []uint64
		pre  int
	}{
		{"an unmap of part of a map", snap("", entry("segment_map", B, 40), entry("segment_unmap", B+20<<20, 20), entry("segment_unmap", B, 20)), []uint64{40, 20, 0}, 0},
		{"an unmap across two maps", snap("", entry("segment_map", B, 20), entry("segment_map", B+20<<20, 20), entry("segment_unmap", B, 40)), []uint64{20, 40, 0}, 0},
		{"mapped before the trace", snap(fmt.Sprintf(`{"device": 0, "address": %d, "total_size": %d, "is_expandable": true, "blocks": []}`, B, 60<<20),
			entry("segment_map", B+20<<20, 40)), []uint64{20, 60}, 1},
		{"unmapped, mapped before", snap("", entry("segment_unmap", B, 8)), []uint64{8, 0}, 1},
	} {
		got, pre := reservedAfter(t, c.snap)
		if !reflect.DeepEqual(got, c.want) || pre != c.pre {
			t.Errorf("%s: reserved %v MiB, pre-history %d; want %v, %d", c.name, got, pre, c.want, c.pre)
		}
	}
}

// A snapshot records the device's free bytes at an oom, never its total
// memory. Given the card's memory (ImportOptions.DeviceMemory), each oom
// says what the device used (the memory less device_free) and what of
// it was outside the allocator (less what it had reserved): the report's
// OOM and Outside figures, from roundtrip.json's device_free and
// reserved_at_oom, which gen.py works out from the construction. Without
// it, device used is what the allocator reserved; with a memory smaller
// than the oom's free and reserved bytes, a clear error.
func TestDeviceMemory(t *testing.T) {
	b, err := os.ReadFile("testdata/roundtrip.json")
	if err != nil {
		t.Fatal(err)
	}
	var cases []struct {
		File   string `json:"file"`
		Device int    `json:"device"`
		Export struct {
			DeviceFree    []uint64 `json:"device_free"`
			ReservedAtOOM []uint64 `json:"reserved_at_oom"`
		} `json:"export"`
	}
	if err := json.Unmarshal(b, &cases); err != nil {
		t.Fatal(err)
	}
	const total = 80 << 30 // an 80 GiB card
	tried := 0
	for _, c := range cases {
		if len(c.Export.DeviceFree) == 0 || (c.File != "snap.p4.pickle" && c.File != "snap.loop.p5.pickle" && c.File != "snap.wrapped.p4.pickle") {
			continue
		}
		tried++
		free, reserved := c.Export.DeviceFree[0], c.Export.ReservedAtOOM[0]
		for _, mem := range []uint64{0, total} {
			res, rep := importAndAnalyze(t, c.File, ImportOptions{Device: c.Device, DeviceMemory: mem})
			if len(rep.OOMs) != 1 || len(res.OOMs) != 1 {
				t.Fatalf("%s: %d OOMs in the report, %d in the import; want 1", c.File, len(rep.OOMs), len(res.OOMs))
			}
			o, s := rep.OOMs[0], res.OOMs[0]
			wantUsed, wantOutside := reserved, uint64(0)
			if mem > 0 {
				wantUsed, wantOutside = mem-free, mem-free-reserved
			}
			if o.DeviceFree != free || o.Reserved != reserved || o.DeviceUsed != wantUsed || rep.Outside.Peak != wantOutside {
				t.Errorf("%s, device memory %d: OOM free %d reserved %d device used %d, outside at most %d; want %d, %d, %d, %d",
					c.File, mem, o.DeviceFree, o.Reserved, o.DeviceUsed, rep.Outside.Peak, free, reserved, wantUsed, wantOutside)
			}
			if s.DeviceFree != free || s.Reserved != reserved || s.Outside != wantOutside || (mem > 0 && s.DeviceUsed != wantUsed) {
				t.Errorf("%s, device memory %d: import's OOM %+v; want free %d, reserved %d, used %d, outside %d", c.File, mem, s, free, reserved, wantUsed, wantOutside)
			}
		}
		out := filepath.Join(t.TempDir(), "small.ltrace")
		_, err := Import(opener(filepath.Join("testdata", c.File)), out, ImportOptions{Device: c.Device, DeviceMemory: free})
		if err == nil || !strings.Contains(err.Error(), "--device-memory") {
			t.Errorf("%s with a device memory of its free bytes alone: %v; want an error naming --device-memory", c.File, err)
		}
		if _, serr := os.Stat(out); serr == nil {
			t.Errorf("%s: a failed import left %s", c.File, out)
		}
	}
	if tried != 3 {
		t.Fatalf("tried %d snapshots with an OOM, want 3 (roundtrip.json changed?)", tried)
	}
}
