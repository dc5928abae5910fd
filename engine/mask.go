package engine

import (
	"fmt"

	"linger/engine/alloc"
	"linger/engine/device"
	"linger/timeline/event"
)

// CausalMask allocates a [rows, cols] attention mask of category attn_mask
// with element (i, j) = 1 where j ≤ i+offset and 0 elsewhere: tril(ones)
// shifted for a chunk whose first row is at position offset. A full mask
// for a whole sequence is CausalMask(a, n, n, 0, ...); the mask of a chunk
// at offset o of length c is then its view
//
//	full.Slice(0, o, o+c) → View(c, o+c)
//
// which is what scenario 2's fixed form does instead of building one mask
// per chunk. The caller owns the mask and frees it.
//
// On an accelerator the mask is made by the CausalMask kernel (bf16) or,
// for an f32 mask, uploaded.
func CausalMask(a *alloc.Allocator, rows, cols, offset int, dt DType, expect event.ScopeKind, label string) (*Tensor, error) {
	return causalMask(a, nil, 0, a.Emitter().Caller(0), rows, cols, offset, dt, expect, label)
}

// CausalMaskIn is CausalMask recorded in the given scope instead of the
// innermost open one (see ZerosIn).
func CausalMaskIn(a *alloc.Allocator, scope event.ScopeID, rows, cols, offset int, dt DType, expect event.ScopeKind, label string) (*Tensor, error) {
	return causalMask(a, nil, scope, a.Emitter().Caller(0), rows, cols, offset, dt, expect, label)
}

// causalMask is CausalMask allocated at site in scope (0: the innermost
// open one), computed on st when a's device is an accelerator (nil: a
// stream of its own).
func causalMask(a *alloc.Allocator, st device.Stream, scope event.ScopeID, site event.SiteID, rows, cols, offset int, dt DType, expect event.ScopeKind, label string) (*Tensor, error) {
	if offset < 0 {
		return nil, fmt.Errorf("causal mask %q: offset must not be negative, got %d", label, offset)
	}
	m, err := emptyIn(a, scope, site, []int{rows, cols}, dt, event.CategoryAttnMask, expect, label)
	if err != nil {
		return nil, fmt.Errorf("causal mask: %w", err)
	}
	if accelerator(a) != nil {
		err := onStream(a, st, func(st device.Stream) error {
			if dt == BF16 {
				return st.CausalMask(m.ptr(), rows, cols, offset)
			}
			v := make([]float32, rows*cols)
			for i := 0; i < rows; i++ {
				for j := 0; j < cols && j <= i+offset; j++ {
					v[i*cols+j] = 1
				}
			}
			return upload(st, m.ptr(), v, dt)
		})
		if err != nil {
			free(m)
			return nil, fmt.Errorf("causal mask %q: %w", label, err)
		}
	}
	if m.data != nil {
		for i := 0; i < rows; i++ {
			r := m.data[i*cols : (i+1)*cols]
			lim := min(cols, i+offset+1)
			for j := range r {
				if j < lim {
					r[j] = 1
				} else {
					r[j] = 0
				}
			}
		}
	}
	return m, nil
}

// chunkMask returns the mask view of rows [pos, pos+rows) over columns
// [0, pos+rows) of a full mask.
func chunkMask(full *Tensor, pos, rows int) (*Tensor, error) {
	if len(full.shape) != 2 || full.shape[0] < pos+rows || full.shape[1] < pos+rows {
		return nil, fmt.Errorf("mask %v too small for rows [%d,%d)", full.shape, pos, pos+rows)
	}
	s, err := full.Slice(0, pos, pos+rows)
	if err != nil {
		return nil, err
	}
	return s.View(rows, pos+rows)
}
