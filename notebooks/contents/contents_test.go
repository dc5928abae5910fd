package contents

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"linger/notebooks/nbformat"
)

// newStore returns a store on a fresh directory laid out by files (a path
// ending in "/" is a directory) and the directory.
func newStore(t *testing.T, files ...string) (*Store, string) {
	t.Helper()
	dir := t.TempDir()
	for _, f := range files {
		p := filepath.Join(dir, filepath.FromSlash(f))
		if strings.HasSuffix(f, "/") {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		data := []byte("content of " + f)
		if strings.HasSuffix(f, ".ipynb") {
			data = notebookBytes(t, f)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s, err := New(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, dir
}

func notebookBytes(t *testing.T, source string) []byte {
	t.Helper()
	nb := nbformat.New()
	nb.Cells = append(nb.Cells, nbformat.NewCell(nbformat.CellCode, source))
	data, err := nbformat.Marshal(nb)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// textMime is the mimetype of a text file with extension ext: the
// system's guess (machines differ about .ipynb) or text/plain.
func textMime(ext string) string {
	if m := guessMime("x" + ext); m != "" {
		return m
	}
	return "text/plain"
}

func names(ms []Model) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.Name+":"+m.Type)
	}
	sort.Strings(out)
	return out
}

// listTree returns every path under dir, hidden ones included.
func listTree(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if p != dir {
			r, _ := filepath.Rel(dir, p)
			out = append(out, filepath.ToSlash(r))
		}
		return nil
	})
	return out
}

