package soak

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"linger/notebooks/nbformat"
)

// savePath is the notebook the save rounds write, under the notebook root.
const savePath = "soak-save.ipynb"

// notebookVersion is version v of the saved notebook: large enough (about
// 2 MiB) that a save takes a while to write and sync, so that a kill
// lands in the middle of one, and different in every cell from every
// other version. It returns the PUT body and the bytes the server must
// write: the notebook in nbformat's own encoding, which it saves with.
func notebookVersion(v int) (body, file []byte, err error) {
	nb := nbformat.New()
	if err := nb.Metadata.Set("soak_version", v); err != nil {
		return nil, nil, err
	}
	line := fmt.Sprintf("x = %d  # version %d of the soak notebook, a line long enough to fill it\n", v, v)
	for i := range 32 {
		c := nbformat.NewCell("code", fmt.Sprintf("# cell %d\n", i)+strings.Repeat(line, 800))
		c.ID = fmt.Sprintf("cell-%d", i) // the same in every version: a version's bytes are reproducible
		nb.Cells = append(nb.Cells, c)
	}
	if file, err = nbformat.Marshal(nb); err != nil {
		return nil, nil, err
	}
	body, err = json.Marshal(map[string]any{"type": "notebook", "format": "json", "content": json.RawMessage(file)})
	return body, file, err
}

// mustVersion is notebookVersion that fails t.
func mustVersion(t *testing.T, v int) (body, file []byte) {
	t.Helper()
	body, file, err := notebookVersion(v)
	if err != nil {
		t.Fatal(err)
	}
	return body, file
}

// saveRounds saves versions of a notebook in a loop and kills the server
// with SIGKILL at a random moment, rounds times; after each restart the
// file on disk must be exactly the last version the server acknowledged
// or the one it was writing: an atomic save never leaves a torn file. It
// returns the server last restarted, the version on disk at the end and
// how many rounds found a torn file.
func saveRounds(t *testing.T, srv *server, rounds int, restart func() *server) (_ *server, last, torn int) {
	t.Helper()
	body, file := mustVersion(t, 0)
	start := time.Now()
	srv.must(t, 201, "PUT", "/api/contents/"+savePath, body)
	perSave := time.Since(start)
	disk := filepath.Join(srv.dir, savePath)
	if got, err := os.ReadFile(disk); err != nil || !bytes.Equal(got, file) {
		t.Fatalf("the first save did not write the notebook as nbformat encodes it (%v); the torn-save check compares with that encoding", err)
	}
	acked := 0
	for round := range rounds {
		var done atomic.Int64 // the last version acknowledged
		done.Store(int64(acked))
		stopped := make(chan struct{})
		go func() {
			defer close(stopped)
			for v := acked + 1; ; v++ {
				body, _, err := notebookVersion(v)
				if err != nil {
					return
				}
				if code, _, err := srv.do("PUT", "/api/contents/"+savePath, body); err != nil || code != 200 {
					return // the server is gone
				}
				done.Store(int64(v))
			}
		}()
		time.Sleep(perSave + rand.N(3*perSave+10*time.Millisecond))
		srv.kill()
		<-stopped
		acked = int(done.Load())
		srv = restart()
		got, err := os.ReadFile(disk)
		if err != nil {
			t.Fatalf("round %d: the notebook is gone after the kill: %v", round, err)
		}
		if _, err := nbformat.Read(bytes.NewReader(got)); err != nil {
			t.Errorf("round %d: the notebook on disk after the kill does not parse: %v", round, err)
		}
		_, old := mustVersion(t, acked)
		_, next := mustVersion(t, acked+1)
		switch {
		case bytes.Equal(got, old):
		case bytes.Equal(got, next):
			acked++ // the save in flight had been renamed into place
		default:
			torn++
			t.Errorf("round %d: the notebook on disk (%d bytes) is neither version %d, the last saved, nor %d, the one in flight: a torn save", round, len(got), acked, acked+1)
		}
		srv.must(t, 200, "GET", "/api/contents/"+savePath, nil)
	}
	return srv, acked, torn
}
