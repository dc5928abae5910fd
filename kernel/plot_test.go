package kernel

import (
	"bytes"
	"encoding/base64"
	"encoding/xml"
	"fmt"
	"image/png"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"linger/internal/units"
	"linger/notebooks/msg/msgtest"
)

// svgDoc is what the tests read of a picture's SVG: every element with
// its class, data attributes, geometry, text and tooltip.
type svgDoc struct {
	XMLName xml.Name `xml:"svg"`
	Width   int      `xml:"width,attr"`
	Height  int      `xml:"height,attr"`
	Title   string   `xml:"title"`
	Els     []svgEl  `xml:",any"`
}

type svgEl struct {
	XMLName  xml.Name
	Class    string `xml:"class,attr"`
	Category string `xml:"data-category,attr"`
	Track    string `xml:"data-track,attr"`
	D        string `xml:"d,attr"`
	Y        string `xml:"y,attr"`
	Fill     string `xml:"fill,attr"`
	Text     string `xml:",chardata"`
	Title    string `xml:"title"`
}

func (d *svgDoc) class(c string) []svgEl {
	var out []svgEl
	for _, e := range d.Els {
		if e.Class == c {
			out = append(out, e)
		}
	}
	return out
}

// plotResult runs code whose result is a plot and returns its SVG,
// parsed, its PNG's bytes and its text/plain; it writes the SVG and PNG
// to $LINGER_PLOT_DIR when that is set, to look at.
func plotResult(t *testing.T, c *client, code, name string) (*svgDoc, []byte, string) {
	t.Helper()
	ms := c.exec(code)
	if rep := msgtest.Find(ms, "execute_reply"); rep["status"] != "ok" {
		t.Fatalf("%s: reply %v", code, rep)
	}
	data, _ := msgtest.Find(ms, "execute_result")["data"].(map[string]any)
	svg, _ := data["image/svg+xml"].(string)
	b64, _ := data["image/png"].(string)
	plain, _ := data["text/plain"].(string)
	if svg == "" || b64 == "" || plain == "" {
		t.Fatalf("%s: result data has %v", code, keys(data))
	}
	pngBytes, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		t.Fatalf("image/png is not base64: %v", err)
	}
	if dir := os.Getenv("LINGER_PLOT_DIR"); dir != "" {
		_ = os.WriteFile(filepath.Join(dir, name+".svg"), []byte(svg), 0o644)
		_ = os.WriteFile(filepath.Join(dir, name+".png"), pngBytes, 0o644)
	}
	var doc svgDoc
	if err := xml.Unmarshal([]byte(svg), &doc); err != nil {
		t.Fatalf("the SVG is not well formed: %v", err)
	}
	return &doc, pngBytes, plain
}

