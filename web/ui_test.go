package web

import (
	"context"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestUI runs the browser code's unit tests (web/ui/src/**/*.test.mjs,
// the parts that need no DOM) under Node's test runner.
func TestUI(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("no node installed")
	}
	var files []string
	for _, pattern := range []string{"ui/src/*.test.mjs", "ui/src/*/*.test.mjs"} {
		m, err := filepath.Glob(pattern)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	if len(files) == 0 {
		t.Fatal("no *.test.mjs under web/ui/src")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, node, append([]string{"--test"}, files...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("node --test %v: %v\n%s", files, err, out)
	}
}
