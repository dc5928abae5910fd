// Package nbformat reads and writes Jupyter notebooks (.ipynb) in nbformat
// 4.5, the version with cell ids that Jupyter writes today.
//
// A Notebook in memory is the form Jupyter keeps after reading: sources,
// stream texts and text mime data are single strings. Write splits them into
// lists of lines, sorts every object's keys and indents by one space, as
// Jupyter's json.dumps(sort_keys=True, indent=1) does, so a notebook saved by
// Linger diffs cleanly against one saved by Jupyter. Notebook also
// implements json.Marshaler in the in-memory form, which is what the Jupyter
// contents API sends as a notebook model's content.
//
// Read accepts any nbformat 4.x notebook; older minors are upgraded to 4.5
// by giving every cell a fresh id. Everything Read accepts, Write writes,
// and everything Write writes validates against the official 4.5 JSON
// schema (testdata/nbformat.v4.5.schema.json): both check the schema's
// constraints, including those on well-known metadata keys, and fail with
// an error wrapping ErrInvalid.
package nbformat

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
)

// Format and FormatMinor are the nbformat version Write produces.
const (
	Format      = 4
	FormatMinor = 5
)

// Cell types.
const (
	CellCode     = "code"
	CellMarkdown = "markdown"
	CellRaw      = "raw"
)

// Output types.
const (
	OutputStream        = "stream"
	OutputDisplayData   = "display_data"
	OutputExecuteResult = "execute_result"
	OutputError         = "error"
)

var (
	// ErrInvalid is wrapped by every error about a notebook's content:
	// malformed JSON, a missing or mistyped field, a bad cell id, a
	// metadata value the schema forbids.
	ErrInvalid = errors.New("invalid notebook")
	// ErrUnsupported is wrapped when the notebook's nbformat is not 4
	// (nbformat 3 and older are not supported; convert them with Jupyter).
	ErrUnsupported = errors.New("unsupported nbformat")
)

// Notebook is an nbformat 4.5 notebook. The zero value is an empty notebook
// without Linger's kernelspec; New returns one with it. A Notebook is a
// plain value: not safe for concurrent mutation.
type Notebook struct {
	// Metadata is the notebook-level metadata. Keys Linger does not know
	// are kept (re-encoded, numbers as written); kernelspec and language_info are checked.
	Metadata Metadata
	Cells    []*Cell
}

// Cell is one notebook cell.
type Cell struct {
	// ID is the cell id: 1–64 characters of [a-zA-Z0-9-_], unique in the
	// notebook. Read fills it in for notebooks older than 4.5; NewCell
	// generates one.
	ID string
	// Type is CellCode, CellMarkdown or CellRaw.
	Type string
	// Source is the cell's text, lines joined.
	Source   string
	Metadata Metadata
	// Attachments (markdown and raw cells only) maps a file name to its
	// data; nil when the cell has none.
	Attachments map[string]MimeBundle
	// ExecutionCount is the code cell's prompt number; nil when the cell
	// has not run (written as null).
	ExecutionCount *int
	// Outputs of a code cell; always written for code cells (as [] when
	// empty), never for others.
	Outputs []*Output
}

// Output is one output of a code cell. Which fields are used depends on
// Type; the others are ignored by Write.
type Output struct {
	// Type is OutputStream, OutputDisplayData, OutputExecuteResult or
	// OutputError.
	Type string
	// Name is a stream's name ("stdout" or "stderr").
	Name string
	// Text is a stream's text, lines joined.
	Text string
	// Data is a display_data or execute_result mime bundle.
	Data MimeBundle
	// Metadata is a display_data or execute_result output's metadata.
	Metadata Metadata
	// ExecutionCount is an execute_result's prompt number (nil → null).
	ExecutionCount *int
	// EName, EValue and Traceback describe an error.
	EName     string
	EValue    string
	Traceback []string
}

