package units

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for _, c := range []struct {
		in   string
		want uint64
		ok   bool
	}{
		{"16GiB", 16 << 30, true},
		{"16G", 16 << 30, true}, // the command line and a notebook agree (they did not)
		{"16g", 16 << 30, true},
		{"16gib", 16 << 30, true},
		{"80GB", 80e9, true},
		{"512MiB", 512 << 20, true},
		{"512M", 512 << 20, true},
		{"1.5GiB", 3 << 29, true},
		{"1048576", 1 << 20, true},
		{"1e9", 1e9, true},
		{"2K", 2048, true},
		{" 2 KiB ", 2048, true},
		{"7B", 7, true},
		{"0", 0, true},
		{"", 0, false},
		{"GiB", 0, false},
		{"-1G", 0, false},
		{"lots", 0, false},
		{"NaN", 0, false},
		{"1e30", 0, false},
		{"16 GiB extra", 0, false},
	} {
		got, err := Parse(c.in)
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("Parse(%q) = %d, %v; want %d, ok=%v", c.in, got, err, c.want, c.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "16GiB") {
			t.Errorf("Parse(%q) error %q shows no example", c.in, err)
		}
	}
}

func TestFormat(t *testing.T) {
	for _, c := range []struct {
		in   uint64
		want string
	}{
		{0, "0 B"}, {1023, "1023 B"}, {1024, "1.0 KiB"}, {1536, "1.5 KiB"},
		{24 << 20, "24.0 MiB"}, {3758096384, "3.5 GiB"}, {300 << 30, "300.0 GiB"},
		{1 << 60, "1.0 EiB"}, {1<<64 - 1, "16.0 EiB"},
		// The unit is the printed figure's: 1048575 B is 1023.999 KiB,
		// 1024.0 to one decimal, so it reads as the next unit's 1.0.
		{1048575, "1.0 MiB"}, {1<<30 - 1, "1.0 GiB"}, {1048524, "1023.9 KiB"}, {1048525, "1.0 MiB"},
	} {
		if got := Format(c.in); got != c.want {
			t.Errorf("Format(%d) = %q, want %q", c.in, got, c.want)
		}
	}
	if got := FormatPrec(20<<20, 2); got != "20.00 MiB" {
		t.Errorf("FormatPrec(20 MiB, 2) = %q", got)
	}
	for v, want := range map[float64]string{24 << 20: "+24.0 MiB", -16 << 20: "−16.0 MiB", 0: "+0 B", 1023.7: "+1.0 KiB", 1023.4: "+1023 B", -1023.7: "−1.0 KiB"} {
		if got := FormatSigned(v); got != want {
			t.Errorf("FormatSigned(%v) = %q, want %q", v, got, want)
		}
	}
	if got := FormatInt(-1); got != "" {
		t.Errorf("FormatInt(-1) = %q, want empty", got)
	}
	for _, c := range []struct {
		req, alloc uint64
		want       string
	}{
		{56 << 20, 98 << 20, "56.0 MiB (98.0 MiB allocated)"}, {600, 1024, "600 B (1.0 KiB allocated)"},
		{24<<20 - 100, 24 << 20, "24.0 MiB"}, {0, 0, "0 B"},
	} {
		if got := FormatBlocks(c.req, c.alloc); got != c.want {
			t.Errorf("FormatBlocks(%d, %d) = %q, want %q", c.req, c.alloc, got, c.want)
		}
	}
}

func TestRoundTrip(t *testing.T) {
	for _, n := range []uint64{0, 1, 1023, 1 << 10, 3 << 20, 16 << 30} {
		got, err := Parse(strings.ReplaceAll(Format(n), " ", ""))
		if err != nil || got != n {
			t.Errorf("Parse(Format(%d)) = %d, %v", n, got, err)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"16GiB", "16g", "1e9", "İb", "-0", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := Parse(s)
		if err != nil {
			return
		}
		if m, err := Parse(strings.ReplaceAll(Format(n), " ", "")); (err != nil && n < 1<<63) || (n < 1024 && m != n) {
			t.Errorf("Parse(%q) = %d; its Format %q reads back as %d, %v", s, n, Format(n), m, err)
		}
	})
}

// TestFormatDuration: durations as a person reads them, never Go's
// "5m12.764359s".
func TestFormatDuration(t *testing.T) {
	for _, c := range []struct {
		ns   int64
		want string
	}{
		{0, "0 ns"},
		{999, "999 ns"},
		{1000, "1 µs"},
		{12_345, "12.3 µs"},
		{850_000, "850 µs"},
		{999_499, "999 µs"},
		{999_600, "1 ms"},
		{1_500_000, "1.5 ms"},
		{12_300_000, "12.3 ms"},
		{99_960_000, "100 ms"},
		{100_000_000, "0.1 s"},
		{580_000_000, "0.58 s"},
		{1_500_000_000, "1.5 s"},
		{2_000_000_000, "2 s"},
		{12_840_000_000, "12.8 s"},
		{59_960_000_000, "1 min 0 s"},
		{312_764_359_000, "5 min 12.8 s"},
		{-312_180_994_000, "−5 min 12.2 s"},
		{-580_000_000, "−0.58 s"},
		{3_725_400_000_000, "1 h 2 min 5 s"},
	} {
		if got := FormatDuration(c.ns); got != c.want {
			t.Errorf("FormatDuration(%d) = %q, want %q", c.ns, got, c.want)
		}
	}
}
