package web

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"time"

	"linger/internal/units"
)

// Page is what every page needs from the server.
type Page struct {
	// Base is the server's base URL path, starting and ending with "/";
	// empty means "/". Every link and asset URL in the page starts with it.
	Base string
	// Title is the document title; empty means "Linger".
	Title string
}

func (p Page) base() string {
	if p.Base == "" {
		return "/"
	}
	return p.Base
}

func (p Page) title() string {
	if p.Title == "" {
		return "Linger"
	}
	return p.Title + " · Linger"
}

// Entry types in a TreeView, as the Jupyter contents API names them.
const (
	TypeDirectory = "directory"
	TypeNotebook  = "notebook"
	TypeFile      = "file"
)

// TreeView is the notebook browser's view of one directory.
type TreeView struct {
	Page
	// Dir is the directory's path relative to the server's root, without
	// leading or trailing slash; "" is the root.
	Dir string
	// Entries are listed in the order given; the server sorts them.
	Entries []EntryView
	// Traces are the newest saved traces (the root page lists them, each
	// opening its timeline and offering to compare it), and MoreTraces
	// how many older ones are not listed.
	Traces     []TraceView
	MoreTraces int
	// Kernels are the running kernels (the root page lists them, as
	// Jupyter's Running tab does, each with a Shutdown button).
	Kernels []RunningKernelView
	// Snapshots offers, on the root page, to open PyTorch memory
	// snapshots: uploaded or dropped, imported as traces with progress.
	Snapshots bool
	// SnapshotRules names the rules the server categorizes snapshots'
	// blocks by, beside the built-in ones ("" for the built-in alone).
	SnapshotRules string
	// Sources are the live traces no kernel writes (watched services,
	// probes), each opening its live timeline.
	Sources []SourceView
}

// SourceView is a live source listed on the root page.
type SourceView struct {
	ID, Name, Kind string
	// Trace is its trace's file name, "" if none; Live is false once it
	// ended, Ended then its reason ("" for a clean end).
	Trace  string
	Live   bool
	Ended  string
	Events uint64
}

// liveHref is the live timeline page of the source id.
func liveHref(base, id string) string {
	return base + "timeline/live/" + url.PathEscape(id)
}

// RunningKernelView is a running kernel listed on the tree page.
type RunningKernelView struct {
	ID string
	// Spec is its kernelspec's name; State its execution state.
	Spec, State string
	// Notebook is the path of the notebook whose session runs it, or ""
	// (a kernel started on its own).
	Notebook string
	// Trace is the file name of the trace it is writing, or "".
	Trace        string
	LastActivity time.Time
}

// notebookHref is the page of the notebook at path.
func notebookHref(base, p string) string {
	return base + "notebooks/" + escapePath(p)
}

// traceHref is the page of a saved trace's timeline.
func traceHref(base, name string) string { return base + "timeline/" + url.PathEscape(name) }

// traceFileHref is where a saved trace's file downloads from.
func traceFileHref(base, name string) string {
	return base + "api/timeline/traces/" + url.PathEscape(name) + "/file"
}

// TraceView is a saved trace listed on the tree page.
type TraceView struct {
	// Name is the trace file's name in the server's trace directory.
	Name string
	// Modified is when it was last written; Size is in bytes.
	Modified time.Time
	Size     int64
	// Live: a running kernel is writing it.
	Live bool
	// Kernel: a kernel a Jupyter frontend started wrote it, in the
	// server's kernel trace directory; the page opens it but neither
	// renames nor deletes it.
	Kernel bool
}

// EntryView is one row of a TreeView.
type EntryView struct {
	// Name is the base name; Path the path relative to the server's root.
	Name, Path string
	// Type is TypeDirectory, TypeNotebook or TypeFile.
	Type string
	// Modified is the last modification time; the zero time shows nothing.
	Modified time.Time
	// Size is in bytes; a negative size (directories) shows nothing.
	Size int64
}

// Crumb is one step of a breadcrumb trail.
type Crumb struct {
	Name, Href string
}

// Crumbs returns the breadcrumb trail from the root to v.Dir.
func (v TreeView) Crumbs() []Crumb {
	out := []Crumb{{Name: "root", Href: v.base() + "tree/"}}
	if v.Dir == "" {
		return out
	}
	parts := strings.Split(v.Dir, "/")
	for i, p := range parts {
		out = append(out, Crumb{Name: p, Href: v.base() + "tree/" + escapePath(strings.Join(parts[:i+1], "/"))})
	}
	return out
}

// NotebookView is the notebook page's view of one notebook. The page shows
// the cells as rendered here before its script runs; the script then loads
// the notebook through the contents API and takes the cells over in place.
type NotebookView struct {
	Page
	// Path is the notebook's path relative to the server's root.
	Path string
	// Cells in notebook order.
	Cells []CellView
	// Kernels are the kernelspecs the server offers, its default first:
	// the toolbar's kernel picker lists them.
	Kernels []KernelView
	// Wants is the kernelspec name the notebook's metadata asks for ("" for
	// none).
	Wants string
}

// KernelView is one kernelspec the server offers.
type KernelView struct {
	// Name is the spec's name ("linger-cuda"); DisplayName what the picker
	// shows ("Linger (CUDA)"); Language the cells' language ("starlark").
	Name, DisplayName, Language string
}

