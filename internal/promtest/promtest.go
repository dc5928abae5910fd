// Package promtest runs Debian's promtool (package prometheus, which
// .ci/run installs) for tests: the checks Prometheus itself makes of what
// Linger exposes and ships (metrics, rules, their unit tests).
package promtest

import (
	"bytes"
	"os/exec"
	"testing"
)

// Promtool returns promtool's path; it fails t when it is not installed.
func Promtool(t testing.TB) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool is not installed: apt-get install -y --no-install-recommends prometheus (.ci/run does)")
	}
	return p
}

// CheckMetrics fails t unless `promtool check metrics` reads exposition
// (a /metrics body) as a scraper would and finds nothing to lint in its
// names (a counter's _total, units in the name).
func CheckMetrics(t testing.TB, exposition []byte) {
	t.Helper()
	cmd := exec.Command(Promtool(t), "check", "metrics")
	cmd.Stdin = bytes.NewReader(exposition)
	if out, err := cmd.CombinedOutput(); err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("promtool check metrics: %v\n%s\n%s", err, out, exposition)
	}
}
