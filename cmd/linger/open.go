package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cli/browser"

	"linger/internal/units"
	"linger/timeline/torchsnap"
)

// runOpen is linger open SNAPSHOT: a PyTorch memory snapshot imported as a
// trace (once per version of the file, kept in the trace directory) and
// served, its timeline page opened in the browser.
func runOpen(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("open", stderr)
	c := serveConfig{baseURL: "/"}
	fs.StringVar(&c.dir, "dir", ".", "notebook root directory the server also serves")
	fs.StringVar(&c.addr, "addr", "127.0.0.1:0", "listen address (port 0 picks a free port); loopback only")
	device := fs.Int("device", -1, "the CUDA device whose trace to open (default: the first in the snapshot)")
	noBrowser := fs.Bool("no-browser", false, "print the timeline's URL, do not open a browser")
	c.kernelFlags.register(fs)
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return fmt.Errorf("%w: open takes one snapshot (a pickle of torch.cuda.memory._dump_snapshot, or its JSON, either gzipped), got %d", errUsage, len(pos))
	}
	if host, _, err := net.SplitHostPort(c.addr); err == nil {
		if err := checkBind(c.addr, host, false); err != nil {
			return err
		}
	}
	snap := pos[0]
	fi, err := os.Stat(snap)
	if err != nil {
		return fmt.Errorf("open: %w", err)
	}
	if c.traceDir == "" {
		cache, err := os.UserCacheDir()
		if err != nil {
			return fmt.Errorf("open: no trace directory: give --trace-dir (%v)", err)
		}
		c.traceDir = filepath.Join(cache, "linger", "open")
	}
	if err := os.MkdirAll(c.traceDir, 0o755); err != nil {
		return fmt.Errorf("open: %w", err)
	}
	name := traceName(snap, *device)
	out := filepath.Join(c.traceDir, name)
	// An import newer than the snapshot is that snapshot's: opened again
	// without reading it again.
	if ti, err := os.Stat(out); err != nil || ti.ModTime().Before(fi.ModTime()) {
		start, last := time.Now(), time.Now()
		res, err := torchsnap.Import(func() (io.ReadCloser, error) { return os.Open(snap) }, out, torchsnap.ImportOptions{Device: *device, Progress: func(read int64) {
			if now := time.Now(); now.Sub(last) >= time.Second {
				last = now
				fmt.Fprintf(stderr, "reading %s: %s of %s (%.0f%%)\n", snap, units.Format(uint64(read)), units.Format(uint64(fi.Size())), 100*float64(read)/float64(max(fi.Size(), 1)))
			}
		}})
		if err != nil {
			return err
		}
		fmt.Fprintf(stderr, "imported %s: device %d, %d events (%s) in %s\n", snap, res.Device, res.Events, res.Snapshot.Format, time.Since(start).Round(time.Millisecond))
	}
	c.page = "timeline/" + name
	if !*noBrowser {
		c.opened = func(url string) {
			browser.Stdout, browser.Stderr = io.Discard, io.Discard
			if err := browser.OpenURL(url); err != nil {
				fmt.Fprintf(stderr, "no browser to open (%v): open the URL above\n", err)
			}
		}
	}
	return serve(ctx, c, stdout, stderr)
}

// traceName is the trace a snapshot opens as: its name without the
// snapshot's extensions, and the device when one is asked for.
func traceName(snap string, device int) string {
	base := filepath.Base(snap)
	for _, ext := range []string{".gz", ".pickle", ".pkl", ".json"} {
		base = strings.TrimSuffix(base, ext)
	}
	base = strings.Map(func(r rune) rune {
		if r == '/' || r == '\\' || r < ' ' {
			return '_'
		}
		return r
	}, strings.TrimLeft(base, "."))
	if base == "" {
		base = "snapshot"
	}
	if device >= 0 {
		base += fmt.Sprintf(".cuda%d", device)
	}
	return base + ".ltrace"
}
