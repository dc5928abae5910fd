package zmqkernel

import (
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"linger/notebooks/msg"
)

func writeConn(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "conn.json")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestReadConnErrors: a connection file that is missing, not JSON, or
// lacks a port is refused with an error that says which.
func TestReadConnErrors(t *testing.T) {
	for _, c := range []struct{ name, path, want string }{
		{"missing", filepath.Join(t.TempDir(), "nope.json"), "does not exist"},
		{"malformed", writeConn(t, "{not json"), "not valid JSON"},
		{"no port", writeConn(t, `{"ip":"127.0.0.1","shell_port":1,"iopub_port":2,"stdin_port":3,"control_port":4,"key":"k"}`), "hb_port is missing"},
		{"scheme", writeConn(t, `{"ip":"127.0.0.1","shell_port":1,"iopub_port":2,"stdin_port":3,"control_port":4,"hb_port":5,"signature_scheme":"hmac-md5"}`), "not supported"},
	} {
		_, err := ReadConn(c.path)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: ReadConn = %v, want an error saying %q", c.name, err, c.want)
		}
	}
}

// TestPortInUse: a port that another socket holds is a clear error, and
// the kernel is never started.
func TestPortInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	busy := ln.Addr().(*net.TCPAddr).Port
	free := func() int {
		l, _ := net.Listen("tcp", "127.0.0.1:0")
		defer l.Close()
		return l.Addr().(*net.TCPAddr).Port
	}
	p := writeConn(t, `{"ip":"127.0.0.1","shell_port":`+itoa(free())+`,"iopub_port":`+itoa(free())+`,"stdin_port":`+itoa(free())+`,"control_port":`+itoa(busy)+`,"hb_port":`+itoa(free())+`,"key":"k"}`)
	started := false
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = Run(ctx, p, func(context.Context, io.Reader, io.Writer) error { started = true; return nil }, Options{TraceDir: t.TempDir(), Log: io.Discard})
	if err == nil || !strings.Contains(err.Error(), "control socket") || !strings.Contains(err.Error(), "in use") {
		t.Errorf("Run = %v, want an error naming the control socket's port in use", err)
	}
	if started {
		t.Error("the kernel started though a port was in use")
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// TestSignature: a message encodes and decodes with its identities under
// the key; under another key, or altered, it is refused.
func TestSignature(t *testing.T) {
	s := signer{key: []byte("secret")}
	m := msg.New(msg.Shell, "execute_request", msg.NewID(), map[string]any{"code": "1"})
	frames, err := s.encode([][]byte{[]byte("id")}, m)
	if err != nil {
		t.Fatal(err)
	}
	ids, got, err := s.decode(frames, msg.Shell)
	if err != nil || len(ids) != 1 || string(ids[0]) != "id" || got.Header.MsgID != m.Header.MsgID || got.Channel != msg.Shell {
		t.Fatalf("decode = %q, %+v, %v", ids, got, err)
	}
	if _, _, err := (signer{key: []byte("other")}).decode(frames, msg.Shell); err != errSignature {
		t.Errorf("decode under another key: %v, want a bad signature", err)
	}
	frames[len(frames)-1] = []byte(`{"code":"2"}`)
	if _, _, err := s.decode(frames, msg.Shell); err != errSignature {
		t.Errorf("decode of altered content: %v, want a bad signature", err)
	}
	if _, _, err := s.decode([][]byte{[]byte("id"), []byte("x")}, msg.Shell); err == nil {
		t.Error("decode without a delimiter succeeded")
	}
}

// TestTraceName: the trace is named after the notebook, else "kernel".
func TestTraceName(t *testing.T) {
	at := time.Date(2026, 12, 6, 7, 8, 9, 0, time.UTC)
	for nb, want := range map[string]string{"dir/my notebook.ipynb": "my_notebook-2026-12-06T07-08-09.ltrace", "": "kernel-2026-12-06T07-08-09.ltrace"} {
		if got := traceName(nb, at); got != want {
			t.Errorf("traceName(%q) = %q, want %q", nb, got, want)
		}
	}
}
