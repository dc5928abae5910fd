package kernel

import (
	"fmt"
	"html"
	"strings"
	"unicode/utf8"

	"go.starlark.net/starlark"
	"go.starlark.net/starlarkstruct"

	"linger/internal/units"
	"linger/kernel/wire"
)

// lingeringTable is what timeline.lingering() returns: the live lingering
// objects, largest first, as a sequence of structs (addr, size, requested,
// category, label, site, holder, cell) for code, and as a cell's result a
// table with one row per holder (wire.GroupHolders: the reference that
// keeps the objects alive), most requested bytes first, with a total row;
// the page shows each holder's objects behind a disclosure. The table
// names each object's cell line as the user sees it on the page (In [3],
// cell 4, line 2; analyze.CellNames), never its Go frames: those stay in
// the objects' site.
type lingeringTable struct {
	hs     []wire.Holder
	objs   []starlark.Value // the structs of hs, same order
	cells  []string         // the cell line of each of hs ("" outside cells)
	groups []wire.HolderGroup
	idx    [][]int // the indexes into hs of each group's objects, in hs's order
	frozen bool
}

// Limits on what the table shows, so that the result of a cell stays
// small however many objects linger: the first maxTableGroups holders, and
// in each holder's disclosure its first maxTableObjects objects, each
// with "… and K more".
const (
	maxTableGroups  = 50
	maxTableObjects = 50
)

var (
	_ starlark.Sequence  = (*lingeringTable)(nil)
	_ starlark.Indexable = (*lingeringTable)(nil)
	_ starlark.Sliceable = (*lingeringTable)(nil)
	_ starlark.HasAttrs  = (*lingeringTable)(nil)
	_ richValue          = (*lingeringTable)(nil)
)

// newLingeringTable makes the table of hs; cells are the cell line that
// made each, as the page names it (session.lingering).
func newLingeringTable(hs []wire.Holder, cells []string) *lingeringTable {
	t := &lingeringTable{hs: hs, objs: make([]starlark.Value, len(hs)), cells: cells, groups: wire.GroupHolders(hs)}
	for i, h := range hs {
		t.objs[i] = starlarkstruct.FromStringDict(starlark.String("lingering"), starlark.StringDict{
			"addr": starlark.MakeUint64(h.Addr), "size": starlark.MakeUint64(h.Size), "requested": starlark.MakeUint64(h.Requested),
			"category": starlark.String(h.Category), "label": starlark.String(h.Label),
			"site": starlark.String(h.Site), "holder": starlark.String(h.Path), "cell": starlark.String(t.cells[i]),
		})
	}
	groupOf := map[uint64]int{}
	for g, gr := range t.groups {
		for _, a := range gr.Addrs {
			groupOf[a] = g
		}
	}
	t.idx = make([][]int, len(t.groups))
	for i, h := range hs {
		g := groupOf[h.Addr]
		t.idx[g] = append(t.idx[g], i)
	}
	return t
}

func (t *lingeringTable) Type() string         { return "lingering" }
func (t *lingeringTable) Truth() starlark.Bool { return len(t.objs) > 0 }
func (t *lingeringTable) Hash() (uint32, error) {
	return unhashable(t)
}
func (t *lingeringTable) Freeze() {
	if !t.frozen {
		t.frozen = true
		for _, o := range t.objs {
			o.Freeze()
		}
	}
}

func (t *lingeringTable) Len() int                   { return len(t.objs) }
func (t *lingeringTable) Index(i int) starlark.Value { return t.objs[i] }
func (t *lingeringTable) Iterate() starlark.Iterator { return starlark.Tuple(t.objs).Iterate() }
func (t *lingeringTable) Slice(start, end, step int) starlark.Value {
	return starlark.NewList(sliceValues(t.objs, start, end, step))
}

// sliceValues is xs[start:end:step] as Starlark's Sliceable gives them.
func sliceValues(xs []starlark.Value, start, end, step int) []starlark.Value {
	var out []starlark.Value
	if step > 0 {
		for i := start; i < end; i += step {
			out = append(out, xs[i])
		}
	} else {
		for i := start; i > end; i += step {
			out = append(out, xs[i])
		}
	}
	return out
}

