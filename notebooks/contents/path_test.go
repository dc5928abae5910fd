package contents

import (
	"errors"
	"path"
	"strings"
	"testing"
)

func TestClean(t *testing.T) {
	tests := []struct {
		in, want string
		err      error
	}{
		{"", "", nil},
		{"a", "a", nil},
		{"a/", "a", nil},
		{"a//b/./c", "a/b/c", nil},
		{"a/../b", "b", nil},
		{"a/..", "", nil},
		{"..", "", ErrForbidden},
		{"a/../..", "", ErrForbidden},
		{"../a", "", ErrForbidden},
		{"/a", "", ErrBadPath},
		{"a\x00", "", ErrBadPath},
		{"Untitled Folder/é.ipynb", "Untitled Folder/é.ipynb", nil},
		{`a\..\..\b`, `a\..\..\b`, nil}, // a backslash is a name character on Unix
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := clean(tt.in)
			if !errors.Is(err, tt.err) || got != tt.want {
				t.Errorf("clean(%q) = %q, %v; want %q, %v", tt.in, got, err, tt.want, tt.err)
			}
		})
	}
}

// FuzzClean checks that a cleaned path can never name anything above the
// root: relative, no "..", "." or empty elements, no NUL.
func FuzzClean(f *testing.F) {
	for _, s := range []string{"", "a/b", "../x", "a/../../b", "/etc/passwd", "a\x00b", "./.", "a//b/"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		rel, err := clean(p)
		if err != nil {
			if !errors.Is(err, ErrBadPath) && !errors.Is(err, ErrForbidden) {
				t.Fatalf("clean(%q): unexpected error %v", p, err)
			}
			return
		}
		if strings.HasPrefix(rel, "/") || strings.ContainsRune(rel, 0) || path.Clean("/"+rel) != "/"+rel && rel != "" {
			t.Fatalf("clean(%q) = %q", p, rel)
		}
		for _, el := range strings.Split(rel, "/") {
			if rel != "" && (el == "" || el == "." || el == "..") {
				t.Fatalf("clean(%q) = %q has element %q", p, rel, el)
			}
		}
	})
}
