package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"linger/timeline/torchsnap"
)

// torchPython is the interpreter Debian's python3-torch is installed for
// (a python3 earlier on PATH, pyenv's say, lacks it).
const torchPython = "/usr/bin/python3"

// snapData is torchsnap's test snapshots (testdata/gen.py there).
const snapData = "../../timeline/torchsnap/testdata"

// needTorch fails the test when Debian's PyTorch is not installed: the
// round trip's peer is PyTorch's own reader.
func needTorch(t *testing.T) {
	t.Helper()
	if out, err := exec.Command(torchPython, "-c", "import torch.cuda._memory_viz").CombinedOutput(); err != nil {
		t.Fatalf("Debian's PyTorch is not installed (%v: %s): apt-get install -y --no-install-recommends python3-torch (.ci/run does)", err, strings.TrimSpace(string(out)))
	}
}

// roundTripCase is one case of gen.py's roundtrip.json: what PyTorch
// 1.13's reader reports of a snapshot and of its round trip, worked out
// from the snapshot's construction.
type roundTripCase struct {
	File     string `json:"file"`
	Device   int    `json:"device"`
	Protocol *int   `json:"protocol"`
	Original struct {
		Stats  map[string]uint64 `json:"stats"`
		Folded []string          `json:"folded"`
	} `json:"original"`
	Export struct {
		Stats      map[string]uint64    `json:"stats"`
		Folded     []string             `json:"folded"`
		Trace      map[string][2]uint64 `json:"trace"`
		Peak       struct{ Allocated, Reserved uint64 }
		AtPeak     map[string]uint64 `json:"at_peak"`
		DeviceFree []uint64          `json:"device_free"`
	} `json:"export"`
}

// peerReport is what testdata/memviz_peer.py reports: PyTorch's reader
// on the original snapshot and on Linger's export of it.
type peerReport struct {
	Torch    string `json:"torch"`
	Reader   string `json:"reader"`
	Original struct {
		Protocol *int              `json:"protocol"`
		Stats    map[string]uint64 `json:"stats"`
		Folded   []string          `json:"folded"`
		Error    string            `json:"error"`
	} `json:"original"`
	Export struct {
		Protocol   int                  `json:"protocol"`
		Keys       []string             `json:"keys"`
		Stats      map[string]uint64    `json:"stats"`
		Folded     []string             `json:"folded"`
		Compare    map[string][]uint64  `json:"compare"`
		Trace      map[string][2]uint64 `json:"trace"`
		DeviceFree []uint64             `json:"device_free"`
		JSONEqual  bool                 `json:"json_equal"`
	} `json:"export"`
}

// roundTrip is one case's files.
type roundTrip struct {
	c                                    roundTripCase
	name                                 string
	trace, pickle, json, chrome, profile string
}

