package device

import "math"

// ToBF16 returns the bfloat16 nearest to f (ties to even), as bits: the
// top half of a float32 with the bottom half rounded in, as CUDA's
// __float2bfloat16 does. NaN stays NaN (quiet); ±Inf and values that
// round past the largest bfloat16 become ±Inf.
func ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 {
		return uint16(b>>16) | 0x40 // NaN: keep the sign, force a quiet payload
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

// FromBF16 returns the float32 of bfloat16 bits h, exactly.
func FromBF16(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }
