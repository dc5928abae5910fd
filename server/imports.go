package server

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"linger/internal/units"
	"linger/server/httperr"
	"linger/timeline/torchsnap"
)

// DefaultMaxSnapshotBytes is Options.MaxSnapshotBytes's default: a
// snapshot of any size PyTorch users bring (torchtitan's million entries
// are about 200 MB), with room.
const DefaultMaxSnapshotBytes = 64 << 30

// maxImportJobs is how many finished imports the list keeps.
const maxImportJobs = 50

// MaxUploadRules bounds the rules an upload gives in its query (a rules
// file is a few hundred bytes; docs/pytorch.md).
const MaxUploadRules = 64 << 10

// keepRules is how many rules files read by POST /api/snapshots/rules
// the server keeps for uploads to name (rules_id).
const keepRules = 64

// rulesKept are the rules files POST /api/snapshots/rules read, by id,
// for uploads to name rather than carry in their URL (a proxy in front
// may bound its length, and logs it): the newest keepRules.
type rulesKept struct {
	mu    sync.Mutex
	byID  map[string]*torchsnap.RuleSet
	order []string
}

func (k *rulesKept) put(id string, rs *torchsnap.RuleSet) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.byID == nil {
		k.byID = map[string]*torchsnap.RuleSet{}
	}
	if _, ok := k.byID[id]; !ok {
		k.order = append(k.order, id)
	}
	k.byID[id] = rs
	if n := len(k.order) - keepRules; n > 0 {
		for _, old := range k.order[:n] {
			delete(k.byID, old)
		}
		k.order = append(k.order[:0], k.order[n:]...)
	}
}

func (k *rulesKept) get(id string) (*torchsnap.RuleSet, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	rs, ok := k.byID[id]
	return rs, ok
}

// ImportJob is one import of a PyTorch memory snapshot into a trace, as
// GET /api/imports lists it: an upload (received, then imported) or a
// file that appeared in the watched trace directory.
type ImportJob struct {
	ID int `json:"id"`
	// Source is "upload" or "watched"; Snapshot the file's name.
	Source   string `json:"source"`
	Snapshot string `json:"snapshot"`
	// Trace is the trace's name in the trace directory.
	Trace string `json:"trace"`
	// State is receiving (an upload's body), queued, importing, done or
	// failed (Error says why).
	State string `json:"state"`
	// Read is the bytes of the snapshot received (receiving) or read by
	// the import (importing) so far, of Size (-1 while unknown).
	Read   int64  `json:"read"`
	Size   int64  `json:"size"`
	Events uint64 `json:"events,omitempty"`
	// Rules names the rules its blocks were categorized by beside the
	// built-in ones: the upload's rules file, or the server's; "" for the
	// built-in rules alone.
	Rules string `json:"rules,omitempty"`
	// Note says what the user should know of a trace that imported: its
	// history starts late, the file was cut short.
	Note  string `json:"note,omitempty"`
	Error string `json:"error,omitempty"`
}

// importer runs the imports, one at a time (each import's memory is that
// of one snapshot), and keeps their list.
type importer struct {
	mu   sync.Mutex
	jobs []*ImportJob
	next int
	run  sync.Mutex // held by the import running
	// failed remembers a watched file that failed, by its mtime and size:
	// not tried again until it changes.
	failed map[string]string
	wg     sync.WaitGroup
	closed bool
}

// add lists job j, unless the server is closing or a job for its trace
// is under way (or taken() says the trace is there), in one step: two
// uploads of one name cannot both pass.
func (im *importer) add(j *ImportJob, taken func() bool) (*ImportJob, bool) {
	im.mu.Lock()
	defer im.mu.Unlock()
	if im.closed || im.busyLocked(j.Trace) || (taken != nil && taken()) {
		return nil, false
	}
	im.next++
	j.ID = im.next
	im.jobs = append(im.jobs, j)
	// Drop the oldest finished beyond the bound; running ones stay.
	for len(im.jobs) > maxImportJobs {
		i := slices.IndexFunc(im.jobs, func(j *ImportJob) bool { return j.State == "done" || j.State == "failed" })
		if i < 0 {
			break
		}
		im.jobs = slices.Delete(im.jobs, i, i+1)
	}
	return j, true
}

