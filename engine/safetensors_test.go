package engine

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"linger/engine/alloc"
	"linger/engine/device"
)

// saveWeights writes e's weights to a safetensors file.
func saveWeights(t *testing.T, e *Engine, path string, skip string) {
	t.Helper()
	var names []string
	var shapes [][]int
	var data [][]float32
	w := &weights{}
	specs := weightSpecs(e.cfg, w)
	for i, s := range specs {
		if s.name == skip {
			continue
		}
		names = append(names, s.name)
		shapes = append(shapes, s.shape)
		data = append(data, e.w.all[i].Float32s())
	}
	if err := WriteSafetensors(path, names, shapes, data); err != nil {
		t.Fatal(err)
	}
}

func TestLoadSafetensors(t *testing.T) {
	dir := t.TempDir()
	cfg := preset(t, "tiny")
	src := newTestEngine(t, cfg, KVContiguous, nil)
	path := filepath.Join(dir, "tiny.safetensors")
	saveWeights(t, src, path, "")
	// A different seed, then the file: the file must win.
	e, err := New(Options{Config: cfg, Allocator: newCPU(t, nil), Seed: 99, Weights: path})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	toks := prompt(10, cfg.Vocab, 1)
	c1, _ := src.NewKVCache(10)
	c2, _ := e.NewKVCache(10)
	if d := maxDiff(logitsOf(t, src, toks, c1), logitsOf(t, e, toks, c2)); d != 0 {
		t.Errorf("loaded weights give logits differing by %g", d)
	}
	// On meta only shapes are checked.
	m, err := New(Options{Config: cfg, Device: device.NewMeta(0), Weights: path})
	if err != nil {
		t.Fatalf("meta load: %v", err)
	}
	m.Close()

	bad := func(name string, content []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, content, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	header := func(js string) []byte {
		var b bytes.Buffer
		binary.Write(&b, binary.LittleEndian, uint64(len(js)))
		b.WriteString(js)
		b.Write(make([]byte, 64))
		return b.Bytes()
	}
	missing := filepath.Join(dir, "missing-norm.safetensors")
	saveWeights(t, src, missing, "model.norm.weight")
	small := preset(t, "tiny")
	small.Hidden = 32
	for _, tc := range []struct {
		name string
		cfg  Config
		path string
		want string
	}{
		{"no file", cfg, filepath.Join(dir, "nope.safetensors"), "no such file"},
		{"short", cfg, bad("short", []byte{1, 2}), "malformed"},
		{"huge header", cfg, bad("huge", header("{}")[:8]), "header length"},
		{"bad json", cfg, bad("json", header("{not json")), "header json"},
		{"bad offsets", cfg, bad("offs", header(`{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,8]}}`)), "data offsets"},
		{"bad dtype name", cfg, bad("dt", header(`{"a":{"dtype":"Q4","shape":[1],"data_offsets":[0,1]}}`)), "unknown dtype"},
		{"missing tensor", cfg, missing, `missing tensor "model.norm.weight"`},
		{"wrong shape", small, path, "shape [4096 64] in file, model needs [4096 32]"},
		{"wrong dtype", cfg, bad("bf16", header(`{"model.embed_tokens.weight":{"dtype":"BF16","shape":[4096,64],"data_offsets":[0,524288]}}`+strings.Repeat(" ", 0))), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "wrong dtype" {
				// pad the data section so the offsets are in range
				b, _ := os.ReadFile(tc.path)
				b = append(b, make([]byte, 524288)...)
				os.WriteFile(tc.path, b, 0o644)
				tc.want = "dtype BF16 in file"
			}
			e, err := New(Options{Config: tc.cfg, Allocator: newCPU(t, nil), Weights: tc.path})
			if err == nil {
				e.Close()
				t.Fatal("no error")
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "load weights") {
				t.Errorf("err = %v, want it to mention %q", err, tc.want)
			}
		})
	}
	// A failed load leaves nothing allocated.
	a := alloc.New(device.NewCPU(1<<30), alloc.Options{})
	if _, err := New(Options{Config: cfg, Allocator: a, Weights: missing}); err == nil {
		t.Fatal("no error")
	}
	if got := a.Stats().Allocated; got != 0 {
		t.Errorf("allocated %d after a failed load", got)
	}
}

func FuzzParseSafetensors(f *testing.F) {
	for _, js := range []string{
		`{}`,
		`{"__metadata__":{"format":"pt"},"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}}`,
		`{"w":{"dtype":"BF16","shape":[3],"data_offsets":[0,6]},"b":{"dtype":"F32","shape":[],"data_offsets":[6,10]}}`,
	} {
		var b bytes.Buffer
		binary.Write(&b, binary.LittleEndian, uint64(len(js)))
		b.WriteString(js)
		b.Write(make([]byte, 16))
		f.Add(b.Bytes())
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		st, err := parseSafetensors(bytes.NewReader(data), int64(len(data)))
		if err != nil {
			if !errors.Is(err, ErrSafetensors) {
				t.Fatalf("error %v does not wrap ErrSafetensors", err)
			}
			return
		}
		for name, e := range st.tensors {
			if st.start+e.Offsets[1] > int64(len(data)) {
				t.Fatalf("tensor %q past the end", name)
			}
		}
	})
}
