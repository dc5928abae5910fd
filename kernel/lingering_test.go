package kernel

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"linger/internal/units"
	"linger/notebooks/msg"
	"linger/notebooks/msg/msgtest"
)

// roundBlock is the caching allocator's block for a small request: whole
// 512-byte units.
func roundBlock(n uint64) uint64 { return (n + 511) / 512 * 512 }

// TestLingeringTable: timeline.lingering() as a cell's result is a table
// by holder, biggest first, with a total row, cut after maxTableGroups
// holders and maxTableObjects objects per holder, in text/plain and
// text/html, with no Go frames; for code it stays a sequence of the
// objects' structs, with its groups.
func TestLingeringTable(t *testing.T) {
	c := startKernel(t)
	const nList, nDict = 60, 55
	ms := c.exec(fmt.Sprintf(`big = tensor([512, 1024], label="big")
a = [tensor([3, 5], label="a.%%d" %% i) for i in range(%d)]
d = {}
for i in range(%d):
    d["k%%d" %% i] = tensor([2, 8], label="d")`, nList, nDict))
	if rep := msgtest.Find(ms, "execute_reply"); rep["status"] != "ok" {
		t.Fatalf("reply %v", rep)
	}
	// The shapes above, f32: what each holder asked for and the blocks.
	bigReq, aReq, dReq := uint64(512*1024*4), uint64(3*5*4), uint64(2*8*4)
	n := 1 + nList + nDict
	req := bigReq + nList*aReq + nDict*dReq
	size := roundBlock(bigReq) + nList*roundBlock(aReq) + nDict*roundBlock(dReq)
	groups := 2 + nDict // big, a[*], one per dict entry

	r := msgtest.Find(c.exec("timeline.lingering()"), "execute_result")
	data, _ := r["data"].(map[string]any)
	plain, _ := data["text/plain"].(string)
	page, _ := data["text/html"].(string)
	if plain == "" || page == "" {
		t.Fatalf("execute_result data %v", r)
	}
	for what, s := range map[string]string{"text/plain": plain, "text/html": page} {
		if strings.Contains(s, " ← ") || strings.Contains(s, ".go:") {
			t.Errorf("%s shows Go frames: %.500s", what, s)
		}
	}
	lines := strings.Split(plain, "\n")
	wantHead := fmt.Sprintf("%d lingering objects, %s, held by %d holders", n, units.FormatBlocks(req, size), groups)
	if lines[0] != wantHead {
		t.Errorf("first line %q, want %q", lines[0], wantHead)
	}
	cols := regexp.MustCompile(`\s{2,}`)
	row := func(l string) []string { return cols.Split(strings.TrimSpace(l), -1) }
	if got := row(lines[1]); strings.Join(got, "|") != "holder|objects|requested|allocated|allocated at" {
		t.Errorf("header %q", got)
	}
	// Biggest first: the 2 MiB tensor, then the list's 60, then the dict's
	// entries; maxTableGroups rows, the rest said in one line.
	wantRows := [][]string{
		{"global big → Tensor#1", "1", units.Format(bigReq), units.Format(roundBlock(bigReq)), "In [1], cell 1, line 1"},
		{"global a[*]", fmt.Sprint(nList), units.Format(nList * aReq), units.Format(nList * roundBlock(aReq)), "In [1], cell 1, line 2"},
	}
	for i, w := range wantRows {
		if got := row(lines[2+i]); strings.Join(got, "|") != strings.Join(w, "|") {
			t.Errorf("row %d: %q, want %q", i, got, w)
		}
	}
	for i := 2; i < maxTableGroups; i++ {
		got := row(lines[2+i])
		if !strings.HasPrefix(got[0], `global d["k`) || got[1] != "1" || got[2] != units.Format(dReq) || got[4] != "In [1], cell 1, line 5" {
			t.Errorf("row %d: %q", i, got)
		}
	}
	more := nDict - (maxTableGroups - 2)
	wantMore := fmt.Sprintf("… and %d more holders (%d objects, %s)", more, more, units.FormatBlocks(uint64(more)*dReq, uint64(more)*roundBlock(dReq)))
	if got := lines[2+maxTableGroups]; got != wantMore {
		t.Errorf("after the rows %q, want %q", got, wantMore)
	}
	wantTotal := []string{"total", fmt.Sprint(n), units.Format(req), units.Format(size)}
	if got := row(lines[3+maxTableGroups]); strings.Join(got, "|") != strings.Join(wantTotal, "|") || len(lines) != 4+maxTableGroups {
		t.Errorf("total %q (of %d lines), want %q last", got, len(lines), wantTotal)
	}
	// Columns line up: every row's objects column ends where the header's does.
	end := strings.Index(lines[1], "objects") + len("objects")
	for _, l := range append(lines[2:2+maxTableGroups], lines[3+maxTableGroups]) {
		if i := len([]rune(l[:strings.Index(l, "  ")])); i > end {
			t.Errorf("holder overflows: %q", l)
		}
		if rs := []rune(l); rs[len([]rune(lines[1][:end]))-1] == ' ' {
			t.Errorf("objects column not aligned: %q", l)
		}
	}

	// The page's table: accessible, a disclosure per holder with its
	// objects, each one line, maxTableObjects of them and the rest counted.
	for _, w := range []string{
		`<caption>` + wantHead + `</caption>`, `<th scope="col">Holder</th>`, `<th scope="col">Allocated at</th>`,
		`<th scope="row"><details><summary title="global big → Tensor#1 → big">global big → Tensor#1</summary><ul><li><code>big</code> activation, 2.0 MiB, In [1], cell 1, line 1</li></ul></details></th>`,
		fmt.Sprintf(`<li>… and %d more</li>`, nList-maxTableObjects),
		fmt.Sprintf(`<tfoot><tr><th scope="row">Total</th><td class="num">%d</td><td class="num">%s</td><td class="num">%s</td>`, n, units.Format(req), units.Format(size)),
		`<td colspan="5">` + wantMore + `</td>`,
	} {
		if !strings.Contains(page, strings.ReplaceAll(w, `"`, `"`)) {
			t.Errorf("text/html lacks %s", w)
		}
	}
	if got := strings.Count(page, "<details>"); got != maxTableGroups {
		t.Errorf("%d disclosures, want %d", got, maxTableGroups)
	}
	if got := strings.Count(page, "<li><code>a."); got != maxTableObjects {
		t.Errorf("%d objects of a[*] listed, want %d", got, maxTableObjects)
	}

	// For code: a sequence of the objects (largest first) with their
	// fields, Go frames in site; the groups in the table's order.
	ms = c.exec(`l = timeline.lingering()
o = l[0]
print(len(l), type(l), bool(l), o.label, o.category, o.size, o.requested, o.holder, o.cell, o.site.startswith("cell exec-1:1 ← "), " ← " in o.site)
print(len([x for x in l if x.label.startswith("a.")]), l.requested, l.size, l.count, len(l[1:4]), l[-1].label)
g = l.groups
print(len(g), g[0].holder, g[1].holder, g[1].count, g[1].requested, g[1].size, g[1].cell, len(g[1].objects), g[1].objects[0].label, g[1].what[0].name, g[2].count)
print([x.holder for x in l if x.label == "big"])`)
	want := fmt.Sprintf("%d lingering True big activation %d %d global big → Tensor#1 → big In [1], cell 1, line 1 True True\n"+
		"%d %d %d %d 3 d\n"+
		"%d global big → Tensor#1 global a[*] %d %d %d In [1], cell 1, line 2 %d a.0 a.* 1\n"+
		"[\"global big → Tensor#1 → big\"]\n",
		n, roundBlock(bigReq), bigReq, nList, req, size, n, groups, nList, nList*aReq, nList*roundBlock(aReq), nList)
	if got := streamText(ms); got != want {
		t.Errorf("printed\n%s\nwant\n%s\n(error: %v)", got, want, msgtest.Find(ms, "error"))
	}
	// Nothing lingering: a line saying so.
	c2 := startKernel(t)
	if r := msgtest.Find(c2.exec("timeline.lingering()"), "execute_result"); fmt.Sprint(r["data"].(map[string]any)["text/plain"]) != "no lingering objects" {
		t.Errorf("nothing lingering: %v", r["data"])
	}
}