// start runs f as the import's goroutine, unless the server is closing
// (Close waits for those started).
func (im *importer) start(f func()) bool {
	im.mu.Lock()
	defer im.mu.Unlock()
	if im.closed {
		return false
	}
	im.wg.Go(f)
	return true
}

// close refuses new jobs and waits for those running.
func (im *importer) close() {
	im.mu.Lock()
	im.closed = true
	im.mu.Unlock()
	im.wg.Wait()
}

func (im *importer) update(j *ImportJob, f func(j *ImportJob)) {
	im.mu.Lock()
	f(j)
	im.mu.Unlock()
}

func (im *importer) list() []ImportJob {
	im.mu.Lock()
	defer im.mu.Unlock()
	out := make([]ImportJob, len(im.jobs))
	for i, j := range im.jobs {
		out[len(im.jobs)-1-i] = *j // newest first
	}
	return out
}

func (im *importer) get(id int) (ImportJob, bool) {
	im.mu.Lock()
	defer im.mu.Unlock()
	for _, j := range im.jobs {
		if j.ID == id {
			return *j, true
		}
	}
	return ImportJob{}, false
}

// busyLocked reports whether a job for trace is receiving, queued or
// importing; im.mu is held.
func (im *importer) busyLocked(trace string) bool {
	return slices.ContainsFunc(im.jobs, func(j *ImportJob) bool {
		return j.Trace == trace && j.State != "done" && j.State != "failed"
	})
}

