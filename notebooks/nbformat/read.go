package nbformat

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Read decodes a notebook. It accepts nbformat 4.0 to 4.5 (and later 4.x
// minors whose cells and outputs are of the 4.5 kinds); a notebook older
// than 4.5 gets fresh ids for cells without a valid one, and a repeated id
// is replaced, as Jupyter repairs it. Source, stream text and text mime data
// may be strings or lists of strings. Keys the schema does not allow on the
// notebook, a cell or an output are dropped (Jupyter itself would only warn
// about them); metadata.orig_nbformat is dropped as Jupyter drops it.
//
// Errors wrap ErrInvalid (malformed JSON, missing or mistyped fields) or
// ErrUnsupported (nbformat other than 4), and name the offending field,
// e.g. `cells[2].outputs[0].text`.
//
// Read decodes as it reads: it holds one cell's bytes at a time, never the
// file's (see DecodeTree).
func Read(r io.Reader) (*Notebook, error) {
	dec := json.NewDecoder(r)
	dec.UseNumber()
	doc, err := DecodeTree(dec)
	if err == nil {
		if _, err = dec.Token(); errors.Is(err, io.EOF) {
			return FromTree(doc)
		}
		if err == nil {
			return nil, fmt.Errorf("%w: malformed JSON: data after the notebook", ErrInvalid)
		}
	}
	if _, ok := errors.AsType[*json.SyntaxError](err); ok || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return nil, fmt.Errorf("%w: malformed JSON: %v", ErrInvalid, err)
	}
	return nil, fmt.Errorf("read notebook: %w", err)
}

// UnmarshalJSON decodes a notebook as Read does, replacing *nb.
func (nb *Notebook) UnmarshalJSON(data []byte) error {
	out, err := Read(bytes.NewReader(data))
	if err != nil {
		return err
	}
	*nb = *out
	return nil
}

// DecodeTree decodes the next JSON value of dec into generic values, as
// dec.Decode into an any does, but reads an object's or list's members one
// at a time down to those of the value's members (a notebook's cells), so
// that dec buffers one cell, not the notebook. dec should use numbers
// (json.Decoder.UseNumber), as FromTree wants them. With FromTree, it lets
// a caller decoding a larger document (a contents model) read the notebook
// inside it as a stream.
//
// The document is decoded once into generic values and then walked:
// decoding nested json.RawMessage levels instead would scan megabytes of
// base64 outputs once per level.
func DecodeTree(dec *json.Decoder) (any, error) {
	return decodeTree(dec, 2)
}

// decodeTree is DecodeTree with depth levels of members read one at a
// time.
func decodeTree(dec *json.Decoder, depth int) (any, error) {
	if depth == 0 {
		var v any
		err := dec.Decode(&v)
		return v, err
	}
	t, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t {
	case json.Delim('{'):
		obj := map[string]any{}
		for dec.More() {
			k, err := dec.Token()
			if err != nil {
				return nil, unexpectedEOF(err)
			}
			// Token gives an object's keys as strings, or fails.
			if obj[k.(string)], err = decodeTree(dec, depth-1); err != nil {
				return nil, unexpectedEOF(err)
			}
		}
		if _, err := dec.Token(); err != nil {
			return nil, unexpectedEOF(err)
		}
		return obj, nil
	case json.Delim('['):
		list := []any{}
		for dec.More() {
			v, err := decodeTree(dec, depth-1)
			if err != nil {
				return nil, unexpectedEOF(err)
			}
			list = append(list, v)
		}
		if _, err := dec.Token(); err != nil {
			return nil, unexpectedEOF(err)
		}
		return list, nil
	}
	return t, nil
}