// TestRichResultCap: a rich result over the kernel's per-output cap keeps
// its text/plain, cut with the notice, and leaves out its HTML, which a
// cut would break.
func TestRichResultCap(t *testing.T) {
	c := startKernelOpts(t, Options{MaxOutput: 2000})
	c.exec(`kept = [tensor([2, 8], label="t.%d" % i) for i in range(5)]
d = {}
for i in range(40):
    d["k%d" % i] = tensor([2, 8])`)
	r := msgtest.Find(c.exec("timeline.lingering()"), "execute_result")
	data, _ := r["data"].(map[string]any)
	plain, _ := data["text/plain"].(string)
	if _, ok := data["text/html"]; ok || !strings.Contains(plain, "truncated: over this kernel's limit") {
		t.Errorf("over the cap: %.300v", data)
	}
	// Under it, both.
	c = startKernelOpts(t, Options{MaxOutput: 1 << 20})
	c.exec(`kept = [tensor([2, 8], label="t.%d" % i) for i in range(5)]`)
	r = msgtest.Find(c.exec("timeline.lingering()"), "execute_result")
	if data, _ := r["data"].(map[string]any); data["text/html"] == nil || strings.Contains(fmt.Sprint(data["text/plain"]), "truncated") {
		t.Errorf("under the cap: %.300v", data)
	}
}

// streamText joins a cell's printed text.
func streamText(ms []*msg.Message) string {
	out := ""
	for _, m := range ms {
		if m.Header.MsgType == "stream" {
			out += fmt.Sprint(msgtest.Find([]*msg.Message{m}, "stream")["text"])
		}
	}
	return out
}
