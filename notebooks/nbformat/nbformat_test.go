package nbformat

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/roundtrip")

var (
	schemaOnce sync.Once
	schema     *jsonschema.Schema
	schemaErr  error
)

// validate checks data against the official nbformat 4.5 schema, strictly:
// everything the schema says, with no leniency for missing cell ids.
func validate(t testing.TB, data []byte) error {
	t.Helper()
	schemaOnce.Do(func() {
		f, err := os.Open("testdata/nbformat.v4.5.schema.json")
		if err != nil {
			schemaErr = err
			return
		}
		defer f.Close()
		doc, err := jsonschema.UnmarshalJSON(f)
		if err != nil {
			schemaErr = err
			return
		}
		c := jsonschema.NewCompiler()
		if schemaErr = c.AddResource("nbformat.v4.5.schema.json", doc); schemaErr != nil {
			return
		}
		schema, schemaErr = c.Compile("nbformat.v4.5.schema.json")
	})
	if schemaErr != nil {
		t.Fatalf("load schema: %v", schemaErr)
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		return err
	}
	return schema.Validate(inst)
}

// counterIDs makes the ids Read gives old notebooks reproducible.
func counterIDs(t *testing.T) {
	n := 0
	old := newID
	newID = func() string { n++; return fmt.Sprintf("cell-%d", n) }
	t.Cleanup(func() { newID = old })
}

func TestSchemaCatchesMissingCellID(t *testing.T) {
	// The check the other tests rely on must be able to fail: a 4.5
	// notebook whose cell lacks an id is invalid.
	const noID = `{"cells": [{"cell_type": "markdown", "metadata": {}, "source": "x"}],
		"metadata": {}, "nbformat": 4, "nbformat_minor": 5}`
	if err := validate(t, []byte(noID)); err == nil {
		t.Fatal("schema accepted a cell without an id")
	}
	withID := strings.Replace(noID, `"cell_type"`, `"id": "abc", "cell_type"`, 1)
	if err := validate(t, []byte(withID)); err != nil {
		t.Fatalf("schema rejected a valid notebook: %v", err)
	}
	// Read refuses it as well, naming the field.
	_, err := Read(strings.NewReader(noID))
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "cells[0].id") {
		t.Fatalf("Read = %v, want ErrInvalid about cells[0].id", err)
	}
}

func TestRoundTrip(t *testing.T) {
	ins, err := filepath.Glob("testdata/roundtrip/*.in.ipynb")
	if err != nil || len(ins) == 0 {
		t.Fatalf("no inputs: %v", err)
	}
	for _, in := range ins {
		name := strings.TrimSuffix(filepath.Base(in), ".in.ipynb")
		t.Run(name, func(t *testing.T) {
			counterIDs(t)
			src, err := os.ReadFile(in)
			if err != nil {
				t.Fatal(err)
			}
			nb, err := Read(bytes.NewReader(src))
			if err != nil {
				t.Fatalf("Read: %v", err)
			}
			var buf bytes.Buffer
			if err := Write(&buf, nb); err != nil {
				t.Fatalf("Write: %v", err)
			}
			got := buf.Bytes()
			if err := validate(t, got); err != nil {
				t.Fatalf("written notebook does not validate: %v\n%s", err, got)
			}
			golden := strings.TrimSuffix(in, ".in.ipynb") + ".out.ipynb"
			if *update {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("Write differs from %s (run with -update to accept):\n%s", golden, lineDiff(string(want), string(got)))
			}
			// Written output reads back to a notebook that writes the
			// same bytes: the format is a fixed point.
			nb2, err := Read(bytes.NewReader(got))
			if err != nil {
				t.Fatalf("Read(Write(nb)): %v", err)
			}
			again, err := Marshal(nb2)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(again, got) {
				t.Errorf("second round trip differs:\n%s", lineDiff(string(got), string(again)))
			}
		})
	}
}

// TestJupyterBytes checks that a notebook written the way Jupyter writes it
// (testdata/roundtrip/jupyter.ipynb, made with Python's
// json.dumps(sort_keys=True, indent=1, ensure_ascii=False) and nbformat's
// line splitting) comes back byte for byte.
func TestJupyterBytes(t *testing.T) {
	src, err := os.ReadFile("testdata/roundtrip/jupyter.ipynb")
	if err != nil {
		t.Fatal(err)
	}
	if err := validate(t, src); err != nil {
		t.Fatalf("input does not validate: %v", err)
	}
	nb, err := Read(bytes.NewReader(src))
	if err != nil {
		t.Fatal(err)
	}
	got, err := Marshal(nb)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, src) {
		t.Errorf("Jupyter's bytes changed:\n%s", lineDiff(string(src), string(got)))
	}
}