func TestGet(t *testing.T) {
	s, dir := newStore(t, "a.ipynb", "notes.txt", "sub/b.ipynb", ".hidden", ".ipynb_checkpoints/a-checkpoint.ipynb", "emptydir/")
	if err := os.WriteFile(filepath.Join(dir, "bin.dat"), []byte{0xff, 0x00, 0xfe}, 0o644); err != nil {
		t.Fatal(err)
	}
	outside := t.TempDir()
	os.WriteFile(filepath.Join(outside, "secret"), []byte("secret"), 0o644)
	os.Symlink(outside, filepath.Join(dir, "out"))
	os.Symlink(filepath.Join(outside, "secret"), filepath.Join(dir, "outfile"))
	os.Symlink("notes.txt", filepath.Join(dir, "link.txt"))
	os.Symlink("missing", filepath.Join(dir, "broken"))

	root, err := s.Get("", GetOptions{Content: true})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"a.ipynb:notebook", "bin.dat:file", "emptydir:directory", "link.txt:file", "notes.txt:file", "sub:directory"}
	if got := names(root.Content.([]Model)); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("root lists %v, want %v (no hidden, no links out, no broken links)", got, want)
	}
	if root.Type != TypeDirectory || root.Path != "" || root.Name != "" || root.Format != FormatJSON || root.Size != nil {
		t.Errorf("root model = %+v", root)
	}
	for _, c := range root.Content.([]Model) {
		if c.Content != nil || c.Format != "" {
			t.Errorf("listed %s with content", c.Path)
		}
	}
	empty, err := s.Get("emptydir/", GetOptions{Content: true})
	if err != nil || len(empty.Content.([]Model)) != 0 || empty.Path != "emptydir" {
		t.Errorf("empty dir = %+v, %v", empty, err)
	}

	tests := []struct {
		name, path string
		opts       GetOptions
		typ        string
		format     string
		mimetype   string
		content    string // for files; "notebook" checks a notebook
		err        error
	}{
		{"notebook", "a.ipynb", GetOptions{Content: true}, TypeNotebook, FormatJSON, "", "notebook", nil},
		{"notebook no content", "sub/b.ipynb", GetOptions{}, TypeNotebook, "", "", "", nil},
		{"notebook as file", "a.ipynb", GetOptions{Type: TypeFile, Content: true}, TypeFile, FormatText, textMime(".ipynb"), "", nil},
		{"text", "notes.txt", GetOptions{Content: true}, TypeFile, FormatText, "text/plain", "content of notes.txt", nil},
		{"text as base64", "notes.txt", GetOptions{Content: true, Format: FormatBase64}, TypeFile, FormatBase64, "text/plain", "Y29udGVudCBvZiBub3Rlcy50eHQ=", nil},
		{"binary", "bin.dat", GetOptions{Content: true}, TypeFile, FormatBase64, "application/octet-stream", "/wD+", nil},
		{"binary as text", "bin.dat", GetOptions{Content: true, Format: FormatText}, "", "", "", "", ErrInvalid},
		{"link inside", "link.txt", GetOptions{Content: true}, TypeFile, FormatText, "text/plain", "content of notes.txt", nil},
		{"file as directory", "notes.txt", GetOptions{Type: TypeDirectory}, "", "", "", "", ErrInvalid},
		{"directory as notebook", "sub", GetOptions{Type: TypeNotebook}, "", "", "", "", ErrInvalid},
		{"unknown type", "notes.txt", GetOptions{Type: "blob"}, "", "", "", "", ErrInvalid},
		{"unknown format", "notes.txt", GetOptions{Format: "hex"}, "", "", "", "", ErrInvalid},
		{"missing", "nope.ipynb", GetOptions{}, "", "", "", "", ErrNotFound},
		{"under a file", "notes.txt/x", GetOptions{}, "", "", "", "", ErrNotFound},
		{"hidden", ".hidden", GetOptions{Content: true}, "", "", "", "", ErrNotFound},
		{"checkpoints", ".ipynb_checkpoints/a-checkpoint.ipynb", GetOptions{}, "", "", "", "", ErrNotFound},
		{"broken link", "broken", GetOptions{}, "", "", "", "", ErrNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := s.Get(tt.path, tt.opts)
			if tt.err != nil {
				if !errors.Is(err, tt.err) {
					t.Fatalf("Get = %+v, %v; want %v", m, err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if m.Type != tt.typ || m.Format != tt.format || m.Mimetype != tt.mimetype {
				t.Errorf("type %q format %q mimetype %q; want %q %q %q", m.Type, m.Format, m.Mimetype, tt.typ, tt.format, tt.mimetype)
			}
			if m.Size == nil || !m.Writable || m.LastModified.IsZero() || m.Path != strings.Trim(tt.path, "/") {
				t.Errorf("model = %+v", m)
			}
			switch {
			case tt.content == "notebook":
				nb, ok := m.Content.(*nbformat.Notebook)
				if !ok || len(nb.Cells) != 1 || nb.Cells[0].Source != "a.ipynb" {
					t.Errorf("content = %#v", m.Content)
				}
			case tt.content != "":
				if m.Content != tt.content {
					t.Errorf("content = %q, want %q", m.Content, tt.content)
				}
			case !tt.opts.Content && m.Content != nil:
				t.Errorf("content without asking: %v", m.Content)
			}
		})
	}
	t.Run("hash", func(t *testing.T) {
		m, err := s.Get("notes.txt", GetOptions{Hash: true})
		if err != nil {
			t.Fatal(err)
		}
		// sha256("content of notes.txt")
		if m.HashAlgorithm != "sha256" || len(m.Hash) != 64 || m.Content != nil {
			t.Errorf("hash = %q %q, content %v", m.Hash, m.HashAlgorithm, m.Content)
		}
	})
}

func TestPathSafety(t *testing.T) {
	s, dir := newStore(t, "a.ipynb", "sub/x.txt")
	outside := t.TempDir()
	secret := filepath.Join(outside, "secret.txt")
	os.WriteFile(secret, []byte("secret"), 0o644)
	os.Symlink(outside, filepath.Join(dir, "out"))
	os.Symlink(secret, filepath.Join(dir, "outfile.txt"))
	os.Symlink("../../"+filepath.Base(outside), filepath.Join(dir, "sub", "rel"))

	paths := []struct {
		path string
		err  error
	}{
		{"../x", ErrForbidden},
		{"..", ErrForbidden},
		{"sub/../../x", ErrForbidden},
		{"/etc/passwd", ErrBadPath},
		{"/", ErrBadPath},
		{"a\x00.ipynb", ErrBadPath},
		{"out/secret.txt", ErrForbidden},
		{"outfile.txt", ErrForbidden},
		{"out", ErrForbidden},
	}
	for _, p := range paths {
		t.Run(fmt.Sprintf("%q", p.path), func(t *testing.T) {
			if _, err := s.Get(p.path, GetOptions{Content: true}); !errors.Is(err, p.err) {
				t.Errorf("Get = %v, want %v", err, p.err)
			}
			file := Model{Type: TypeFile, Format: FormatText, Content: "pwned"}
			if _, _, err := s.Save(p.path, file); !errors.Is(err, p.err) && !(p.path == "/" && errors.Is(err, ErrBadPath)) {
				t.Errorf("Save = %v, want %v", err, p.err)
			}
			if _, err := s.Copy("a.ipynb", p.path); !errors.Is(err, p.err) {
				t.Errorf("Copy to = %v, want %v", err, p.err)
			}
			if _, err := s.Copy(p.path, ""); !errors.Is(err, p.err) {
				t.Errorf("Copy from = %v, want %v", err, p.err)
			}
			// A link out is still a name in the root: renaming onto it
			// finds it taken.
			if _, err := s.Rename("sub/x.txt", p.path); !errors.Is(err, p.err) && !errors.Is(err, ErrExists) {
				t.Errorf("Rename to = %v, want %v", err, p.err)
			}
			if _, err := s.NewUntitled(p.path, TypeFile, ".txt"); !errors.Is(err, p.err) {
				t.Errorf("NewUntitled = %v, want %v", err, p.err)
			}
			if _, err := s.CreateCheckpoint(p.path); !errors.Is(err, p.err) {
				t.Errorf("CreateCheckpoint = %v, want %v", err, p.err)
			}
		})
	}
	t.Run("symlink chain out", func(t *testing.T) {
		if _, err := s.Get("sub/rel/secret.txt", GetOptions{Content: true}); !errors.Is(err, ErrForbidden) {
			t.Errorf("Get = %v, want ErrForbidden", err)
		}
	})
	t.Run("inside dotdot", func(t *testing.T) {
		m, err := s.Get("sub/../a.ipynb", GetOptions{})
		if err != nil || m.Path != "a.ipynb" {
			t.Errorf("Get = %+v, %v", m, err)
		}
	})
	t.Run("hidden writes", func(t *testing.T) {
		file := Model{Type: TypeFile, Format: FormatText, Content: "x"}
		for _, p := range []string{".env", "sub/.git/config", ".ipynb_checkpoints/a-checkpoint.ipynb"} {
			if _, _, err := s.Save(p, file); !errors.Is(err, ErrBadPath) {
				t.Errorf("Save(%q) = %v, want ErrBadPath", p, err)
			}
			if err := s.Delete(p); !errors.Is(err, ErrBadPath) {
				t.Errorf("Delete(%q) = %v, want ErrBadPath", p, err)
			}
		}
	})
	t.Run("root", func(t *testing.T) {
		if err := s.Delete(""); !errors.Is(err, ErrBadPath) {
			t.Errorf("Delete(root) = %v", err)
		}
		if _, err := s.Rename("", "x"); !errors.Is(err, ErrBadPath) {
			t.Errorf("Rename(root) = %v", err)
		}
	})
	// Deleting a link out removes the link, never the target.
	if err := s.Delete("outfile.txt"); err != nil {
		t.Fatal(err)
	}
	if data, err := os.ReadFile(secret); err != nil || string(data) != "secret" {
		t.Errorf("outside file changed: %q, %v", data, err)
	}
	if got := listTree(t, outside); fmt.Sprint(got) != "[secret.txt]" {
		t.Errorf("outside now holds %v", got)
	}
}

func TestSave(t *testing.T) {
	s, dir := newStore(t, "sub/")
	nb := nbformat.New()
	nb.Cells = append(nb.Cells, nbformat.NewCell(nbformat.CellCode, "x = 1"))

	m, created, err := s.Save("sub/n.ipynb", Model{Type: TypeNotebook, Content: nb})
	if err != nil || !created || m.Type != TypeNotebook || m.Path != "sub/n.ipynb" || m.Content != nil {
		t.Fatalf("Save = %+v, %v, %v", m, created, err)
	}
	// Jupyter gives a notebook its first checkpoint on save.
	if cps, err := s.ListCheckpoints("sub/n.ipynb"); err != nil || len(cps) != 1 || cps[0].ID != "checkpoint" {
		t.Errorf("checkpoints after first save = %v, %v", cps, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "sub", ".ipynb_checkpoints", "n-checkpoint.ipynb")); err != nil {
		t.Errorf("checkpoint not beside the file: %v", err)
	}
	nb.Cells[0].Source = "x = 2"
	if _, created, err := s.Save("sub/n.ipynb", Model{Type: TypeNotebook, Content: nb}); err != nil || created {
		t.Fatalf("second Save: created %v, %v", created, err)
	}
	back, err := nbformat.ReadFile(filepath.Join(dir, "sub", "n.ipynb"))
	if err != nil || back.Cells[0].Source != "x = 2" {
		t.Fatalf("saved notebook = %v, %v", back, err)
	}

	// A PUT body as the server decodes it: content stays raw JSON, in
	// Jupyter's in-memory form (sources as strings).
	var put Model
	body := `{"type": "notebook", "format": "json", "content": {"nbformat": 4, "nbformat_minor": 5, "metadata": {},
		"cells": [{"id": "c1", "cell_type": "markdown", "metadata": {}, "source": "# hi\nthere"}]}}`
	if err := json.Unmarshal([]byte(body), &put); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Save("put.ipynb", put); err != nil {
		t.Fatal(err)
	}
	got, err := s.Get("put.ipynb", GetOptions{Content: true})
	if err != nil || got.Content.(*nbformat.Notebook).Cells[0].Source != "# hi\nthere" {
		t.Fatalf("Get after PUT = %+v, %v", got, err)
	}
	raw, _ := os.ReadFile(filepath.Join(dir, "put.ipynb"))
	if !bytes.Contains(raw, []byte("\"# hi\\n\",\n    \"there\"")) {
		t.Errorf("not written as lines:\n%s", raw)
	}

	files := []struct {
		name string
		m    Model
		want string
		err  error
	}{
		{"text", Model{Type: TypeFile, Format: FormatText, Content: "héllo\n"}, "héllo\n", nil},
		{"base64", Model{Type: TypeFile, Format: FormatBase64, Content: "AP8K"}, "\x00\xff\n", nil},
		{"base64 lines", Model{Type: TypeFile, Format: FormatBase64, Content: "AP\n8K"}, "\x00\xff\n", nil},
		{"raw JSON string", Model{Type: TypeFile, Format: FormatText, Content: json.RawMessage(`"raw"`)}, "raw", nil},
		{"no type", Model{Content: "x"}, "", ErrInvalid},
		{"unknown type", Model{Type: "blob", Content: "x"}, "", ErrInvalid},
		{"no content", Model{Type: TypeFile, Format: FormatText}, "", ErrInvalid},
		{"no format", Model{Type: TypeFile, Content: "x"}, "", ErrInvalid},
		{"bad base64", Model{Type: TypeFile, Format: FormatBase64, Content: "!!"}, "", ErrInvalid},
		{"content not string", Model{Type: TypeFile, Format: FormatText, Content: 3}, "", ErrInvalid},
	}
	for _, tt := range files {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := s.Save("f.bin", tt.m)
			if !errors.Is(err, tt.err) {
				t.Fatalf("Save = %v, want %v", err, tt.err)
			}
			if err == nil {
				if data, _ := os.ReadFile(filepath.Join(dir, "f.bin")); string(data) != tt.want {
					t.Errorf("wrote %q, want %q", data, tt.want)
				}
			}
		})
	}
	t.Run("directory", func(t *testing.T) {
		m, created, err := s.Save("newdir", Model{Type: TypeDirectory})
		if err != nil || !created || m.Type != TypeDirectory {
			t.Fatalf("Save dir = %+v, %v, %v", m, created, err)
		}
		if _, created, err := s.Save("newdir", Model{Type: TypeDirectory}); err != nil || created {
			t.Errorf("Save existing dir: created %v, %v", created, err)
		}
		if _, _, err := s.Save("newdir", Model{Type: TypeFile, Format: FormatText, Content: "x"}); !errors.Is(err, ErrInvalid) {
			t.Errorf("file over dir = %v", err)
		}
		if _, _, err := s.Save("f.bin", Model{Type: TypeDirectory}); !errors.Is(err, ErrInvalid) {
			t.Errorf("dir over file = %v", err)
		}
		if _, _, err := s.Save("nodir/x.txt", Model{Type: TypeFile, Format: FormatText, Content: "x"}); !errors.Is(err, ErrNotFound) {
			t.Errorf("save into missing dir = %v", err)
		}
	})
}

