package nbformat

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
)

// The schema's patterns, compiled with the same regexp engine the schema
// tests validate with, so the two agree on edge cases such as newlines.
var (
	cellIDPattern   = regexp.MustCompile(`^[a-zA-Z0-9-_]+$`)
	jsonMimePattern = regexp.MustCompile(`^application/(.*\+)?json$`)
	namePattern     = regexp.MustCompile(`^.+$`)
	tagPattern      = regexp.MustCompile(`^[^,]+$`)
	anyKeyPattern   = regexp.MustCompile(`^.*$`)
)

// ValidCellID reports whether id is a valid nbformat 4.5 cell id.
func ValidCellID(id string) bool {
	return len(id) >= 1 && len(id) <= 64 && cellIDPattern.MatchString(id)
}

// isJSONMime reports whether a mime bundle's value for mime may be any JSON
// value rather than a (multi-line) string.
func isJSONMime(mime string) bool { return jsonMimePattern.MatchString(mime) }

// Validate reports why Write would refuse nb, or nil: an error wrapping
// ErrInvalid, as Write's. It lets a caller check a notebook before it
// starts a write that a refusal would leave half done.
func (nb *Notebook) Validate() error { return nb.validate() }

// validate checks what the 4.5 schema requires of nb beyond what the Go
// types guarantee, so that Write never produces a notebook Jupyter rejects.
func (nb *Notebook) validate() error {
	if err := checkNotebookMetadata(nb.Metadata); err != nil {
		return err
	}
	seen := make(map[string]int, len(nb.Cells))
	for i, c := range nb.Cells {
		path := fmt.Sprintf("cells[%d]", i)
		if c == nil {
			return invalid(path, "nil cell")
		}
		if !ValidCellID(c.ID) {
			return invalid(path+".id", "%q is not a valid cell id (1–64 of a-z A-Z 0-9 - _)", c.ID)
		}
		if j, dup := seen[c.ID]; dup {
			return invalid(path+".id", "%q repeats the id of cells[%d]", c.ID, j)
		}
		seen[c.ID] = i
		if err := c.validate(path); err != nil {
			return err
		}
	}
	return nil
}

func (c *Cell) validate(path string) error {
	switch c.Type {
	case CellCode, CellMarkdown, CellRaw:
	default:
		return invalid(path+".cell_type", "unknown cell type %q", c.Type)
	}
	if err := checkCellMetadata(path+".metadata", c.Type, c.Metadata); err != nil {
		return err
	}
	if c.Type != CellCode {
		for name, b := range c.Attachments {
			if err := checkBundle(fmt.Sprintf("%s.attachments[%q]", path, name), b); err != nil {
				return err
			}
		}
		return nil
	}
	if c.ExecutionCount != nil && *c.ExecutionCount < 0 {
		return invalid(path+".execution_count", "%d is negative", *c.ExecutionCount)
	}
	for i, o := range c.Outputs {
		opath := fmt.Sprintf("%s.outputs[%d]", path, i)
		if o == nil {
			return invalid(opath, "nil output")
		}
		switch o.Type {
		case OutputStream, OutputError:
		case OutputDisplayData, OutputExecuteResult:
			if err := checkBundle(opath+".data", o.Data); err != nil {
				return err
			}
			if err := checkRaw(opath+".metadata", o.Metadata); err != nil {
				return err
			}
			if o.Type == OutputExecuteResult && o.ExecutionCount != nil && *o.ExecutionCount < 0 {
				return invalid(opath+".execution_count", "%d is negative", *o.ExecutionCount)
			}
		default:
			return invalid(opath+".output_type", "unknown output type %q", o.Type)
		}
	}
	return nil
}

func invalid(path, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrInvalid, path, fmt.Sprintf(format, args...))
}

// value decodes one raw JSON value, numbers kept as written.
func value(raw json.RawMessage) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, fmt.Errorf("trailing data after JSON value")
	}
	return v, nil
}

// checkRaw checks that every value of m is well-formed JSON.
func checkRaw(path string, m Metadata) error {
	for k, raw := range m {
		if _, err := value(raw); err != nil {
			return invalid(fmt.Sprintf("%s[%q]", path, k), "malformed JSON: %v", err)
		}
	}
	return nil
}

