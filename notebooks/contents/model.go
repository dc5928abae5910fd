package contents

import (
	"encoding/json"
	"time"

	"linger/notebooks/msg"
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
	w := wireModel{
		Name: m.Name, Path: m.Path, Type: m.Type, Writable: m.Writable,
		Created: date(m.Created), LastModified: date(m.LastModified),
		Mimetype: nullable(m.Mimetype), Format: nullable(m.Format),
		Size: m.Size, Hash: m.Hash, HashAlgorithm: m.HashAlgorithm,
		Content: json.RawMessage("null"),
	}
	if m.Content != nil {
		b, err := json.Marshal(m.Content)
		if err != nil {
			return nil, err
		}
		w.Content = b
	}
	return json.Marshal(w)
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
