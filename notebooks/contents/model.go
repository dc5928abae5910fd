package contents

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"linger/notebooks/msg"
	"linger/notebooks/nbformat"
)

// Model types.
const (
	TypeNotebook  = "notebook"
	TypeFile      = "file"
	TypeDirectory = "directory"
)

// Content formats.
const (
	FormatJSON   = "json"
	FormatText   = "text"
	FormatBase64 = "base64"
)

// Model is the Jupyter contents model of a notebook, file or directory, as
// the REST API sends and receives it. Its JSON form matches Jupyter's:
// mimetype, content and format are null when empty, size is null for
// directories, hash and hash_algorithm appear only when asked for.
type Model struct {
	Name         string    // the last path element; "" for the root
	Path         string    // slash-separated, relative to the root
	Type         string    // TypeNotebook, TypeFile or TypeDirectory
	Writable     bool      // the owner may write it (mode bits)
	Created      time.Time // UTC; Linger uses the modification time, as it cannot know the creation time portably
	LastModified time.Time // UTC
	Mimetype     string    // files only; "" is null
	// Content is nil unless asked for. From Get: a *nbformat.Notebook for
	// a notebook, a string (text or base64) for a file, a []Model without
	// content for a directory. To Save: a *nbformat.Notebook or any value
	// whose JSON is a notebook (the json.RawMessage UnmarshalJSON leaves)
	// for a notebook; a string or a JSON string for a file.
	Content       any
	Format        string // FormatJSON, FormatText or FormatBase64; "" is null
	Size          *int64 // bytes; nil for directories
	Hash          string // hex sha256 of the bytes, when GetOptions.Hash asks
	HashAlgorithm string // "sha256" when Hash is set
	// Chunk is set by clients uploading a large file in pieces, as
	// Jupyter's LargeFileManager takes them: 1 for the first piece, 2, 3,
	// … for the next ones and -1 for the last; 0 for a whole file. Save
	// only.
	Chunk int
}

type wireModel struct {
	Name          string          `json:"name"`
	Path          string          `json:"path"`
	Type          string          `json:"type"`
	Writable      bool            `json:"writable"`
	Created       date            `json:"created"`
	LastModified  date            `json:"last_modified"`
	Mimetype      *string         `json:"mimetype"`
	Content       json.RawMessage `json:"content"`
	Format        *string         `json:"format"`
	Size          *int64          `json:"size"`
	Hash          string          `json:"hash,omitempty"`
	HashAlgorithm string          `json:"hash_algorithm,omitempty"`
	Chunk         int             `json:"chunk,omitempty"`
}

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// MarshalJSON writes m as Jupyter's REST API does.
func (m Model) MarshalJSON() ([]byte, error) {
	w := m.wire()
	if m.Content != nil {
		b, err := json.Marshal(m.Content)
		if err != nil {
			return nil, err
		}
		w.Content = b
	}
	return json.Marshal(w)
}

// wire is m's JSON form with null content.
func (m Model) wire() wireModel {
	return wireModel{
		Name: m.Name, Path: m.Path, Type: m.Type, Writable: m.Writable,
		Created: date(m.Created), LastModified: date(m.LastModified),
		Mimetype: nullable(m.Mimetype), Format: nullable(m.Format),
		Size: m.Size, Hash: m.Hash, HashAlgorithm: m.HashAlgorithm,
		Content: json.RawMessage("null"),
	}
}

// WriteJSON writes to w the bytes json.Marshal(m) gives, but a notebook's
// content as it is encoded (nbformat's WriteJSON), so that a model is
// served as a stream, never held as bytes. An error before the content's
// first byte (an invalid notebook, content that does not encode) leaves
// w untouched; w should be buffered.
func (m Model) WriteJSON(w io.Writer) error {
	b, err := json.Marshal(m.wire())
	if err != nil {
		return err
	}
	// The content field is the only `"content":null` in b unescaped: in
	// a string every quote is escaped.
	at := bytes.Index(b, []byte(`"content":null`))
	head, tail := b[:at+len(`"content":`)], b[at+len(`"content":null`):]
	nb, ok := m.Content.(*nbformat.Notebook)
	if !ok {
		c := []byte("null")
		if m.Content != nil {
			if c, err = json.Marshal(m.Content); err != nil {
				return err
			}
		}
		for _, p := range [][]byte{head, c, tail} {
			if _, err := w.Write(p); err != nil {
				return err
			}
		}
		return nil
	}
	if err := nb.WriteJSON(&prefixWriter{w: w, prefix: head}); err != nil {
		return err
	}
	_, err = w.Write(tail)
	return err
}

// prefixWriter writes prefix to w before the first bytes written to it.
type prefixWriter struct {
	w      io.Writer
	prefix []byte
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	if p.prefix != nil {
		if _, err := p.w.Write(p.prefix); err != nil {
			return 0, err
		}
		p.prefix = nil
	}
	return p.w.Write(b)
}

