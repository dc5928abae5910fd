package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// RunKernelspec is PROG kernelspec install|list: the kernelspec that
// lets a Jupyter frontend (JupyterLab, VS Code, nbconvert, nbclient)
// start `PROG kernel --connection-file {connection_file}`.
func (p KernelProgram) RunKernelspec(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	help := fmt.Sprintf("Usage: %s kernelspec install [--user | --prefix P | --sys-prefix] [--name %s] [--device %s]\n       %s kernelspec list\n\n", p.Prog, p.SpecName, p.deviceNames("|"), p.Prog) +
		"install writes NAME/kernel.json (and a logo) under a Jupyter kernels directory: --user (the default)\n" +
		"$JUPYTER_DATA_DIR/kernels or ~/.local/share/jupyter/kernels, --prefix P P/share/jupyter/kernels,\n" +
		"--sys-prefix /usr/local/share/jupyter/kernels (no Python is involved: the system prefix).\n" +
		"list shows the Linger kernelspecs found in Jupyter's kernel directories ($JUPYTER_PATH first)."
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprintln(stderr, help)
		if len(args) == 0 {
			return fmt.Errorf("%w: kernelspec needs install or list", ErrUsage)
		}
		return nil
	}
	switch args[0] {
	case "install":
		return p.kernelspecInstall(args[1:], stdout, stderr, help)
	case "list":
		fs := NewFlagSet(p.Prog, "kernelspec list", stderr)
		fs.Usage = func() { fmt.Fprintln(stderr, help) }
		if err := ParseFlags(fs, args[1:]); err != nil {
			return err
		}
		return kernelspecList(stdout)
	}
	fmt.Fprintln(stderr, help)
	return fmt.Errorf("%w: unknown kernelspec command %q (install or list)", ErrUsage, args[0])
}

// A Kernelspec is the kernel.json that Jupyter reads to start a kernel.
type Kernelspec struct {
	Argv          []string          `json:"argv"`
	DisplayName   string            `json:"display_name"`
	Language      string            `json:"language"`
	InterruptMode string            `json:"interrupt_mode"`
	Env           map[string]string `json:"env"`
	Metadata      map[string]any    `json:"metadata,omitempty"`
}

var kernelspecName = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)

func (p KernelProgram) kernelspecInstall(args []string, stdout, stderr io.Writer, help string) error {
	fs := NewFlagSet(p.Prog, "kernelspec install", stderr)
	user := fs.Bool("user", false, "install for this user: $JUPYTER_DATA_DIR/kernels or ~/.local/share/jupyter/kernels (the default)")
	prefix := fs.String("prefix", "", "install under `P`/share/jupyter/kernels")
	sysPrefix := fs.Bool("sys-prefix", false, "install under /usr/local/share/jupyter/kernels")
	name := fs.String("name", p.SpecName, "the kernelspec's name (letters, digits, '.', '_', '-')")
	dev := fs.String("device", "", "the kernel's default device, "+p.deviceNames(" or ")+" (default: "+p.Devices[0].Name+")")
	fs.Usage = func() { fmt.Fprintln(stderr, help); fs.PrintDefaults() }
	if err := ParseFlags(fs, args); err != nil {
		return err
	}
	n := 0
	for _, b := range []bool{*user, *prefix != "", *sysPrefix} {
		if b {
			n++
		}
	}
	if n > 1 {
		return fmt.Errorf("%w: --user, --prefix and --sys-prefix exclude each other", ErrUsage)
	}
	if !kernelspecName.MatchString(*name) {
		return fmt.Errorf("%w: bad kernelspec name %q: use letters, digits, '.', '_' and '-'", ErrUsage, *name)
	}
	if *dev != "" && !p.validDevice(*dev) {
		return fmt.Errorf("%w: unknown device %q: %s", ErrUsage, *dev, p.deviceNames(" or "))
	}
	var root string
	switch {
	case *prefix != "":
		p, err := filepath.Abs(*prefix)
		if err != nil {
			return err
		}
		root = filepath.Join(p, "share", "jupyter", "kernels")
	case *sysPrefix:
		root = "/usr/local/share/jupyter/kernels"
	default:
		d, err := jupyterDataDir()
		if err != nil {
			return err
		}
		root = filepath.Join(d, "kernels")
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("the path of the %s binary: %w", p.Prog, err)
	}
	if s, err := filepath.EvalSymlinks(self); err == nil {
		self = s
	}
	argv := []string{self, "kernel", "--connection-file", "{connection_file}"}
	if *dev != "" {
		argv = append(argv, "--device", *dev)
	}
	spec := Kernelspec{Argv: argv, DisplayName: p.DisplayName, Language: "starlark", InterruptMode: "message", Env: map[string]string{},
		Metadata: map[string]any{"linger": map[string]any{"device": *dev}}}
	b, _ := json.MarshalIndent(spec, "", "  ")
	dir := filepath.Join(root, *name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("cannot install the kernelspec in %s: %w", root, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "kernel.json"), append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("cannot install the kernelspec in %s: %w", root, err)
	}
	if p.Logo != nil {
		if err := os.WriteFile(filepath.Join(dir, "logo-svg.svg"), p.Logo, 0o644); err != nil {
			return fmt.Errorf("cannot install the kernelspec in %s: %w", root, err)
		}
	}
	fmt.Fprintf(stdout, "installed kernelspec %s in %s\n", *name, dir)
	return nil
}