// TestRoundTrip takes each of torchsnap's test snapshots (pickles of
// protocols 2 to 5, JSON and a pickle gzipped, a ring buffer that
// wrapped, another device's trace, and a training loop on two devices
// that leaks a tensor per step with expandable segments and ends in an
// OOM) through linger trace import and trace export --format
// memviz-pickle and memviz-json, then has PyTorch's own reader, Debian's
// torch.cuda._memory_viz (1.13), read the original and the export. What
// it reports (the segments, their totals by block state, each block's
// folded stack line, and compare()'s segments added or removed between
// the original's device and the export), what Python's pickle.load finds
// in the export (protocol 4, whatever the input's; the trace's entries
// by action, with their bytes; the JSON export equal to the pickle) and
// Linger's own reading (torchsnap.Read of the export, trace analyze of
// the import) must all be what gen.py's construction says.
//
// 1.13's command line cannot read any current snapshot, PyTorch's or
// Linger's: it takes the file to be the list of segments 1.13's
// memory_snapshot() returned, and indexes the dict's first key as a
// segment; the test checks it fails so, as docs/pytorch.md says.
//
// The same imports export to Perfetto and pprof: the counter tracks
// reach the construction's peaks and end at its figures, and
// go tool pprof -top names the function the construction held most
// bytes in at the peak first, with those bytes.
func TestRoundTrip(t *testing.T) {
	needTorch(t)
	b, err := os.ReadFile(filepath.Join(snapData, "roundtrip.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cases []roundTripCase
	if err := json.Unmarshal(b, &cases); err != nil {
		t.Fatal(err)
	}
	if len(cases) < 10 {
		t.Fatalf("roundtrip.json has %d cases", len(cases))
	}
	dir := t.TempDir()
	var rts []roundTrip
	var args []string
	for i, c := range cases {
		rt := roundTrip{c: c, name: fmt.Sprintf("%s/device%d", c.File, c.Device)}
		p := func(ext string) string { return filepath.Join(dir, fmt.Sprintf("%d.%s", i, ext)) }
		rt.trace, rt.pickle, rt.json, rt.chrome, rt.profile = p("ltrace"), p("pickle"), p("json"), p("chrome.json"), p("pprof")
		orig := filepath.Join(snapData, c.File)
		mustRun(t, "trace", "import", orig, "-o", rt.trace, "--device", strconv.Itoa(c.Device))
		mustRun(t, "trace", "export", "--format", "memviz-pickle", rt.trace, "-o", rt.pickle)
		mustRun(t, "trace", "export", "--format", "memviz-json", rt.trace, "-o", rt.json)
		mustRun(t, "trace", "export", "--format", "perfetto", rt.trace, "-o", rt.chrome)
		mustRun(t, "trace", "export", "--format", "pprof", rt.trace, "-o", rt.profile)
		rts = append(rts, rt)
		args = append(args, orig, strconv.Itoa(c.Device), rt.pickle, rt.json)
	}
	out, err := exec.Command(torchPython, append([]string{"testdata/memviz_peer.py"}, args...)...).Output()
	if err != nil {
		t.Fatalf("memviz_peer.py: %v\n%s", err, stderrOf(err))
	}
	var reps []peerReport
	if err := json.Unmarshal(out, &reps); err != nil || len(reps) != len(rts) {
		t.Fatalf("memviz_peer.py: %d reports for %d cases (%v): %.300s", len(reps), len(rts), err, out)
	}
	t.Logf("peer: PyTorch %s, %s", reps[0].Torch, reps[0].Reader)
	for i, rt := range rts {
		t.Run(rt.name, func(t *testing.T) {
			checkPeer(t, rt.c, reps[i])
			checkOwnReading(t, rt)
			checkChrome(t, rt)
			checkPprof(t, rt)
		})
	}

	// 1.13's own command line, on Linger's export as on PyTorch's files.
	for _, f := range []string{rts[0].pickle, filepath.Join(snapData, "snap.p4.pickle")} {
		cmd := exec.Command(torchPython, "-m", "torch.cuda._memory_viz", "stats", f)
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), "TypeError: string indices must be integers") {
			t.Errorf("1.13's _memory_viz stats %s: %v, %s; want the TypeError of a dict read as a list of segments", f, err, out)
		}
	}
}

// mustRun runs linger with args and fails the test when it fails.
func mustRun(t *testing.T, args ...string) string {
	t.Helper()
	code, stdout, stderr := runCLI(t, args...)
	if code != 0 {
		t.Fatalf("linger %s: exit %d: %s", strings.Join(args, " "), code, stderr)
	}
	return stdout
}

func stderrOf(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return string(ee.Stderr)
	}
	return ""
}

