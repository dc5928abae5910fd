package kernel

import (
	"encoding/base64"
	"fmt"
	"html"
	"net/url"
	"path/filepath"
	"strings"

	"go.starlark.net/starlark"

	"linger/internal/serverinfo"
	"linger/timeline/event"
	"linger/timeline/plot"
)

// plotValue is what timeline.plot() returns: a picture of the kernel's
// memory over the session or a cell, drawn from the sink's plot.Series
// when it is shown, so that a plot that ends a cell includes the cell's
// end and what lingered when it ended. As a cell's result it is a mime
// bundle of image/svg+xml, image/png and text/plain (the summary line),
// for notebook frontends without Linger's timeline.
type plotValue struct {
	s             *session
	cell          bool          // a cell's run, not the session
	scope         event.ScopeID // that cell's scope
	title         string
	width, height int
}

var _ richValue = (*plotValue)(nil)

// timelinePlot is timeline.plot(cell=False, width=800, height=300):
// cell=True is the cell running it, cell=N the latest run of In [N];
// otherwise the session.
func timelinePlot(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var cell starlark.Value = starlark.False
	width, height := plot.DefaultWidth, plot.DefaultHeight
	if err := starlark.UnpackArgs(b.Name(), args, kwargs, "cell?", &cell, "width?", &width, "height?", &height); err != nil {
		return nil, err
	}
	if width < plot.MinWidth || width > plot.MaxWidth || height < plot.MinHeight || height > plot.MaxHeight {
		return nil, fmt.Errorf("%s: a size of %d × %d: want a width of %d to %d and a height of %d to %d pixels",
			b.Name(), width, height, plot.MinWidth, plot.MaxWidth, plot.MinHeight, plot.MaxHeight)
	}
	s := sessionOf(thread)
	p := &plotValue{s: s, title: "the session", width: width, height: height}
	switch c := cell.(type) {
	case starlark.Bool:
		if !c {
			return p, nil
		}
		open, ok := s.sink.openCell()
		if !ok {
			return nil, fmt.Errorf("%s: cell=True outside a cell", b.Name())
		}
		p.cell, p.scope, p.title = true, open.Scope, cellTitle(open)
	case starlark.Int:
		n, ok := c.Uint64()
		if !ok || n == 0 {
			return nil, fmt.Errorf("%s: cell=%s: want an execution count, as In [3] shows it", b.Name(), c)
		}
		run, ok := s.sink.findCell(n)
		if !ok {
			return nil, fmt.Errorf("%s: cell=%d: In [%d] has not run in this kernel", b.Name(), n, n)
		}
		p.cell, p.scope, p.title = true, run.Scope, cellTitle(run)
	default:
		return nil, fmt.Errorf("%s: cell must be True, False or an execution count, not %s", b.Name(), cell.Type())
	}
	return p, nil
}

func cellTitle(c plot.Cell) string {
	if c.Count == 0 {
		return "this cell"
	}
	return fmt.Sprintf("In [%d]", c.Count)
}

// picture draws the plot now: the series' stretch, with the live
// lingering objects allocated in it marked.
func (p *plotValue) picture() *plot.Picture {
	var objs []plot.Object
	for _, o := range p.s.sink.report().Lingering.Objects {
		if o.FreeSeq == 0 {
			objs = append(objs, plot.Object{Time: o.AllocTime, Size: o.Size, Category: o.Category, Label: o.Label})
		}
	}
	return p.s.sink.picture(plot.Options{Width: p.width, Height: p.height, Title: p.title, Lingering: objs}, p.cell, p.scope)
}

func (p *plotValue) String() string        { return p.picture().Summary() }
func (p *plotValue) Type() string          { return "plot" }
func (p *plotValue) Freeze()               {}
func (p *plotValue) Truth() starlark.Bool  { return starlark.True }
func (p *plotValue) Hash() (uint32, error) { return unhashable(p) }

// mimeBundle is the picture as SVG and PNG, and its summary; in a
// kernel a Jupyter frontend started, also text/html: the picture with a
// link to its trace in a linger serve that lists it (htmlFigure).
func (p *plotValue) mimeBundle() map[string]string {
	pic := p.picture()
	svg := pic.SVG()
	out := map[string]string{"text/plain": pic.Summary(), "image/svg+xml": string(svg)}
	if b, err := pic.PNG(); err == nil {
		out["image/png"] = base64.StdEncoding.EncodeToString(b)
	}
	if p.s.tracePath != "" {
		out["text/html"] = htmlFigure(svg, pic.Summary(), p.width, p.height, p.s.tracePath, serverinfo.Dir())
	}
	return out
}

// htmlFigure is the picture as HTML, for the frontends that show
// text/html before an image (JupyterLab, nbconvert's HTML): the SVG as
// an image (a data URL: no script, no style of the page's), the summary
// as its caption, and a link that opens trace in the timeline of the
// linger serve running on this machine that lists it (serverinfo.Find
// in servers) — or, when none runs, where the trace is (~ for the home
// directory) and how to open it. The link carries no token: one saved in a notebook would give the
// server away.
func htmlFigure(svg []byte, summary string, width, height int, trace, servers string) string {
	var b strings.Builder
	esc := html.EscapeString
	fmt.Fprintf(&b, `<figure class="linger-plot" style="margin:0"><img src="data:image/svg+xml;base64,%s" alt="%s" width="%d" height="%d" style="max-width:100%%;height:auto">`,
		base64.StdEncoding.EncodeToString(svg), esc(summary), width, height)
	name := filepath.Base(trace)
	if srv, ok := serverinfo.Find(servers, filepath.Dir(trace)); ok {
		link := strings.TrimSuffix(srv.URL, "/") + "/timeline/" + url.PathEscape(name)
		fmt.Fprintf(&b, `<figcaption>%s · <a href="%s" target="_blank" rel="noopener">open %s in Linger's timeline</a></figcaption>`, esc(summary), esc(link), esc(name))
	} else {
		fmt.Fprintf(&b, `<figcaption>%s · the trace is <code>%s</code>: <code>linger serve</code> lists it beside its own</figcaption>`, esc(summary), esc(serverinfo.TrimHome(trace)))
	}
	b.WriteString("</figure>")
	return b.String()
}
