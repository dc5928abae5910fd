package server

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strings"

	"github.com/a-h/templ"

	"linger/notebooks/contents"
	"linger/notebooks/nbformat"
	"linger/web"
)

// Pages: the server turns its models into the web package's plain view
// models and renders its components. web knows no domain type.

func (s *Server) page(title string) web.Page {
	return web.Page{Base: s.opts.BaseURL, Title: title}
}

// boolRank orders false before true.
func boolRank(b bool) int {
	if b {
		return 1
	}
	return 0
}

// treeTraces is how many saved traces the root page lists.
const treeTraces = 20

// handleRoot is the root page: the tree, or Options.DefaultURL.
func (s *Server) handleRoot(w http.ResponseWriter, r *http.Request) {
	if d := strings.TrimPrefix(s.opts.DefaultURL, "/"); d != "" && !strings.HasPrefix(d, "/") && !strings.Contains(d, "://") {
		http.Redirect(w, r, s.opts.BaseURL+d, http.StatusFound)
		return
	}
	s.handleTree(w, r)
}

// handleTree renders the notebook browser for a directory.
func (s *Server) handleTree(w http.ResponseWriter, r *http.Request) {
	dir := strings.Trim(r.PathValue("path"), "/")
	model, err := s.contents.Get(r.Context(), dir, contentsQuery{Type: "directory", Content: true})
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	list, ok := model.Content.([]contents.Model)
	if !ok {
		s.writeError(w, r, fmt.Errorf("directory %q: the store gave %T for its listing", dir, model.Content))
		return
	}
	v := web.TreeView{Page: s.page(dir), Dir: dir}
	for _, e := range list {
		ev := web.EntryView{Name: e.Name, Path: e.Path, Type: e.Type, Modified: e.LastModified, Size: -1}
		if e.Size != nil && e.Type != web.TypeDirectory {
			ev.Size = *e.Size
		}
		v.Entries = append(v.Entries, ev)
	}
	// As Jupyter lists them: directories first, then by name.
	slices.SortFunc(v.Entries, func(a, b web.EntryView) int {
		return cmp.Or(cmp.Compare(boolRank(a.Type != web.TypeDirectory), boolRank(b.Type != web.TypeDirectory)),
			cmp.Compare(strings.ToLower(a.Name), strings.ToLower(b.Name)), cmp.Compare(a.Name, b.Name))
	})
	if dir == "" {
		// The root page lists the newest saved traces; a listing that
		// fails leaves them out rather than the notebooks.
		if ts, err := s.savedTraceList(); err == nil {
			v.Traces = ts[:min(len(ts), treeTraces)]
			v.MoreTraces = len(ts) - len(v.Traces)
			live := s.liveTraces()
			for i := range v.Traces {
				v.Traces[i].Live = live[v.Traces[i].Name]
			}
		} else {
			s.log.Warn("tree page: list saved traces", "err", err)
		}
		v.Kernels = s.runningKernels()
		v.Snapshots = s.opts.TraceDir != ""
		v.SnapshotRules = s.opts.SnapshotRulesName
		for _, src := range s.sourceEntries() {
			v.Sources = append(v.Sources, web.SourceView{ID: src.ID, Name: src.Name, Kind: src.Kind, Trace: src.Trace, Live: src.Live, Ended: src.Ended, Events: src.Events})
		}
	}
	s.render(w, r, web.Tree(v))
}

// handleNotebookPage renders a notebook's page: its cells as saved, which
// the page's script then takes over.
func (s *Server) handleNotebookPage(w http.ResponseWriter, r *http.Request) {
	p := strings.Trim(r.PathValue("path"), "/")
	model, err := s.contents.Get(r.Context(), p, contentsQuery{Type: "notebook", Content: true})
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	// The store's notebook as it is: no copy of it as JSON.
	nb, ok := model.Content.(*nbformat.Notebook)
	if !ok {
		s.writeError(w, r, fmt.Errorf("notebook %q: the store gave %T for its content", p, model.Content))
		return
	}
	v := notebookView(s.page(path.Base(p)), p, nb)
	for _, sp := range s.kernels.Specs() {
		v.Kernels = append(v.Kernels, web.KernelView{Name: sp.Name, DisplayName: sp.DisplayName, Language: sp.Language})
	}
	s.render(w, r, web.Notebook(v))
}

