package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
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
	step := fs.String("step", "", "what a step is: an annotation's `NAME` (a record_function range; a pattern such as 'ProfilerStep#*' names them all) or a function of your code (forward, generate); default: the annotation recorded most often; none: no steps")
	rulesFile := fs.String("rules", "", "categorize blocks by the rules in `FILE` (JSON, docs/pytorch.md) before the built-in ones")
	deviceMemory := deviceMemoryFlag(fs)
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
	rules, err := snapRules(*rulesFile)
	if err != nil {
		return err
	}
	open := func() (io.ReadCloser, error) { return os.Open(pos[0]) }
	start := time.Now()
	last := start
	res, err := torchsnap.Import(open, *out, torchsnap.ImportOptions{Device: *device, Step: *step, Rules: rules, DeviceMemory: *deviceMemory, Progress: func(read int64) {
		if now := time.Now(); now.Sub(last) >= time.Second {
			last = now
			fmt.Fprintf(stderr, "reading %s: %s of %s (%.0f%%)\n", pos[0], units.Format(uint64(read)), units.Format(uint64(fi.Size())), 100*float64(read)/float64(max(fi.Size(), 1)))
		}
	}})
	if err != nil {
		return err
	}
	s := res.Snapshot
	fmt.Fprintf(stdout, "wrote %s: %s, %d events from %s (%s) in %s\n", *out, deviceName(res), res.Events, pos[0], s.Format, time.Since(start).Round(time.Millisecond))
	if res.PreHistory > 0 {
		fmt.Fprintf(stdout, "history starts late: the snapshot's trace had dropped its oldest entries (max_entries); %d blocks and segments alive before its first entry are allocated at its start\n", res.PreHistory)
	}
	for dev, n := range res.Other {
		fmt.Fprintf(stdout, "device %d: %d entries not imported (--device %d)\n", dev, n, dev)
	}
	printSteps(stdout, res)
	printOOMs(stdout, res, *deviceMemory)
	printCategories(stdout, res)
	if len(s.Skipped) > 0 {
		fmt.Fprintf(stdout, "fields this reader does not know, skipped: %s\n", strings.Join(s.Skipped, ", "))
	}
	if res.Truncated != "" {
		fmt.Fprintf(stderr, "warning: %s\n", res.Truncated)
	}
	return nil
}

// deviceName says which device an import read: "device 0", or, for a
// snapshot cut short before the end of its device_traces (which says
// whose each trace is), that it cannot tell.
func deviceName(res *torchsnap.Imported) string {
	if res.Device < 0 {
		return "device unknown (the snapshot was cut short before it says whose trace this is)"
	}
	return fmt.Sprintf("device %d", res.Device)
}

// deviceMemoryFlag registers --device-memory on fs.
func deviceMemoryFlag(fs *flag.FlagSet) *uint64 {
	var n uint64
	fs.Func("device-memory", "the GPU's total memory (`SIZE`: 80GiB, as torch.cuda.mem_get_info's second figure), which a snapshot never records: with it, each out-of-memory entry's device_free says what the device used and what of it was outside PyTorch's allocator", func(s string) error {
		v, err := units.Parse(s)
		if err == nil && v == 0 {
			err = errors.New("a device's memory is more than 0 bytes")
		}
		n = v
		return err
	})
	return &n
}

// printOOMs says what each out-of-memory entry shows of the device: what
// was asked for, its free bytes, what the allocator had reserved, and,
// given the device's memory, what it used and what of that was outside
// the allocator.
func printOOMs(w io.Writer, res *torchsnap.Imported, deviceMemory uint64) {
	for i, o := range res.OOMs {
		if i == maxStepLines {
			fmt.Fprintf(w, "… and %d more out-of-memory entries\n", len(res.OOMs)-i)
			break
		}
		fmt.Fprintf(w, "out of memory at %s: %s asked for, %s free on the device, %s reserved by the allocator",
			time.Duration(o.TimeNS).Round(time.Microsecond), units.Format(o.Size), units.Format(o.DeviceFree), units.Format(o.Reserved))
		if deviceMemory > 0 {
			fmt.Fprintf(w, "; the device used %s of %s, %s of it outside the allocator\n", units.Format(o.DeviceUsed), units.Format(deviceMemory), units.Format(o.Outside))
		} else {
			fmt.Fprintf(w, " (--device-memory, the card's total, would say what the device used and what of it was outside the allocator)\n")
		}
	}
}

// snapRules reads the --rules file; nil (the built-in rules) for none.
func snapRules(file string) (*torchsnap.RuleSet, error) {
	if file == "" {
		return nil, nil
	}
	return torchsnap.ReadRulesFile(file)
}

// maxStepLines bounds the steps an import lists one by one.
const maxStepLines = 12

// printSteps says what made the steps and, per step, what it allocated
// and left alive: the first and last steps, and those that left the
// most alive.
func printSteps(w io.Writer, res *torchsnap.Imported) {
	if len(res.Steps) == 0 {
		fmt.Fprintln(w, res.NoSteps)
		return
	}
	fmt.Fprintf(w, "%d steps (%s): allocated, left alive at its end, still alive at the trace's end\n", len(res.Steps), res.StepsFrom)
	show := make([]bool, len(res.Steps))
	for i := range min(3, len(res.Steps)) {
		show[i], show[len(res.Steps)-1-i] = true, true
	}
	byLeft := make([]int, len(res.Steps))
	for i := range byLeft {
		byLeft[i] = i
	}
	slices.SortStableFunc(byLeft, func(a, b int) int { return cmp.Compare(res.Steps[b].AliveAtEnd.Bytes, res.Steps[a].AliveAtEnd.Bytes) })
	for _, i := range byLeft[:min(maxStepLines-6, len(byLeft))] {
		if res.Steps[i].AliveAtEnd.Bytes > 0 {
			show[i] = true
		}
	}
	gap := false
	for i, st := range res.Steps {
		if !show[i] {
			if !gap {
				fmt.Fprintln(w, "  …")
			}
			gap = true
			continue
		}
		gap = false
		fmt.Fprintf(w, "  %-24s %s in %d blocks, %s left alive, %s still alive\n", st.Label, units.Format(st.Allocated.Bytes), st.Allocated.Blocks, units.Format(st.LeftAlive.Bytes), units.Format(st.AliveAtEnd.Bytes))
	}
}

// printCategories says the blocks by category and, never a silent guess,
// the sites no rule matched.
func printCategories(w io.Writer, res *torchsnap.Imported) {
	var parts []string
	for _, c := range slices.Sorted(maps.Keys(res.Categories)) {
		n := res.Categories[c]
		parts = append(parts, fmt.Sprintf("%s %s in %d", c, units.Format(n.Bytes), n.Blocks))
	}
	if len(parts) == 0 {
		return
	}
	fmt.Fprintf(w, "blocks by category: %s\n", strings.Join(parts, ", "))
	if len(res.Unmatched) > 0 {
		fmt.Fprintln(w, "no rule matched these sites (category other; --rules FILE names them):")
		for _, u := range res.Unmatched {
			fmt.Fprintf(w, "  %s in %d blocks: %s\n", units.Format(u.Bytes), u.Blocks, u.Site)
		}
	}
}
