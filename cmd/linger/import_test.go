package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"linger/timeline"
	"linger/timeline/event"
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
	if fi, err := os.Stat(out); err != nil {
		t.Error(err)
	} else if fi.Mode().Perm() != 0o644 {
		t.Errorf("the trace's mode is %v; want 0644, readable by whoever shares the directory", fi.Mode())
	}
	code, stdout, stderr = runCLI(t, "trace", "analyze", out)
	if code != 0 || !strings.Contains(stdout, "out of memory: 1 allocation(s) failed") || !strings.Contains(stdout, "3.0 MiB free") {
		t.Errorf("analyze of the import: exit %d %s\n%s", code, stderr, stdout)
	}

	// The card's memory (1 GiB) says what the device used at the OOM:
	// 1 GiB less its 3 MiB free (gen.py's oom entry), 1021 MiB; of it the
	// allocator had reserved its one 20 MiB segment, so 1001 MiB was
	// outside it.
	dm := filepath.Join(t.TempDir(), "dm.ltrace")
	code, stdout, stderr = runCLI(t, "trace", "import", "../../timeline/torchsnap/testdata/snap.wrapped.p4.pickle", "-o", dm, "--device-memory", "1GiB")
	if want := "3.0 MiB free on the device, 20.0 MiB reserved by the allocator; the device used 1021.0 MiB of 1.0 GiB, 1001.0 MiB of it outside the allocator"; code != 0 || !strings.Contains(stdout, want) {
		t.Errorf("import --device-memory 1GiB: exit %d %s\n%s\nwant %q", code, stderr, stdout, want)
	}
	code, stdout, _ = runCLI(t, "trace", "analyze", dm)
	if code != 0 || !strings.Contains(stdout, "device used 1021.0 MiB") || !strings.Contains(stdout, "outside the allocator: at most 1001.0 MiB") {
		t.Errorf("analyze of the import with the device's memory: exit %d\n%s", code, stdout)
	}
	if code, _, stderr = runCLI(t, "trace", "import", "../../timeline/torchsnap/testdata/snap.wrapped.p4.pickle", "-o", dm, "--device-memory", "2MiB"); code == 0 || !strings.Contains(stderr, "less than the free bytes (3.0 MiB)") {
		t.Errorf("import --device-memory 2MiB: exit %d %s; want an error", code, stderr)
	}
	if code, stdout, _ = runCLI(t, "trace", "analyze", dm); code != 0 || !strings.Contains(stdout, "device used 1021.0 MiB") {
		t.Errorf("the failed import did not keep the trace it would have replaced: exit %d\n%s", code, stdout)
	}
	if ents, _ := os.ReadDir(filepath.Dir(dm)); len(ents) != 1 {
		t.Errorf("the failed import left %d files beside its output, want only the trace kept", len(ents))
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

// linger open imports a snapshot once into its trace directory and serves
// it: the URL it prints opens the snapshot's timeline page with the token,
// whose level-of-detail route counts the imported events.
func TestOpen(t *testing.T) {
	traces := t.TempDir()
	snap := filepath.Join(t.TempDir(), "rank0.pickle")
	b, err := os.ReadFile("../../timeline/torchsnap/testdata/snap.p4.pickle")
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(snap, b, 0o644)
	stdout, stderr := make(lineChan, 100), make(lineChan, 100)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- runOpen(ctx, []string{snap, "--no-browser", "--dir", t.TempDir(), "--trace-dir", traces}, stdout, stderr)
	}()
	defer func() {
		cancel()
		go func() {
			for range stderr {
			}
		}()
		<-done
	}()
	var url string
	for url == "" {
		select {
		case l := <-stdout:
			url = l
		case l := <-stderr:
			t.Log(l)
		case err := <-done:
			t.Fatalf("open returned %v", err)
		case <-time.After(20 * time.Second):
			t.Fatal("open printed no URL")
		}
	}
	page, token, ok := strings.Cut(url, "?token=")
	if !ok || !strings.HasSuffix(page, "/timeline/rank0.ltrace") {
		t.Fatalf("URL %q, want the timeline of rank0.ltrace with the token", url)
	}
	if code, body := get(t, page, token, ""); code != 200 || !strings.Contains(body, `data-testid="timeline"`) {
		t.Errorf("timeline page: %d %.200s", code, body)
	}
	base := strings.TrimSuffix(page, "timeline/rank0.ltrace")
	code, body := get(t, base+"api/timeline/traces/rank0.ltrace/lod", token, "")
	// Device 0's trace as gen.py built it: a segment, 400 blocks
	// allocated and freed, one more allocated, a segment mapped and
	// unmapped, an oom and a snapshot mark: 1+800+1+2+1+1 events, and
	// the mark that says it has no steps.
	if code != 200 || !strings.Contains(body, `"events":807`) {
		t.Errorf("lod: %d %.200s", code, body)
	}
	if _, err := os.Stat(filepath.Join(traces, "rank0.ltrace")); err != nil {
		t.Error(err)
	}
	if traceName("a/.b.pickle.gz", 2) != "b.cuda2.ltrace" {
		t.Errorf("traceName: %q", traceName("a/.b.pickle.gz", 2))
	}
}

