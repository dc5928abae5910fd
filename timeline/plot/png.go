package plot

import (
	"bytes"
	"image"
	"image/color"
	"image/png"
	"math"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
	"golang.org/x/image/vector"
)

// PNG renders the picture as a PNG of Width × Height pixels: the shapes
// the SVG has, filled with golang.org/x/image/vector's rasterizer (lines
// stroked as quads, dashes cut from them), text in basicfont's 7 × 13.
func (p *Picture) PNG() ([]byte, error) {
	img := image.NewRGBA(image.Rect(0, 0, p.Width, p.Height))
	z := vector.NewRasterizer(p.Width, p.Height)
	fill := func(c color.RGBA) {
		z.Draw(img, img.Bounds(), image.NewUniform(c), image.Point{})
		z.Reset(p.Width, p.Height)
	}
	for i := range p.shapes {
		sh := &p.shapes[i]
		switch sh.kind {
		case shapeRect:
			z.MoveTo(float32(sh.x), float32(sh.y))
			z.LineTo(float32(sh.x+sh.w), float32(sh.y))
			z.LineTo(float32(sh.x+sh.w), float32(sh.y+sh.h))
			z.LineTo(float32(sh.x), float32(sh.y+sh.h))
			z.ClosePath()
			fill(sh.fill)
		case shapeArea:
			for j, q := range sh.pts {
				if j == 0 {
					z.MoveTo(float32(q.x), float32(q.y))
				} else {
					z.LineTo(float32(q.x), float32(q.y))
				}
			}
			z.ClosePath()
			fill(sh.fill)
		case shapeLine:
			stroke(z, sh.pts, sh.width, sh.dash)
			fill(sh.stroke)
		case shapeText:
			drawText(img, sh)
		}
	}
	var b bytes.Buffer
	if err := (&png.Encoder{CompressionLevel: png.BestCompression}).Encode(&b, img); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// stroke adds to z a quad of width w for each dash of the polyline pts,
// each extended by half its width at both ends (square caps, which join
// a step line's corners). The quads all wind one way, so that where they
// overlap the rasterizer's coverage stays whole.
func stroke(z *vector.Rasterizer, pts []pt, w float64, dash []float64) {
	on, di, left := true, 0, math.Inf(1)
	if len(dash) > 0 {
		left = dash[0]
	}
	quad := func(a, b pt) {
		dx, dy := b.x-a.x, b.y-a.y
		l := math.Hypot(dx, dy)
		if l == 0 {
			return
		}
		ux, uy := dx/l*w/2, dy/l*w/2 // half a width along the segment
		nx, ny := -uy, ux            // and across it
		a = pt{a.x - ux, a.y - uy}
		b = pt{b.x + ux, b.y + uy}
		z.MoveTo(float32(a.x+nx), float32(a.y+ny))
		z.LineTo(float32(b.x+nx), float32(b.y+ny))
		z.LineTo(float32(b.x-nx), float32(b.y-ny))
		z.LineTo(float32(a.x-nx), float32(a.y-ny))
		z.ClosePath()
	}
	for i := 1; i < len(pts); i++ {
		a, b := pts[i-1], pts[i]
		l := math.Hypot(b.x-a.x, b.y-a.y)
		for l > 0 {
			d := math.Min(l, left)
			c := pt{a.x + (b.x-a.x)*d/l, a.y + (b.y-a.y)*d/l}
			if on {
				quad(a, c)
			}
			a, l, left = c, l-d, left-d
			if left <= 0 {
				di = (di + 1) % len(dash)
				on, left = di%2 == 0, dash[di]
			}
		}
	}
}

func drawText(img *image.RGBA, sh *shape) {
	face := basicfont.Face7x13
	d := font.Drawer{Dst: img, Src: image.NewUniform(sh.fill), Face: face}
	w := d.MeasureString(sh.text)
	x := fixed.I(int(math.Round(sh.x)))
	switch sh.anchor {
	case 0:
		x -= w / 2
	case 1:
		x -= w
	}
	y := fixed.I(int(math.Round(sh.y)))
	d.Dot = fixed.Point26_6{X: x, Y: y}
	d.DrawString(sh.text)
	if sh.bold {
		d.Dot = fixed.Point26_6{X: x + fixed.I(1), Y: y}
		d.DrawString(sh.text)
	}
}
