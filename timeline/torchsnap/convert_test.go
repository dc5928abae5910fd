package torchsnap

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"linger/timeline"
	"linger/timeline/event"
)

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
		f, err := os.Open("testdata/" + name)
		if err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(t.TempDir(), "snap.ltrace")
		res, err := Import(f, out, ImportOptions{Device: -1})
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		c := readCounts(t, out)
		want := map[event.Kind]int{event.KindAlloc: 401, event.KindFree: 400, event.KindSegmentAlloc: 2, event.KindSegmentFree: 1, event.KindOOM: 1, event.KindMark: 1}
		for k, n := range want {
			if c.byKind[k] != n {
				t.Errorf("%s: %d %s events, want %d", name, c.byKind[k], k, n)
			}
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
	f, err := os.Open("testdata/snap.wrapped.p4.pickle")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := filepath.Join(t.TempDir(), "snap.ltrace")
	res, err := Import(f, out, ImportOptions{Device: -1})
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