// DecodeModel reads one model as a client sends it from r, as
// UnmarshalJSON would from r's bytes, but decodes its content as it reads
// (nbformat.DecodeTree), so that a large notebook's JSON is never held
// whole. Content is a *nbformat.Notebook when Type is TypeNotebook, a
// string for a JSON string, else the JSON value as a json.RawMessage (for
// Save to refuse), or nil when absent or null. r must hold the model and
// nothing more. A notebook that does not read is an error wrapping
// nbformat.ErrInvalid or nbformat.ErrUnsupported; an error of r comes
// back as r gave it (an *http.MaxBytesError stays one).
func DecodeModel(r io.Reader) (Model, error) {
	m, content, err := decodeModel(r)
	if err != nil || content == nil {
		return m, err
	}
	if m.Type == TypeNotebook {
		nb, err := nbformat.FromTree(content)
		if err != nil {
			return Model{}, fmt.Errorf("notebook content: %w", err)
		}
		m.Content = nb
		return m, nil
	}
	if s, ok := content.(string); ok {
		m.Content = s
		return m, nil
	}
	raw, err := json.Marshal(content)
	if err != nil {
		return Model{}, fmt.Errorf("content: %w", err)
	}
	m.Content = json.RawMessage(raw)
	return m, nil
}

// decodeModel decodes the model in r but its content, which it returns as
// DecodeTree gives it.
func decodeModel(r io.Reader) (Model, any, error) {
	dec := json.NewDecoder(r)
	dec.UseNumber()
	t, err := dec.Token()
	if err != nil {
		return Model{}, nil, err
	}
	var content any
	rest := map[string]json.RawMessage{}
	switch t {
	case nil: // null, as UnmarshalJSON takes it: an empty model
	case json.Delim('{'):
		for dec.More() {
			k, err := dec.Token()
			if err != nil {
				return Model{}, nil, err
			}
			// encoding/json matches field names without regard to case.
			if key := k.(string); strings.EqualFold(key, "content") {
				content, err = nbformat.DecodeTree(dec)
			} else {
				var v json.RawMessage
				err = dec.Decode(&v)
				rest[key] = v
			}
			if err != nil {
				return Model{}, nil, err
			}
		}
		if _, err := dec.Token(); err != nil {
			return Model{}, nil, err
		}
	case json.Delim('['):
		return Model{}, nil, errors.New("a model is a JSON object, not a list")
	default:
		return Model{}, nil, fmt.Errorf("a model is a JSON object, not a %T", t)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return Model{}, nil, cmp.Or(err, errors.New("data after the model"))
	}
	// The fields but content are small: decoded once more, as
	// UnmarshalJSON decodes them.
	b, err := json.Marshal(rest)
	if err != nil {
		return Model{}, nil, err
	}
	var m Model
	if err := json.Unmarshal(b, &m); err != nil {
		return Model{}, nil, err
	}
	return m, content, nil
}

// UnmarshalJSON reads a model as a client sends it (PUT, PATCH, POST
// bodies; any field may be missing). Content is left as a json.RawMessage
// for Save to interpret by Type and Format, or nil when absent or null.
func (m *Model) UnmarshalJSON(b []byte) error {
	var w wireModel
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*m = Model{
		Name: w.Name, Path: w.Path, Type: w.Type, Writable: w.Writable,
		Created: time.Time(w.Created), LastModified: time.Time(w.LastModified),
		Size: w.Size, Hash: w.Hash, HashAlgorithm: w.HashAlgorithm,
		Chunk: w.Chunk,
	}
	if w.Mimetype != nil {
		m.Mimetype = *w.Mimetype
	}
	if w.Format != nil {
		m.Format = *w.Format
	}
	if len(w.Content) > 0 && string(w.Content) != "null" {
		m.Content = w.Content
	}
	return nil
}

// date is a time in the REST API: written as msg.FormatDate writes it (6
// fractional digits, which jupyter_client's parser reads), read as any
// RFC 3339 time.
type date time.Time

func (d date) MarshalJSON() ([]byte, error) { return json.Marshal(msg.FormatDate(time.Time(d))) }

func (d *date) UnmarshalJSON(b []byte) error { return (*time.Time)(d).UnmarshalJSON(b) }

// Checkpoint is a saved copy of a file, as Jupyter's FileCheckpoints keeps
// it: one per file, id "checkpoint".
type Checkpoint struct {
	ID           string    `json:"id"`
	LastModified time.Time `json:"last_modified"`
}

// MarshalJSON writes c as Jupyter's REST API does.
func (c Checkpoint) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		ID           string `json:"id"`
		LastModified date   `json:"last_modified"`
	}{c.ID, date(c.LastModified)})
}

// CheckpointID is the id of the one checkpoint a file can have.
const CheckpointID = "checkpoint"

// GetOptions says what Get returns.
type GetOptions struct {
	// Type is the model type asked for, or "" to decide by the path
	// (a directory, a .ipynb notebook, else a file). A notebook can be
	// read as a file; asking for a directory on a file fails.
	Type string
	// Format is the file content format asked for: FormatText (fails on
	// a file that is not UTF-8), FormatBase64, or "" for text when the
	// bytes are UTF-8 and base64 otherwise. Ignored for notebooks and
	// directories.
	Format string
	// Content asks for the content (Jupyter's content=1).
	Content bool
	// Hash asks for the sha256 of a file's or notebook's bytes.
	Hash bool
}
