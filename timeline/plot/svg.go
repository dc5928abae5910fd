package plot

import (
	"fmt"
	"html"
	"image/color"
	"strconv"
	"strings"
)

// SVG renders the picture as a standalone SVG document: shapes as rect,
// path and text elements with classes (and data-category, data-track)
// that say what each is, tooltips as title elements, and the summary as
// its accessible name.
func (p *Picture) SVG() []byte {
	var b strings.Builder
	e := Escape
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" role="img" aria-label="%s" font-family="DejaVu Sans Mono,Menlo,Consolas,monospace" font-size="12">`,
		p.Width, p.Height, p.Width, p.Height, e(p.Summary()))
	fmt.Fprintf(&b, "<title>%s</title>\n", e(p.Summary()))
	for i := range p.shapes {
		sh := &p.shapes[i]
		attrs := ""
		if sh.class != "" {
			attrs += ` class="` + sh.class + `"`
		}
		if sh.data != "" {
			if sh.kind == shapeLine {
				attrs += ` data-track="` + e(sh.data) + `"`
			} else {
				attrs += ` data-category="` + e(sh.data) + `"`
			}
		}
		end := "/>"
		if sh.title != "" {
			end = "><title>" + e(sh.title) + "</title></" + svgTag(sh.kind) + ">"
		}
		switch sh.kind {
		case shapeRect:
			fmt.Fprintf(&b, `<rect%s x="%s" y="%s" width="%s" height="%s" fill="%s"%s`, attrs, num(sh.x), num(sh.y), num(sh.w), num(sh.h), hex(sh.fill), end)
		case shapeArea:
			fmt.Fprintf(&b, `<path%s d="%sZ" fill="%s"%s`, attrs, pathData(sh.pts), hex(sh.fill), end)
		case shapeLine:
			dash := ""
			if len(sh.dash) > 0 {
				ds := make([]string, len(sh.dash))
				for i, d := range sh.dash {
					ds[i] = num(d)
				}
				dash = ` stroke-dasharray="` + strings.Join(ds, " ") + `"`
			}
			fmt.Fprintf(&b, `<path%s d="%s" fill="none" stroke="%s" stroke-width="%s"%s%s`, attrs, pathData(sh.pts), hex(sh.stroke), num(sh.width), dash, end)
		case shapeText:
			anchor := ""
			switch sh.anchor {
			case 0:
				anchor = ` text-anchor="middle"`
			case 1:
				anchor = ` text-anchor="end"`
			}
			if sh.bold {
				anchor += ` font-weight="bold"`
			}
			fmt.Fprintf(&b, `<text%s x="%s" y="%s" fill="%s"%s>%s</text>`, attrs, num(sh.x), num(sh.y), hex(sh.fill), anchor, e(sh.text))
		}
		b.WriteByte('\n')
	}
	b.WriteString("</svg>\n")
	return []byte(b.String())
}

func svgTag(k shapeKind) string {
	switch k {
	case shapeRect:
		return "rect"
	case shapeText:
		return "text"
	}
	return "path"
}

// pathData writes pts as path data, with H and V for the steps that
// most of a picture's paths are.
func pathData(pts []pt) string {
	var b strings.Builder
	for i, q := range pts {
		switch {
		case i == 0:
			b.WriteString("M" + num(q.x) + " " + num(q.y))
		case q.y == pts[i-1].y:
			b.WriteString("H" + num(q.x))
		case q.x == pts[i-1].x:
			b.WriteString("V" + num(q.y))
		default:
			b.WriteString("L" + num(q.x) + " " + num(q.y))
		}
	}
	return b.String()
}

// num prints a coordinate to a tenth of a pixel, without trailing zeros.
func num(v float64) string { return strconv.FormatFloat(round1(v), 'f', -1, 64) }

func hex(c color.RGBA) string { return fmt.Sprintf("#%02x%02x%02x", c.R, c.G, c.B) }

// Escape is s for XML text or an attribute: escaped as HTML is, and
// without the characters XML 1.0 forbids (most control characters, which
// a label from a notebook may hold), which would make the whole picture
// unreadable.
func Escape(s string) string {
	return html.EscapeString(strings.Map(func(r rune) rune {
		if r == '\t' || r == '\n' || r == '\r' || r >= 0x20 && r < 0xfffe && !(r >= 0xd800 && r < 0xe000) || r >= 0x10000 && r <= 0x10ffff {
			return r
		}
		return -1
	}, s))
}