func TestSaveInvalidNotebookWritesNothing(t *testing.T) {
	s, dir := newStore(t, "n.ipynb")
	before, _ := os.ReadFile(filepath.Join(dir, "n.ipynb"))
	bad := []struct {
		name    string
		content any
		msg     string
	}{
		{"no cell id", json.RawMessage(`{"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [{"cell_type": "raw", "metadata": {}, "source": ""}]}`), "cells[0].id"},
		{"nbformat 3", json.RawMessage(`{"nbformat": 3, "nbformat_minor": 0, "metadata": {}, "worksheets": []}`), "nbformat 3"},
		{"not a notebook", "just text", "not a JSON object"},
		{"malformed", json.RawMessage(`{"nbformat": 4,`), "malformed JSON"},
		{"map", map[string]any{"cells": []any{}}, "nbformat: missing"},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := s.Save("n.ipynb", Model{Type: TypeNotebook, Content: tt.content})
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("Save = %v, want ErrInvalid mentioning %q", err, tt.msg)
			}
			if after, _ := os.ReadFile(filepath.Join(dir, "n.ipynb")); !bytes.Equal(after, before) {
				t.Error("the previous notebook changed")
			}
			if got := listTree(t, dir); fmt.Sprint(got) != "[n.ipynb]" {
				t.Errorf("directory holds %v", got)
			}
		})
	}
}

