package serverinfo

import (
	"os"
	"path/filepath"
	"testing"
)

// TestFind: a kernel finds the running server that lists its trace
// directory; a server of another directory is not it, nor one that is
// gone, whose file nobody holds locked (a kill -9 left it), and the next
// server to start removes that file. Two servers of one process (as in
// tests) each keep their own file.
func TestFind(t *testing.T) {
	dir := t.TempDir()
	traces := t.TempDir()
	if _, ok := Find(dir, traces); ok {
		t.Fatal("found a server in an empty directory")
	}
	// A server killed before it could remove its file: the file, unlocked.
	stale := filepath.Join(dir, "serve-1-stale.json")
	if err := os.WriteFile(stale, []byte(`{"url":"http://127.0.0.1:1/","pid":1,"kernel_trace_dir":"`+traces+`"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	other, err := Write(dir, Info{URL: "http://127.0.0.1:2/", PID: os.Getpid(), KernelTraceDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer other()
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("the dead server's file is still there (%v)", err)
	}
	if s, ok := Find(dir, traces); ok {
		t.Fatalf("found %+v: a server of another directory", s)
	}
	remove, err := Write(dir, Info{URL: "http://127.0.0.1:3/", PID: os.Getpid(), KernelTraceDir: traces})
	if err != nil {
		t.Fatal(err)
	}
	if s, ok := Find(dir, filepath.Join(traces, ".")); !ok || s.URL != "http://127.0.0.1:3/" {
		t.Errorf("Find = %+v, %v; want the live server of the directory", s, ok)
	}
	if n := len(files(dir)); n != 2 {
		t.Errorf("%d server files, want the two servers'", n)
	}
	remove()
	if _, ok := Find(dir, traces); ok {
		t.Error("found the server after it removed its file")
	}
}

func TestTrimHome(t *testing.T) {
	t.Setenv("HOME", "/home/ada")
	for in, want := range map[string]string{"/home/ada/.local/share/linger/traces/x.ltrace": "~/.local/share/linger/traces/x.ltrace", "/home/adam/x": "/home/adam/x", "/tmp/x": "/tmp/x"} {
		if got := TrimHome(in); got != want {
			t.Errorf("TrimHome(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestSameDir: one directory by a link or a relative name is the same;
// another, or none, is not.
func TestSameDir(t *testing.T) {
	dir := t.TempDir()
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	t.Chdir(filepath.Dir(dir))
	for _, c := range []struct {
		a, b string
		want bool
	}{
		{dir, link, true},
		{dir, filepath.Base(dir), true},
		{dir + "/.", dir, true},
		{dir, t.TempDir(), false},
		{"", dir, false},
	} {
		if got := SameDir(c.a, c.b); got != c.want {
			t.Errorf("SameDir(%q, %q) = %v, want %v", c.a, c.b, got, c.want)
		}
	}
}
