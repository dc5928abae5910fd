package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/cli/browser"

	"linger/internal/units"
	"linger/server"
	"linger/timeline/analyze"
	"linger/timeline/torchsnap"
)

// runOpen is linger open SNAPSHOT...: PyTorch memory snapshots imported
// as traces (once per version of each file, kept in the trace directory)
// and served: one snapshot's timeline page opened in the browser, or,
// for several (one job's ranks: files, a directory of them, or a pattern
// such as 'rank*.pickle'), the ranks page that sets them side by side.
func runOpen(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("open", stderr)
	c := serveConfig{baseURL: "/"}
	fs.StringVar(&c.dir, "dir", ".", "notebook root directory the server also serves")
	fs.StringVar(&c.addr, "addr", "127.0.0.1:0", "listen address (port 0 picks a free port); loopback only")
	device := fs.Int("device", -1, "the CUDA device whose trace to open (default: the first in each snapshot)")
	noBrowser := fs.Bool("no-browser", false, "print the page's URL, do not open a browser")
	step := fs.String("step", "", "what a step is, as for trace import: an annotation's `NAME` (or a pattern such as 'ProfilerStep#*'), a function of your code (forward, generate), or none; default: the annotation recorded most often")
	rulesFile := fs.String("rules", "", "categorize blocks by the rules in `FILE` (JSON, docs/pytorch.md) before the built-in ones")
	deviceMemory := deviceMemoryFlag(fs)
	c.kernelFlags.register(fs)
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		return fmt.Errorf("%w: open takes a snapshot (a pickle of torch.cuda.memory._dump_snapshot, or its JSON, either gzipped), several (one per rank), or a directory of them", errUsage)
	}
	if host, _, err := net.SplitHostPort(c.addr); err == nil {
		if err := checkBind(c.addr, host, false); err != nil {
			return err
		}
	}
	snaps, err := snapshotFiles(pos)
	if err != nil {
		return err
	}
	rules, err := snapRules(*rulesFile)
	if err != nil {
		return err
	}
	imp := importSettings{device: *device, step: *step, rules: rules, rulesFile: *rulesFile, deviceMemory: *deviceMemory}
	c.rules, c.rulesFile = rules, *rulesFile // the page's uploads, too
	if len(snaps) > server.MaxRanks {
		return fmt.Errorf("%w: open shows at most %d snapshots together, got %d: open fewer at a time (one node's ranks, say)", errUsage, server.MaxRanks, len(snaps))
	}
	// Each snapshot's trace, by name: two files of one name would open
	// as one trace.
	names := make([]string, len(snaps))
	for i, snap := range snaps {
		names[i] = traceName(snap, *device)
		if j := slices.Index(names[:i], names[i]); j >= 0 {
			return fmt.Errorf("%w: %s and %s would both open as %s: rename one", errUsage, snaps[j], snap, names[i])
		}
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
	// One at a time: each import's memory is bounded by the blocks alive
	// at once in its snapshot, and so stays that of one.
	for i, snap := range snaps {
		if err := importOnce(snap, filepath.Join(c.traceDir, names[i]), imp, stderr); err != nil {
			if len(snaps) > 1 {
				return fmt.Errorf("open %s: %w", snap, err)
			}
			return err
		}
	}
	if len(names) == 1 {
		c.page = "timeline/" + url.PathEscape(names[0])
	} else {
		c.page = "ranks?" + url.Values{"t": names}.Encode()
	}
	if !*noBrowser {
		c.opened = openBrowser(stderr)
	}
	return serve(ctx, c, stdout, stderr)
}

// openBrowser is serveConfig.opened for the commands that open their page
// in the user's browser (open, watch): the platform's opener, or a line
// saying to open the URL printed.
func openBrowser(stderr io.Writer) func(url string) {
	return func(url string) {
		browser.Stdout, browser.Stderr = io.Discard, io.Discard
		if err := browser.OpenURL(url); err != nil {
			fmt.Fprintf(stderr, "no browser to open (%v): open the URL above\n", err)
		}
	}
}