// failingWriter passes through n bytes, then fails with err.
type failingWriter struct {
	w   io.Writer
	n   int
	err error
}

func (f *failingWriter) Write(p []byte) (int, error) {
	if len(p) <= f.n {
		f.n -= len(p)
		return f.w.Write(p)
	}
	k, _ := f.w.Write(p[:f.n])
	f.n = 0
	return k, f.err
}

func TestAtomicSave(t *testing.T) {
	big := strings.Repeat("new content\n", 10000)
	tests := []struct {
		name string
		n    int
		err  error
	}{
		{"disk full at once", 0, syscall.ENOSPC},
		{"disk full half way", len(big) / 2, syscall.ENOSPC},
		{"permission", 0, syscall.EACCES},
		{"io error at the end", len(big) - 1, syscall.EIO},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, dir := newStore(t, "f.txt", "n.ipynb")
			before, _ := os.ReadFile(filepath.Join(dir, "f.txt"))
			beforeNB, _ := os.ReadFile(filepath.Join(dir, "n.ipynb"))
			s.wrap = func(w io.Writer) io.Writer { return &failingWriter{w: w, n: tt.n, err: tt.err} }
			_, _, err := s.Save("f.txt", Model{Type: TypeFile, Format: FormatText, Content: big})
			if !errors.Is(err, tt.err) {
				t.Fatalf("Save = %v, want %v", err, tt.err)
			}
			if after, _ := os.ReadFile(filepath.Join(dir, "f.txt")); !bytes.Equal(after, before) {
				t.Error("failed save changed the file")
			}
			nb := nbformat.New()
			nb.Cells = append(nb.Cells, nbformat.NewCell(nbformat.CellMarkdown, big))
			if _, _, err := s.Save("n.ipynb", Model{Type: TypeNotebook, Content: nb}); !errors.Is(err, tt.err) {
				t.Fatalf("Save notebook = %v, want %v", err, tt.err)
			}
			if after, _ := os.ReadFile(filepath.Join(dir, "n.ipynb")); !bytes.Equal(after, beforeNB) {
				t.Error("failed save changed the notebook")
			}
			if _, _, err := s.Save("new.txt", Model{Type: TypeFile, Format: FormatText, Content: big}); !errors.Is(err, tt.err) {
				t.Fatalf("Save new = %v, want %v", err, tt.err)
			}
			// No temp file left, hidden or not, and no half-made new file.
			if got := listTree(t, dir); fmt.Sprint(got) != "[f.txt n.ipynb]" {
				t.Errorf("directory holds %v", got)
			}
			s.wrap = nil
			if _, _, err := s.Save("f.txt", Model{Type: TypeFile, Format: FormatText, Content: big}); err != nil {
				t.Fatal(err)
			}
			if after, _ := os.ReadFile(filepath.Join(dir, "f.txt")); string(after) != big {
				t.Error("save after the failure did not write")
			}
		})
	}
	t.Run("keeps mode and links", func(t *testing.T) {
		s, dir := newStore(t, "f.txt")
		os.Chmod(filepath.Join(dir, "f.txt"), 0o600)
		os.Symlink("f.txt", filepath.Join(dir, "link.txt"))
		if _, _, err := s.Save("link.txt", Model{Type: TypeFile, Format: FormatText, Content: "via link"}); err != nil {
			t.Fatal(err)
		}
		fi, err := os.Lstat(filepath.Join(dir, "link.txt"))
		if err != nil || fi.Mode()&os.ModeSymlink == 0 {
			t.Errorf("the link was replaced: %v, %v", fi.Mode(), err)
		}
		data, _ := os.ReadFile(filepath.Join(dir, "f.txt"))
		if string(data) != "via link" {
			t.Errorf("target holds %q", data)
		}
		if fi, _ := os.Stat(filepath.Join(dir, "f.txt")); fi.Mode().Perm() != 0o600 {
			t.Errorf("mode = %v, want 0600 kept", fi.Mode().Perm())
		}
	})
	t.Run("read-only directory", func(t *testing.T) {
		if os.Geteuid() == 0 {
			t.Skip("root ignores directory permissions; the injected failures above cover it")
		}
		s, dir := newStore(t, "ro/f.txt")
		os.Chmod(filepath.Join(dir, "ro"), 0o555)
		t.Cleanup(func() { os.Chmod(filepath.Join(dir, "ro"), 0o755) })
		if _, _, err := s.Save("ro/f.txt", Model{Type: TypeFile, Format: FormatText, Content: "x"}); !errors.Is(err, ErrForbidden) {
			t.Errorf("Save = %v, want ErrForbidden", err)
		}
		if data, _ := os.ReadFile(filepath.Join(dir, "ro", "f.txt")); string(data) != "content of ro/f.txt" {
			t.Errorf("file now %q", data)
		}
	})
}

