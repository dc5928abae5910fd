package main

import "testing"

func TestParseBytes(t *testing.T) {
	for _, c := range []struct {
		in   string
		want uint64
		ok   bool
	}{
		{"16GiB", 16 << 30, true},
		{"16G", 16 << 30, true},
		{"80GB", 80e9, true},
		{"512MiB", 512 << 20, true},
		{"1.5GiB", 3 << 29, true},
		{"1048576", 1 << 20, true},
		{" 2 KiB ", 2048, true},
		{"", 0, false},
		{"-1G", 0, false},
		{"lots", 0, false},
		{"1e30", 0, false},
	} {
		got, err := parseBytes(c.in)
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("parseBytes(%q) = %d, %v; want %d, ok=%v", c.in, got, err, c.want, c.ok)
		}
	}
}

func TestFormatBytes(t *testing.T) {
	for _, c := range []struct {
		in   uint64
		want string
	}{
		{0, "0 B"}, {1023, "1023 B"}, {1024, "1.00 KiB"}, {3758096384, "3.50 GiB"}, {15 << 20, "15.0 MiB"}, {300 << 30, "300 GiB"},
	} {
		if got := formatBytes(c.in); got != c.want {
			t.Errorf("formatBytes(%d) = %q, want %q", c.in, got, c.want)
		}
	}
}