// KernelName is the spec the picker shows before the page's script starts
// a kernel, which starts the same: the one the notebook asks for when the
// server offers it, else the server's default.
func (v NotebookView) KernelName() string {
	for _, k := range v.Kernels {
		if k.Name == v.Wants {
			return k.Name
		}
	}
	if len(v.Kernels) > 0 {
		return v.Kernels[0].Name
	}
	return ""
}

// pickerTitle is the kernel picker's tooltip.
func pickerTitle(v NotebookView) string {
	if len(v.Kernels) == 1 {
		return "The only kernel this server offers"
	}
	return "Change the kernel"
}

// Name is the notebook's base name.
func (v NotebookView) Name() string {
	if i := strings.LastIndexByte(v.Path, '/'); i >= 0 {
		return v.Path[i+1:]
	}
	return v.Path
}

// Cell types, as nbformat names them.
const (
	CellCode     = "code"
	CellMarkdown = "markdown"
	CellRaw      = "raw"
)

// CellView is one cell.
type CellView struct {
	// ID is the nbformat 4.5 cell id; the page uses it as the element id
	// ("cell-" + ID) that the timeline scrolls to.
	ID string
	// Type is CellCode, CellMarkdown or CellRaw.
	Type   string
	Source string
	// ExecutionCount is the code cell's prompt number; 0 shows "[ ]".
	ExecutionCount int
	Outputs        []OutputView
}

// Output types, as nbformat names them.
const (
	OutputStream        = "stream"
	OutputExecuteResult = "execute_result"
	OutputDisplayData   = "display_data"
	OutputError         = "error"
)

// OutputView is one output of a code cell.
type OutputView struct {
	// Type is one of the Output constants.
	Type string
	// Name is a stream's name: "stdout" or "stderr".
	Name string
	// Text is a stream's text, or the text/plain of a result or display.
	Text string
	// PNG is the base64 of an image/png result or display; when set it is
	// shown instead of Text.
	PNG string
	// SVG is the document of an image/svg+xml result or display; when set
	// it is shown, before PNG, as an image (a data URL, never inlined into
	// the page), with Text as its alt text.
	SVG string
	// EName, EValue and Traceback describe an error; the traceback's ANSI
	// escapes are removed when rendered.
	EName, EValue string
	Traceback     []string
}

// TimelineView is the page of one saved trace.
type TimelineView struct {
	Page
	// Name is what the page calls the trace (e.g. its file name).
	Name string
	// TraceURL is where the timeline script fetches the trace from; the
	// page passes it on in the container's data-trace-url attribute.
	TraceURL string
	// Live says TraceURL is a live trace's routes (a source no kernel
	// writes: …/api/timeline/sources/{id}), which the page follows over
	// the stream.
	Live bool
	// Overview, if set, returns the answer of the trace's level-of-detail
	// query over the whole trace (JSON, or nil), inlined for the first
	// paint. The page is flushed before it is called, so that the browser
	// loads the script and stylesheet while the server indexes the trace.
	Overview func(ctx context.Context) json.RawMessage
}

func prompt(n int) string {
	if n <= 0 {
		return "[ ]:"
	}
	return fmt.Sprintf("[%d]:", n)
}

var ansi = regexp.MustCompile(`\x1b\[[0-9;?]*[ -/]*[@-~]`)

// stripANSI removes terminal escapes, which Jupyter kernels put in
// tracebacks to colour them.
func stripANSI(s string) string { return ansi.ReplaceAllString(s, "") }

// traceback is an error's traceback as the page shows it: without its
// last line when that says again what the heading above it says
// ("NameError: …", as a kernel's traceback ends), so that an error reads
// once.
func traceback(o OutputView) string {
	tb := strings.TrimRight(stripANSI(strings.Join(o.Traceback, "\n")), "\n ")
	head := o.EName + ": " + o.EValue
	if tb == head {
		return ""
	}
	if rest, ok := strings.CutSuffix(tb, "\n"+head); ok {
		return rest
	}
	return tb
}

var base64Only = regexp.MustCompile(`^[A-Za-z0-9+/=\s]*$`)

func pngURL(b64 string) string {
	if !base64Only.MatchString(b64) {
		return ""
	}
	return "data:image/png;base64," + strings.Join(strings.Fields(b64), "")
}

// svgURL is an SVG document as an img's data URL: base64, so that no
// byte of it is read as the page's markup.
func svgURL(doc string) string {
	return "data:image/svg+xml;base64," + base64.StdEncoding.EncodeToString([]byte(doc))
}

// imageAlt is an image output's alt text: its text/plain, else what it is.
func imageAlt(o OutputView) string {
	if t := strings.TrimSpace(stripANSI(o.Text)); t != "" {
		return t
	}
	return "image output"
}

func escapePath(p string) string {
	parts := strings.Split(p, "/")
	for i, s := range parts {
		parts[i] = url.PathEscape(s)
	}
	return strings.Join(parts, "/")
}

func entryHref(base string, e EntryView) string {
	switch e.Type {
	case TypeDirectory:
		return base + "tree/" + escapePath(e.Path)
	case TypeNotebook:
		return base + "notebooks/" + escapePath(e.Path)
	default:
		return base + "api/contents/" + escapePath(e.Path) + "?content=1"
	}
}

// formatSize is a size as pages show it, "" when unknown (negative).
func formatSize(n int64) string { return units.FormatInt(n) }

func formatTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02 15:04")
}

func isoTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}
