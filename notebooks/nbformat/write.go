package nbformat

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// Write encodes nb as an nbformat 4.5 file the way Jupyter does: keys
// sorted at every level, one-space indentation, non-ASCII characters
// written as themselves, multi-line strings as lists of lines, and a
// trailing newline. The output depends only on nb, so saving an unchanged
// notebook changes no byte.
//
// Write checks nb first and writes nothing if it would not validate against
// the 4.5 schema (an error wrapping ErrInvalid: a bad or repeated cell id,
// an unknown cell or output type, a non-string text mime value, a
// well-known metadata key of the wrong type).
//
// Write encodes a cell at a time, so it never holds the encoded file; w
// gets a few writes a cell, which a bufio.Writer should gather when w is
// a file or a connection.
func Write(w io.Writer, nb *Notebook) error {
	if err := nb.validate(); err != nil {
		return err
	}
	return nb.write(w, fileForm)
}

// Marshal returns the bytes Write would write.
func Marshal(nb *Notebook) ([]byte, error) {
	var buf bytes.Buffer
	if err := Write(&buf, nb); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// MarshalJSON encodes nb in its in-memory form, compactly: multi-line
// strings stay single strings. This is a notebook model's content in the
// Jupyter contents API. It fails as Write does on an invalid notebook.
func (nb *Notebook) MarshalJSON() ([]byte, error) {
	if err := nb.validate(); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if err := nb.write(&buf, form{}); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// WriteJSON writes to w what json.Marshal(nb) gives: MarshalJSON's
// encoding with <, > and & escaped, as encoding/json compacts the output
// of every Marshaler. It encodes a cell at a time, as Write does, so a
// notebook model's content can stream to a client. WriteJSON checks nb
// first and writes nothing on an invalid notebook.
func (nb *Notebook) WriteJSON(w io.Writer) error {
	if err := nb.validate(); err != nil {
		return err
	}
	return nb.write(w, form{escapeHTML: true})
}

// form is how a notebook is encoded.
type form struct {
	split      bool   // multi-line strings as lists of lines
	indent     string // per level; "" is compact, with no trailing newline
	escapeHTML bool   // <, > and & as \u escapes
}

// fileForm is the file's form, as Jupyter writes it.
var fileForm = form{split: true, indent: " "}

// write encodes nb (which has passed validate) to w in form f: the
// notebook's own keys by hand, each cell and the metadata by
// encoding/json, which sorts their keys, so that only one cell's bytes
// are held at a time. The keys are written in the order encoding/json
// would sort them.
func (nb *Notebook) write(w io.Writer, f form) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(f.escapeHTML) // Jupyter writes <, > and & as themselves
	// put writes sep then v encoded at the given depth.
	put := func(sep string, v any, depth int) error {
		buf.Reset()
		buf.WriteString(sep)
		enc.SetIndent(strings.Repeat(f.indent, depth), f.indent)
		if err := enc.Encode(v); err != nil {
			// validate has checked every raw value, so this is a bug.
			return fmt.Errorf("encode notebook: %w", err)
		}
		b := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
		if f.indent != "" {
			b = unescapeSeparators(b)
		}
		if _, err := w.Write(b); err != nil {
			return fmt.Errorf("write notebook: %w", err)
		}
		return nil
	}
	// nl is a line break and the indentation of depth, or nothing
	// compactly; colon follows a key.
	nl := func(depth int) string {
		if f.indent == "" {
			return ""
		}
		return "\n" + strings.Repeat(f.indent, depth)
	}
	colon := ":"
	if f.indent != "" {
		colon = ": "
	}
	sep := "{" + nl(1) + `"cells"` + colon + "["
	for i, c := range nb.Cells {
		if i > 0 {
			sep = ","
		}
		if err := put(sep+nl(2), c.tree(f.split), 2); err != nil {
			return err
		}
	}
	if len(nb.Cells) > 0 {
		sep = nl(1) + "]"
	} else {
		sep += "]"
	}
	md := rawTree(nb.Metadata)
	delete(md, "orig_nbformat") // Jupyter never writes it either
	delete(md, "orig_nbformat_minor")
	if err := put(sep+","+nl(1)+`"metadata"`+colon, md, 1); err != nil {
		return err
	}
	end := fmt.Sprintf(",%s\"nbformat\"%s%d,%s\"nbformat_minor\"%s%d%s}", nl(1), colon, Format, nl(1), colon, FormatMinor, nl(0))
	if f.indent != "" {
		end += "\n"
	}
	if _, err := io.WriteString(w, end); err != nil {
		return fmt.Errorf("write notebook: %w", err)
	}
	return nil
}

// unescapeSeparators writes U+2028 and U+2029 as themselves, as Python's
// json.dumps(ensure_ascii=False) does; encoding/json escapes them for
// JavaScript's sake. Every backslash in encoder output starts an escape,
// so stepping over escapes two bytes at a time never misreads an escaped
// backslash followed by "u2028".
func unescapeSeparators(b []byte) []byte {
	if !bytes.Contains(b, []byte(`\u202`)) {
		return b
	}
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); i++ {
		if b[i] != '\\' || i+1 >= len(b) {
			out = append(out, b[i])
			continue
		}
		if rest := b[i:]; bytes.HasPrefix(rest, []byte(`\u2028`)) || bytes.HasPrefix(rest, []byte(`\u2029`)) {
			out = utf8.AppendRune(out, rune(0x2028+int(rest[5]-'8')))
			i += 5
			continue
		}
		out = append(out, b[i], b[i+1])
		i++
	}
	return out
}

