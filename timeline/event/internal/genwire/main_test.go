package main

import (
	"bytes"
	"os"
	"testing"
)

// TestGenerated checks that the committed module is what genwire writes
// now: run go generate ./timeline/event after changing a wire constant.
func TestGenerated(t *testing.T) {
	const path = "../../../../web/ui/src/timeline/wire.gen.js"
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := module(); !bytes.Equal(got, want) {
		t.Errorf("%s is stale; run go generate ./timeline/event. Want:\n%s", path, want)
	}
}