// Attributes: groups (one struct per holder: holder, count, size,
// requested, cell, example, what, objects), count, size and requested
// (the totals).
func (t *lingeringTable) AttrNames() []string {
	return []string{"count", "groups", "requested", "size"}
}

func (t *lingeringTable) Attr(name string) (starlark.Value, error) {
	switch name {
	case "groups":
		return t.groupValues(), nil
	case "count":
		return starlark.MakeInt(len(t.hs)), nil
	case "size", "requested":
		size, req := t.totals()
		if name == "size" {
			return starlark.MakeUint64(size), nil
		}
		return starlark.MakeUint64(req), nil
	}
	return nil, nil
}

func (t *lingeringTable) totals() (size, requested uint64) {
	for _, h := range t.hs {
		size += h.Size
		requested += h.Requested
	}
	return size, requested
}

// groupCell is the cell line of a group's biggest objects, with how many
// other lines made the rest: "In [2], cell 3, line 2 (+1 more)".
func (t *lingeringTable) groupCell(idx []int) string {
	bytes := map[string]uint64{}
	var order []string
	for _, i := range idx {
		c := t.cells[i]
		if _, ok := bytes[c]; !ok {
			order = append(order, c)
		}
		bytes[c] += t.hs[i].Requested
	}
	if len(order) == 0 {
		return ""
	}
	best := order[0]
	for _, c := range order[1:] {
		if bytes[c] > bytes[best] {
			best = c
		}
	}
	if best == "" {
		best = "(outside cells)"
	}
	if len(order) > 1 {
		best += fmt.Sprintf(" (+%d more)", len(order)-1)
	}
	return best
}

func (t *lingeringTable) groupValues() *starlark.List {
	out := make([]starlark.Value, len(t.groups))
	for i, g := range t.groups {
		idx := t.idx[i]
		objs := make([]starlark.Value, len(idx))
		for j, k := range idx {
			objs[j] = t.objs[k]
		}
		what := make([]starlark.Value, len(g.What))
		for j, k := range g.What {
			what[j] = starlarkstruct.FromStringDict(starlark.String("kind"), starlark.StringDict{
				"name": starlark.String(k.Name), "count": starlark.MakeUint64(k.Count),
				"size": starlark.MakeUint64(k.Bytes), "requested": starlark.MakeUint64(k.Requested),
			})
		}
		out[i] = starlarkstruct.FromStringDict(starlark.String("holder_group"), starlark.StringDict{
			"holder": starlark.String(g.Path), "count": starlark.MakeUint64(g.Count),
			"size": starlark.MakeUint64(g.Bytes), "requested": starlark.MakeUint64(g.Requested),
			"cell": starlark.String(t.groupCell(idx)), "example": starlark.String(g.Example),
			"what": starlark.NewList(what), "objects": starlark.NewList(objs),
		})
	}
	l := starlark.NewList(out)
	if t.frozen {
		l.Freeze()
	}
	return l
}