// lineDiff prints the lines that differ, enough to see what changed.
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var b strings.Builder
	shown := 0
	for i := 0; i < len(w) || i < len(g); i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			fmt.Fprintf(&b, "line %d:\n- %s\n+ %s\n", i+1, wl, gl)
			if shown++; shown == 10 {
				b.WriteString("…\n")
				break
			}
		}
	}
	return b.String()
}

func TestReadContent(t *testing.T) {
	counterIDs(t)
	nb, err := ReadFile("testdata/roundtrip/full.in.ipynb")
	if err != nil {
		t.Fatal(err)
	}
	if len(nb.Cells) != 5 {
		t.Fatalf("got %d cells, want 5", len(nb.Cells))
	}
	md, code := nb.Cells[0], nb.Cells[1]
	if want := "# Héllo\n\nAn image: ![x](attachment:x.png)\r\nCRLF line\rCR line\u2028LS line"; md.Source != want {
		t.Errorf("markdown source = %q, want %q", md.Source, want)
	}
	if got, _ := md.Attachments["x.png"].Text("text/plain"); got != "one\ntwo" {
		t.Errorf("attachment text/plain = %q, want joined lines", got)
	}
	if code.Source != "x = 1\nprint(x)\nx" || *code.ExecutionCount != 3 {
		t.Errorf("code cell = %q, count %d", code.Source, *code.ExecutionCount)
	}
	if len(code.Outputs) != 5 {
		t.Fatalf("got %d outputs, want 5", len(code.Outputs))
	}
	if o := code.Outputs[0]; o.Type != OutputStream || o.Name != "stdout" || o.Text != "1\n2\n" {
		t.Errorf("stream = %+v", o)
	}
	dd := code.Outputs[2]
	if s, _ := dd.Data.Text("text/html"); s != "<b>bold</b>\n<i>it</i>" {
		t.Errorf("text/html = %q", s)
	}
	if got := string(dd.Data["application/json"]); got != `{"a":"x","b":[1,2]}` {
		t.Errorf("application/json kept as %s", got)
	}
	if e := code.Outputs[4]; e.EName != "ValueError" || len(e.Traceback) != 2 {
		t.Errorf("error = %+v", e)
	}
	if _, ok := nb.Metadata["orig_nbformat"]; ok {
		t.Error("orig_nbformat kept")
	}
	// Unknown metadata keeps its values, numbers as written.
	if string(nb.Metadata["zeta"]) != `{"a":[1.50,2e3,-0,true,null],"b":1}` {
		t.Errorf("unknown metadata changed: %s", nb.Metadata["zeta"])
	}
	if ks, ok := nb.KernelSpec(); !ok || ks != LingerKernelSpec {
		t.Errorf("KernelSpec = %+v, %v", ks, ok)
	}
}

func TestUpgradeGivesIDs(t *testing.T) {
	counterIDs(t)
	nb, err := ReadFile("testdata/roundtrip/old.in.ipynb")
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, c := range nb.Cells {
		ids = append(ids, c.ID)
	}
	// A valid id in an older notebook is kept; missing and invalid ones
	// are made.
	if want := []string{"cell-1", "cell-2", "has-an-id", "cell-3"}; fmt.Sprint(ids) != fmt.Sprint(want) {
		t.Errorf("ids = %v, want %v", ids, want)
	}
	newID = NewCellID
	for range 100 {
		if id := NewCellID(); !ValidCellID(id) || len(id) != 8 {
			t.Fatalf("NewCellID() = %q", id)
		}
	}
}

