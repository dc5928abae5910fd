package nbformat

import (
	"bytes"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"testing/iotest"
)

// oneTree encodes nb as a single tree of maps in one encoding/json call,
// as Write and MarshalJSON did before they streamed a cell at a time: the
// reference their bytes must equal.
func oneTree(t *testing.T, nb *Notebook, f form) []byte {
	t.Helper()
	md := rawTree(nb.Metadata)
	delete(md, "orig_nbformat")
	delete(md, "orig_nbformat_minor")
	cells := make([]any, 0, len(nb.Cells))
	for _, c := range nb.Cells {
		cells = append(cells, c.tree(f.split))
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(f.escapeHTML)
	enc.SetIndent("", f.indent)
	if err := enc.Encode(map[string]any{"nbformat": Format, "nbformat_minor": FormatMinor, "metadata": md, "cells": cells}); err != nil {
		t.Fatal(err)
	}
	if f.indent == "" {
		return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	}
	return unescapeSeparators(buf.Bytes())
}

// streamNotebooks are the notebooks the streamed encodings are checked
// on: the round-trip inputs, an empty one, and one of the characters
// encoders treat apart (HTML, U+2028, U+2029, escapes) in every place.
func streamNotebooks(t *testing.T) map[string]*Notebook {
	t.Helper()
	nbs := map[string]*Notebook{"empty": {}, "new": New()}
	ins, err := filepath.Glob("testdata/roundtrip/*.ipynb")
	if err != nil || len(ins) == 0 {
		t.Fatalf("no inputs: %v", err)
	}
	for _, in := range ins {
		nb, err := ReadFile(in)
		if err != nil {
			t.Fatal(err)
		}
		nbs[filepath.Base(in)] = nb
	}
	odd := "<b>&amp;</b>\u2028line\u2029\"q\"\\\t\x01é\n"
	nb := New()
	nb.Metadata["title"] = json.RawMessage(`"<&>\u2028 \u2029 \\ \""`)
	md := NewCell(CellMarkdown, odd)
	code := NewCell(CellCode, odd+odd)
	code.Outputs = []*Output{
		{Type: OutputStream, Name: "stdout", Text: odd},
		{Type: OutputExecuteResult, ExecutionCount: Count(1), Data: MimeBundle{"text/html": json.RawMessage(`"<p>\u2028</p>"`), "text/plain": json.RawMessage(`"a\nb"`)}, Metadata: Metadata{}},
		{Type: OutputError, EName: "E<", EValue: odd},
	}
	nb.Cells = []*Cell{md, code, NewCell(CellRaw, "")}
	nbs["odd"] = nb
	return nbs
}

// TestStreamedEncodings: Write, MarshalJSON and WriteJSON, which encode a
// cell at a time, write the bytes one encoding of the whole notebook does,
// and WriteJSON those json.Marshal gives.
func TestStreamedEncodings(t *testing.T) {
	for name, nb := range streamNotebooks(t) {
		t.Run(name, func(t *testing.T) {
			file, err := Marshal(nb)
			if err != nil {
				t.Fatal(err)
			}
			if want := oneTree(t, nb, fileForm); !bytes.Equal(file, want) {
				t.Errorf("Write differs from one tree:\n%s", lineDiff(string(want), string(file)))
			}
			mem, err := nb.MarshalJSON()
			if err != nil {
				t.Fatal(err)
			}
			if want := oneTree(t, nb, form{}); !bytes.Equal(mem, want) {
				t.Errorf("MarshalJSON differs from one tree:\n got %s\nwant %s", mem, want)
			}
			var buf bytes.Buffer
			if err := nb.WriteJSON(&buf); err != nil {
				t.Fatal(err)
			}
			want, err := json.Marshal(nb)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(buf.Bytes(), want) {
				t.Errorf("WriteJSON differs from json.Marshal:\n got %s\nwant %s", buf.Bytes(), want)
			}
			// Read, a cell at a time, reads back what it wrote.
			back, err := Read(iotest.OneByteReader(bytes.NewReader(file)))
			if err != nil {
				t.Fatal(err)
			}
			if again, err := Marshal(back); err != nil || !bytes.Equal(again, file) {
				t.Errorf("Read(Write(nb)) writes other bytes (%v):\n%s", err, lineDiff(string(file), string(again)))
			}
		})
	}
}

// TestWriteJSONInvalid: an invalid notebook writes nothing, so a server can
// still answer with an error.
func TestWriteJSONInvalid(t *testing.T) {
	nb := New()
	nb.Cells = []*Cell{{ID: "bad id", Type: CellCode}}
	var buf bytes.Buffer
	if err := nb.WriteJSON(&buf); !errors.Is(err, ErrInvalid) || buf.Len() > 0 {
		t.Errorf("WriteJSON of an invalid notebook: %v, wrote %q", err, buf.Bytes())
	}
}

// TestDecodeTree: DecodeTree gives the values dec.Decode into an any
// does, and Read the errors of a stream it cannot read.
func TestDecodeTree(t *testing.T) {
	for _, doc := range []string{
		`{"cells":[{"a":[1,{"b":null}]},2,"x",[]],"metadata":{"k":{"v":[true]}},"e":{},"l":[]}`,
		`[{"a":1},[2,[3]]]`, `"s"`, `1.5`, `null`, `{"a":1,"a":2}`,
	} {
		dec := json.NewDecoder(strings.NewReader(doc))
		dec.UseNumber()
		got, err := DecodeTree(dec)
		if err != nil {
			t.Fatalf("%s: %v", doc, err)
		}
		dec = json.NewDecoder(strings.NewReader(doc))
		dec.UseNumber()
		var want any
		if err := dec.Decode(&want); err != nil {
			t.Fatal(err)
		}
		g, _ := json.Marshal(got)
		w, _ := json.Marshal(want)
		if !bytes.Equal(g, w) {
			t.Errorf("DecodeTree(%s) = %s, want %s", doc, g, w)
		}
	}
	for _, doc := range []string{`{"cells":[{}`, `{"cells" 1}`, `{"cells":[1 2]}`, `{"cells":[],}`, `{`, `[1,`} {
		if _, err := Read(strings.NewReader(doc)); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "malformed JSON") {
			t.Errorf("Read(%s): %v, want malformed JSON", doc, err)
		}
	}
	read := errors.New("disk on fire")
	if _, err := Read(iotest.ErrReader(read)); !errors.Is(err, read) || errors.Is(err, ErrInvalid) {
		t.Errorf("Read of a failing reader: %v", err)
	}
}
