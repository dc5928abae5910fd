package kernel

import (
	"fmt"
	"math"
	"math/big"
	"regexp"
	"strings"

	starlarkmath "go.starlark.net/lib/math"
	"go.starlark.net/starlark"
	"go.starlark.net/syntax"
)

// Arithmetic a Python user reaches for and Starlark lacks: the ** operator
// (a syntax error, which powerHint explains), pow and the math module.

// maxPowBits bounds the size of an integer pow result (8 MiB of digits),
// so that a typo like pow(10, 10**12) fails at once rather than filling
// the kernel's memory.
const maxPowBits = 1 << 26

// powBuiltin is Python's pow(base, exp, mod=None): Starlark ints (of any
// size) give an int, or a float for a negative exponent; a float on
// either side gives a float; mod takes ints only.
var powBuiltin = starlark.NewBuiltin("pow", func(_ *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var x, y starlark.Value
	var mod starlark.Value = starlark.None
	if err := starlark.UnpackArgs(b.Name(), args, kwargs, "base", &x, "exp", &y, "mod?", &mod); err != nil {
		return nil, err
	}
	xi, xInt := x.(starlark.Int)
	yi, yInt := y.(starlark.Int)
	if mod != starlark.None {
		mi, mInt := mod.(starlark.Int)
		if !xInt || !yInt || !mInt {
			return nil, fmt.Errorf("pow: unsupported operand types %s, %s and %s: a modulus takes ints only", x.Type(), y.Type(), mod.Type())
		}
		return powMod(xi.BigInt(), yi.BigInt(), mi.BigInt())
	}
	if xInt && yInt && yi.Sign() >= 0 {
		return powInt(xi.BigInt(), yi)
	}
	xf, xok := starlark.AsFloat(x)
	yf, yok := starlark.AsFloat(y)
	if !xok || !yok || !isNumber(x) || !isNumber(y) {
		return nil, fmt.Errorf("pow: unsupported operand types %s and %s", x.Type(), y.Type())
	}
	switch {
	case xf == 0 && yf < 0:
		return nil, fmt.Errorf("pow: division by zero (0 to the power %v)", y)
	case xf < 0 && yf != math.Trunc(yf):
		return nil, fmt.Errorf("pow: a negative number to a fractional power (%v, %v) is not a real number", x, y)
	}
	r := math.Pow(xf, yf)
	if math.IsInf(r, 0) && !math.IsInf(xf, 0) && !math.IsInf(yf, 0) {
		return nil, fmt.Errorf("pow(%v, %v): result too large for a float", x, y)
	}
	return starlark.Float(r), nil
})

func isNumber(v starlark.Value) bool {
	switch v.(type) {
	case starlark.Int, starlark.Float:
		return true
	}
	return false
}

// powInt is x**y for y >= 0, refused past maxPowBits.
func powInt(x *big.Int, y starlark.Int) (starlark.Value, error) {
	if n := x.BitLen(); n > 1 { // 0, 1 and -1 stay small whatever the exponent
		e, ok := y.Int64()
		if !ok || e > maxPowBits/int64(n-1) {
			return nil, fmt.Errorf("pow: result of %d-bit base to the power %v would exceed %d bits", n, y, maxPowBits)
		}
	}
	return starlark.MakeBigInt(new(big.Int).Exp(x, y.BigInt(), nil)), nil
}

// powMod is Python's three-argument pow: the result takes the sign of m.
func powMod(x, y, m *big.Int) (starlark.Value, error) {
	switch {
	case m.Sign() == 0:
		return nil, fmt.Errorf("pow: modulus is zero")
	case y.Sign() < 0:
		return nil, fmt.Errorf("pow: negative exponent with a modulus")
	}
	r := new(big.Int).Exp(x, y, new(big.Int).Abs(m))
	if m.Sign() < 0 && r.Sign() != 0 {
		r.Add(r, m)
	}
	return starlark.MakeBigInt(r), nil
}

// mathModule is go.starlark.net's math module (sqrt, pow, floor, pi, …).
var mathModule = starlarkmath.Module

var (
	powLeft  = regexp.MustCompile(`([\w.]*\([^()]*\)|[\w.]+)\s*$`)
	powRight = regexp.MustCompile(`^\s*(\([^()]*\)|-?[\w.]+)`)
)

// powerHint rewrites the parser's complaint about ** (Starlark has no
// power operator; "got '**', want newline") as what to write instead,
// naming the operands when they are simple: for `x = 10**9`, "Starlark
// has no ** operator: use pow(10, 9) instead of 10**9". Other errors keep
// their message.
func powerHint(src string, se syntax.Error) string {
	if !strings.HasPrefix(se.Msg, "got '**'") {
		return se.Msg
	}
	lines := strings.Split(src, "\n")
	use := "pow(x, y) instead of x**y"
	if l := int(se.Pos.Line) - 1; l >= 0 && l < len(lines) {
		// The error's column is just after the **.
		line, end := lines[l], int(se.Pos.Col)-1
		if end >= 2 && end <= len(line) && line[end-2:end] == "**" {
			left, right := line[:end-2], line[end:]
			lm, rm := powLeft.FindStringSubmatch(left), powRight.FindStringSubmatch(right)
			if lm != nil && rm != nil {
				expr := strings.TrimSpace(line[len(left)-len(lm[0]) : end+len(rm[0])])
				use = fmt.Sprintf("pow(%s, %s) instead of %s", lm[1], rm[1], expr)
			}
		}
	}
	return "Starlark has no ** operator: use " + use
}