func TestReadErrors(t *testing.T) {
	const cell = `{"id": "a", "cell_type": "code", "metadata": {}, "source": "", "outputs": [], "execution_count": null}`
	nb := func(cells ...string) string {
		return `{"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [` + strings.Join(cells, ",") + `]}`
	}
	withCell := func(old, new string) string { return nb(strings.Replace(cell, old, new, 1)) }
	withOutput := func(out string) string { return withCell(`"outputs": []`, `"outputs": [`+out+`]`) }
	tests := []struct {
		name, in string
		want     error
		msg      string // part of the error text
	}{
		{"empty", ``, ErrInvalid, "malformed JSON"},
		{"truncated", `{"nbformat": 4, "cells": [`, ErrInvalid, "malformed JSON"},
		{"not object", `[1, 2]`, ErrInvalid, "not a JSON object but a list"},
		{"trailing data", `{"nbformat": 4} {}`, ErrInvalid, "data after the notebook"},
		{"source list with null", withCell(`"source": ""`, `"source": ["a", null]`), ErrInvalid, "cells[0].source: want a string or a list of strings"},
		{"null", `null`, ErrInvalid, "not a JSON object"},
		{"no nbformat", `{"cells": []}`, ErrInvalid, "nbformat: missing"},
		{"nbformat 3", `{"nbformat": 3, "nbformat_minor": 0, "worksheets": [], "metadata": {}}`, ErrUnsupported, "nbformat 3"},
		{"nbformat 5", `{"nbformat": 5, "nbformat_minor": 0}`, ErrUnsupported, "nbformat 5"},
		{"nbformat string", `{"nbformat": "4"}`, ErrInvalid, "nbformat: want an integer"},
		{"nbformat float", `{"nbformat": 4.5}`, ErrInvalid, "nbformat: want an integer"},
		{"no minor", `{"nbformat": 4, "metadata": {}, "cells": []}`, ErrInvalid, "nbformat_minor: missing"},
		{"no metadata", `{"nbformat": 4, "nbformat_minor": 5, "cells": []}`, ErrInvalid, "metadata: missing"},
		{"no cells", `{"nbformat": 4, "nbformat_minor": 5, "metadata": {}}`, ErrInvalid, "cells: missing"},
		{"cells object", `{"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": {}}`, ErrInvalid, "cells: want a list, got an object"},
		{"cell not object", nb(`"x"`), ErrInvalid, "cells[0]: want an object"},
		{"no cell type", withCell(`"cell_type": "code", `, ``), ErrInvalid, "cells[0].cell_type: missing"},
		{"unknown cell type", withCell(`"code"`, `"heading"`), ErrInvalid, `unknown cell type "heading"`},
		{"no source", withCell(`"source": "", `, ``), ErrInvalid, "cells[0].source: missing"},
		{"source number", withCell(`"source": ""`, `"source": 3`), ErrInvalid, "cells[0].source: want a string or a list of strings, got a number"},
		{"no outputs", withCell(`, "outputs": []`, ``), ErrInvalid, "cells[0].outputs: missing"},
		{"no execution count", withCell(`, "execution_count": null`, ``), ErrInvalid, "cells[0].execution_count: missing"},
		{"negative count", withCell(`"execution_count": null`, `"execution_count": -1`), ErrInvalid, "is negative"},
		{"no id", withCell(`"id": "a", `, ``), ErrInvalid, "cells[0].id: missing"},
		{"bad id", withCell(`"a"`, `"a b"`), ErrInvalid, "not a valid cell id"},
		{"long id", withCell(`"a"`, `"`+strings.Repeat("x", 65)+`"`), ErrInvalid, "not a valid cell id"},
		{"metadata list", withCell(`"metadata": {}`, `"metadata": []`), ErrInvalid, "cells[0].metadata: want an object"},
		{"output type", withOutput(`{"output_type": "pyout"}`), ErrInvalid, `unknown output type "pyout"`},
		{"stream no text", withOutput(`{"output_type": "stream", "name": "stdout"}`), ErrInvalid, "outputs[0].text: missing"},
		{"display no metadata", withOutput(`{"output_type": "display_data", "data": {}}`), ErrInvalid, "outputs[0].metadata: missing"},
		{"result no count", withOutput(`{"output_type": "execute_result", "data": {}, "metadata": {}}`), ErrInvalid, "outputs[0].execution_count: missing"},
		{"text mime number", withOutput(`{"output_type": "display_data", "data": {"text/plain": 1}, "metadata": {}}`), ErrInvalid, `data["text/plain"]: want a string`},
		{"error no traceback", withOutput(`{"output_type": "error", "ename": "E", "evalue": "v"}`), ErrInvalid, "traceback: missing"},
		{"traceback number", withOutput(`{"output_type": "error", "ename": "E", "evalue": "v", "traceback": ["a", 1]}`), ErrInvalid, "traceback[1]: want a string"},
		{"kernelspec no name", `{"nbformat": 4, "nbformat_minor": 5, "metadata": {"kernelspec": {"display_name": "x"}}, "cells": []}`, ErrInvalid, "metadata.kernelspec: name: missing"},
		{"language_info name", `{"nbformat": 4, "nbformat_minor": 5, "metadata": {"language_info": {"name": 1}}, "cells": []}`, ErrInvalid, "language_info: name: want a string"},
		{"tag comma", withCell(`"metadata": {}`, `"metadata": {"tags": ["a,b"]}`), ErrInvalid, "metadata.tags"},
		{"tag repeated", withCell(`"metadata": {}`, `"metadata": {"tags": ["a", "a"]}`), ErrInvalid, `tag "a" repeats`},
		{"scrolled", withCell(`"metadata": {}`, `"metadata": {"scrolled": "yes"}`), ErrInvalid, "metadata.scrolled"},
		{"name newline", withCell(`"metadata": {}`, `"metadata": {"name": "a\nb"}`), ErrInvalid, "metadata.name"},
		{"execution value", withCell(`"metadata": {}`, `"metadata": {"execution": {"shell.execute_reply": 1}}`), ErrInvalid, "metadata.execution"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Read(strings.NewReader(tt.in))
			if !errors.Is(err, tt.want) {
				t.Fatalf("Read = %v, want %v", err, tt.want)
			}
			if !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("error %q does not mention %q", err, tt.msg)
			}
			// Whatever Read refuses for content reasons the schema
			// refuses too (malformed JSON aside), so Read is no stricter.
			if errors.Is(err, ErrInvalid) && !strings.Contains(tt.msg, "JSON") && validate(t, []byte(tt.in)) == nil {
				t.Errorf("Read refused a notebook the schema accepts")
			}
		})
	}
}

