package nbformat

import (
	"bytes"
	"encoding/json"
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
func Read(r io.Reader) (*Notebook, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("read notebook: %w", err)
	}
	nb := new(Notebook)
	if err := nb.UnmarshalJSON(data); err != nil {
		return nil, err
	}
	return nb, nil
}

// UnmarshalJSON decodes a notebook as Read does, replacing *nb.
func (nb *Notebook) UnmarshalJSON(data []byte) error {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil {
		return fmt.Errorf("%w: malformed JSON: %v", ErrInvalid, err)
	}
	if top == nil {
		return fmt.Errorf("%w: not a JSON object", ErrInvalid)
	}
	d := decoder{}
	major, ok := top["nbformat"]
	if !ok {
		return fmt.Errorf("%w: nbformat: missing (is this a notebook?)", ErrInvalid)
	}
	v, err := d.int("nbformat", major)
	if err != nil {
		return err
	}
	if v != Format {
		hint := ""
		if v < Format {
			hint = "; upgrade it with `jupyter nbconvert --to notebook`"
		}
		return fmt.Errorf("%w: nbformat %d (Linger reads nbformat 4 only%s)", ErrUnsupported, v, hint)
	}
	minorRaw, ok := top["nbformat_minor"]
	if !ok {
		return fmt.Errorf("%w: nbformat_minor: missing", ErrInvalid)
	}
	minor, err := d.int("nbformat_minor", minorRaw)
	if err != nil {
		return err
	}
	if minor < 0 {
		return fmt.Errorf("%w: nbformat_minor: %d is negative", ErrInvalid, minor)
	}
	out := Notebook{}
	if out.Metadata, err = d.metadata("metadata", top["metadata"], true); err != nil {
		return err
	}
	delete(out.Metadata, "orig_nbformat")
	delete(out.Metadata, "orig_nbformat_minor")
	cellsRaw, ok := top["cells"]
	if !ok {
		return fmt.Errorf("%w: cells: missing", ErrInvalid)
	}
	var cells []json.RawMessage
	if err := d.decode("cells", cellsRaw, &cells, "a list"); err != nil {
		return err
	}
	out.Cells = make([]*Cell, 0, len(cells))
	for i, raw := range cells {
		c, err := d.cell(fmt.Sprintf("cells[%d]", i), raw, minor >= FormatMinor)
		if err != nil {
			return err
		}
		out.Cells = append(out.Cells, c)
	}
	repairIDs(out.Cells)
	if err := out.validate(); err != nil {
		return err
	}
	*nb = out
	return nil
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

// decoder turns raw JSON into the typed notebook, with errors that name
// the field.
type decoder struct{}

func (decoder) errorf(path, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrInvalid, path, fmt.Sprintf(format, args...))
}

// decode unmarshals raw into v; a JSON null is a type error too, since no
// field of a notebook may be null except the execution counts.
func (d decoder) decode(path string, raw json.RawMessage, v any, want string) error {
	if isNull(raw) || json.Unmarshal(raw, v) != nil {
		return d.errorf(path, "want %s, got %s", want, kind(raw))
	}
	return nil
}

func (d decoder) int(path string, raw json.RawMessage) (int, error) {
	var n json.Number
	if kind(raw) != "a number" {
		return 0, d.errorf(path, "want an integer, got %s", kind(raw))
	}
	if err := d.decode(path, raw, &n, "an integer"); err != nil {
		return 0, err
	}
	v, err := strconv.Atoi(string(n))
	if err != nil {
		return 0, d.errorf(path, "want an integer, got %s", n)
	}
	return v, nil
}

// count decodes an execution count: an integer ≥ 0 or null.
func (d decoder) count(path string, raw json.RawMessage, present bool) (*int, error) {
	if !present {
		return nil, d.errorf(path, "missing")
	}
	if isNull(raw) {
		return nil, nil
	}
	v, err := d.int(path, raw)
	if err != nil {
		return nil, err
	}
	if v < 0 {
		return nil, d.errorf(path, "%d is negative", v)
	}
	return &v, nil
}

func (d decoder) string(path string, raw json.RawMessage, present bool) (string, error) {
	if !present {
		return "", d.errorf(path, "missing")
	}
	var s string
	err := d.decode(path, raw, &s, "a string")
	return s, err
}

// multiline decodes a string or a list of strings, joined.
func (d decoder) multiline(path string, raw json.RawMessage, present bool) (string, error) {
	if !present {
		return "", d.errorf(path, "missing")
	}
	if s, ok := multiline(raw); ok {
		return s, nil
	}
	return "", d.errorf(path, "want a string or a list of strings, got %s", kind(raw))
}

func multiline(raw json.RawMessage) (string, bool) {
	var s string
	if json.Unmarshal(raw, &s) == nil && !isNull(raw) {
		return s, true
	}
	var lines []string
	if isNull(raw) || json.Unmarshal(raw, &lines) != nil {
		return "", false
	}
	return strings.Join(lines, ""), true
}

func (d decoder) metadata(path string, raw json.RawMessage, required bool) (Metadata, error) {
	if raw == nil {
		if required {
			return nil, d.errorf(path, "missing")
		}
		return Metadata{}, nil
	}
	m := Metadata{}
	if err := d.decode(path, raw, &m, "an object"); err != nil {
		return nil, err
	}
	return m, nil
}

