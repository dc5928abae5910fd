package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gorilla/websocket"

	"linger/notebooks/contents"
	"linger/notebooks/msg"
	"linger/notebooks/nbformat"
	"linger/server/httperr"
)

// The decoders of what clients send that the websocket framings' fuzz
// targets (channels_test.go) do not reach: contents PUT bodies, the JSON
// bodies of the sessions and kernels routes, and a client's websocket
// message as a connection takes it (decode, validate, or an error reply).

// FuzzSave sends a contents PUT body to the store adapter the server
// uses: a body it refuses is a 4xx and leaves the directory as it was; one
// it takes is on disk as the body said (a text file byte for byte, a
// notebook that reads back).
func FuzzSave(f *testing.F) {
	f.Add([]byte(testNotebook), true)
	f.Add([]byte(`{"type":"file","format":"text","content":"hello"}`), false)
	f.Add([]byte(`{"type":"file","format":"base64","content":"aGVs\nbG8="}`), false)
	f.Add([]byte(`{"type":"file","format":"text","content":"a","chunk":2}`), false)
	f.Add([]byte(`{"type":"directory"}`), false)
	f.Add([]byte(`{"type":"notebook","format":"json","content":{"cells":"no"}}`), true)
	f.Add([]byte(`{"type":"file","format":"text","content":"x"} {}`), false)
	dir := f.TempDir()
	st, err := contents.New(dir)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { st.Close() })
	a := storeContents{st}
	f.Fuzz(func(t *testing.T, body []byte, notebook bool) {
		name := "f.txt"
		if notebook {
			name = "f.ipynb"
		}
		defer empty(t, dir)
		_, _, err := a.Save(context.Background(), name, bytes.NewReader(body))
		if err != nil {
			if code := httperr.Status(classify(err)); code < 400 || code >= 500 {
				t.Fatalf("Save: %d %v", code, err)
			}
			if left, _ := os.ReadDir(dir); len(left) != 0 {
				t.Fatalf("Save failed (%v) and left %s", err, left[0].Name())
			}
			return
		}
		var m contents.Model
		if err := json.Unmarshal(body, &m); err != nil {
			t.Fatalf("saved a body json.Unmarshal refuses: %v", err)
		}
		if m.Chunk != 0 && m.Chunk != -1 {
			// A chunk before the last is staged: the target is not
			// there until the last chunk.
			if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
				t.Fatalf("chunk %d showed at the target", m.Chunk)
			}
			if left, _ := os.ReadDir(dir); len(left) != 1 || !strings.HasPrefix(left[0].Name(), ".") {
				t.Fatalf("chunk %d staged as %v", m.Chunk, left)
			}
			return
		}
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatalf("saved, but: %v", err)
		}
		if m.Type == contents.TypeDirectory {
			if !fi.IsDir() {
				t.Fatal("saved a directory as a file")
			}
			return
		}
		data, _ := os.ReadFile(filepath.Join(dir, name))
		switch {
		case m.Type == contents.TypeNotebook:
			if _, err := nbformat.Read(bytes.NewReader(data)); err != nil {
				t.Fatalf("saved notebook does not read back: %v", err)
			}
		case m.Format == contents.FormatText:
			var text string
			_ = json.Unmarshal(m.Content.(json.RawMessage), &text)
			if string(data) != text {
				t.Fatalf("saved %q, want %q", data, text)
			}
		}
	})
}