func (p KernelProgram) validDevice(name string) bool {
	for _, d := range p.Devices {
		if d.Name == name {
			return true
		}
	}
	return false
}

// deviceNames are the program's devices, joined by sep.
func (p KernelProgram) deviceNames(sep string) string {
	var n []string
	for _, d := range p.Devices {
		n = append(n, d.Name)
	}
	return strings.Join(n, sep)
}

// jupyterDataDir is Jupyter's user data directory: $JUPYTER_DATA_DIR, or
// $XDG_DATA_HOME/jupyter, or ~/.local/share/jupyter.
func jupyterDataDir() (string, error) {
	if d := os.Getenv("JUPYTER_DATA_DIR"); d != "" {
		return d, nil
	}
	if d := os.Getenv("XDG_DATA_HOME"); d != "" {
		return filepath.Join(d, "jupyter"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("no home directory for --user (set JUPYTER_DATA_DIR or use --prefix): %w", err)
	}
	return filepath.Join(home, ".local", "share", "jupyter"), nil
}

// kernelspecList prints the Linger kernelspecs (kernel.json whose argv
// runs "kernel --connection-file") in Jupyter's kernel directories, in
// Jupyter's order of precedence.
func kernelspecList(stdout io.Writer) error {
	var dirs []string
	for _, p := range filepath.SplitList(os.Getenv("JUPYTER_PATH")) {
		if p != "" {
			dirs = append(dirs, filepath.Join(p, "kernels"))
		}
	}
	if d, err := jupyterDataDir(); err == nil {
		dirs = append(dirs, filepath.Join(d, "kernels"))
	}
	dirs = append(dirs, "/usr/local/share/jupyter/kernels", "/usr/share/jupyter/kernels")
	seen := map[string]bool{}
	found := 0
	for _, root := range dirs {
		ents, err := os.ReadDir(root)
		if err != nil {
			continue
		}
		names := []string{}
		for _, e := range ents {
			names = append(names, e.Name())
		}
		sort.Strings(names)
		for _, n := range names {
			b, err := os.ReadFile(filepath.Join(root, n, "kernel.json"))
			if err != nil {
				continue
			}
			var spec Kernelspec
			if json.Unmarshal(b, &spec) != nil || !isLingerArgv(spec.Argv) {
				continue
			}
			note := ""
			if seen[strings.ToLower(n)] {
				note = " (hidden by the one above)"
			}
			seen[strings.ToLower(n)] = true
			found++
			fmt.Fprintf(stdout, "%-16s %s  %q  %s%s\n", n, filepath.Join(root, n), spec.DisplayName, strings.Join(spec.Argv, " "), note)
		}
	}
	if found == 0 {
		return errors.New("no Linger kernelspec found: run linger kernelspec install (or linger-cuda kernelspec install)")
	}
	return nil
}

func isLingerArgv(argv []string) bool {
	return len(argv) >= 4 && argv[1] == "kernel" && argv[2] == "--connection-file"
}