// snapshotFiles is the snapshots open's arguments name, in the order
// given: a file as it is, a directory as the snapshots directly in it,
// and an argument that is no file but a pattern (quoted from the shell:
// 'rank*.pickle') as the files it matches, a directory's and a
// pattern's in the order of their ranks (byRank).
func snapshotFiles(args []string) ([]string, error) {
	var out []string
	for _, a := range args {
		fi, err := os.Stat(a)
		switch {
		case err == nil && fi.IsDir():
			entries, err := os.ReadDir(a)
			if err != nil {
				return nil, fmt.Errorf("open: %w", err)
			}
			var found []string
			for _, e := range entries {
				if e.Type().IsRegular() && isSnapshotName(e.Name()) {
					found = append(found, filepath.Join(a, e.Name()))
				}
			}
			if len(found) == 0 {
				return nil, fmt.Errorf("no snapshots in %s (files ending in .pickle, .pkl or .json, or those gzipped)", a)
			}
			out = append(out, byRank(found)...)
		case err == nil:
			out = append(out, a)
		case errors.Is(err, os.ErrNotExist) && strings.ContainsAny(a, "*?["):
			found, err := filepath.Glob(a)
			if err != nil {
				return nil, fmt.Errorf("%w: pattern %q: %v", errUsage, a, err)
			}
			if len(found) == 0 {
				return nil, fmt.Errorf("no file matches %q", a)
			}
			out = append(out, byRank(found)...)
		default:
			return nil, fmt.Errorf("open: %w", err)
		}
	}
	// A file named twice (a pattern and a file, say) is opened once.
	seen := map[string]bool{}
	return slices.DeleteFunc(out, func(p string) bool {
		abs, err := filepath.Abs(p)
		if err != nil {
			abs = p
		}
		dup := seen[abs]
		seen[abs] = true
		return dup
	}), nil
}

// isSnapshotName reports whether a file in a directory given to open is
// a snapshot by its name: a pickle or JSON, either gzipped, not hidden.
func isSnapshotName(name string) bool {
	if strings.HasPrefix(name, ".") {
		return false
	}
	name = strings.TrimSuffix(name, ".gz")
	return strings.HasSuffix(name, ".pickle") || strings.HasSuffix(name, ".pkl") || strings.HasSuffix(name, ".json")
}

// byRank orders snapshot paths by the rank their names say
// (analyze.RankNumber: rank2 before rank10), those without one after,
// by name.
func byRank(paths []string) []string {
	rank := func(p string) int {
		if n, ok := analyze.RankNumber(traceName(p, -1)); ok {
			return n
		}
		return math.MaxInt
	}
	slices.SortStableFunc(paths, func(a, b string) int {
		return cmp.Or(cmp.Compare(rank(a), rank(b)), strings.Compare(a, b))
	})
	return paths
}

// importSettings are open's flags that change what an import writes.
type importSettings struct {
	device    int
	step      string
	rules     *torchsnap.RuleSet
	rulesFile string
	// deviceMemory is --device-memory, 0 without it.
	deviceMemory uint64
}

// key says the settings, and the rules file's version, in a line: an
// import made with other settings is not reused.
func (s importSettings) key() string {
	k := fmt.Sprintf("device=%d step=%q", s.device, s.step)
	if s.deviceMemory > 0 {
		k += fmt.Sprintf(" device_memory=%d", s.deviceMemory)
	}
	if s.rulesFile != "" {
		abs, _ := filepath.Abs(s.rulesFile)
		k += fmt.Sprintf(" rules=%q", abs)
		if fi, err := os.Stat(s.rulesFile); err == nil {
			k += fmt.Sprintf(" %d %d", fi.Size(), fi.ModTime().UnixNano())
		}
	}
	return k + "\n"
}

// importOnce imports the snapshot snap as the trace out, unless an import
// newer than the snapshot, made with the same settings, is there already
// (that snapshot's: opened again without reading it again), with its
// progress on stderr. The settings are kept beside the trace, in a hidden
// file of its name (.NAME.import).
func importOnce(snap, out string, set importSettings, stderr io.Writer) error {
	fi, err := os.Stat(snap)
	if err != nil {
		return fmt.Errorf("open: %w", err)
	}
	keyFile := filepath.Join(filepath.Dir(out), "."+filepath.Base(out)+".import")
	if ti, err := os.Stat(out); err == nil && !ti.ModTime().Before(fi.ModTime()) {
		if k, err := os.ReadFile(keyFile); (err == nil && string(k) == set.key()) || (errors.Is(err, os.ErrNotExist) && set.key() == (importSettings{device: set.device}).key()) {
			return nil
		}
	}
	device := set.device
	start, last := time.Now(), time.Now()
	res, err := torchsnap.Import(func() (io.ReadCloser, error) { return os.Open(snap) }, out, torchsnap.ImportOptions{Device: device, Step: set.step, Rules: set.rules, DeviceMemory: set.deviceMemory, Progress: func(read int64) {
		if now := time.Now(); now.Sub(last) >= time.Second {
			last = now
			fmt.Fprintf(stderr, "reading %s: %s of %s (%.0f%%)\n", snap, units.Format(uint64(read)), units.Format(uint64(fi.Size())), 100*float64(read)/float64(max(fi.Size(), 1)))
		}
	}})
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "imported %s: %s, %d events (%s) in %s\n", snap, deviceName(res), res.Events, res.Snapshot.Format, time.Since(start).Round(time.Millisecond))
	if err := os.WriteFile(keyFile, []byte(set.key()), 0o644); err != nil {
		fmt.Fprintf(stderr, "warning: %v: the next open imports %s again\n", err, snap)
	}
	return nil
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
