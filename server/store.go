package server

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"

	"linger/notebooks/contents"
	"linger/notebooks/nbformat"
)

// storeContents adapts a *contents.Store to contentStore: it decodes the
// request bodies into the store's arguments.
type storeContents struct{ st *contents.Store }

func (a storeContents) Get(_ context.Context, p string, q contentsQuery) (contents.Model, error) {
	return a.st.Get(p, contents.GetOptions{Type: q.Type, Format: q.Format, Content: q.Content, Hash: q.Hash})
}

// Save decodes the model as body streams in, a notebook's content
// straight into the notebook (contents.DecodeModel), so that the body's
// bytes are never held whole besides it.
func (a storeContents) Save(_ context.Context, p string, body io.Reader) (contents.Model, bool, error) {
	m, err := contents.DecodeModel(body)
	if errors.Is(err, nbformat.ErrInvalid) || errors.Is(err, nbformat.ErrUnsupported) {
		return contents.Model{}, false, badRequest("save %q: %v", p, err)
	}
	if err != nil {
		return contents.Model{}, false, decodeError("decode model", err)
	}
	return a.st.Save(p, m)
}

// decodeError is a request body that could not be decoded: a 400, or the
// body's own read error (too large: a 413) as it is.
func decodeError(what string, err error) error {
	if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
		return err
	}
	return badRequest("%s: %v", what, err)
}

func (a storeContents) Create(_ context.Context, dir string, body []byte) (contents.Model, error) {
	var b struct {
		Type     string `json:"type"`
		Ext      string `json:"ext"`
		CopyFrom string `json:"copy_from"`
	}
	if len(body) > 0 {
		if err := json.Unmarshal(body, &b); err != nil {
			return contents.Model{}, badRequest("decode request: %v", err)
		}
	}
	if b.CopyFrom != "" {
		return a.st.Copy(b.CopyFrom, dir)
	}
	return a.st.NewUntitled(dir, b.Type, b.Ext)
}

func (a storeContents) Rename(_ context.Context, p string, body []byte) (contents.Model, error) {
	var b struct {
		Path *string `json:"path"`
	}
	if err := json.Unmarshal(body, &b); err != nil {
		return contents.Model{}, badRequest("decode request: %v", err)
	}
	if b.Path == nil {
		return contents.Model{}, badRequest("rename needs a path")
	}
	return a.st.Rename(p, *b.Path)
}

func (a storeContents) Delete(_ context.Context, p string) error { return a.st.Delete(p) }

func (a storeContents) Checkpoints(_ context.Context, p string) ([]contents.Checkpoint, error) {
	cps, err := a.st.ListCheckpoints(p)
	if cps == nil && err == nil {
		cps = []contents.Checkpoint{}
	}
	return cps, err
}

func (a storeContents) CreateCheckpoint(_ context.Context, p string) (contents.Checkpoint, error) {
	return a.st.CreateCheckpoint(p)
}

func (a storeContents) RestoreCheckpoint(_ context.Context, p, id string) error {
	return a.st.RestoreCheckpoint(p, id)
}

func (a storeContents) DeleteCheckpoint(_ context.Context, p, id string) error {
	return a.st.DeleteCheckpoint(p, id)
}
