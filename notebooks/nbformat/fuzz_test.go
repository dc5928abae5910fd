package nbformat

import (
	"bytes"
	"encoding/json"
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

// FuzzFields puts arbitrary strings where the schema has patterns and
// types (cell id, cell name, tag, mime type and its value, metadata
// values), which byte-level mutation of whole notebooks rarely reaches,
// and checks that Read and the schema agree on what Write produces.
func FuzzFields(f *testing.F) {
	f.Add("abc", "name", "tag", "text/plain", `"x"`, `"auto"`, "src\n")
	f.Add("a b", "", "a,b", "application/json", `{"a": 1}`, `true`, "")
	f.Add("x", "a\nb", "t\n", "application/x+json", `[1]`, `"no"`, "\u2028")
	f.Add("-_", "n", "", "image/png", `1`, `null`, "\r\n")
	f.Fuzz(func(t *testing.T, id, name, tag, mime, value, scrolled, source string) {
		cell := map[string]any{
			"id": id, "cell_type": "code", "source": source, "execution_count": nil,
			"metadata": map[string]any{"name": name, "tags": []string{tag}, "scrolled": json.RawMessage(scrolled)},
			"outputs": []any{map[string]any{
				"output_type": "display_data", "metadata": map[string]any{},
				"data": map[string]any{mime: json.RawMessage(value)},
			}},
		}
		data, err := json.Marshal(map[string]any{"nbformat": 4, "nbformat_minor": 5, "metadata": map[string]any{}, "cells": []any{cell}})
		if err != nil {
			return // value or scrolled is not JSON
		}
		nb, err := Read(bytes.NewReader(data))
		if err != nil {
			if validate(t, data) == nil {
				t.Fatalf("Read refused a valid notebook: %v\n%s", err, data)
			}
			return
		}
		out, err := Marshal(nb)
		if err != nil {
			t.Fatalf("Write refused what Read accepted: %v", err)
		}
		if err := validate(t, out); err != nil {
			t.Fatalf("written notebook does not validate: %v\n%s", err, out)
		}
	})
}