// checkPeer compares PyTorch's reading with the construction.
func checkPeer(t *testing.T, c roundTripCase, r peerReport) {
	t.Helper()
	if c.Protocol == nil {
		if r.Original.Error == "" {
			t.Errorf("1.13 read %s, which is not a pickle", c.File)
		}
	} else if r.Original.Error != "" || r.Original.Protocol == nil || *r.Original.Protocol != *c.Protocol {
		t.Errorf("original: 1.13 %q, protocol %v; want it read, protocol %d", r.Original.Error, r.Original.Protocol, *c.Protocol)
	} else {
		if !reflect.DeepEqual(r.Original.Stats, c.Original.Stats) {
			t.Errorf("original: 1.13's stats %v, want %v", r.Original.Stats, c.Original.Stats)
		}
		diffLines(t, "original: 1.13's segments", r.Original.Folded, c.Original.Folded)
		if len(r.Export.Compare["only_before"]) != 0 || len(r.Export.Compare["only_after"]) != 0 {
			t.Errorf("1.13's compare of the original's device %d with the export: %v, want no segment in one only", c.Device, r.Export.Compare)
		}
	}
	x := r.Export
	if x.Protocol != 4 || !slices.Equal(x.Keys, []string{"device_traces", "segments"}) || !x.JSONEqual {
		t.Errorf("export: protocol %d, keys %v, JSON equal %v; want 4, [device_traces segments], true", x.Protocol, x.Keys, x.JSONEqual)
	}
	if !reflect.DeepEqual(x.Stats, c.Export.Stats) {
		t.Errorf("export: 1.13's stats %v, want %v", x.Stats, c.Export.Stats)
	}
	diffLines(t, "export: 1.13's segments", x.Folded, c.Export.Folded)
	if !reflect.DeepEqual(x.Trace, c.Export.Trace) || !slices.Equal(x.DeviceFree, c.Export.DeviceFree) {
		t.Errorf("export: trace by action %v, oom free %v\nwant                   %v, %v", x.Trace, x.DeviceFree, c.Export.Trace, c.Export.DeviceFree)
	}
}

// diffLines reports the first line where got and want part.
func diffLines(t *testing.T, what string, got, want []string) {
	t.Helper()
	for i := range max(len(got), len(want)) {
		var g, w string
		if i < len(got) {
			g = got[i]
		}
		if i < len(want) {
			w = want[i]
		}
		if g != w {
			t.Errorf("%s: %d lines, want %d; line %d:\n got %q\nwant %q", what, len(got), len(want), i+1, g, w)
			return
		}
	}
}

// checkOwnReading compares Linger's reading of its export
// (torchsnap.Read) and its analysis of the import with the construction.
func checkOwnReading(t *testing.T, rt roundTrip) {
	t.Helper()
	f, err := os.Open(rt.pickle)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	trace := map[string][2]uint64{}
	snap, err := torchsnap.Read(f, func(_ int, e *torchsnap.Entry) error {
		n := trace[e.Action]
		trace[e.Action] = [2]uint64{n[0] + 1, n[1] + e.Size}
		return nil
	}, torchsnap.Options{})
	if err != nil {
		t.Fatal(err)
	}
	stats := map[string]uint64{"segments": uint64(len(snap.Segments))}
	for _, s := range snap.Segments {
		for _, b := range s.Blocks {
			stats[b.State] += b.Size
			stats["total_size"] += b.Size
		}
	}
	if snap.Format != "pickle protocol 4" || !reflect.DeepEqual(stats, rt.c.Export.Stats) || !reflect.DeepEqual(trace, rt.c.Export.Trace) {
		t.Errorf("Linger's reading of its export: %s, %v, trace %v\nwant pickle protocol 4, %v, %v", snap.Format, stats, trace, rt.c.Export.Stats, rt.c.Export.Trace)
	}
	var rep struct {
		Peak   struct{ Bytes uint64 }
		Tracks struct {
			End    struct{ Allocated, Reserved uint64 }
			Points []struct {
				ReservedMax uint64 `json:"reserved_max"`
			}
		}
	}
	if err := json.Unmarshal([]byte(mustRun(t, "trace", "analyze", "--json", rt.trace)), &rep); err != nil {
		t.Fatal(err)
	}
	var reservedPeak uint64
	for _, p := range rep.Tracks.Points {
		reservedPeak = max(reservedPeak, p.ReservedMax)
	}
	want := rt.c.Export
	if rep.Tracks.End.Allocated != want.Stats["active_allocated"] || rep.Tracks.End.Reserved != want.Stats["total_size"] ||
		rep.Peak.Bytes != want.Peak.Allocated || reservedPeak != want.Peak.Reserved {
		t.Errorf("trace analyze: at the end %d allocated, %d reserved; peaks %d, %d; want %d, %d; %d, %d", rep.Tracks.End.Allocated, rep.Tracks.End.Reserved,
			rep.Peak.Bytes, reservedPeak, want.Stats["active_allocated"], want.Stats["total_size"], want.Peak.Allocated, want.Peak.Reserved)
	}
}

