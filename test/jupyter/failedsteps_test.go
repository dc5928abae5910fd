package jupyter_test

import (
	"os"
	"strings"
	"testing"
)

// TestFailedSteps checks that a failure names the failing protocol steps and
// their errors, from a real node spec report (testdata/spec-failure.txt).
func TestFailedSteps(t *testing.T) {
	report, err := os.ReadFile("testdata/spec-failure.txt")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		out    string
		want   []string
		absent []string
	}{
		{
			name: "spec report",
			out:  string(report),
			want: []string{
				"✖ messaging: kernel messages carry the kernel's own session id, not the client's",
				"AssertionError [ERR_ASSERTION]: execute_reply header.session is the client's session id",
				"✖ interrupt: interrupt_request on the control channel stops a long cell",
				"Error: interrupt_reply on control: no answer within 5000 ms",
				"websocket messages received around this step:",
			},
			absent: []string{"✔", "at file://"},
		},
		{
			name: "no summary",
			out:  "line one\nnode: crashed\n",
			want: []string{"no failing-test summary", "node: crashed"},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := failedSteps(c.out)
			for _, w := range c.want {
				if !strings.Contains(got, w) {
					t.Errorf("failedSteps lacks %q; got:\n%s", w, got)
				}
			}
			for _, a := range c.absent {
				if strings.Contains(got, a) {
					t.Errorf("failedSteps has %q; got:\n%s", a, got)
				}
			}
		})
	}
}
