package redistest

import (
	"strings"
	"testing"
)

// A server answers, holds what it is given, loses it when killed, and
// comes back empty on the same address.
func TestServer(t *testing.T) {
	r := Start(t)
	if !strings.HasPrefix(r.Addr(), "127.0.0.1:") {
		t.Fatalf("addr %s: want 127.0.0.1", r.Addr())
	}
	if _, err := r.Do("SET", "k", "v"); err != nil {
		t.Fatal(err)
	}
	if got, err := r.Do("GET", "k"); err != nil || got != "v" {
		t.Fatalf("GET k = %q, %v; want v", got, err)
	}
	r.Kill()
	if _, err := r.Do("PING"); err == nil {
		t.Fatal("PING answered after Kill")
	}
	r.Restart()
	if got, err := r.Do("DBSIZE"); err != nil || got != "0" {
		t.Fatalf("DBSIZE after Restart = %q, %v; want an empty server", got, err)
	}
}