// checkChrome reads the Perfetto export as Chrome trace JSON: its
// allocated and reserved counter tracks reach the construction's peaks
// and end at its figures.
func checkChrome(t *testing.T, rt roundTrip) {
	t.Helper()
	b, err := os.ReadFile(rt.chrome)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		TraceEvents []struct {
			Ph   string         `json:"ph"`
			Name string         `json:"name"`
			Ts   *float64       `json:"ts"`
			Pid  *int           `json:"pid"`
			Args map[string]any `json:"args"`
		} `json:"traceEvents"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("perfetto export is not JSON: %v", err)
	}
	type track struct{ peak, last float64 }
	tracks := map[string]*track{}
	last := -1.0
	for i, e := range doc.TraceEvents {
		if e.Ph == "" || e.Pid == nil || (e.Ph != "M" && e.Ts == nil) {
			t.Fatalf("event %d: %+v lacks ph, pid or ts", i, e)
		}
		if e.Ph != "C" {
			continue
		}
		if *e.Ts < last {
			t.Fatalf("counter event %d at %v µs after one at %v", i, *e.Ts, last)
		}
		last = *e.Ts
		tr := tracks[e.Name]
		if tr == nil {
			tr = &track{}
			tracks[e.Name] = tr
		}
		v, ok := e.Args["value"].(float64)
		if !ok {
			t.Fatalf("counter %q at %v µs: args %v, want a number as value", e.Name, *e.Ts, e.Args)
		}
		tr.peak, tr.last = max(tr.peak, v), v
	}
	want := rt.c.Export
	for name, w := range map[string]track{
		"allocated": {float64(want.Peak.Allocated), float64(want.Stats["active_allocated"])},
		"reserved":  {float64(want.Peak.Reserved), float64(want.Stats["total_size"])},
	} {
		if got := tracks[name]; got == nil || *got != w {
			t.Errorf("perfetto counter %q: %+v, want peak and last %+v", name, got, w)
		}
	}
}

// topRow is the first row of go tool pprof -top -unit=B's table.
var topRow = regexp.MustCompile(`(?m)^\s+(\d+)B\s+[\d.]+%\s+[\d.]+%\s+\d+B\s+[\d.]+%\s+(\S+)\s*$`)

// checkPprof has go tool pprof read the heap profile at the peak: its
// total is the construction's peak, and its top row the function that
// held most of it.
func checkPprof(t *testing.T, rt roundTrip) {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("go tool pprof reads the profile: %v", err)
	}
	out, err := exec.Command(gobin, "tool", "pprof", "-top", "-unit=B", "-sample_index=inuse_space", rt.profile).CombinedOutput()
	if err != nil {
		t.Fatalf("go tool pprof: %v\n%s", err, out)
	}
	var top string
	var most uint64
	for f, n := range rt.c.Export.AtPeak {
		if n > most || (n == most && f < top) {
			top, most = f, n
		}
	}
	m := topRow.FindStringSubmatch(string(out))
	total := fmt.Sprintf("100%% of %dB total", rt.c.Export.Peak.Allocated)
	if m == nil || m[1] != strconv.FormatUint(most, 10) || m[2] != top || !strings.Contains(string(out), total) {
		t.Errorf("go tool pprof -top: want %q and %s with %d B first:\n%s", total, top, most, out)
	}
}