func TestNewUntitled(t *testing.T) {
	s, _ := newStore(t, "sub/")
	steps := []struct {
		dir, typ, ext, want string
	}{
		{"", TypeNotebook, "", "Untitled.ipynb"},
		{"", "", ".ipynb", "Untitled1.ipynb"},
		{"", TypeNotebook, ".txt", "Untitled2.ipynb"},
		{"", TypeFile, ".txt", "untitled.txt"},
		{"", "", ".txt", "untitled1.txt"},
		{"", TypeFile, "", "untitled"},
		{"", TypeFile, "", "untitled1"},
		{"", TypeFile, ".tar.gz", "untitled.tar.gz"},
		{"", TypeFile, ".tar.gz", "untitled1.tar.gz"},
		{"", TypeDirectory, "", "Untitled Folder"},
		{"", TypeDirectory, "", "Untitled Folder 1"},
		{"sub", TypeNotebook, "", "sub/Untitled.ipynb"},
	}
	for _, st := range steps {
		m, err := s.NewUntitled(st.dir, st.typ, st.ext)
		if err != nil {
			t.Fatalf("NewUntitled(%q, %q, %q): %v", st.dir, st.typ, st.ext, err)
		}
		if m.Path != st.want {
			t.Errorf("NewUntitled(%q, %q, %q) = %q, want %q", st.dir, st.typ, st.ext, m.Path, st.want)
		}
	}
	m, err := s.Get("Untitled.ipynb", GetOptions{Content: true})
	if err != nil {
		t.Fatal(err)
	}
	if ks, ok := m.Content.(*nbformat.Notebook).KernelSpec(); !ok || ks.Name != "linger" {
		t.Errorf("new notebook kernelspec = %+v", ks)
	}
	if f, _ := s.Get("untitled.txt", GetOptions{Content: true}); f.Content != "" || f.Type != TypeFile {
		t.Errorf("new file = %+v", f)
	}
	if _, err := s.NewUntitled("nodir", TypeFile, ""); !errors.Is(err, ErrNotFound) {
		t.Errorf("in missing dir = %v", err)
	}
	if _, err := s.NewUntitled("untitled.txt", TypeFile, ""); !errors.Is(err, ErrNotFound) {
		t.Errorf("in a file = %v", err)
	}
	if _, err := s.NewUntitled("", "blob", ""); !errors.Is(err, ErrInvalid) {
		t.Errorf("unknown type = %v", err)
	}
}