// unexpectedEOF is err, io.ErrUnexpectedEOF for the end of input inside a
// value.
func unexpectedEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// FromTree builds the notebook of doc, a document decoded into generic
// values with numbers as json.Number (as DecodeTree gives it), and checks
// it as Read does. doc is not changed; the notebook shares none of it
// that a later change to doc could reach.
func FromTree(doc any) (*Notebook, error) {
	top, ok := doc.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%w: not a JSON object but %s", ErrInvalid, kind(doc))
	}
	major, ok := top["nbformat"]
	if !ok {
		return nil, fmt.Errorf("%w: nbformat: missing (is this a notebook?)", ErrInvalid)
	}
	v, err := toInt("nbformat", major)
	if err != nil {
		return nil, err
	}
	if v != Format {
		hint := ""
		if v < Format {
			hint = "; upgrade it with `jupyter nbconvert --to notebook`"
		}
		return nil, fmt.Errorf("%w: nbformat %d (Linger reads nbformat 4 only%s)", ErrUnsupported, v, hint)
	}
	minorV, ok := top["nbformat_minor"]
	if !ok {
		return nil, fmt.Errorf("%w: nbformat_minor: missing", ErrInvalid)
	}
	minor, err := toInt("nbformat_minor", minorV)
	if err != nil {
		return nil, err
	}
	if minor < 0 {
		return nil, invalid("nbformat_minor", "%d is negative", minor)
	}
	out := Notebook{}
	if out.Metadata, err = toMetadata("metadata", top, "metadata"); err != nil {
		return nil, err
	}
	delete(out.Metadata, "orig_nbformat")
	delete(out.Metadata, "orig_nbformat_minor")
	cellsV, ok := top["cells"]
	if !ok {
		return nil, invalid("cells", "missing")
	}
	cells, ok := cellsV.([]any)
	if !ok {
		return nil, invalid("cells", "want a list, got %s", kind(cellsV))
	}
	out.Cells = make([]*Cell, 0, len(cells))
	for i, cv := range cells {
		c, err := toCell(fmt.Sprintf("cells[%d]", i), cv, minor >= FormatMinor)
		if err != nil {
			return nil, err
		}
		out.Cells = append(out.Cells, c)
	}
	repairIDs(out.Cells)
	if err := out.validate(); err != nil {
		return nil, err
	}
	return &out, nil
}

// repairIDs gives a fresh id to every cell without one and to every repeat
// of an id seen earlier in the notebook.
func repairIDs(cells []*Cell) {
	seen := make(map[string]bool, len(cells))
	for _, c := range cells {
		for c.ID == "" || seen[c.ID] {
			c.ID = newID()
		}
		seen[c.ID] = true
	}
}

// kind names the JSON type of a decoded value for error messages.
func kind(v any) string {
	switch v.(type) {
	case map[string]any:
		return "an object"
	case []any:
		return "a list"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case json.Number:
		return "a number"
	case nil:
		return "null"
	}
	return fmt.Sprintf("%T", v)
}

// field returns obj[name], or a "missing" error naming path.name.
func field(path string, obj map[string]any, name string) (any, error) {
	v, ok := obj[name]
	if !ok {
		return nil, invalid(path+"."+name, "missing")
	}
	return v, nil
}

func toInt(path string, v any) (int, error) {
	n, ok := v.(json.Number)
	if !ok {
		return 0, invalid(path, "want an integer, got %s", kind(v))
	}
	i, err := strconv.Atoi(string(n))
	if err != nil {
		return 0, invalid(path, "want an integer, got %s", n)
	}
	return i, nil
}

func toString(path string, obj map[string]any, name string) (string, error) {
	v, err := field(path, obj, name)
	if err != nil {
		return "", err
	}
	s, ok := v.(string)
	if !ok {
		return "", invalid(path+"."+name, "want a string, got %s", kind(v))
	}
	return s, nil
}

// toCount decodes an execution count: an integer ≥ 0 or null.
func toCount(path string, obj map[string]any) (*int, error) {
	v, err := field(path, obj, "execution_count")
	if err != nil || v == nil {
		return nil, err
	}
	n, err := toInt(path+".execution_count", v)
	if err != nil {
		return nil, err
	}
	if n < 0 {
		return nil, invalid(path+".execution_count", "%d is negative", n)
	}
	return &n, nil
}

// multiline joins a string or a list of strings.
func multiline(v any) (string, bool) {
	switch v := v.(type) {
	case string:
		return v, true
	case []any:
		var b strings.Builder
		for _, l := range v {
			s, ok := l.(string)
			if !ok {
				return "", false
			}
			b.WriteString(s)
		}
		return b.String(), true
	}
	return "", false
}

func toMultiline(path string, obj map[string]any, name string) (string, error) {
	v, err := field(path, obj, name)
	if err != nil {
		return "", err
	}
	s, ok := multiline(v)
	if !ok {
		return "", invalid(path+"."+name, "want a string or a list of strings, got %s", kind(v))
	}
	return s, nil
}

func toObject(path string, v any) (map[string]any, error) {
	m, ok := v.(map[string]any)
	if !ok {
		return nil, invalid(path, "want an object, got %s", kind(v))
	}
	return m, nil
}