// linger open reuses an import only when it was made with the same
// --device, --step and --rules (the rules file's version too): the leaky
// steps' snapshot opened with its steps, then with --step none (no step
// scopes at all), then with rules, and with the rules file changed.
func TestOpenImportSettings(t *testing.T) {
	b, err := os.ReadFile("../../timeline/torchsnap/testdata/steps.leak.p4.pickle")
	if err != nil {
		t.Fatal(err)
	}
	var exp map[string]struct {
		Steps []struct{} `json:"steps"`
	}
	eb, _ := os.ReadFile("../../timeline/torchsnap/testdata/steps-expected.json")
	if err := json.Unmarshal(eb, &exp); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	snap, out := filepath.Join(dir, "run.pickle"), filepath.Join(dir, "traces", "run.ltrace")
	os.WriteFile(snap, b, 0o644)
	os.Mkdir(filepath.Dir(out), 0o755)
	rulesFile := filepath.Join(dir, "rules.json")
	os.WriteFile(rulesFile, []byte(`{"rules": [{"name": "forward", "category": "activation"}]}`), 0o644)
	rules, err := snapRules(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	steps := func() int {
		r, err := timeline.Open(out)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		n := 0
		for {
			e, err := r.ReadEvent()
			if err != nil {
				return n
			}
			if e.Kind == event.KindScopeBegin && e.ScopeView().Kind() == event.ScopeStep {
				n++
			}
		}
	}
	for i, c := range []struct {
		set      importSettings
		imported bool
		steps    int
	}{
		{importSettings{device: -1}, true, len(exp["leak"].Steps)},
		{importSettings{device: -1}, false, len(exp["leak"].Steps)},
		{importSettings{device: -1, step: "none"}, true, 0},
		{importSettings{device: -1, step: "none"}, false, 0},
		{importSettings{device: -1, rules: rules, rulesFile: rulesFile}, true, len(exp["leak"].Steps)},
		{importSettings{device: -1, rules: rules, rulesFile: rulesFile}, false, len(exp["leak"].Steps)},
	} {
		if i == 5 {
			later := time.Now().Add(2 * time.Second)
			os.Chtimes(rulesFile, later, later)
			c.imported = true // the rules file changed
		}
		var stderr bytes.Buffer
		if err := importOnce(snap, out, c.set, &stderr); err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(stderr.String(), "imported"); got != c.imported {
			t.Errorf("open %d (%s): imported %v, want %v", i, strings.TrimSpace(c.set.key()), got, c.imported)
		}
		if n := steps(); n != c.steps {
			t.Errorf("open %d (%s): %d steps in the trace, want %d", i, strings.TrimSpace(c.set.key()), n, c.steps)
		}
	}
}