func TestCopy(t *testing.T) {
	s, dir := newStore(t, "a.ipynb", "data.tar.gz", "sub/", "other/a.ipynb")
	steps := []struct {
		from, to, want string
		err            error
	}{
		{"a.ipynb", "", "a-Copy1.ipynb", nil},
		{"a.ipynb", "", "a-Copy2.ipynb", nil},
		{"a-Copy1.ipynb", "", "a-Copy3.ipynb", nil},
		{"a.ipynb", "sub", "sub/a.ipynb", nil},
		{"a.ipynb", "other", "other/a-Copy1.ipynb", nil},
		{"data.tar.gz", "", "data-Copy1.tar.gz", nil},
		{"a.ipynb", "sub/b.ipynb", "sub/b.ipynb", nil},
		{"a.ipynb", "sub/b.ipynb", "", ErrExists},
		{"sub", "", "", ErrInvalid},
		{"missing.ipynb", "", "", ErrNotFound},
		{"a.ipynb", "nodir/x.ipynb", "", ErrNotFound},
	}
	for _, st := range steps {
		m, err := s.Copy(st.from, st.to)
		if !errors.Is(err, st.err) {
			t.Fatalf("Copy(%q, %q) = %v, want %v", st.from, st.to, err, st.err)
		}
		if err == nil && m.Path != st.want {
			t.Errorf("Copy(%q, %q) = %q, want %q", st.from, st.to, m.Path, st.want)
		}
	}
	a, _ := os.ReadFile(filepath.Join(dir, "a.ipynb"))
	c, _ := os.ReadFile(filepath.Join(dir, "a-Copy1.ipynb"))
	if !bytes.Equal(a, c) {
		t.Error("copied notebook differs")
	}
	if d, _ := os.ReadFile(filepath.Join(dir, "data-Copy1.tar.gz")); string(d) != "content of data.tar.gz" {
		t.Errorf("copied file = %q", d)
	}
}

func TestRenameAndDelete(t *testing.T) {
	s, dir := newStore(t, "a.ipynb", "b.txt", "sub/", "full/x.txt", "onlycp/")
	if _, err := s.CreateCheckpoint("a.ipynb"); err != nil {
		t.Fatal(err)
	}
	m, err := s.Rename("a.ipynb", "sub/renamed.ipynb")
	if err != nil || m.Path != "sub/renamed.ipynb" || m.Type != TypeNotebook {
		t.Fatalf("Rename = %+v, %v", m, err)
	}
	if cps, _ := s.ListCheckpoints("sub/renamed.ipynb"); len(cps) != 1 {
		t.Error("checkpoint did not move with the file")
	}
	if _, err := os.Stat(filepath.Join(dir, ".ipynb_checkpoints", "a-checkpoint.ipynb")); !os.IsNotExist(err) {
		t.Errorf("old checkpoint left: %v", err)
	}
	renames := []struct {
		from, to string
		err      error
	}{
		{"b.txt", "b.txt", nil},
		{"b.txt", "sub/renamed.ipynb", ErrExists},
		{"missing", "x", ErrNotFound},
		{"b.txt", "nodir/b.txt", ErrNotFound},
		{"b.txt", ".b.txt", ErrBadPath},
		{"sub", "sub2", nil},
	}
	for _, r := range renames {
		if _, err := s.Rename(r.from, r.to); !errors.Is(err, r.err) {
			t.Errorf("Rename(%q, %q) = %v, want %v", r.from, r.to, err, r.err)
		}
	}
	if _, err := s.Get("sub2/renamed.ipynb", GetOptions{}); err != nil {
		t.Errorf("renamed directory lost its file: %v", err)
	}

	os.MkdirAll(filepath.Join(dir, "onlycp", ".ipynb_checkpoints"), 0o755)
	os.WriteFile(filepath.Join(dir, "onlycp", ".ipynb_checkpoints", "gone-checkpoint.ipynb"), nil, 0o644)
	deletes := []struct {
		path string
		err  error
	}{
		{"full", ErrNotEmpty},
		{"onlycp", nil},
		{"sub2/renamed.ipynb", nil},
		{"sub2", nil}, // only the moved checkpoint's directory was left
		{"b.txt", nil},
		{"b.txt", ErrNotFound},
		{"", ErrBadPath},
	}
	for _, d := range deletes {
		if err := s.Delete(d.path); !errors.Is(err, d.err) {
			t.Errorf("Delete(%q) = %v, want %v", d.path, err, d.err)
		}
	}
	// The emptied checkpoint directory stays, as with Jupyter.
	if got := listTree(t, dir); fmt.Sprint(got) != "[.ipynb_checkpoints full full/x.txt]" {
		t.Errorf("left %v", got)
	}
}

