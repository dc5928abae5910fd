package export

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/pprof/profile"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// TestGolden compares every export of the hand-built trace with its golden
// file; go test -update rewrites them. The trace's times are fixed, so the
// outputs are byte for byte stable.
func TestGolden(t *testing.T) {
	tr := handTrace()
	cases := []struct {
		file  string
		write func(*bytes.Buffer) error
	}{
		{"hand.chrome.json", func(b *bytes.Buffer) error { return Chrome(b, tr, ChromeOptions{}) }},
		{"hand.aggregated.chrome.json", func(b *bytes.Buffer) error { return Chrome(b, tr, ChromeOptions{MaxObjects: 2}) }},
		{"hand.memviz.json", func(b *bytes.Buffer) error { return MemvizJSON(b, tr, MemvizOptions{}) }},
		{"hand.memviz.pickle", func(b *bytes.Buffer) error { return MemvizPickle(b, tr, MemvizOptions{}) }},
		{"hand.at7.memviz.json", func(b *bytes.Buffer) error { return MemvizJSON(b, tr, MemvizOptions{At: AtSeq(7)}) }},
		{"hand.peak.pprof.txt", func(b *bytes.Buffer) error {
			// The profile's text form: the gzipped bytes depend on the
			// compressor's version, the content does not.
			var raw bytes.Buffer
			if err := Pprof(&raw, tr, PprofOptions{At: AtPeak}); err != nil {
				return err
			}
			p, err := profile.Parse(&raw)
			if err != nil {
				return err
			}
			b.WriteString(p.String())
			return nil
		}},
	}
	for _, c := range cases {
		t.Run(c.file, func(t *testing.T) {
			var b bytes.Buffer
			if err := c.write(&b); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join("testdata", c.file)
			if *update {
				if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test -update to create it)", err)
			}
			if !bytes.Equal(b.Bytes(), want) {
				t.Errorf("%s differs from its golden file (go test -update rewrites it):\n%s", c.file, lineDiff(want, b.Bytes()))
			}
		})
	}
}

// lineDiff shows the first differing line of two outputs.
func lineDiff(want, got []byte) string {
	wl, gl := bytes.Split(want, []byte("\n")), bytes.Split(got, []byte("\n"))
	for i := 0; i < len(wl) || i < len(gl); i++ {
		var w, g []byte
		if i < len(wl) {
			w = wl[i]
		}
		if i < len(gl) {
			g = gl[i]
		}
		if !bytes.Equal(w, g) {
			return "line " + itoa(i+1) + ":\n- " + string(w) + "\n+ " + string(g)
		}
	}
	return "(same lines)"
}

func itoa(i int) string { return string(appendInt(nil, i)) }

func appendInt(b []byte, i int) []byte {
	if i >= 10 {
		b = appendInt(b, i/10)
	}
	return append(b, byte('0'+i%10))
}
