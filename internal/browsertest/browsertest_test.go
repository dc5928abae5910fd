package browsertest_test

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"linger/internal/browsertest"
)

func TestRoot(t *testing.T) {
	root := browsertest.Root(t)
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("Root = %s: %v", root, err)
	}
	if want, _ := filepath.Abs("../.."); root != want {
		t.Errorf("Root = %s, want %s", root, want)
	}
}

func TestFlags(t *testing.T) {
	f := browsertest.Flags("/tmp/p")
	for _, want := range []string{"--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
		"--disable-component-update", "--disable-sync", "--no-first-run", "--user-data-dir=/tmp/p"} {
		if !slices.Contains(f, want) {
			t.Errorf("Flags lacks %s: %v", want, f)
		}
	}
}

// TestChromiumMissing: $CHROMIUM naming nothing is an error that says how
// to install Chromium (Chromium fails the test with it).
func TestChromiumMissing(t *testing.T) {
	t.Setenv("CHROMIUM", "no-such-chromium-for-linger")
	ft := &fatalT{TB: t}
	done := make(chan struct{})
	go func() { defer close(done); browsertest.Chromium(ft) }()
	<-done
	if !strings.Contains(ft.msg, "make browser") {
		t.Errorf("Chromium failed with %q, want it to say to run make browser", ft.msg)
	}
}

// fatalT records a Fatal instead of failing the test.
type fatalT struct {
	testing.TB
	msg string
}

func (f *fatalT) Helper() {}
func (f *fatalT) Fatal(args ...any) {
	f.msg = fmt.Sprint(args...)
	runtime.Goexit()
}