// Metadata is a JSON object kept as raw values, so keys Linger does not
// know survive a read and write unchanged (Write re-indents them and sorts
// their keys).
type Metadata map[string]json.RawMessage

// MimeBundle maps a MIME type to its data. For JSON types (application/json
// and application/*+json) the value is any JSON value; for every other type
// it is a JSON string (multi-line data is joined on read and split on
// write). A bundle decoded from a Jupyter message's data field can be used
// as is.
type MimeBundle map[string]json.RawMessage

// KernelSpec is the notebook's metadata.kernelspec.
type KernelSpec struct {
	Name        string `json:"name"`
	DisplayName string `json:"display_name"`
	Language    string `json:"language,omitempty"`
}

// LanguageInfo is the notebook's metadata.language_info.
type LanguageInfo struct {
	Name           string `json:"name"`
	Mimetype       string `json:"mimetype,omitempty"`
	FileExtension  string `json:"file_extension,omitempty"`
	CodemirrorMode string `json:"codemirror_mode,omitempty"`
	PygmentsLexer  string `json:"pygments_lexer,omitempty"`
}

// LingerKernelSpec is the kernelspec of Linger's Starlark kernel.
var LingerKernelSpec = KernelSpec{Name: "linger", DisplayName: "Linger (Starlark)", Language: "starlark"}

// LingerLanguageInfo is the language_info of Linger's Starlark kernel.
var LingerLanguageInfo = LanguageInfo{
	Name:           "starlark",
	Mimetype:       "text/x-python",
	FileExtension:  ".star",
	CodemirrorMode: "python",
	PygmentsLexer:  "python",
}

// New returns an empty notebook whose metadata names Linger's kernel and
// language.
func New() *Notebook {
	nb := &Notebook{Metadata: Metadata{}}
	nb.Metadata.mustSet("kernelspec", LingerKernelSpec)
	nb.Metadata.mustSet("language_info", LingerLanguageInfo)
	return nb
}

// NewCell returns a cell of the given type with a fresh id and the given
// source. Code cells start with no outputs and a null execution count.
func NewCell(typ, source string) *Cell {
	return &Cell{ID: NewCellID(), Type: typ, Source: source, Metadata: Metadata{}}
}

// NewCellID returns a fresh random cell id: 8 hex digits, as Jupyter makes
// them.
func NewCellID() string {
	var b [4]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// newID makes the ids Read gives cells of older notebooks; tests replace it
// for reproducible goldens.
var newID = NewCellID

// Count returns a pointer to n, for ExecutionCount fields.
func Count(n int) *int { return &n }

// Get decodes the value under key into v and reports whether the key was
// present.
func (m Metadata) Get(key string, v any) (bool, error) {
	raw, ok := m[key]
	if !ok {
		return false, nil
	}
	return true, json.Unmarshal(raw, v)
}

// Set encodes v as the value under key. m must not be nil.
func (m Metadata) Set(key string, v any) error {
	raw, err := json.Marshal(v)
	if err != nil {
		return err
	}
	m[key] = raw
	return nil
}

func (m Metadata) mustSet(key string, v any) {
	if err := m.Set(key, v); err != nil {
		panic(err)
	}
}

// Text returns the data of a non-JSON mime type as a string.
func (b MimeBundle) Text(mime string) (string, bool) {
	var s string
	raw, ok := b[mime]
	if !ok || json.Unmarshal(raw, &s) != nil {
		return "", false
	}
	return s, true
}

// SetText sets the data of a mime type to the string s.
func (b MimeBundle) SetText(mime, s string) {
	raw, _ := json.Marshal(s) // a string always encodes
	b[mime] = raw
}

// KernelSpec returns the notebook's metadata.kernelspec, if it has one.
func (nb *Notebook) KernelSpec() (KernelSpec, bool) {
	var ks KernelSpec
	ok, err := nb.Metadata.Get("kernelspec", &ks)
	return ks, ok && err == nil
}