// SnapshotTrace is the trace a snapshot file imports as: its name less
// .gz and .pickle, .pkl or .json, with .ltrace; false for a name that is
// not a snapshot's (hidden, another extension, a path).
func SnapshotTrace(name string) (string, bool) {
	if name == "" || name != filepath.Base(name) || strings.ContainsAny(name, `/\`) || strings.HasPrefix(name, ".") {
		return "", false
	}
	stem := strings.TrimSuffix(name, ".gz")
	for _, ext := range []string{".pickle", ".pkl", ".json"} {
		if s, ok := strings.CutSuffix(stem, ext); ok && s != "" {
			return s + ".ltrace", true
		}
	}
	return "", false
}

// importSnapshot imports the snapshot at src into the trace dst (in the
// trace directory; nothing is left there if it fails), as job j.
func (s *Server) importSnapshot(j *ImportJob, src, dst string, opts torchsnap.ImportOptions) error {
	im := &s.imports
	im.run.Lock()
	defer im.run.Unlock()
	fail := func(err error) error {
		msg := s.errw.Paths.Scrub(err.Error())
		im.update(j, func(j *ImportJob) { j.State, j.Error = "failed", msg })
		return err
	}
	if err := s.ctx.Err(); err != nil {
		return fail(errors.New("the server is shutting down"))
	}
	fi, err := os.Stat(src)
	if err != nil {
		return fail(err)
	}
	// Written under a hidden name, then renamed: a trace in the list is
	// whole (an import cut off by a crash leaves no shortened trace that
	// would pass for done).
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".~import-"+filepath.Base(dst)+".*")
	if err != nil {
		return fail(err)
	}
	tmp.Close()
	defer os.Remove(tmp.Name())
	im.update(j, func(j *ImportJob) { j.State, j.Read, j.Size = "importing", 0, fi.Size() })
	opts.Progress = func(read int64) { im.update(j, func(j *ImportJob) { j.Read = read }) }
	res, err := torchsnap.Import(func() (io.ReadCloser, error) {
		f, err := os.Open(src)
		return stopReader{f, s.ctx}, err
	}, tmp.Name(), opts)
	if err == nil {
		err = os.Rename(tmp.Name(), dst)
	}
	if err != nil {
		s.log.Warn("import snapshot", "snapshot", j.Snapshot, "err", err)
		return fail(err)
	}
	var notes []string
	if res.PreHistory > 0 {
		notes = append(notes, fmt.Sprintf("history starts late: %d blocks and segments were alive before the first entry", res.PreHistory))
	}
	if res.Truncated != "" {
		notes = append(notes, res.Truncated)
	}
	im.update(j, func(j *ImportJob) {
		j.State, j.Read, j.Events, j.Note = "done", fi.Size(), res.Events, strings.Join(notes, "; ")
	})
	return nil
}

// handleSnapshotUpload is POST
// /api/snapshots?name=FILE[&step=S][&device=N][&device_memory=SIZE][&rules_id=ID|&rules=JSON][&rules_name=F]:
// the body is a PyTorch memory snapshot (a pickle of _dump_snapshot, or
// its JSON, either gzipped), streamed to the trace directory and imported
// as the trace of its name, its blocks categorized by the rules given
// (ID: a rules file POST /api/snapshots/rules read and keeps; or the
// file's text, as trace import's --rules reads it; F its name, for the
// list) or else the server's (Options.SnapshotRules). It answers
// 202 with the job once the body is in; GET /api/imports/{id} follows
// the import. A body cut short, empty or over the bound, a name that is
// not a snapshot's, rules that do not read, a trace of that name already
// there: a clear error before or as the body comes, and nothing left
// behind.
func (s *Server) handleSnapshotUpload(w http.ResponseWriter, r *http.Request) {
	if s.opts.TraceDir == "" {
		s.writeError(w, r, httperr.New(httperr.NotFound, "this server keeps no traces (no trace directory): start it with --trace-dir"))
		return
	}
	q := r.URL.Query()
	name := q.Get("name")
	trace, ok := SnapshotTrace(name)
	if !ok {
		s.writeError(w, r, badRequest("snapshot name %q: a file name (no directory) ending in .pickle, .pkl or .json, optionally .gz", name))
		return
	}
	opts := torchsnap.ImportOptions{Device: -1, Step: q.Get("step"), Rules: s.opts.SnapshotRules}
	rulesName := s.opts.SnapshotRulesName
	switch {
	case q.Has("rules_id"):
		rs, ok := s.rules.get(q.Get("rules_id"))
		if !ok {
			s.writeError(w, r, badRequest("%s is no longer on the server (it restarted, or %d rules files were chosen since): choose it again", cmp.Or(q.Get("rules_name"), "the rules file"), keepRules))
			return
		}
		opts.Rules, rulesName = rs, cmp.Or(q.Get("rules_name"), "the upload's rules")
	case q.Has("rules"):
		rs, err := uploadRules(q.Get("rules_name"), q.Get("rules"))
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		opts.Rules, rulesName = rs, cmp.Or(q.Get("rules_name"), "the upload's rules")
	}
	if d := q.Get("device"); d != "" {
		n, err := strconv.Atoi(d)
		if err != nil || n < 0 {
			s.writeError(w, r, badRequest("device %q: a CUDA device number (0, 1, …)", d))
			return
		}
		opts.Device = n
	}
	if d := q.Get("device_memory"); d != "" {
		n, err := units.Parse(d)
		if err != nil || n == 0 {
			s.writeError(w, r, badRequest("device memory %q: the GPU's total memory, such as 80GiB", d))
			return
		}
		opts.DeviceMemory = n
	}
	dst := filepath.Join(s.opts.TraceDir, trace)
	limit := s.opts.MaxSnapshotBytes
	if limit <= 0 {
		limit = DefaultMaxSnapshotBytes
	}
	if r.ContentLength > limit {
		s.writeError(w, r, httperr.New(httperr.TooLarge, "snapshot of %d bytes, over this server's bound of %d bytes (--max-snapshot-size)", r.ContentLength, limit))
		return
	}
	j, ok := s.imports.add(&ImportJob{Source: "upload", Snapshot: name, Trace: trace, State: "receiving", Size: r.ContentLength, Rules: rulesName}, func() bool {
		_, err := os.Lstat(dst)
		return err == nil
	})
	if !ok {
		if s.ctx.Err() != nil {
			s.writeError(w, r, httperr.New(httperr.Conflict, "the server is shutting down: upload %s again to the next one", name))
			return
		}
		s.writeError(w, r, httperr.New(httperr.Conflict, "a trace named %s is already there: rename the snapshot, or delete that trace first", trace))
		return
	}
	fail := func(err error) {
		msg := s.errw.Paths.Scrub(err.Error())
		s.imports.update(j, func(j *ImportJob) { j.State, j.Error = "failed", msg })
		s.writeError(w, r, err)
	}
	tmp, err := os.CreateTemp(s.opts.TraceDir, ".~upload-"+name+".*")
	if err != nil {
		fail(fmt.Errorf("upload %s: %w", name, err))
		return
	}
	defer os.Remove(tmp.Name()) // once imported, or not: the trace is what stays
	body := http.MaxBytesReader(w, r.Body, limit)
	n, err := io.Copy(tmp, &progressReader{r: body, f: func(n int64) { s.imports.update(j, func(j *ImportJob) { j.Read = n }) }})
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		fail(httperr.New(httperr.TooLarge, "snapshot over this server's bound of %d bytes (--max-snapshot-size)", limit))
		return
	case err != nil:
		fail(badRequest("upload of %s cut short after %d bytes: %v", name, n, err))
		return
	case r.ContentLength >= 0 && n != r.ContentLength:
		fail(badRequest("upload of %s cut short: %d of %d bytes", name, n, r.ContentLength))
		return
	case n == 0:
		fail(httperr.New(httperr.Unprocessable, "%s is empty: 0 bytes, not a snapshot", name))
		return
	}
	s.imports.update(j, func(j *ImportJob) { j.State, j.Size, j.Read = "queued", n, 0 })
	// The import goes on without the request: its page follows the job.
	src := tmp.Name() + ".snapshot"
	if err := os.Rename(tmp.Name(), src); err != nil {
		fail(fmt.Errorf("upload %s: %w", name, err))
		return
	}
	if !s.imports.start(func() {
		defer os.Remove(src)
		s.importSnapshot(j, src, dst, opts)
	}) {
		os.Remove(src)
		fail(httperr.New(httperr.Conflict, "the server is shutting down: upload %s again to the next one", name))
		return
	}
	job, _ := s.imports.get(j.ID)
	writeJSON(w, http.StatusAccepted, job)
}

// uploadRules reads the text of a rules file an upload gives, named name
// (its file's name, or ""), as trace import's --rules reads a file.
func uploadRules(name, text string) (*torchsnap.RuleSet, error) {
	name = cmp.Or(name, "the upload's rules")
	if len(text) > MaxUploadRules {
		return nil, badRequest("%s: %d bytes, over the %d bytes a rules file sent with an upload may have", name, len(text), MaxUploadRules)
	}
	rs, err := torchsnap.ReadRules(strings.NewReader(text))
	if err != nil {
		return nil, badRequest("%s: %v", name, err)
	}
	return rs, nil
}

// handleSnapshotRules is POST /api/snapshots/rules?name=F: the body, a
// rules file, read as an upload's rules are (uploadRules), so that the
// root page says what is wrong with one when it is chosen, before any
// snapshot is sent, and kept for uploads to name by its id (rules_id). 200
// with the id, the count of the file's own rules and of all the rules and
// library paths in force with them, or 400 naming the rule.
func (s *Server) handleSnapshotRules(w http.ResponseWriter, r *http.Request) {
	name := r.URL.Query().Get("name")
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxUploadRules+1))
	if err != nil && !errors.As(err, new(*http.MaxBytesError)) {
		s.writeError(w, r, badRequest("rules cut short: %v", err))
		return
	}
	rs, err := uploadRules(name, string(b))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	sum := sha256.Sum256(b)
	id := hex.EncodeToString(sum[:12])
	s.rules.put(id, rs)
	writeJSON(w, http.StatusOK, struct {
		ID      string `json:"id"`
		Own     int    `json:"own"`
		Rules   int    `json:"rules"`
		Library int    `json:"library"`
	}{id, rs.Own, len(rs.Rules), len(rs.Library)})
}

// stopReader is a snapshot's file that stops being read once the server
// closes (its import then fails, leaving nothing behind, rather than
// holding the shutdown for a long import).
type stopReader struct {
	*os.File
	ctx context.Context
}

func (r stopReader) Read(b []byte) (int, error) {
	if err := r.ctx.Err(); err != nil {
		return 0, fmt.Errorf("the server is shutting down: %w", err)
	}
	return r.File.Read(b)
}

// progressReader reports the bytes read so far, now and then.
type progressReader struct {
	r    io.Reader
	n    int64
	last time.Time
	f    func(int64)
}

func (p *progressReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	p.n += int64(n)
	if now := time.Now(); now.Sub(p.last) > 100*time.Millisecond || err != nil {
		p.last = now
		p.f(p.n)
	}
	return n, err
}

// handleImports is GET /api/imports: the imports, newest first.
func (s *Server) handleImports(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, s.imports.list())
}

// handleImport is GET /api/imports/{id}: one import.
func (s *Server) handleImport(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.Atoi(r.PathValue("id"))
	if err != nil {
		s.writeError(w, r, badRequest("import id %q: a number", r.PathValue("id")))
		return
	}
	j, ok := s.imports.get(id)
	if !ok {
		s.writeError(w, r, notFound("no import %d (the list keeps the last %d)", id, maxImportJobs))
		return
	}
	writeJSON(w, http.StatusOK, j)
}

// watchSnapshots looks at the trace directory every interval until ctx
// ends, and imports each snapshot that is new or changed (its trace
// older than it, or missing) once it has stopped growing: the same size
// and modification time as at the look before.
func (s *Server) watchSnapshots(ctx context.Context, every time.Duration) {
	seen := map[string]string{} // name → size and mtime at the last look
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		s.lookForSnapshots(seen)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (s *Server) lookForSnapshots(seen map[string]string) {
	entries, err := os.ReadDir(s.opts.TraceDir)
	if err != nil {
		s.log.Warn("watch snapshots", "err", err)
		return
	}
	for _, e := range entries {
		if s.ctx.Err() != nil {
			return
		}
		trace, ok := SnapshotTrace(e.Name())
		if !ok || !e.Type().IsRegular() {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			continue
		}
		stamp := fmt.Sprint(fi.Size(), fi.ModTime().UnixNano())
		was := seen[e.Name()]
		seen[e.Name()] = stamp
		if was != stamp || fi.Size() == 0 {
			continue // new or still growing: looked at again next time
		}
		// A trace of the same name that is not an import of it (a run's
		// own, its export downloaded beside it, "01.pickle" next to
		// "01.ltrace"; linger generate's or watch's) is never replaced:
		// the import goes beside it, as NAME.snapshot.ltrace.
		dst := filepath.Join(s.opts.TraceDir, trace)
		if _, err := os.Lstat(dst); err == nil && !torchsnap.IsImport(dst) {
			trace = strings.TrimSuffix(trace, ".ltrace") + ".snapshot.ltrace"
			dst = filepath.Join(s.opts.TraceDir, trace)
		}
		if ti, err := os.Stat(dst); err == nil && !ti.ModTime().Before(fi.ModTime()) {
			continue // imported already
		}
		s.imports.mu.Lock()
		failed := s.imports.failed[e.Name()] == stamp
		s.imports.mu.Unlock()
		if failed {
			continue
		}
		j, ok := s.imports.add(&ImportJob{Source: "watched", Snapshot: e.Name(), Trace: trace, State: "queued", Size: fi.Size(), Rules: s.opts.SnapshotRulesName}, nil)
		if !ok {
			continue
		}
		if err := s.importSnapshot(j, filepath.Join(s.opts.TraceDir, e.Name()), dst, torchsnap.ImportOptions{Device: -1, Rules: s.opts.SnapshotRules}); err != nil {
			s.imports.mu.Lock()
			if s.imports.failed == nil {
				s.imports.failed = map[string]string{}
			}
			s.imports.failed[e.Name()] = stamp
			s.imports.mu.Unlock()
		}
	}
}