// summary is the table's first line: "280 lingering objects, 896.0 MiB
// (1.0 GiB allocated), held by 3 holders".
func (t *lingeringTable) summary() string {
	if len(t.hs) == 0 {
		return "no lingering objects"
	}
	size, req := t.totals()
	return fmt.Sprintf("%s, %s, held by %s", plural(len(t.hs), "lingering object"), units.FormatBlocks(req, size), plural(len(t.groups), "holder"))
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// rows are the table's rows as text: holder, objects, requested,
// allocated, cell line; the first maxTableGroups groups, then the "… and
// K more" row and the total.
func (t *lingeringTable) rows() (rows [][5]string, more string) {
	for i, g := range t.groups {
		if i == maxTableGroups {
			var n, size, req uint64
			for _, g := range t.groups[i:] {
				n, size, req = n+g.Count, size+g.Bytes, req+g.Requested
			}
			more = fmt.Sprintf("… and %d more holders (%s, %s)", len(t.groups)-i, plural(int(n), "object"), units.FormatBlocks(req, size))
			break
		}
		rows = append(rows, [5]string{g.Path, fmt.Sprint(g.Count), units.Format(g.Requested), units.Format(g.Bytes), t.groupCell(t.idx[i])})
	}
	return rows, more
}

// String is the plain table (text/plain of the result, print(), repr):
// aligned columns, no Go frames.
func (t *lingeringTable) String() string {
	var b strings.Builder
	b.WriteString(t.summary())
	if len(t.hs) == 0 {
		return b.String()
	}
	b.WriteString("\n")
	rows, more := t.rows()
	size, req := t.totals()
	head := [5]string{"holder", "objects", "requested", "allocated", "allocated at"}
	total := [5]string{"total", fmt.Sprint(len(t.hs)), units.Format(req), units.Format(size), ""}
	all := append(append([][5]string{head}, rows...), total)
	var w [5]int
	for _, r := range all {
		for j, c := range r {
			w[j] = max(w[j], utf8.RuneCountInString(c))
		}
	}
	w[0] = min(w[0], 72) // a longer holder overflows its column alone
	line := func(r [5]string) {
		pad := func(s string, n int, right bool) string {
			fill := strings.Repeat(" ", max(0, n-utf8.RuneCountInString(s)))
			if right {
				return fill + s
			}
			return s + fill
		}
		s := pad(r[0], w[0], false) + "  " + pad(r[1], w[1], true) + "  " + pad(r[2], w[2], true) + "  " + pad(r[3], w[3], true) + "  " + r[4]
		b.WriteString(strings.TrimRight(s, " "))
		b.WriteString("\n")
	}
	line(head)
	for _, r := range rows {
		line(r)
	}
	if more != "" {
		b.WriteString(more + "\n")
	}
	line(total)
	return strings.TrimSuffix(b.String(), "\n")
}

// mimeBundle is the result's text/plain (String) and text/html: the same
// rows as an accessible table (caption, column and row headers), each
// holder's objects behind a <details> disclosure, one line each: label,
// category, size and cell line.
func (t *lingeringTable) mimeBundle() map[string]string {
	e := html.EscapeString
	var b strings.Builder
	b.WriteString(`<table class="linger-lingering"><caption>` + e(t.summary()) + `</caption>`)
	if len(t.hs) == 0 {
		b.WriteString(`</table>`)
		return map[string]string{"text/plain": t.String(), "text/html": b.String()}
	}
	b.WriteString(`<thead><tr><th scope="col">Holder</th><th scope="col">Objects</th><th scope="col">Requested</th><th scope="col">Allocated</th><th scope="col">Allocated at</th></tr></thead><tbody>`)
	rows, more := t.rows()
	for i, r := range rows {
		idx := t.idx[i]
		fmt.Fprintf(&b, `<tr><th scope="row"><details><summary title="%s">%s</summary><ul>`, e(t.groups[i].Example), e(r[0]))
		for j, k := range idx {
			if j == maxTableObjects {
				fmt.Fprintf(&b, `<li>… and %d more</li>`, len(idx)-j)
				break
			}
			h := t.hs[k]
			label := h.Label
			if label == "" {
				label = "(unlabeled)"
			}
			at := t.cells[k]
			if at == "" {
				at = "outside cells"
			}
			fmt.Fprintf(&b, `<li><code>%s</code> %s, %s, %s</li>`, e(label), e(h.Category), e(units.FormatBlocks(h.Requested, h.Size)), e(at))
		}
		fmt.Fprintf(&b, `</ul></details></th><td class="num">%s</td><td class="num">%s</td><td class="num">%s</td><td>%s</td></tr>`, r[1], r[2], r[3], e(r[4]))
	}
	if more != "" {
		fmt.Fprintf(&b, `<tr><td colspan="5">%s</td></tr>`, e(more))
	}
	size, req := t.totals()
	fmt.Fprintf(&b, `</tbody><tfoot><tr><th scope="row">Total</th><td class="num">%d</td><td class="num">%s</td><td class="num">%s</td><td></td></tr></tfoot></table>`,
		len(t.hs), units.Format(req), units.Format(size))
	return map[string]string{"text/plain": t.String(), "text/html": b.String()}
}