// checkBundle checks b's values without decoding them: they can be
// megabytes of base64.
func checkBundle(path string, b MimeBundle) error {
	for mime, raw := range b {
		if !json.Valid(raw) {
			return invalid(fmt.Sprintf("%s[%q]", path, mime), "malformed JSON")
		}
		if t := bytes.TrimSpace(raw); (len(t) == 0 || t[0] != '"') && !isJSONMime(mime) {
			return invalid(fmt.Sprintf("%s[%q]", path, mime), "want a string for a non-JSON mime type")
		}
	}
	return nil
}

// rule checks one well-known metadata value.
type rule func(v any) string

func isString(v any) string {
	if _, ok := v.(string); !ok {
		return "want a string"
	}
	return ""
}

func isObject(v any) string {
	if _, ok := v.(map[string]any); !ok {
		return "want an object"
	}
	return ""
}

func isBool(v any) string {
	if _, ok := v.(bool); !ok {
		return "want a boolean"
	}
	return ""
}

func isList(v any) string {
	if _, ok := v.([]any); !ok {
		return "want a list"
	}
	return ""
}

// object checks that v is an object with the required string fields and
// the given rules for optional ones.
func object(required []string, fields map[string]rule) rule {
	return func(v any) string {
		m, ok := v.(map[string]any)
		if !ok {
			return "want an object"
		}
		for _, k := range required {
			if _, ok := m[k]; !ok {
				return fmt.Sprintf("%s: missing", k)
			}
		}
		for k, r := range fields {
			if fv, ok := m[k]; ok {
				if msg := r(fv); msg != "" {
					return fmt.Sprintf("%s: %s", k, msg)
				}
			}
		}
		return ""
	}
}

var notebookRules = map[string]rule{
	"kernelspec": object([]string{"name", "display_name"}, map[string]rule{
		"name":         isString,
		"display_name": isString,
	}),
	"language_info": object([]string{"name"}, map[string]rule{
		"name": isString,
		"codemirror_mode": func(v any) string {
			if isString(v) != "" && isObject(v) != "" {
				return "want a string or an object"
			}
			return ""
		},
		"file_extension": isString,
		"mimetype":       isString,
		"pygments_lexer": isString,
	}),
	"title":   isString,
	"authors": isList,
}

func cellName(v any) string {
	if s, ok := v.(string); !ok || !namePattern.MatchString(s) {
		return "want a non-empty one-line string"
	}
	return ""
}

func cellTags(v any) string {
	l, ok := v.([]any)
	if !ok {
		return "want a list of strings"
	}
	seen := make(map[string]bool, len(l))
	for _, t := range l {
		s, ok := t.(string)
		if !ok || !tagPattern.MatchString(s) {
			return "want non-empty strings without commas"
		}
		if seen[s] {
			return fmt.Sprintf("tag %q repeats", s)
		}
		seen[s] = true
	}
	return ""
}

var cellRules = map[string]map[string]rule{
	CellCode: {
		"name":    cellName,
		"tags":    cellTags,
		"jupyter": isObject,
		"execution": func(v any) string {
			m, ok := v.(map[string]any)
			if !ok {
				return "want an object"
			}
			for k, ts := range m {
				if _, ok := ts.(string); !ok && anyKeyPattern.MatchString(k) {
					return fmt.Sprintf("%s: want a string", k)
				}
			}
			return ""
		},
		"collapsed": isBool,
		"scrolled": func(v any) string {
			if _, ok := v.(bool); !ok && v != "auto" {
				return `want true, false or "auto"`
			}
			return ""
		},
	},
	CellMarkdown: {"name": cellName, "tags": cellTags, "jupyter": isObject},
	CellRaw:      {"name": cellName, "tags": cellTags, "jupyter": isObject, "format": isString},
}

func checkMetadata(path string, m Metadata, rules map[string]rule) error {
	if err := checkRaw(path, m); err != nil {
		return err
	}
	for k, r := range rules {
		raw, ok := m[k]
		if !ok {
			continue
		}
		v, _ := value(raw) // checked by checkRaw
		if msg := r(v); msg != "" {
			return invalid(path+"."+k, "%s", msg)
		}
	}
	return nil
}

func checkNotebookMetadata(m Metadata) error {
	return checkMetadata("metadata", m, notebookRules)
}

func checkCellMetadata(path, typ string, m Metadata) error {
	return checkMetadata(path, m, cellRules[typ])
}