func (d decoder) bundle(path string, raw json.RawMessage, present bool) (MimeBundle, error) {
	if !present {
		return nil, d.errorf(path, "missing")
	}
	var in map[string]json.RawMessage
	if err := d.decode(path, raw, &in, "an object"); err != nil {
		return nil, err
	}
	b := make(MimeBundle, len(in))
	for mime, v := range in {
		if isJSONMime(mime) {
			b[mime] = v
			continue
		}
		s, ok := multiline(v)
		if !ok {
			return nil, d.errorf(fmt.Sprintf("%s[%q]", path, mime), "want a string or a list of strings, got %s", kind(v))
		}
		b.SetText(mime, s)
	}
	return b, nil
}

func (d decoder) cell(path string, raw json.RawMessage, needID bool) (*Cell, error) {
	var f map[string]json.RawMessage
	if err := d.decode(path, raw, &f, "an object"); err != nil {
		return nil, err
	}
	c := &Cell{}
	var err error
	typRaw, ok := f["cell_type"]
	if c.Type, err = d.string(path+".cell_type", typRaw, ok); err != nil {
		return nil, err
	}
	switch c.Type {
	case CellCode, CellMarkdown, CellRaw:
	default:
		return nil, d.errorf(path+".cell_type", "unknown cell type %q", c.Type)
	}
	if idRaw, ok := f["id"]; ok {
		if c.ID, err = d.string(path+".id", idRaw, true); err != nil {
			return nil, err
		}
		if !ValidCellID(c.ID) {
			if needID {
				return nil, d.errorf(path+".id", "%q is not a valid cell id (1–64 of a-z A-Z 0-9 - _)", c.ID)
			}
			c.ID = "" // an older notebook: repairIDs gives it one
		}
	} else if needID {
		return nil, d.errorf(path+".id", "missing (required since nbformat 4.5)")
	}
	if c.Metadata, err = d.metadata(path+".metadata", f["metadata"], true); err != nil {
		return nil, err
	}
	srcRaw, ok := f["source"]
	if c.Source, err = d.multiline(path+".source", srcRaw, ok); err != nil {
		return nil, err
	}
	if c.Type != CellCode {
		if araw, ok := f["attachments"]; ok {
			var atts map[string]json.RawMessage
			if err := d.decode(path+".attachments", araw, &atts, "an object"); err != nil {
				return nil, err
			}
			c.Attachments = make(map[string]MimeBundle, len(atts))
			for name, v := range atts {
				if c.Attachments[name], err = d.bundle(fmt.Sprintf("%s.attachments[%q]", path, name), v, true); err != nil {
					return nil, err
				}
			}
		}
		return c, nil
	}
	ecRaw, ok := f["execution_count"]
	if c.ExecutionCount, err = d.count(path+".execution_count", ecRaw, ok); err != nil {
		return nil, err
	}
	outsRaw, ok := f["outputs"]
	if !ok {
		return nil, d.errorf(path+".outputs", "missing")
	}
	var outs []json.RawMessage
	if err := d.decode(path+".outputs", outsRaw, &outs, "a list"); err != nil {
		return nil, err
	}
	c.Outputs = make([]*Output, 0, len(outs))
	for i, raw := range outs {
		o, err := d.output(fmt.Sprintf("%s.outputs[%d]", path, i), raw)
		if err != nil {
			return nil, err
		}
		c.Outputs = append(c.Outputs, o)
	}
	return c, nil
}

func (d decoder) output(path string, raw json.RawMessage) (*Output, error) {
	var f map[string]json.RawMessage
	if err := d.decode(path, raw, &f, "an object"); err != nil {
		return nil, err
	}
	o := &Output{}
	var err error
	typRaw, ok := f["output_type"]
	if o.Type, err = d.string(path+".output_type", typRaw, ok); err != nil {
		return nil, err
	}
	field := func(name string) (json.RawMessage, bool) {
		v, ok := f[name]
		return v, ok
	}
	switch o.Type {
	case OutputStream:
		v, ok := field("name")
		if o.Name, err = d.string(path+".name", v, ok); err != nil {
			return nil, err
		}
		v, ok = field("text")
		if o.Text, err = d.multiline(path+".text", v, ok); err != nil {
			return nil, err
		}
	case OutputDisplayData, OutputExecuteResult:
		v, ok := field("data")
		if o.Data, err = d.bundle(path+".data", v, ok); err != nil {
			return nil, err
		}
		if o.Metadata, err = d.metadata(path+".metadata", f["metadata"], true); err != nil {
			return nil, err
		}
		if o.Type == OutputExecuteResult {
			v, ok := field("execution_count")
			if o.ExecutionCount, err = d.count(path+".execution_count", v, ok); err != nil {
				return nil, err
			}
		}
	case OutputError:
		v, ok := field("ename")
		if o.EName, err = d.string(path+".ename", v, ok); err != nil {
			return nil, err
		}
		v, ok = field("evalue")
		if o.EValue, err = d.string(path+".evalue", v, ok); err != nil {
			return nil, err
		}
		v, ok = field("traceback")
		if !ok {
			return nil, d.errorf(path+".traceback", "missing")
		}
		if err := d.decode(path+".traceback", v, &o.Traceback, "a list of strings"); err != nil {
			return nil, err
		}
	default:
		return nil, d.errorf(path+".output_type", "unknown output type %q", o.Type)
	}
	return o, nil
}

func isNull(raw json.RawMessage) bool {
	return bytes.Equal(bytes.TrimSpace(raw), []byte("null"))
}

// kind names the JSON type of raw for error messages.
func kind(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "nothing"
	}
	switch raw[0] {
	case '{':
		return "an object"
	case '[':
		return "a list"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	default:
		return "a number"
	}
}
