package main

import (
	"encoding/json"
	"linger/cmd/internal/cli"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestKernelspecCommand: install --user writes kernel.json and the logo
// under $JUPYTER_DATA_DIR/kernels, list shows it, and bad command lines
// and unwritable directories are clear errors.
func TestKernelspecCommand(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	t.Setenv("JUPYTER_DATA_DIR", data)
	t.Setenv("JUPYTER_PATH", "")
	if code, out, stderr := runCLI(t, "kernelspec", "install", "--user", "--name", "linger-cpu", "--device", "cpu"); code != 0 || !strings.Contains(out, "installed kernelspec linger-cpu") {
		t.Fatalf("install: exit %d, %q %q", code, out, stderr)
	}
	dir := filepath.Join(data, "kernels", "linger-cpu")
	b, err := os.ReadFile(filepath.Join(dir, "kernel.json"))
	if err != nil {
		t.Fatal(err)
	}
	var spec cli.Kernelspec
	if err := json.Unmarshal(b, &spec); err != nil {
		t.Fatal(err)
	}
	if len(spec.Argv) != 6 || !filepath.IsAbs(spec.Argv[0]) || strings.Join(spec.Argv[1:], " ") != "kernel --connection-file {connection_file} --device cpu" ||
		spec.DisplayName != "Linger (Starlark)" || spec.Language != "starlark" || spec.InterruptMode != "message" || spec.Env == nil {
		t.Errorf("kernel.json: %s", b)
	}
	if _, err := os.Stat(filepath.Join(dir, "logo-svg.svg")); err != nil {
		t.Errorf("no logo: %v", err)
	}
	if code, out, _ := runCLI(t, "kernelspec", "list"); code != 0 || !strings.Contains(out, dir) {
		t.Errorf("list: exit %d, %q", code, out)
	}
	if code, out, _ := runCLI(t, "help"); code != 0 || !strings.Contains(out, "kernelspec") {
		t.Errorf("help does not list kernelspec: %q", out)
	}
	blocker := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(blocker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"kernelspec"}, 2, "install or list"},
		{[]string{"kernelspec", "frob"}, 2, `unknown kernelspec command "frob"`},
		{[]string{"kernelspec", "install", "--name", "a/b"}, 2, `bad kernelspec name "a/b"`},
		{[]string{"kernelspec", "install", "--device", "cuda"}, 2, `unknown device "cuda"`},
		{[]string{"kernelspec", "install", "--user", "--prefix", "x"}, 2, "exclude each other"},
		{[]string{"kernelspec", "install", "--prefix", blocker}, 1, "cannot install the kernelspec in " + blocker},
		{[]string{"kernel", "--device", "gpu"}, 2, `unknown device "gpu"`},
	} {
		if code, _, stderr := runCLI(t, c.args...); code != c.code || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, %q; want exit %d and %q", c.args, code, stderr, c.code, c.want)
		}
	}
}
