package main

import (
	"fmt"
	"strconv"
	"strings"
)

// parseBytes reads a byte count such as "16GiB", "80G", "512MiB", "1.5GB"
// or "1048576". Binary and decimal suffixes are both accepted; a bare
// number is bytes.
func parseBytes(s string) (uint64, error) {
	t := strings.TrimSpace(s)
	mult := 1.0
	units := []struct {
		suffix string
		mult   float64
	}{
		{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
		{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
		{"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"T", 1 << 40}, {"B", 1},
	}
	for _, u := range units {
		if rest, ok := strings.CutSuffix(t, u.suffix); ok {
			t, mult = strings.TrimSpace(rest), u.mult
			break
		}
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || v < 0 || v*mult >= 1<<64 {
		return 0, fmt.Errorf("invalid byte size %q (examples: 16GiB, 512MiB, 1048576)", s)
	}
	return uint64(v * mult), nil
}

// formatBytes prints n in binary units with three significant digits.
func formatBytes(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	v := float64(n) / float64(div)
	prec := 2
	if v >= 100 {
		prec = 0
	} else if v >= 10 {
		prec = 1
	}
	return strconv.FormatFloat(v, 'f', prec, 64) + " " + string("KMGTP"[exp]) + "iB"
}
