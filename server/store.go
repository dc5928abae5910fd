package server

import (
	"context"
	"encoding/json"

	"linger/notebooks/contents"
)

// storeContents adapts a *contents.Store to contentStore: it decodes the
// request bodies into the store's arguments.
type storeContents struct{ st *contents.Store }

func (a storeContents) Get(_ context.Context, p string, q contentsQuery) (any, error) {
	return a.st.Get(p, contents.GetOptions{Type: q.Type, Format: q.Format, Content: q.Content, Hash: q.Hash})
}

func (a storeContents) Save(_ context.Context, p string, body []byte) (any, bool, error) {
	var m contents.Model
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, false, badRequest("decode model: %v", err)
	}
	return a.st.Save(p, m)
}

func (a storeContents) Create(_ context.Context, dir string, body []byte) (any, error) {
	var b struct {
		Type     string `json:"type"`
		Ext      string `json:"ext"`
		CopyFrom string `json:"copy_from"`
	}
	if len(body) > 0 {
		if err := json.Unmarshal(body, &b); err != nil {
			return nil, badRequest("decode request: %v", err)
		}
	}
	if b.CopyFrom != "" {
		return a.st.Copy(b.CopyFrom, dir)
	}
	return a.st.NewUntitled(dir, b.Type, b.Ext)
}

func (a storeContents) Rename(_ context.Context, p string, body []byte) (any, error) {
	var b struct {
		Path *string `json:"path"`
	}
	if err := json.Unmarshal(body, &b); err != nil {
		return nil, badRequest("decode request: %v", err)
	}
	if b.Path == nil {
		return nil, badRequest("rename needs a path")
	}
	return a.st.Rename(p, *b.Path)
}

func (a storeContents) Delete(_ context.Context, p string) error { return a.st.Delete(p) }

func (a storeContents) Checkpoints(_ context.Context, p string) (any, error) {
	cps, err := a.st.ListCheckpoints(p)
	if cps == nil && err == nil {
		cps = []contents.Checkpoint{}
	}
	return cps, err
}

func (a storeContents) CreateCheckpoint(_ context.Context, p string) (any, error) {
	return a.st.CreateCheckpoint(p)
}

func (a storeContents) RestoreCheckpoint(_ context.Context, p, id string) error {
	return a.st.RestoreCheckpoint(p, id)
}

func (a storeContents) DeleteCheckpoint(_ context.Context, p, id string) error {
	return a.st.DeleteCheckpoint(p, id)
}
