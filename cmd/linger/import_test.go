package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// linger trace import reads a snapshot as PyTorch writes it into a trace
// that the other trace commands read: the wrapped ring of torchsnap's
// test snapshots (testdata/gen.py there) says its history starts late,
// names the device left out and the fields it skipped; analyze then
// finds the oom the snapshot recorded, with the 3 MiB its device had
// free. A file that is not a snapshot is an error that says so, and
// leaves no trace behind.
func TestTraceImport(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "snap.ltrace")
	code, stdout, stderr := runCLI(t, "trace", "import", "../../timeline/torchsnap/testdata/snap.wrapped.p4.pickle", "-o", out)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{"device 0, ", "history starts late", "2 blocks and segments alive before its first entry", "device 2: 50 entries not imported (--device 2)", "entry.new_field"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("import output lacks %q:\n%s", want, stdout)
		}
	}
	code, stdout, stderr = runCLI(t, "trace", "analyze", out)
	if code != 0 || !strings.Contains(stdout, "out of memory: 1 allocation(s) failed") || !strings.Contains(stdout, "3.0 MiB free") {
		t.Errorf("analyze of the import: exit %d %s\n%s", code, stderr, stdout)
	}

	junk := filepath.Join(dir, "junk.pickle")
	os.WriteFile(junk, []byte("not a snapshot at all"), 0o644)
	bad := filepath.Join(dir, "bad.ltrace")
	code, _, stderr = runCLI(t, "trace", "import", junk, "-o", bad)
	if code == 0 || !strings.Contains(stderr, "not a PyTorch memory snapshot") {
		t.Errorf("junk: exit %d: %s", code, stderr)
	}
	if _, err := os.Stat(bad); !os.IsNotExist(err) {
		t.Errorf("a failed import left %s behind (%v)", bad, err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 2 {
		t.Errorf("the directory holds %d files, want the import and the junk (no temporary left)", len(ents))
	}
}
