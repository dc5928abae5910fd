package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"linger/internal/units"
	"linger/timeline/torchsnap"
)

// runTraceImport is linger trace import SNAPSHOT -o OUT.ltrace: a
// PyTorch memory snapshot as a Linger trace, read as a stream, with its
// progress on stderr.
func runTraceImport(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("trace import", stderr)
	out := fs.String("o", "", "write the trace to `FILE` (required; .ltrace)")
	device := fs.Int("device", -1, "the CUDA device whose trace to import (default: the first in the snapshot)")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return fmt.Errorf("%w: trace import takes one snapshot (a pickle of torch.cuda.memory._dump_snapshot, or its JSON, either gzipped), got %d", errUsage, len(pos))
	}
	if *out == "" {
		return fmt.Errorf("%w: -o OUT.ltrace is required", errUsage)
	}
	fi, err := os.Stat(pos[0])
	if err != nil {
		return fmt.Errorf("import: %w", err)
	}
	open := func() (io.ReadCloser, error) { return os.Open(pos[0]) }
	start := time.Now()
	last := start
	res, err := torchsnap.Import(open, *out, torchsnap.ImportOptions{Device: *device, Progress: func(read int64) {
		if now := time.Now(); now.Sub(last) >= time.Second {
			last = now
			fmt.Fprintf(stderr, "reading %s: %s of %s (%.0f%%)\n", pos[0], units.Format(uint64(read)), units.Format(uint64(fi.Size())), 100*float64(read)/float64(max(fi.Size(), 1)))
		}
	}})
	if err != nil {
		return err
	}
	s := res.Snapshot
	fmt.Fprintf(stdout, "wrote %s: device %d, %d events from %s (%s) in %s\n", *out, res.Device, res.Events, pos[0], s.Format, time.Since(start).Round(time.Millisecond))
	if res.PreHistory > 0 {
		fmt.Fprintf(stdout, "history starts late: the snapshot's trace had dropped its oldest entries (max_entries); %d blocks and segments alive before its first entry are allocated at its start\n", res.PreHistory)
	}
	for dev, n := range res.Other {
		fmt.Fprintf(stdout, "device %d: %d entries not imported (--device %d)\n", dev, n, dev)
	}
	if len(s.Skipped) > 0 {
		fmt.Fprintf(stdout, "fields this reader does not know, skipped: %s\n", strings.Join(s.Skipped, ", "))
	}
	if res.Truncated != "" {
		fmt.Fprintf(stderr, "warning: %s\n", res.Truncated)
	}
	return nil
}
