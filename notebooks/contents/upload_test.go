package contents

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

func chunk(n int, data []byte) Model {
	return Model{Type: TypeFile, Format: FormatBase64, Content: base64.StdEncoding.EncodeToString(data), Chunk: n}
}

func readFile(t *testing.T, name string) string {
	t.Helper()
	data, err := os.ReadFile(name)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return string(data)
}

// The target shows its old content until the last chunk, which makes it
// the chunks' concatenation; the staging file is neither listed nor
// served, and is gone after.
func TestSaveChunks(t *testing.T) {
	s, dir := newStore(t, "big.bin")
	target, staging := filepath.Join(dir, "big.bin"), filepath.Join(dir, stagingName("big.bin"))
	// A stale staging file (a crashed upload) is replaced by chunk 1.
	if err := os.WriteFile(staging, []byte("stale"), 0o644); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		n    int
		data string
	}{{1, "\x00\x01"}, {2, "\x02\x03"}, {3, "\x04"}, {-1, "\x05"}}
	var want string
	for _, st := range steps {
		m, created, err := s.Save("big.bin", chunk(st.n, []byte(st.data)))
		if err != nil {
			t.Fatalf("chunk %d: %v", st.n, err)
		}
		want += st.data
		if created || m.Name != "big.bin" || m.Path != "big.bin" || m.Type != TypeFile || m.Size == nil || *m.Size != int64(len(want)) || m.Content != nil {
			t.Errorf("chunk %d: created %v, model %+v", st.n, created, m)
		}
		got := readFile(t, target)
		if st.n != -1 {
			if got != "content of big.bin" {
				t.Errorf("after chunk %d the target is %q, want the old content", st.n, got)
			}
			if st := readFile(t, staging); st != want {
				t.Errorf("staged %q, want %q", st, want)
			}
			d, err := s.Get("", GetOptions{Content: true})
			if err != nil {
				t.Fatal(err)
			}
			if l := d.Content.([]Model); len(l) != 1 || l[0].Name != "big.bin" {
				t.Errorf("listing during the upload: %+v", l)
			}
			if _, err := s.Get(stagingName("big.bin"), GetOptions{Content: true}); !errors.Is(err, ErrNotFound) {
				t.Errorf("Get of the staging file = %v", err)
			}
			if _, _, err := s.Save(stagingName("big.bin"), chunk(2, []byte("x"))); !errors.Is(err, ErrBadPath) {
				t.Errorf("chunk to the staging file = %v", err)
			}
			continue
		}
		if got != want {
			t.Errorf("after the last chunk the target is %q, want %q", got, want)
		}
	}
	if _, err := os.Stat(staging); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("staging file after the upload: %v", err)
	}
	if len(s.uploads) != 0 {
		t.Errorf("uploads left: %v", s.uploads)
	}
	// A new file: chunk 1 answers created (201), and the file appears at -1.
	if _, created, err := s.Save("new.bin", chunk(1, []byte("a"))); err != nil || !created {
		t.Errorf("chunk 1 of a new file: %v, created %v", err, created)
	}
	if _, err := s.Get("new.bin", GetOptions{}); !errors.Is(err, ErrNotFound) {
		t.Errorf("new file before its last chunk: %v", err)
	}
	if _, created, err := s.Save("new.bin", chunk(-1, []byte("b"))); err != nil || created {
		t.Errorf("last chunk of a new file: %v, created %v", err, created)
	}
	if got := readFile(t, filepath.Join(dir, "new.bin")); got != "ab" {
		t.Errorf("new.bin = %q", got)
	}
}

func TestSaveChunksRefused(t *testing.T) {
	s, dir := newStore(t, "big.bin", "sub/")
	for _, n := range []int{2, 3, -1} {
		if _, _, err := s.Save("nothing.bin", chunk(n, []byte("x"))); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "chunk 1") {
			t.Errorf("chunk %d without chunk 1 = %v", n, err)
		}
	}
	if _, _, err := s.Save("big.bin", chunk(1, []byte("a"))); err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{3, 5, -2} {
		if _, _, err := s.Save("big.bin", chunk(n, []byte("x"))); !errors.Is(err, ErrInvalid) {
			t.Errorf("chunk %d after chunk 1 = %v", n, err)
		}
	}
	// Refused chunks leave the upload as it was.
	if _, _, err := s.Save("big.bin", chunk(-1, []byte("b"))); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(dir, "big.bin")); got != "ab" {
		t.Errorf("big.bin = %q", got)
	}
	if _, _, err := s.Save("../out.bin", chunk(1, []byte("x"))); !errors.Is(err, ErrForbidden) {
		t.Errorf("chunk outside the root = %v", err)
	}
	if _, _, err := s.Save("sub", chunk(1, []byte("x"))); !errors.Is(err, ErrInvalid) {
		t.Errorf("chunk over a directory = %v", err)
	}
	if _, _, err := s.Save("nodir/x.bin", chunk(1, []byte("x"))); !errors.Is(err, ErrNotFound) {
		t.Errorf("chunk into a missing directory = %v", err)
	}
	if _, _, err := s.Save("n.ipynb", Model{Type: TypeNotebook, Content: "{}", Chunk: 1}); !errors.Is(err, ErrInvalid) {
		t.Errorf("chunked notebook = %v", err)
	}
	var m Model
	json.Unmarshal([]byte(`{"type": "file", "format": "text", "content": "x", "chunk": -1}`), &m)
	if m.Chunk != -1 {
		t.Errorf("chunk decoded as %d", m.Chunk)
	}
}

