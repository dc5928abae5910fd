package nbformat

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// FuzzRead checks that Read never panics, fails only with its sentinels,
// and that whatever it reads it also writes, as a notebook that validates
// against the 4.5 schema and reads back to the same bytes.
func FuzzRead(f *testing.F) {
	seeds, _ := filepath.Glob("testdata/roundtrip/*.ipynb")
	for _, s := range seeds {
		data, err := os.ReadFile(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		nb, err := Read(bytes.NewReader(data))
		if err != nil {
			if !errors.Is(err, ErrInvalid) && !errors.Is(err, ErrUnsupported) {
				t.Fatalf("Read error wraps no sentinel: %v", err)
			}
			return
		}
		out, err := Marshal(nb)
		if err != nil {
			t.Fatalf("Read accepted a notebook Write refuses: %v", err)
		}
		if err := validate(t, out); err != nil {
			t.Fatalf("written notebook does not validate: %v\n%s", err, out)
		}
		nb2, err := Read(bytes.NewReader(out))
		if err != nil {
			t.Fatalf("Read(Write(nb)): %v", err)
		}
		again, err := Marshal(nb2)
		if err != nil || !bytes.Equal(again, out) {
			t.Fatalf("not a fixed point (%v):\n%s\n%s", err, out, again)
		}
	})
}