// handleTimelinePage renders the page of a saved trace.
func (s *Server) handleTimelinePage(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if _, err := s.tracePath(name); err != nil {
		s.writeError(w, r, err)
		return
	}
	// Streamed, not buffered as render does: the head goes out before the
	// page waits for the trace's index to inline its overview, so that the
	// browser loads the script meanwhile.
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	err := web.Timeline(web.TimelineView{Page: s.page(name), Name: name,
		TraceURL: s.opts.BaseURL + "api/timeline/traces/" + url.PathEscape(name),
		Overview: func(ctx context.Context) json.RawMessage { return s.timelineOverview(ctx, name) }}).Render(r.Context(), w)
	if err != nil {
		s.log.Warn("timeline page", "trace", name, "err", err)
	}
}

// handleLivePage renders the timeline of the live source id (a watched
// service, a probe): the page follows its stream as the notebook's dock
// follows a kernel.
func (s *Server) handleLivePage(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	var src *LiveSource
	for _, x := range s.Sources() {
		if x.ID == id {
			src = &x
			break
		}
	}
	if src == nil {
		s.writeError(w, r, notFound("no source %q", id))
		return
	}
	s.render(w, r, web.Timeline(web.TimelineView{Page: s.page(src.Name), Name: src.Name, Live: true,
		TraceURL: s.opts.BaseURL + "api/timeline/sources/" + url.PathEscape(id)}))
}

// render writes a page, buffered so that a failure is an error response
// rather than half a page.
func (s *Server) render(w http.ResponseWriter, r *http.Request, c templ.Component) {
	s.renderStatus(w, r, http.StatusOK, c)
}

// renderStatus is render with a status other than 200 (a page that says
// what was not found).
func (s *Server) renderStatus(w http.ResponseWriter, r *http.Request, code int, c templ.Component) {
	var buf bytes.Buffer
	if err := c.Render(r.Context(), &buf); err != nil {
		s.writeError(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	_, _ = buf.WriteTo(w)
}

// notebookView converts a notebook into the page's view model (all but
// the kernelspecs, which are the server's).
func notebookView(pg web.Page, p string, nb *nbformat.Notebook) web.NotebookView {
	v := web.NotebookView{Page: pg, Path: p}
	if ks, ok := nb.KernelSpec(); ok {
		v.Wants = ks.Name
	}
	for _, c := range nb.Cells {
		cv := web.CellView{ID: c.ID, Type: c.Type, Source: c.Source}
		if c.ExecutionCount != nil {
			cv.ExecutionCount = *c.ExecutionCount
		}
		for _, o := range c.Outputs {
			ov := web.OutputView{Type: o.Type, Name: o.Name, Text: o.Text, EName: o.EName, EValue: o.EValue, Traceback: o.Traceback}
			if t, ok := o.Data.Text("text/plain"); ok {
				ov.Text = t
			}
			if png, ok := o.Data.Text("image/png"); ok {
				ov.PNG = png
			}
			if svg, ok := o.Data.Text("image/svg+xml"); ok {
				ov.SVG = svg
			}
			cv.Outputs = append(cv.Outputs, ov)
		}
		v.Cells = append(v.Cells, cv)
	}
	return v
}

// runningKernels lists the kernels for the root page, each named by its
// notebook (its session's path), in start order.
func (s *Server) runningKernels() []web.RunningKernelView {
	notebooks := map[string]string{}
	s.sessions.mu.Lock()
	for _, se := range s.sessions.byID {
		notebooks[se.KernelID] = se.Path
	}
	s.sessions.mu.Unlock()
	var out []web.RunningKernelView
	for _, k := range s.kernels.List() {
		m := s.kernelModel(k)
		out = append(out, web.RunningKernelView{ID: m.ID, Spec: m.Name, State: m.ExecutionState, Notebook: notebooks[m.ID],
			Trace: m.Trace, LastActivity: k.LastActivity()})
	}
	return out
}