// 128 chunks write each byte once: the store writes the file's size, not
// the sum of the sizes so far.
func TestChunkedUploadLinear(t *testing.T) {
	s, dir := newStore(t)
	var written atomic.Int64
	s.wrap = func(w io.Writer) io.Writer { return countingWriter{w, &written} }
	const size, chunks = 64 << 10, 128
	var all bytes.Buffer
	for i := 1; i <= chunks; i++ {
		piece := bytes.Repeat([]byte{byte(i)}, size)
		all.Write(piece)
		n := i
		if i == chunks {
			n = -1
		}
		if _, _, err := s.Save("big.bin", chunk(n, piece)); err != nil {
			t.Fatalf("chunk %d: %v", n, err)
		}
	}
	if got := written.Load(); got != size*chunks {
		t.Errorf("wrote %d bytes for a %d-byte upload", got, size*chunks)
	}
	if got := readFile(t, filepath.Join(dir, "big.bin")); got != all.String() {
		t.Errorf("the file is %d bytes, not the %d of the chunks", len(got), all.Len())
	}
}

// blockingWriter holds a write to a staging file, once armed, until
// released.
type blockingWriter struct {
	f                 *os.File
	armed             *atomic.Bool
	entered, released chan struct{}
}

func (b blockingWriter) Write(p []byte) (int, error) {
	if strings.Contains(b.f.Name(), stagingPrefix) && b.armed.CompareAndSwap(true, false) {
		close(b.entered)
		<-b.released
	}
	return b.f.Write(p)
}

// A chunk in the middle of its write holds no lock that a read or a save
// of another path (or a read of the target) waits for.
func TestChunkDoesNotBlockOthers(t *testing.T) {
	s, dir := newStore(t, "a.txt", "n.ipynb", "big.bin")
	var armed atomic.Bool
	entered, released := make(chan struct{}), make(chan struct{})
	s.wrap = func(w io.Writer) io.Writer { return blockingWriter{w.(*os.File), &armed, entered, released} }
	if _, _, err := s.Save("big.bin", chunk(1, []byte("a"))); err != nil {
		t.Fatal(err)
	}
	armed.Store(true)
	chunk2 := make(chan error)
	go func() {
		_, _, err := s.Save("big.bin", chunk(2, []byte("b")))
		chunk2 <- err
	}()
	<-entered
	others := make(chan error)
	go func() {
		others <- func() error {
			if m, err := s.Get("a.txt", GetOptions{Content: true}); err != nil || m.Content != "content of a.txt" {
				return errors.Join(err, errors.New("a.txt read wrong"))
			}
			if m, err := s.Get("big.bin", GetOptions{Content: true}); err != nil || m.Content != "content of big.bin" {
				return errors.Join(err, errors.New("big.bin is not its old content"))
			}
			if _, err := s.Get("", GetOptions{Content: true}); err != nil {
				return err
			}
			nb := Model{Type: TypeNotebook, Content: json.RawMessage(notebookBytes(t, "n.ipynb"))}
			_, _, err := s.Save("n.ipynb", nb)
			return err
		}()
	}()
	select {
	case err := <-others:
		if err != nil {
			t.Error(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a read or a save of another file waited for a chunk's write")
	}
	close(released)
	if err := <-chunk2; err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Save("big.bin", chunk(-1, []byte("c"))); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(dir, "big.bin")); got != "abc" {
		t.Errorf("big.bin = %q", got)
	}
}

// A chunk whose write fails (the disk full half way) leaves the target as
// it was and the upload where it was: the same chunk can be sent again.
func TestChunkWriteFailure(t *testing.T) {
	for _, n := range []int{1, 2, -1} {
		s, dir := newStore(t, "big.bin")
		var want string
		send := func(k int, data string) error {
			_, _, err := s.Save("big.bin", chunk(k, []byte(data)))
			if err == nil {
				want += data
			}
			return err
		}
		seq := []int{1, 2, -1}
		for _, k := range seq {
			if k == n {
				s.wrap = func(w io.Writer) io.Writer { return &failingWriter{w: w, n: 3, err: syscall.ENOSPC} }
				if err := send(k, "0123456789"); !errors.Is(err, syscall.ENOSPC) {
					t.Fatalf("failing chunk %d = %v", k, err)
				}
				s.wrap = nil
				if got := readFile(t, filepath.Join(dir, "big.bin")); got != "content of big.bin" {
					t.Errorf("after failing chunk %d the target is %q", k, got)
				}
				if k != 1 {
					if got := readFile(t, filepath.Join(dir, stagingName("big.bin"))); got != want {
						t.Errorf("after failing chunk %d staged %q, want %q", k, got, want)
					}
				}
			}
			if err := send(k, "chunk"+string(rune('0'+len(want)%10))); err != nil {
				t.Fatalf("chunk %d sent again: %v", k, err)
			}
		}
		if got := readFile(t, filepath.Join(dir, "big.bin")); got != want {
			t.Errorf("failing chunk %d, then: %q, want %q", n, got, want)
		}
	}
}

// A chunk that cannot make its staging file (a read-only directory, or,
// as root, a directory in the staging file's place) fails and leaves the
// target intact.
func TestChunkCannotStage(t *testing.T) {
	s, dir := newStore(t, "ro/big.bin")
	ro := filepath.Join(dir, "ro")
	if os.Geteuid() == 0 {
		if err := os.Mkdir(filepath.Join(ro, stagingName("big.bin")), 0o755); err != nil {
			t.Fatal(err)
		}
	} else {
		if err := os.Chmod(ro, 0o555); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Chmod(ro, 0o755) })
	}
	if _, _, err := s.Save("ro/big.bin", chunk(1, []byte("x"))); err == nil {
		t.Error("chunk 1 saved with no staging file to write")
	}
	if _, _, err := s.Save("ro/big.bin", chunk(-1, []byte("x"))); !errors.Is(err, ErrInvalid) {
		t.Errorf("last chunk after a failed first = %v", err)
	}
	if got := readFile(t, filepath.Join(ro, "big.bin")); got != "content of ro/big.bin" {
		t.Errorf("target = %q", got)
	}
}

