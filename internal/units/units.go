// Package units reads and prints byte counts, the one vocabulary of sizes
// that the command line, notebook cells, reports and pages share, and
// prints durations for pages (FormatDuration).
//
// Parse accepts binary (KiB … EiB and the short K, M, G, T, P) and
// decimal (KB … EB) suffixes, upper or lower case, on a decimal or
// exponent number: "16GiB", "16G", "80GB", "1.5gib", "1e9", "1048576".
// Format prints binary units with one decimal, as the analyzer's reports
// and the timeline do: "24.0 MiB", "1023 B".
package units

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// suffixes in the order Parse tries them: longest first, so "MiB" is not
// read as "B".
var suffixes = []struct {
	suffix string
	mult   float64
}{
	{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30}, {"tib", 1 << 40}, {"pib", 1 << 50}, {"eib", 1 << 60},
	{"kb", 1e3}, {"mb", 1e6}, {"gb", 1e9}, {"tb", 1e12}, {"pb", 1e15}, {"eb", 1e18},
	{"k", 1 << 10}, {"m", 1 << 20}, {"g", 1 << 30}, {"t", 1 << 40}, {"p", 1 << 50},
	{"b", 1},
}

// Parse reads a byte count such as "16GiB", "16G", "80GB", "512MiB",
// "1.5GiB", "1e9" or "1048576". A bare number is bytes; a fraction of a
// byte is dropped. Negative, non-numeric and 2⁶⁴-or-more sizes are
// errors that show valid examples.
func Parse(s string) (uint64, error) {
	t := strings.TrimSpace(s)
	mult := 1.0
	for _, u := range suffixes {
		if n := len(t) - len(u.suffix); n >= 0 && strings.EqualFold(t[n:], u.suffix) {
			t, mult = strings.TrimSpace(t[:n]), u.mult
			break
		}
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || v < 0 || math.IsNaN(v) || v*mult >= 1<<64 {
		return 0, fmt.Errorf("invalid byte size %q (examples: 16GiB, 16G, 512MiB, 80GB, 1048576)", s)
	}
	return uint64(v * mult), nil
}

// Format prints n in binary units with one decimal: "24.0 MiB"; under
// 1 KiB, whole bytes: "1023 B".
func Format(n uint64) string { return FormatPrec(n, 1) }

// FormatBlocks prints bytes as code asked for them (requested) first and,
// beside them, the bytes of the blocks the caching allocator handed out
// for them (rounded up to 512 B, or a whole cached block), when the two
// read differently: "56.0 MiB (98.0 MiB allocated)", else "56.0 MiB".
func FormatBlocks(requested, allocated uint64) string {
	r, a := Format(requested), Format(allocated)
	if r == a {
		return r
	}
	return r + " (" + a + " allocated)"
}

// FormatPrec is Format with prec decimals. The allocator's out-of-memory
// message uses two, as PyTorch's does ("Tried to allocate 20.00 MiB").
func FormatPrec(n uint64, prec int) string {
	return formatFloat(float64(n), prec)
}

// FormatSigned prints a byte difference with its sign: "+24.0 MiB",
// "−16.0 MiB" (a minus sign, U+2212), "+0 B".
func FormatSigned(v float64) string {
	if v < 0 {
		return "−" + formatFloat(-v, 1)
	}
	return "+" + formatFloat(v, 1)
}

// FormatInt prints a signed count of bytes, "" for a negative one (an
// unknown size, as a page shows it).
func FormatInt(n int64) string {
	if n < 0 {
		return ""
	}
	return Format(uint64(n))
}

// formatFloat picks the unit by the figure as it will be printed, not as
// it is: 1048575 bytes is 1024.0 KiB to one decimal, so it prints as
// "1.0 MiB", and 1023.7 bytes as "1.0 KiB", never "1024".
func formatFloat(v float64, prec int) string {
	const prefixes = "KMGTPE"
	if math.Round(v) < 1024 {
		return strconv.FormatFloat(v, 'f', 0, 64) + " B"
	}
	v /= 1024
	i := 0
	for i < len(prefixes)-1 && (v >= 1024 || roundsUp(v, prec)) {
		v /= 1024
		i++
	}
	return strconv.FormatFloat(v, 'f', prec, 64) + " " + prefixes[i:i+1] + "iB"
}

// roundsUp reports whether v, printed with prec decimals, reads 1024 or
// more: the next unit's 1.0.
func roundsUp(v float64, prec int) bool {
	r, _ := strconv.ParseFloat(strconv.FormatFloat(v, 'f', prec, 64), 64)
	return r >= 1024
}

// FormatDuration prints ns nanoseconds as a person reads a run's length,
// never as time.Duration's String ("5m12.764359s"): "5 min 12.8 s",
// "0.58 s", "12.3 ms", "850 µs", "1 h 2 min 5 s"; a negative one with a
// minus sign (U+2212), "−5 min 12.2 s". Under a minute it keeps three
// significant digits at most; from a minute, tenths of a second; from an
// hour, whole seconds. Trailing zeros go: "2 s", not "2.00 s".
func FormatDuration(ns int64) string {
	if ns < 0 {
		if ns == math.MinInt64 {
			ns++ // its magnitude does not fit
		}
		return "−" + FormatDuration(-ns)
	}
	trim := func(v float64, prec int) string {
		s := strconv.FormatFloat(v, 'f', prec, 64)
		if strings.Contains(s, ".") {
			s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
		}
		return s
	}
	// Three significant digits, never an exponent: a value that rounds up
	// to 1000 of a unit (999.6 µs) is the next unit's (1 ms).
	sig3 := func(v float64) string {
		switch {
		case v >= 100:
			return trim(v, 0)
		case v >= 10:
			return trim(v, 1)
		}
		return trim(v, 2)
	}
	switch {
	case ns < 1e3:
		return strconv.FormatInt(ns, 10) + " ns"
	case ns < 999_500:
		return sig3(float64(ns)/1e3) + " µs"
	case ns < 1e8:
		return sig3(float64(ns)/1e6) + " ms"
	case ns < 10e9:
		return trim(float64(ns)/1e9, 2) + " s"
	}
	tenths := (ns + 5e7) / 1e8 // rounded first, so that 59.96 s reads 1 min
	if tenths < 600 {
		return trim(float64(tenths)/10, 1) + " s"
	}
	if tenths < 36000 {
		return fmt.Sprintf("%d min %s s", tenths/600, trim(float64(tenths%600)/10, 1))
	}
	s := (ns + 5e8) / 1e9
	return fmt.Sprintf("%d h %d min %d s", s/3600, s%3600/60, s%60)
}