// rawJSON encodes a decoded value back to JSON; numbers keep their text.
func rawJSON(v any) json.RawMessage {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		// Decoded JSON always encodes.
		panic(fmt.Sprintf("nbformat: encode decoded value: %v", err))
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

func toMetadata(path string, obj map[string]any, name string) (Metadata, error) {
	v, err := field(path, obj, name)
	if err != nil {
		return nil, err
	}
	if path != "" {
		path += "."
	}
	m, err := toObject(path+name, v)
	if err != nil {
		return nil, err
	}
	md := make(Metadata, len(m))
	for k, v := range m {
		md[k] = rawJSON(v)
	}
	return md, nil
}

func toBundle(path string, v any) (MimeBundle, error) {
	m, err := toObject(path, v)
	if err != nil {
		return nil, err
	}
	b := make(MimeBundle, len(m))
	for mime, v := range m {
		if isJSONMime(mime) {
			b[mime] = rawJSON(v)
			continue
		}
		s, ok := multiline(v)
		if !ok {
			return nil, invalid(fmt.Sprintf("%s[%q]", path, mime), "want a string or a list of strings, got %s", kind(v))
		}
		b.SetText(mime, s)
	}
	return b, nil
}

func toCell(path string, v any, needID bool) (*Cell, error) {
	f, err := toObject(path, v)
	if err != nil {
		return nil, err
	}
	c := &Cell{}
	if c.Type, err = toString(path, f, "cell_type"); err != nil {
		return nil, err
	}
	switch c.Type {
	case CellCode, CellMarkdown, CellRaw:
	default:
		return nil, invalid(path+".cell_type", "unknown cell type %q", c.Type)
	}
	if _, ok := f["id"]; ok {
		if c.ID, err = toString(path, f, "id"); err != nil {
			return nil, err
		}
		if !ValidCellID(c.ID) {
			if needID {
				return nil, invalid(path+".id", "%q is not a valid cell id (1–64 of a-z A-Z 0-9 - _)", c.ID)
			}
			c.ID = "" // an older notebook: repairIDs gives it one
		}
	} else if needID {
		return nil, invalid(path+".id", "missing (required since nbformat 4.5)")
	}
	if c.Metadata, err = toMetadata(path, f, "metadata"); err != nil {
		return nil, err
	}
	if c.Source, err = toMultiline(path, f, "source"); err != nil {
		return nil, err
	}
	if c.Type != CellCode {
		if av, ok := f["attachments"]; ok {
			atts, err := toObject(path+".attachments", av)
			if err != nil {
				return nil, err
			}
			c.Attachments = make(map[string]MimeBundle, len(atts))
			for name, bv := range atts {
				if c.Attachments[name], err = toBundle(fmt.Sprintf("%s.attachments[%q]", path, name), bv); err != nil {
					return nil, err
				}
			}
		}
		return c, nil
	}
	if c.ExecutionCount, err = toCount(path, f); err != nil {
		return nil, err
	}
	ov, err := field(path, f, "outputs")
	if err != nil {
		return nil, err
	}
	outs, ok := ov.([]any)
	if !ok {
		return nil, invalid(path+".outputs", "want a list, got %s", kind(ov))
	}
	c.Outputs = make([]*Output, 0, len(outs))
	for i, o := range outs {
		out, err := toOutput(fmt.Sprintf("%s.outputs[%d]", path, i), o)
		if err != nil {
			return nil, err
		}
		c.Outputs = append(c.Outputs, out)
	}
	return c, nil
}

func toOutput(path string, v any) (*Output, error) {
	f, err := toObject(path, v)
	if err != nil {
		return nil, err
	}
	o := &Output{}
	if o.Type, err = toString(path, f, "output_type"); err != nil {
		return nil, err
	}
	switch o.Type {
	case OutputStream:
		if o.Name, err = toString(path, f, "name"); err != nil {
			return nil, err
		}
		if o.Text, err = toMultiline(path, f, "text"); err != nil {
			return nil, err
		}
	case OutputDisplayData, OutputExecuteResult:
		dv, err := field(path, f, "data")
		if err != nil {
			return nil, err
		}
		if o.Data, err = toBundle(path+".data", dv); err != nil {
			return nil, err
		}
		if o.Metadata, err = toMetadata(path, f, "metadata"); err != nil {
			return nil, err
		}
		if o.Type == OutputExecuteResult {
			if o.ExecutionCount, err = toCount(path, f); err != nil {
				return nil, err
			}
		}
	case OutputError:
		if o.EName, err = toString(path, f, "ename"); err != nil {
			return nil, err
		}
		if o.EValue, err = toString(path, f, "evalue"); err != nil {
			return nil, err
		}
		tv, err := field(path, f, "traceback")
		if err != nil {
			return nil, err
		}
		tb, ok := tv.([]any)
		if !ok {
			return nil, invalid(path+".traceback", "want a list of strings, got %s", kind(tv))
		}
		o.Traceback = make([]string, len(tb))
		for i, l := range tb {
			if o.Traceback[i], ok = l.(string); !ok {
				return nil, invalid(fmt.Sprintf("%s.traceback[%d]", path, i), "want a string, got %s", kind(l))
			}
		}
	default:
		return nil, invalid(path+".output_type", "unknown output type %q", o.Type)
	}
	return o, nil
}