func (c *Cell) tree(split bool) map[string]any {
	t := map[string]any{
		"id":        c.ID,
		"cell_type": c.Type,
		"metadata":  rawTree(c.Metadata),
		"source":    text(c.Source, split),
	}
	if c.Type != CellCode {
		if c.Attachments != nil {
			atts := make(map[string]any, len(c.Attachments))
			for name, b := range c.Attachments {
				atts[name] = bundleTree(b, split)
			}
			t["attachments"] = atts
		}
		return t
	}
	t["execution_count"] = c.ExecutionCount
	outs := make([]any, 0, len(c.Outputs))
	for _, o := range c.Outputs {
		outs = append(outs, o.tree(split))
	}
	t["outputs"] = outs
	return t
}

func (o *Output) tree(split bool) map[string]any {
	t := map[string]any{"output_type": o.Type}
	switch o.Type {
	case OutputStream:
		t["name"] = o.Name
		t["text"] = text(o.Text, split)
	case OutputDisplayData, OutputExecuteResult:
		t["data"] = bundleTree(o.Data, split)
		t["metadata"] = rawTree(o.Metadata)
		if o.Type == OutputExecuteResult {
			t["execution_count"] = o.ExecutionCount
		}
	case OutputError:
		t["ename"] = o.EName
		t["evalue"] = o.EValue
		tb := o.Traceback
		if tb == nil {
			tb = []string{}
		}
		t["traceback"] = tb
	}
	return t
}

// rawTree decodes raw values so that their keys get sorted too.
func rawTree(m Metadata) map[string]any {
	t := make(map[string]any, len(m))
	for k, raw := range m {
		t[k], _ = value(raw) // validated
	}
	return t
}

// splitMimes are the non-text/* types Jupyter writes as lists of lines.
var splitMimes = map[string]bool{"application/javascript": true, "image/svg+xml": true}

func bundleTree(b MimeBundle, split bool) map[string]any {
	t := make(map[string]any, len(b))
	for mime, raw := range b {
		split := !isJSONMime(mime) && (strings.HasPrefix(mime, "text/") || splitMimes[mime])
		if !split && plain(raw) {
			t[mime] = raw // base64 images: encoding them again would only cost
			continue
		}
		v, _ := value(raw) // validated
		if s, ok := v.(string); ok && split {
			t[mime] = text(s, split)
			continue
		}
		t[mime] = v
	}
	return t
}

// plain reports whether raw is a JSON string that encoding/json would
// write back byte for byte: valid UTF-8, no escapes but "\n", no U+2028
// or U+2029.
func plain(raw json.RawMessage) bool {
	if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' || !utf8.Valid(raw) {
		return false
	}
	inner := raw[1 : len(raw)-1]
	for i := 0; i < len(inner); i++ {
		switch c := inner[i]; {
		case c == '\\':
			if i+1 >= len(inner) || inner[i+1] != 'n' {
				return false
			}
			i++
		case c == '"' || c < 0x20 || c == '<' || c == '>' || c == '&':
			return false
		case c == 0xe2 && (bytes.HasPrefix(inner[i:], []byte("\u2028")) || bytes.HasPrefix(inner[i:], []byte("\u2029"))):
			return false
		}
	}
	return true
}

func text(s string, split bool) any {
	if !split {
		return s
	}
	return SplitLines(s)
}

// SplitLines splits s after every line boundary, keeping the boundaries,
// exactly as Python's str.splitlines(keepends=True) that Jupyter uses: "\n",
// "\r\n", "\r", "\v", "\f", "\x1c", "\x1d", "\x1e", U+0085, U+2028 and
// U+2029. Joining the result gives s back; "" gives an empty list.
func SplitLines(s string) []string {
	lines := []string{}
	start := 0
	for i := 0; i < len(s); {
		r, size := rune(s[i]), 1
		if r >= 0x80 {
			r, size = utf8.DecodeRuneInString(s[i:])
		}
		end := -1
		switch r {
		case '\r':
			end = i + 1
			if end < len(s) && s[end] == '\n' {
				end++
			}
		case '\n', '\v', '\f', 0x1c, 0x1d, 0x1e, 0x85, 0x2028, 0x2029:
			end = i + size
		}
		if end < 0 {
			i += size
			continue
		}
		lines = append(lines, s[start:end])
		start, i = end, end
	}
	if start < len(s) {
		lines = append(lines, s[start:])
	}
	return lines
}