func TestCheckpoints(t *testing.T) {
	s, dir := newStore(t, "n.ipynb", "f.txt", "sub/")
	if cps, err := s.ListCheckpoints("f.txt"); err != nil || len(cps) != 0 {
		t.Fatalf("ListCheckpoints = %v, %v", cps, err)
	}
	cp, err := s.CreateCheckpoint("f.txt")
	if err != nil || cp.ID != CheckpointID || cp.LastModified.IsZero() {
		t.Fatalf("CreateCheckpoint = %+v, %v", cp, err)
	}
	if data, _ := os.ReadFile(filepath.Join(dir, ".ipynb_checkpoints", "f-checkpoint.txt")); string(data) != "content of f.txt" {
		t.Errorf("checkpoint holds %q", data)
	}
	if _, _, err := s.Save("f.txt", Model{Type: TypeFile, Format: FormatText, Content: "changed"}); err != nil {
		t.Fatal(err)
	}
	if err := s.RestoreCheckpoint("f.txt", CheckpointID); err != nil {
		t.Fatal(err)
	}
	if data, _ := os.ReadFile(filepath.Join(dir, "f.txt")); string(data) != "content of f.txt" {
		t.Errorf("restored %q", data)
	}
	if cps, _ := s.ListCheckpoints("f.txt"); len(cps) != 1 || cps[0] != cp {
		t.Errorf("ListCheckpoints = %v, want [%v]", cps, cp)
	}
	errs := []struct {
		name string
		err  error
		call func() error
	}{
		{"restore wrong id", ErrNotFound, func() error { return s.RestoreCheckpoint("f.txt", "other") }},
		{"restore none", ErrNotFound, func() error { return s.RestoreCheckpoint("n.ipynb", CheckpointID) }},
		{"delete none", ErrNotFound, func() error { return s.DeleteCheckpoint("n.ipynb", CheckpointID) }},
		{"list missing", ErrNotFound, func() error { _, err := s.ListCheckpoints("missing"); return err }},
		{"create missing", ErrNotFound, func() error { _, err := s.CreateCheckpoint("missing"); return err }},
		{"create directory", ErrInvalid, func() error { _, err := s.CreateCheckpoint("sub"); return err }},
		{"delete", nil, func() error { return s.DeleteCheckpoint("f.txt", CheckpointID) }},
		{"delete again", ErrNotFound, func() error { return s.DeleteCheckpoint("f.txt", CheckpointID) }},
	}
	for _, e := range errs {
		if err := e.call(); !errors.Is(err, e.err) {
			t.Errorf("%s = %v, want %v", e.name, err, e.err)
		}
	}
}

func TestModelJSON(t *testing.T) {
	s, _ := newStore(t, "n.ipynb", "sub/")
	dirModel, _ := s.Get("sub", GetOptions{})
	data, err := json.Marshal(dirModel)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	json.Unmarshal(data, &got)
	for _, k := range []string{"content", "format", "mimetype", "size"} {
		if v, ok := got[k]; !ok || v != nil {
			t.Errorf("%s = %v, present %v; want null", k, v, ok)
		}
	}
	for _, k := range []string{"name", "path", "type", "writable", "created", "last_modified"} {
		if _, ok := got[k]; !ok {
			t.Errorf("%s missing from %s", k, data)
		}
	}
	if _, ok := got["hash"]; ok {
		t.Error("hash present without asking")
	}
	nbModel, _ := s.Get("n.ipynb", GetOptions{Content: true})
	data, err = json.Marshal(nbModel)
	if err != nil {
		t.Fatal(err)
	}
	var nbJSON struct {
		Content struct {
			Cells []struct {
				Source any `json:"source"`
			} `json:"cells"`
		} `json:"content"`
		Format string `json:"format"`
	}
	json.Unmarshal(data, &nbJSON)
	if nbJSON.Format != "json" || len(nbJSON.Content.Cells) != 1 || nbJSON.Content.Cells[0].Source != "n.ipynb" {
		t.Errorf("notebook model JSON = %s", data)
	}
	// A model round-trips through JSON into something Save accepts.
	var back Model
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	if _, ok := back.Content.(json.RawMessage); !ok || back.Type != TypeNotebook {
		t.Fatalf("decoded content is %T", back.Content)
	}
	if _, created, err := s.Save("copy.ipynb", back); err != nil || !created {
		t.Errorf("Save(decoded) = %v, %v", created, err)
	}
}

// TestDatesJSON: the times of models (a listing's entries among them) and
// checkpoints have 6 fractional digits, which jupyter_client's date
// parser reads (it refuses Go's 9), and read back.
func TestDatesJSON(t *testing.T) {
	s, dir := newStore(t, "sub/a.txt")
	at := time.Date(2026, 12, 2, 14, 20, 21, 126000789, time.UTC)
	for _, p := range []string{"sub/a.txt", "sub"} {
		if err := os.Chtimes(filepath.Join(dir, p), at, at); err != nil {
			t.Fatal(err)
		}
	}
	const want = "2026-12-02T14:20:21.126000Z"
	m, err := s.Get("sub", GetOptions{Content: true})
	if err != nil {
		t.Fatal(err)
	}
	data, _ := json.Marshal(m)
	var got struct {
		Created      string `json:"created"`
		LastModified string `json:"last_modified"`
		Content      []struct {
			LastModified string `json:"last_modified"`
		} `json:"content"`
	}
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	if got.Created != want || got.LastModified != want || len(got.Content) != 1 || got.Content[0].LastModified != want {
		t.Errorf("dates in %s, want %s", data, want)
	}
	var back Model
	if err := json.Unmarshal(data, &back); err != nil || !back.LastModified.Equal(at.Truncate(time.Microsecond)) {
		t.Errorf("read back %v: %v", back.LastModified, err)
	}
	cp, _ := json.Marshal(Checkpoint{ID: CheckpointID, LastModified: at})
	if string(cp) != `{"id":"checkpoint","last_modified":"`+want+`"}` {
		t.Errorf("checkpoint %s", cp)
	}
}

