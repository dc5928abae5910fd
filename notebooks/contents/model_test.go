package contents

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"linger/notebooks/nbformat"
)

// TestModelWriteJSON: WriteJSON writes the bytes json.Marshal gives, for
// every kind of content, and nothing for a notebook that does not encode.
func TestModelWriteJSON(t *testing.T) {
	nb := nbformat.New()
	c := nbformat.NewCell(nbformat.CellCode, "print('<a & b>')\n\u2028")
	c.Outputs = []*nbformat.Output{{Type: nbformat.OutputStream, Name: "stdout", Text: "x\ny\n"}}
	nb.Cells = []*nbformat.Cell{c, nbformat.NewCell(nbformat.CellMarkdown, "# <h1>")}
	size := int64(42)
	at := time.Date(2024, 5, 6, 7, 8, 9, 123456789, time.UTC)
	base := Model{Name: `a "content":null <b>.ipynb`, Path: `d/a "content":null <b>.ipynb`, Type: TypeNotebook, Writable: true,
		Created: at, LastModified: at, Size: &size}
	with := func(f func(*Model)) Model { m := base; f(&m); return m }
	for name, m := range map[string]Model{
		"no content": base,
		"notebook":   with(func(m *Model) { m.Content, m.Format, m.Hash, m.HashAlgorithm = nb, FormatJSON, "ab", "sha256" }),
		"empty nb":   with(func(m *Model) { m.Content, m.Format = &nbformat.Notebook{}, FormatJSON }),
		"text": with(func(m *Model) {
			m.Type, m.Content, m.Format, m.Mimetype = TypeFile, "<x>\u2028&", FormatText, "text/plain"
		}),
		"directory": with(func(m *Model) {
			m.Type, m.Size, m.Format, m.Content = TypeDirectory, nil, FormatJSON, []Model{base, with(func(m *Model) { m.Name = "b" })}
		}),
		"empty dir": with(func(m *Model) { m.Type, m.Size, m.Format, m.Content = TypeDirectory, nil, FormatJSON, []Model{} }),
	} {
		t.Run(name, func(t *testing.T) {
			want, err := json.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			var buf bytes.Buffer
			if err := m.WriteJSON(&buf); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(buf.Bytes(), want) {
				t.Errorf("WriteJSON:\n got %s\nwant %s", buf.Bytes(), want)
			}
		})
	}
	bad := with(func(m *Model) { m.Content = &nbformat.Notebook{Cells: []*nbformat.Cell{{ID: "not an id"}}} })
	var buf bytes.Buffer
	if err := bad.WriteJSON(&buf); !errors.Is(err, nbformat.ErrInvalid) || buf.Len() > 0 {
		t.Errorf("WriteJSON of an invalid notebook: %v, wrote %q", err, buf.Bytes())
	}
}

// TestDecodeModel: DecodeModel reads what UnmarshalJSON does, with the
// content of a notebook as the notebook and of a file as its string, from
// a stream however it is cut.
func TestDecodeModel(t *testing.T) {
	const notebook = `{"cells":[{"cell_type":"markdown","id":"m1","metadata":{},"source":"<hi>"}],"metadata":{},"nbformat":4,"nbformat_minor":5}`
	for _, tt := range []struct{ body, content string }{
		{`{"type":"notebook","format":"json","content":` + notebook + `,"chunk":0,"name":"x"}`, notebook},
		{`{"content":` + notebook + `,"type":"notebook","path":"p","size":3,"last_modified":"2024-01-02T03:04:05.123456Z"}`, notebook},
		{`{"type":"file","format":"text","content":"hello <&>","chunk":2}`, `"hello <&>"`},
		{`{"type":"file","format":"text","Content":[1,{"a":2.50}]}`, `[1,{"a":2.50}]`},
		{`{"type":"directory"}`, ``},
		{`{"type":"notebook","content":null,"mimetype":null}`, ``},
		{` null `, ``},
	} {
		m, err := DecodeModel(iotest.OneByteReader(strings.NewReader(tt.body)))
		if err != nil {
			t.Fatalf("%s: %v", tt.body, err)
		}
		var want Model
		if err := json.Unmarshal([]byte(tt.body), &want); err != nil {
			t.Fatal(err)
		}
		got := m
		got.Content, want.Content = nil, nil
		g, _ := json.Marshal(got)
		w, _ := json.Marshal(want)
		if !bytes.Equal(g, w) || got.Chunk != want.Chunk {
			t.Errorf("%s: fields %s (chunk %d), want %s (chunk %d)", tt.body, g, got.Chunk, w, want.Chunk)
		}
		var c []byte
		switch v := m.Content.(type) {
		case nil:
		case *nbformat.Notebook:
			c, _ = v.MarshalJSON() // unescaped, as the body
		case json.RawMessage:
			c = v
		case string:
			c = []byte(`"` + v + `"`)
		default:
			t.Fatalf("%s: content %T", tt.body, v)
		}
		if string(c) != tt.content {
			t.Errorf("%s: content %s, want %s", tt.body, c, tt.content)
		}
	}
	for _, tt := range []struct {
		body string
		is   error
	}{
		{`{"type":"notebook","content":{"cells":"no"}}`, nbformat.ErrInvalid},
		{`{"type":"notebook","content":{"nbformat":3}}`, nbformat.ErrUnsupported},
		{`{"type":"notebook","content":{"cells":[}}`, nil},
		{`{"type":"file"} {}`, nil},
		{`[]`, nil},
		{`"x"`, nil},
		{``, nil},
		{`{"type":`, nil},
	} {
		_, err := DecodeModel(strings.NewReader(tt.body))
		if err == nil || tt.is != nil && !errors.Is(err, tt.is) {
			t.Errorf("%s: %v, want an error (%v)", tt.body, err, tt.is)
		}
	}
	read := errors.New("connection reset")
	if _, err := DecodeModel(iotest.ErrReader(read)); !errors.Is(err, read) {
		t.Errorf("a failing body: %v", err)
	}
}