// empty removes everything in dir.
func empty(t *testing.T, dir string) {
	es, _ := os.ReadDir(dir)
	for _, e := range es {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
}

// FuzzReadJSON decodes a sessions or kernels request body as those routes
// do: it is a 400 or a 413, or exactly what json.Unmarshal makes of the
// whole body (an empty body leaves the defaults).
func FuzzReadJSON(f *testing.F) {
	f.Add([]byte(`{"path":"a.ipynb","name":"a.ipynb","type":"notebook","kernel":{"name":"linger"}}`))
	f.Add([]byte(`{"notebook":{"path":"a.ipynb"},"kernel":{"id":"0b7e"}}`))
	f.Add([]byte(`{"name":"linger","path":"dir/a.ipynb"}`))
	f.Add([]byte(`{"path":"a"}{"path":"b"}`))
	f.Add([]byte(``))
	f.Add([]byte(`{"path":1}`))
	const limit = 256
	f.Fuzz(func(t *testing.T, body []byte) {
		r := httptest.NewRequest(http.MethodPost, "/api/sessions", bytes.NewReader(body))
		var b sessionBody
		err := readJSON(httptest.NewRecorder(), r, limit, &b)
		if err != nil {
			code := httperr.Status(err)
			if code != http.StatusBadRequest && code != http.StatusRequestEntityTooLarge || code == http.StatusRequestEntityTooLarge && len(body) <= limit {
				t.Fatalf("readJSON of %d bytes: %d %v", len(body), code, err)
			}
			return
		}
		if len(bytes.TrimSpace(body)) == 0 {
			if b.path() != "" || b.Name != nil || b.Kernel != nil {
				t.Fatalf("empty body decoded to %+v", b)
			}
			return
		}
		var want sessionBody
		if err := json.Unmarshal(body, &want); err != nil {
			t.Fatalf("readJSON took %q, which json.Unmarshal refuses: %v", body, err)
		}
		g, _ := json.Marshal(b)
		w, _ := json.Marshal(want)
		if !bytes.Equal(g, w) {
			t.Fatalf("readJSON: %s, json.Unmarshal: %s", g, w)
		}
	})
}

// FuzzClientMessage takes a websocket message as a connection does: it
// decodes and validates, and re-encodes in its framing to the same
// message; or it is refused with an error reply that is itself a valid
// message every client can decode.
func FuzzClientMessage(f *testing.F) {
	exec := msg.New(msg.Shell, "execute_request", "9c1f7d2e", map[string]any{
		"code": "e = Engine(model=\"small\")\ne.generate(prompt_tokens=64)", "silent": false, "store_history": true,
		"user_expressions": map[string]any{}, "allow_stdin": true, "stop_on_error": true,
	})
	v1, _ := encodeV1(exec)
	legacy, _, _ := encodeLegacy(exec)
	f.Add(v1, true, true)
	f.Add(legacy, false, false)
	f.Add(legacy, false, true)
	f.Add([]byte(`{"channel":"iopub","header":{"msg_id":"1","msg_type":"stream"},"content":{}}`), false, false)
	f.Add([]byte(`{"channel":"shell","header":{"msg_id":"1","msg_type":"kernel_info_request"},"content":[]}`), false, true)
	f.Add([]byte(`{"header":{"msg_type":"execute_request"`), false, false)
	// Jupyter Server takes these: no channel (shell) and a numeric date.
	f.Add([]byte(`{"header":{"msg_id":"1","msg_type":"execute_request","date":1764685221126},"parent_header":{"date":1.5},"content":{"code":"1"}}`), false, false)
	f.Add([]byte(`{"header":{"msg_id":"1","msg_type":"execute_request","date":1764685221126},"content":{}}`), false, true)
	f.Fuzz(func(t *testing.T, data []byte, binaryFrame, isV1 bool) {
		typ := websocket.TextMessage
		if binaryFrame {
			typ = websocket.BinaryMessage
		}
		c := &wsConn{v1: isV1}
		m, err := c.decode(typ, data)
		if err == nil {
			err = validate(m)
		}
		if err != nil {
			if !errors.Is(err, errFrame) && !errors.Is(err, msg.ErrInvalid) {
				t.Fatalf("unexpected error %v", err)
			}
			r := errorReply(partial(m, data, typ), err)
			if err := r.Validate(); err != nil {
				t.Fatalf("error reply %+v: %v", r, err)
			}
			for _, v1 := range []bool{false, true} {
				if _, err := roundTrip(&wsConn{v1: v1}, r); err != nil {
					t.Fatalf("error reply (v1 %v): %v", v1, err)
				}
			}
			return
		}
		again, err := roundTrip(c, m)
		if err != nil {
			t.Fatalf("re-encoding %+v: %v", m, err)
		}
		sameMsg(t, "again", again, m)
	})
}

// roundTrip encodes m as the server writes it on c and decodes it again.
func roundTrip(c *wsConn, m *msg.Message) (*msg.Message, error) {
	if c.v1 {
		b, err := encodeV1(m)
		if err != nil {
			return nil, err
		}
		return c.decode(websocket.BinaryMessage, b)
	}
	b, bin, err := encodeLegacy(m)
	if err != nil {
		return nil, err
	}
	typ := websocket.TextMessage
	if bin {
		typ = websocket.BinaryMessage
	}
	return c.decode(typ, b)
}

// FuzzTracePath resolves a saved trace's name from a URL (the timeline,
// export and compare routes): a name it takes is a regular file directly
// in the trace directory; any other is a 400, 403 or 404.
func FuzzTracePath(f *testing.F) {
	f.Add("qwen2-1.5b-128k.ltrace")
	f.Add("../secret.ltrace")
	f.Add("link.ltrace")
	f.Add(".hidden.ltrace")
	dir := f.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "qwen2-1.5b-128k.ltrace"), []byte("LTRACE"), 0o644); err != nil {
		f.Fatal(err)
	}
	if err := os.Symlink("/etc/passwd", filepath.Join(dir, "link.ltrace")); err != nil {
		f.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "d.ltrace"), 0o755); err != nil {
		f.Fatal(err)
	}
	s := &Server{opts: Options{TraceDir: dir}}
	f.Fuzz(func(t *testing.T, name string) {
		p, err := s.tracePath(name)
		if err != nil {
			if code := httperr.Status(err); code != http.StatusBadRequest && code != http.StatusForbidden && code != http.StatusNotFound {
				t.Fatalf("tracePath(%q): %d %v", name, code, err)
			}
			return
		}
		if filepath.Dir(p) != dir {
			t.Fatalf("tracePath(%q) = %s, outside %s", name, p, dir)
		}
		if fi, err := os.Lstat(p); err != nil || !fi.Mode().IsRegular() {
			t.Fatalf("tracePath(%q) = %s, not a regular file (%v)", name, p, err)
		}
	})
}