func TestConcurrent(t *testing.T) {
	s, _ := newStore(t, "n.ipynb", "sub/")
	var wg sync.WaitGroup
	errc := make(chan error, 100)
	for w := range 4 {
		wg.Go(func() {
			for i := range 20 {
				nb := nbformat.New()
				nb.Cells = append(nb.Cells, nbformat.NewCell(nbformat.CellCode, strings.Repeat(fmt.Sprintf("w%d i%d\n", w, i), 200)))
				if _, _, err := s.Save("n.ipynb", Model{Type: TypeNotebook, Content: nb}); err != nil {
					errc <- err
					return
				}
				if _, err := s.NewUntitled("sub", TypeFile, ".txt"); err != nil {
					errc <- err
					return
				}
			}
		})
		wg.Go(func() {
			for range 20 {
				m, err := s.Get("n.ipynb", GetOptions{Content: true})
				if err != nil {
					errc <- fmt.Errorf("reader saw a broken notebook: %w", err)
					return
				}
				if src := m.Content.(*nbformat.Notebook).Cells[0].Source; !strings.HasPrefix(src, "w") && src != "n.ipynb" {
					errc <- fmt.Errorf("reader saw %q", src[:10])
					return
				}
				if _, err := s.Get("sub", GetOptions{Content: true}); err != nil {
					errc <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	m, _ := s.Get("sub", GetOptions{Content: true})
	if n := len(m.Content.([]Model)); n != 80 {
		t.Errorf("%d untitled files, want 80 distinct", n)
	}
}

func BenchmarkSaveNotebook(b *testing.B) {
	dir := b.TempDir()
	s, err := New(dir)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	nb := nbformat.New()
	for i := range 50 {
		nb.Cells = append(nb.Cells, nbformat.NewCell(nbformat.CellCode, fmt.Sprintf("x%d = %d\nprint(x%d)\n", i, i, i)))
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := s.Save("n.ipynb", Model{Type: TypeNotebook, Content: nb}); err != nil {
			b.Fatal(err)
		}
	}
}

func TestRemoveStaleTemps(t *testing.T) {
	s, dir := newStore(t, "n.ipynb", "sub/m.ipynb")
	old := time.Now().Add(-time.Hour)
	plant := func(rel string, mtime time.Time) {
		t.Helper()
		p := filepath.Join(dir, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("half a save"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
	// Left by saves killed mid-way: ours, old.
	plant(".~n.ipynb.0123456789ab.tmp", old)
	plant("sub/.~m.ipynb.a1b2c3d4e5f6.tmp", old)
	plant("sub/.ipynb_checkpoints/.~m-checkpoint.ipynb.ffffffffffff.tmp", old)
	// Not ours, or not stale: they stay.
	keep := []string{
		".~n.ipynb.0123456789ab.tmp.bak",
		".~n.ipynb.tmp",
		".~n.ipynb.0123456789AB.tmp",
		"~n.ipynb.0123456789ab.tmp",
		"notes.tmp",
		"sub/.~m.ipynb.000000000000.tmp", // a save in flight
	}
	for _, k := range keep[:len(keep)-1] {
		plant(k, old)
	}
	plant(keep[len(keep)-1], time.Now())
	// A link named like ours, to a file outside the root, stays, and so does
	// its target; a link to a directory is not entered.
	outside := t.TempDir()
	os.WriteFile(filepath.Join(outside, "target"), []byte("not ours"), 0o644)
	os.WriteFile(filepath.Join(outside, ".~x.ipynb.0123456789ab.tmp"), nil, 0o644)
	os.Chtimes(filepath.Join(outside, ".~x.ipynb.0123456789ab.tmp"), old, old)
	os.Symlink(filepath.Join(outside, "target"), filepath.Join(dir, ".~l.ipynb.0123456789ab.tmp"))
	os.Symlink(outside, filepath.Join(dir, "linked"))
	keep = append(keep, ".~l.ipynb.0123456789ab.tmp")

	removed, err := s.RemoveStaleTemps(time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{".~n.ipynb.0123456789ab.tmp", "sub/.ipynb_checkpoints/.~m-checkpoint.ipynb.ffffffffffff.tmp", "sub/.~m.ipynb.a1b2c3d4e5f6.tmp"}
	slices.Sort(removed)
	if !slices.Equal(removed, want) {
		t.Errorf("removed %q, want %q", removed, want)
	}
	for _, w := range want {
		if _, err := os.Lstat(filepath.Join(dir, w)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s still there: %v", w, err)
		}
	}
	for _, k := range append(keep, "n.ipynb", "sub/m.ipynb") {
		if _, err := os.Lstat(filepath.Join(dir, filepath.FromSlash(k))); err != nil {
			t.Errorf("%s removed: %v", k, err)
		}
	}
	if _, err := os.Stat(filepath.Join(outside, ".~x.ipynb.0123456789ab.tmp")); err != nil {
		t.Errorf("file outside the root removed: %v", err)
	}
	if data, _ := os.ReadFile(filepath.Join(outside, "target")); string(data) != "not ours" {
		t.Error("link target changed")
	}

	// What a save writes is what RemoveStaleTemps clears.
	if !tempPattern.MatchString(tempName("n.ipynb", [6]byte{1, 2, 3, 4, 5, 6})) {
		t.Error("tempPattern does not match tempName")
	}
}