func TestWriteRefusesInvalid(t *testing.T) {
	valid := func() *Notebook {
		nb := New()
		nb.Cells = append(nb.Cells, NewCell(CellCode, "1"), NewCell(CellMarkdown, "m"))
		return nb
	}
	tests := []struct {
		name   string
		break_ func(nb *Notebook)
		msg    string
	}{
		{"empty id", func(nb *Notebook) { nb.Cells[0].ID = "" }, "cells[0].id"},
		{"bad id", func(nb *Notebook) { nb.Cells[1].ID = "a/b" }, "cells[1].id"},
		{"duplicate id", func(nb *Notebook) { nb.Cells[1].ID = nb.Cells[0].ID }, "repeats"},
		{"nil cell", func(nb *Notebook) { nb.Cells[1] = nil }, "nil cell"},
		{"cell type", func(nb *Notebook) { nb.Cells[0].Type = "heading" }, "unknown cell type"},
		{"output type", func(nb *Notebook) { nb.Cells[0].Outputs = []*Output{{Type: "pyerr"}} }, "unknown output type"},
		{"text mime", func(nb *Notebook) {
			nb.Cells[0].Outputs = []*Output{{Type: OutputDisplayData, Data: MimeBundle{"text/plain": json.RawMessage(`[1]`)}}}
		}, "want a string"},
		{"bad raw", func(nb *Notebook) { nb.Metadata["x"] = json.RawMessage(`{`) }, "malformed JSON"},
		{"kernelspec", func(nb *Notebook) { nb.Metadata["kernelspec"] = json.RawMessage(`"linger"`) }, "kernelspec"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			nb := valid()
			tt.break_(nb)
			var buf bytes.Buffer
			err := Write(&buf, nb)
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("Write = %v, want ErrInvalid mentioning %q", err, tt.msg)
			}
			if buf.Len() != 0 {
				t.Errorf("Write wrote %d bytes of an invalid notebook", buf.Len())
			}
		})
	}
}

