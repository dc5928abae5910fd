package export

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/pprof/profile"

	"linger/timeline/event"
)

// liveBytes replays tr up to the instant and adds up what is alive,
// independently of the exporter's own bookkeeping.
func liveBytes(t *testing.T, tr Trace, upTo uint64) (total uint64) {
	t.Helper()
	live := map[uint64]uint64{}
	err := tr.Replay(func(e event.Event) error {
		if upTo != 0 && e.Seq > upTo {
			return nil
		}
		switch e.Kind {
		case event.KindAlloc:
			live[e.Addr] = e.Size
		case event.KindFree:
			delete(live, e.Addr)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range live {
		total += n
	}
	return total
}

// peakSeq finds the first event after which allocated bytes are highest.
func peakSeq(t *testing.T, tr Trace) uint64 {
	t.Helper()
	live := map[uint64]uint64{}
	var cur, best, seq uint64
	tr.Replay(func(e event.Event) error {
		switch e.Kind {
		case event.KindAlloc:
			live[e.Addr] = e.Size
			cur += e.Size
		case event.KindFree:
			cur -= live[e.Addr]
			delete(live, e.Addr)
		}
		if cur > best || seq == 0 {
			best, seq = cur, e.Seq
		}
		return nil
	})
	return seq
}

func TestPprof(t *testing.T) {
	hand := handTrace()
	eng := engineTrace(t, true)
	cases := []struct {
		name string
		tr   Trace
		at   At
		seq  func() uint64 // the instant's seq, computed here; 0 is the end
	}{
		{"hand end", hand, AtEnd, func() uint64 { return 0 }},
		{"hand at 7", hand, AtSeq(7), func() uint64 { return 7 }},
		{"hand peak", hand, AtPeak, func() uint64 { return peakSeq(t, hand) }},
		{"engine end", eng, AtEnd, func() uint64 { return 0 }},
		{"engine peak", eng, AtPeak, func() uint64 { return peakSeq(t, eng) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := Pprof(&b, c.tr, PprofOptions{At: c.at}); err != nil {
				t.Fatal(err)
			}
			p, err := profile.Parse(bytes.NewReader(b.Bytes()))
			if err != nil {
				t.Fatal(err)
			}
			if err := p.CheckValid(); err != nil {
				t.Fatal(err)
			}
			if p.DefaultSampleType != "inuse_space" || len(p.SampleType) != 4 || p.SampleType[3].Type != "inuse_space" {
				t.Fatalf("sample types %v, default %q", p.SampleType, p.DefaultSampleType)
			}
			var inuse, alloc int64
			for _, s := range p.Sample {
				inuse += s.Value[3]
				alloc += s.Value[1]
				if len(s.Label["category"]) != 1 || len(s.Location) == 0 {
					t.Errorf("sample %v: labels %v", s.Value, s.Label)
				}
			}
			if want := liveBytes(t, c.tr, c.seq()); uint64(inuse) != want {
				t.Errorf("inuse_space %d, want the live bytes %d", inuse, want)
			}
			if alloc < inuse {
				t.Errorf("alloc_space %d < inuse_space %d", alloc, inuse)
			}
		})
	}
}

func TestPprofCellFrameFirst(t *testing.T) {
	p, err := heapProfile(handTrace(), PprofOptions{At: AtSeq(7)})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range p.Sample {
		if s.Label["label"][0] != "kv big" {
			continue
		}
		fn := s.Location[0].Line[0].Function
		if fn.Name != "cell c1" || fn.Filename != "cell:c1" || s.Location[0].Line[0].Line != 3 {
			t.Errorf("first frame %s %s:%d", fn.Name, fn.Filename, s.Location[0].Line[0].Line)
		}
		if s.Location[1].Line[0].Function.Name != "linger/engine.(*Engine).Generate" {
			t.Errorf("second frame %s", s.Location[1].Line[0].Function.Name)
		}
		return
	}
	t.Error("no sample for kv big")
}

func TestPprofGoTool(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go tool pprof")
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go not on PATH")
	}
	path := filepath.Join(t.TempDir(), "heap.pb.gz")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := Pprof(f, engineTrace(t, true), PprofOptions{At: AtEnd}); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(gobin, "tool", "pprof", "-top", "-sample_index=inuse_space", path).CombinedOutput()
	if err != nil {
		t.Fatalf("go tool pprof: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "flat%") || !strings.Contains(string(out), "Generate") {
		t.Errorf("go tool pprof -top:\n%s", out)
	}
}

// Every sample of a real run's profile goes through the frame that
// started the run, so its cumulative figure is 100%: sites keep whole Go
// stacks, written to the trace log and read back. Here the run is
// started by the test function (the testing package's frames are not
// kept).
func TestPprofWholeStacks(t *testing.T) {
	var b bytes.Buffer
	if err := Pprof(&b, engineTrace(t, true), PprofOptions{At: AtEnd}); err != nil {
		t.Fatal(err)
	}
	p, err := profile.Parse(&b)
	if err != nil {
		t.Fatal(err)
	}
	const root = "linger/timeline/export.TestPprofWholeStacks"
	for i, st := range p.SampleType {
		if st.Unit != "bytes" {
			continue
		}
		var total, cum int64
		for _, s := range p.Sample {
			total += s.Value[i]
			if outer := s.Location[len(s.Location)-1].Line[0].Function.Name; outer == root {
				cum += s.Value[i]
			} else if s.Value[i] != 0 {
				t.Errorf("%s: a sample of %d bytes ends in %s, not %s", st.Type, s.Value[i], outer, root)
			}
		}
		if total == 0 || cum != total {
			t.Errorf("%s: %s has %d of %d bytes cumulative (%.1f%%), want all", st.Type, root, cum, total, 100*float64(cum)/float64(total))
		}
	}
}
