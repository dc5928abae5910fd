package deploy

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// promtool is Debian's Prometheus tool (package prometheus, which .ci/run
// installs).
func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool is not installed: apt-get install -y --no-install-recommends prometheus (.ci/run does)")
	}
	return p
}

// The alerting and recording rules (deploy/prometheus/linger-rules.yml)
// are valid as Prometheus reads them, and their unit tests pass: each
// alert fires on series shaped as the failure it names and stays silent
// on healthy ones (linger-rules.test.yml).
func TestPrometheusRules(t *testing.T) {
	tool := promtool(t)
	dir := filepath.Join("prometheus")
	for _, args := range [][]string{{"check", "rules", "linger-rules.yml"}, {"test", "rules", "linger-rules.test.yml"}} {
		cmd := exec.Command(tool, args...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "SUCCESS") {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}