func TestNew(t *testing.T) {
	nb := New()
	c := NewCell(CellCode, "print(1)\n2")
	c.ExecutionCount = Count(1)
	out := &Output{Type: OutputExecuteResult, Data: MimeBundle{}, ExecutionCount: Count(1)}
	out.Data.SetText("text/plain", "2")
	c.Outputs = []*Output{{Type: OutputStream, Name: "stdout", Text: "1\n"}, out}
	nb.Cells = append(nb.Cells, c, NewCell(CellMarkdown, ""), NewCell(CellRaw, "raw"))
	data, err := Marshal(nb)
	if err != nil {
		t.Fatal(err)
	}
	if err := validate(t, data); err != nil {
		t.Fatalf("New notebook does not validate: %v\n%s", err, data)
	}
	var got struct {
		Metadata struct {
			KernelSpec   map[string]string `json:"kernelspec"`
			LanguageInfo map[string]string `json:"language_info"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	wantKS := map[string]string{"name": "linger", "display_name": "Linger (Starlark)", "language": "starlark"}
	wantLI := map[string]string{"name": "starlark", "mimetype": "text/x-python", "file_extension": ".star", "codemirror_mode": "python", "pygments_lexer": "python"}
	if fmt.Sprint(got.Metadata.KernelSpec) != fmt.Sprint(wantKS) || fmt.Sprint(got.Metadata.LanguageInfo) != fmt.Sprint(wantLI) {
		t.Errorf("metadata = %+v", got.Metadata)
	}
	if !bytes.HasSuffix(data, []byte("}\n")) || !bytes.HasPrefix(data, []byte("{\n \"cells\": [\n  {\n")) {
		t.Errorf("not Jupyter's layout:\n%s", data)
	}
}

func TestMarshalJSONKeepsStrings(t *testing.T) {
	nb := New()
	nb.Cells = append(nb.Cells, NewCell(CellMarkdown, "a\nb"))
	data, err := json.Marshal(nb)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(data, []byte(`"source":"a\nb"`)) {
		t.Errorf("in-memory form should keep source whole: %s", data)
	}
	var back Notebook
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	if back.Cells[0].Source != "a\nb" || back.Cells[0].ID != nb.Cells[0].ID {
		t.Errorf("round trip = %+v", back.Cells[0])
	}
	if err := validate(t, data); err != nil {
		t.Errorf("in-memory form does not validate: %v", err)
	}
}

func TestSplitLines(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{"", []string{}},
		{"a", []string{"a"}},
		{"a\n", []string{"a\n"}},
		{"a\nb", []string{"a\n", "b"}},
		{"a\r\nb\rc\n\n", []string{"a\r\n", "b\r", "c\n", "\n"}},
		{"a\vb\fc\x1cd\x1de\x1ef", []string{"a\v", "b\f", "c\x1c", "d\x1d", "e\x1e", "f"}},
		{"a\u0085b\u2028c\u2029d", []string{"a\u0085", "b\u2028", "c\u2029", "d"}},
		{"é\n中", []string{"é\n", "中"}},
		{"\r", []string{"\r"}},
		{"bad \xff utf8\n", []string{"bad \xff utf8\n"}},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%q", tt.in), func(t *testing.T) {
			got := SplitLines(tt.in)
			if fmt.Sprintf("%q", got) != fmt.Sprintf("%q", tt.want) {
				t.Errorf("SplitLines(%q) = %q, want %q", tt.in, got, tt.want)
			}
			if strings.Join(got, "") != tt.in {
				t.Errorf("joined lines differ from input")
			}
		})
	}
}

func TestWriteFile(t *testing.T) {
	dir := t.TempDir()
	name := filepath.Join(dir, "nb.ipynb")
	nb := New()
	nb.Cells = append(nb.Cells, NewCell(CellCode, "1"))
	if err := WriteFile(name, nb); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(name, 0o600); err != nil {
		t.Fatal(err)
	}
	nb.Cells[0].Source = "2"
	if err := WriteFile(name, nb); err != nil {
		t.Fatal(err)
	}
	back, err := ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	if back.Cells[0].Source != "2" {
		t.Errorf("source = %q", back.Cells[0].Source)
	}
	if fi, _ := os.Stat(name); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode = %v, want the old file's 0600", fi.Mode().Perm())
	}
	nb.Cells[0].ID = "bad id"
	if err := WriteFile(name, nb); !errors.Is(err, ErrInvalid) {
		t.Errorf("WriteFile(invalid) = %v", err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("directory holds %d entries, want only the notebook", len(entries))
	}
	if back, _ := ReadFile(name); back.Cells[0].Source != "2" {
		t.Error("failed write changed the file")
	}
}

func BenchmarkRead(b *testing.B) {
	data, err := os.ReadFile("testdata/roundtrip/jupyter.ipynb")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := Read(bytes.NewReader(data)); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkWrite(b *testing.B) {
	nb, err := ReadFile("testdata/roundtrip/jupyter.ipynb")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Marshal(nb); err != nil {
			b.Fatal(err)
		}
	}
}