// RemoveStaleTemps clears an abandoned upload's staging file, not one in
// progress.
func TestRemoveStaleStaging(t *testing.T) {
	s, dir := newStore(t, "a.bin", "b.bin")
	if _, _, err := s.Save("a.bin", chunk(1, []byte("x"))); err != nil {
		t.Fatal(err)
	}
	old := filepath.Join(dir, stagingName("b.bin"))
	if err := os.WriteFile(old, []byte("y"), 0o644); err != nil {
		t.Fatal(err)
	}
	past := time.Now().Add(-time.Hour)
	os.Chtimes(old, past, past)
	removed, err := s.RemoveStaleTemps(time.Minute)
	if err != nil || len(removed) != 1 || removed[0] != stagingName("b.bin") {
		t.Errorf("removed %v, %v", removed, err)
	}
	if _, err := os.Stat(filepath.Join(dir, stagingName("a.bin"))); err != nil {
		t.Errorf("the upload in progress lost its staging file: %v", err)
	}
}

// stallingWriter blocks its first write until release is closed.
type stallingWriter struct {
	w       io.Writer
	started chan struct{}
	release chan struct{}
	once    *sync.Once
}

func (b stallingWriter) Write(p []byte) (int, error) {
	b.once.Do(func() { close(b.started); <-b.release })
	return b.w.Write(p)
}

// A save writing its content holds only its own path: while one is stuck
// in its write, other paths are read, listed and saved, and the stuck
// file reads as it was; once the write goes on, the save lands whole.
func TestSaveHoldsOnlyItsPath(t *testing.T) {
	s, _ := newStore(t, "a.txt", "b.txt")
	started, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	s.wrap = func(w io.Writer) io.Writer { return stallingWriter{w, started, release, &once} }
	done := make(chan error, 1)
	go func() {
		_, _, err := s.Save("a.txt", Model{Type: TypeFile, Format: FormatText, Content: "new a"})
		done <- err
	}()
	<-started
	others := make(chan error, 1)
	go func() {
		if _, err := s.Get("b.txt", GetOptions{Content: true}); err != nil {
			others <- err
			return
		}
		if _, err := s.Get("", GetOptions{Content: true}); err != nil {
			others <- err
			return
		}
		m, err := s.Get("a.txt", GetOptions{Content: true, Format: FormatText})
		if err == nil && m.Content == "new a" {
			err = errors.New("a.txt reads as saved before its save ended")
		}
		others <- err
	}()
	select {
	case err := <-others:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("reads of other paths waited for a save in its write")
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if m, err := s.Get("a.txt", GetOptions{Content: true, Format: FormatText}); err != nil || m.Content != "new a" {
		t.Errorf("after the save: %v %q", err, m.Content)
	}
}
