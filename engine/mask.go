package engine

import (
	"fmt"

	"linger/engine/alloc"
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
func CausalMask(a *alloc.Allocator, rows, cols, offset int, dt DType, expect event.ScopeKind, label string) (*Tensor, error) {
	if offset < 0 {
		return nil, fmt.Errorf("causal mask %q: offset must not be negative, got %d", label, offset)
	}
	m, err := emptyAt(a, a.Emitter().Caller(0), []int{rows, cols}, dt, event.CategoryAttnMask, expect, label)
	if err != nil {
		return nil, fmt.Errorf("causal mask: %w", err)
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
