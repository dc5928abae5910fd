package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestServe(t *testing.T) {
	dir := t.TempDir()
	pr, pw := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- runServe(ctx, []string{"--dir", dir, "--addr", "127.0.0.1:0", "--trace-dir", t.TempDir()}, pw, io.Discard)
		pw.Close()
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatalf("read the URL: %v", err)
	}
	go io.Copy(io.Discard, pr)
	line = strings.TrimSpace(line)
	base, token, ok := strings.Cut(line, "/?token=")
	if !ok || !strings.HasPrefix(base, "http://127.0.0.1:") || len(token) != 48 {
		t.Fatalf("URL line %q", line)
	}
	for _, tt := range []struct {
		auth string
		want int
	}{{"token " + token, 200}, {"token wrong", 403}, {"", 403}} {
		req, _ := http.NewRequest("GET", base+"/api/status", nil)
		if tt.auth != "" {
			req.Header.Set("Authorization", tt.auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tt.want {
			t.Errorf("auth %q: %d, want %d", tt.auth, resp.StatusCode, tt.want)
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serve returned %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not stop")
	}
}

func TestServeFlags(t *testing.T) {
	if err := runServe(context.Background(), []string{"--nope"}, io.Discard, io.Discard); err == nil {
		t.Fatal("bad flag accepted")
	}
	if err := runServe(context.Background(), []string{"--dir", "/does/not/exist"}, io.Discard, io.Discard); err == nil {
		t.Fatal("missing dir accepted")
	}
}