func keys(m map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// scale reads the byte scale off the y axis: each tick's label at its
// baseline (4 px under its value's y), so bytes → y.
func scale(t *testing.T, d *svgDoc) func(uint64) float64 {
	t.Helper()
	type tick struct{ v, y float64 }
	var ts []tick
	for _, e := range d.class("y-tick") {
		var v uint64
		if e.Text != "0" {
			var err error
			if v, err = units.Parse(strings.ReplaceAll(e.Text, " ", "")); err != nil {
				t.Fatalf("y tick %q: %v", e.Text, err)
			}
		}
		y, _ := strconv.ParseFloat(e.Y, 64)
		ts = append(ts, tick{float64(v), y - 4})
	}
	if len(ts) < 2 || ts[0].v != 0 {
		t.Fatalf("y ticks %v", ts)
	}
	a, b := ts[0], ts[len(ts)-1]
	return func(v uint64) float64 { return a.y + (float64(v)-a.v)*(b.y-a.y)/(b.v-a.v) }
}

var pathNum = regexp.MustCompile(`[MHVL]([-0-9.]+)(?: ([-0-9.]+))?`)

// topY is the highest point (least y) of a path's vertices.
func topY(d string) float64 {
	best := 1e9
	for _, m := range pathNum.FindAllStringSubmatch(d, -1) {
		var y string
		switch m[0][0] {
		case 'V':
			y = m[1]
		case 'M', 'L':
			y = m[2]
		default:
			continue
		}
		v, _ := strconv.ParseFloat(y, 64)
		best = min(best, v)
	}
	return best
}

// lingeringMarks sums the objects the marks' tooltips count: "3
// lingering, 12.0 MiB: ...".
func lingeringMarks(t *testing.T, d *svgDoc) (n int, title string) {
	for _, e := range d.class("lingering") {
		var k int
		if _, err := fmt.Sscanf(e.Title, "%d lingering", &k); err != nil {
			t.Errorf("lingering mark's title %q", e.Title)
		}
		n += k
		title += e.Title
	}
	return n, title
}

// TestPlot: timeline.plot() of a cell that leaks and of one that does
// not, and of the session: well-formed SVG whose category areas, peak
// and lingering marks are those the tensors' shapes give, a PNG of the
// stated size that is not blank, and a summary line.
func TestPlot(t *testing.T) {
	c := startKernel(t)
	// In [1] leaks three 4 MiB kv_cache tensors (kept in a global past
	// the cell they were expected to die with) and frees an 8 MiB
	// activation while they live: its peak is 20 MiB. In [2] makes and
	// frees a 2 MiB attn_mask: its peak is 14 MiB, nothing new lingers.
	const mib = 1 << 20
	leak := `kept = [tensor([1024, 1024], category="kv_cache", label="kept") for i in range(3)]
x = tensor([2048, 1024], label="scratch")
x.free()`
	clean := `m = tensor([1024, 512], category="attn_mask", label="m")
m.free()`
	for _, code := range []string{leak, clean} {
		if rep := msgtest.Find(c.exec(code), "execute_reply"); rep["status"] != "ok" {
			t.Fatalf("%s: %v", code, rep)
		}
	}
	kept, scratch, mask := uint64(3*1024*1024*4), uint64(2048*1024*4), uint64(1024*512*4)

	for _, tc := range []struct {
		name, code string
		title      string
		peak       uint64
		lingering  int
		cats       []string
	}{
		{"leaking-cell", "timeline.plot(cell=1)", "In [1]", kept + scratch, 3, []string{"kv_cache", "activation"}},
		{"clean-cell", "timeline.plot(cell=2, width=500, height=240)", "In [2]", kept + mask, 0, []string{"kv_cache", "attn_mask"}},
		{"session", "timeline.plot()", "the session", kept + scratch, 3, []string{"kv_cache", "attn_mask", "activation"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, pngBytes, plain := plotResult(t, c, tc.code, tc.name)
			linger := "no lingering objects"
			if tc.lingering > 0 {
				linger = fmt.Sprintf("%d lingering objects (%s)", tc.lingering, units.Format(kept))
			}
			want := fmt.Sprintf("memory over %s: peak %s allocated, %s", tc.title, units.Format(tc.peak), linger)
			if plain != want || d.Title != want {
				t.Errorf("text/plain %q, svg title %q; want %q", plain, d.Title, want)
			}
			peak := d.class("peak")
			if len(peak) != 1 || !strings.HasPrefix(peak[0].Text, "peak "+units.Format(tc.peak)+" allocated") {
				t.Errorf("peak text %v, want peak %s", peak, units.Format(tc.peak))
			}
			var cats []string
			top := 1e9
			for _, e := range d.class("category") {
				cats = append(cats, e.Category)
				top = min(top, topY(e.D))
			}
			if strings.Join(cats, " ") != strings.Join(reverse(tc.cats), " ") {
				t.Errorf("category areas %v, want %v (top first)", cats, reverse(tc.cats))
			}
			// The stack's top is the peak, on the axis's scale.
			if y := scale(t, d)(tc.peak); top < y-0.2 || top > y+0.2 {
				t.Errorf("the stack's top is at y=%v, the peak of %s at y=%v", top, units.Format(tc.peak), y)
			}
			if n, titles := lingeringMarks(t, d); n != tc.lingering {
				t.Errorf("%d lingering objects marked (%s), want %d", n, titles, tc.lingering)
			} else if n > 0 && !strings.Contains(titles, "kept (kv_cache, 4.0 MiB)") {
				t.Errorf("lingering marks say %q", titles)
			}
			var tracks []string
			for _, e := range d.class("track") {
				tracks = append(tracks, e.Track)
			}
			if strings.Join(tracks, " ") != "device_used reserved allocated" {
				t.Errorf("tracks %v", tracks)
			}
			img, err := png.Decode(bytes.NewReader(pngBytes))
			if err != nil {
				t.Fatalf("image/png: %v", err)
			}
			if b := img.Bounds(); b.Dx() != d.Width || b.Dy() != d.Height {
				t.Errorf("PNG is %v, SVG %d × %d", b, d.Width, d.Height)
			}
			colours := map[uint32]bool{}
			for y := img.Bounds().Min.Y; y < img.Bounds().Max.Y; y += 3 {
				for x := img.Bounds().Min.X; x < img.Bounds().Max.X; x += 3 {
					r, g, b, _ := img.At(x, y).RGBA()
					colours[r>>8<<16|g>>8<<8|b>>8] = true
				}
			}
			// kv_cache's cyan is there, and more than the ground and text.
			if !colours[0x88CCEE] || len(colours) < 8 {
				t.Errorf("PNG has %d colours, kv_cache's: %v", len(colours), colours[0x88CCEE])
			}
			t.Logf("%s: SVG %d bytes, PNG %d bytes", tc.name, len(d.Els), len(pngBytes))
		})
	}
}

func reverse(xs []string) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[len(xs)-1-i] = x
	}
	return out
}
