package server

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"linger/server/kernels"
)

// testGPU is what the fake linger-cuda's probe says.
var testGPU = kernels.GPU{Device: "NVIDIA H200", TotalBytes: 150000000000, FreeBytes: 149000000000, DriverVersion: 13000, ComputeCapability: "9.0"}

// kernelspecsBody is GET /api/kernelspecs as @jupyterlab/services reads it.
type kernelspecsBody struct {
	Default     string `json:"default"`
	Kernelspecs map[string]struct {
		Name string `json:"name"`
		Spec struct {
			Argv        []string       `json:"argv"`
			DisplayName string         `json:"display_name"`
			Language    string         `json:"language"`
			Metadata    map[string]any `json:"metadata"`
		} `json:"spec"`
		Resources map[string]string `json:"resources"`
	} `json:"kernelspecs"`
}

func TestKernelspecsList(t *testing.T) {
	ts := newTestServer(t, nil)
	ts.ks.specs = []kernels.Spec{kernels.LingerSpec("linger", "kernel"), kernels.CUDASpec("/opt/linger-cuda", testGPU)}
	code, b := ts.do(t, "GET", "/api/kernelspecs", "")
	if code != 200 {
		t.Fatalf("GET /api/kernelspecs: %d %s", code, b)
	}
	var got kernelspecsBody
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if got.Default != "linger" || len(got.Kernelspecs) != 2 {
		t.Fatalf("kernelspecs %s", b)
	}
	cuda := got.Kernelspecs["linger-cuda"]
	if cuda.Name != "linger-cuda" || cuda.Spec.DisplayName != "Linger (CUDA)" || cuda.Spec.Language != "starlark" ||
		strings.Join(cuda.Spec.Argv, " ") != "/opt/linger-cuda kernel" || cuda.Resources == nil {
		t.Errorf("linger-cuda spec %+v", cuda)
	}
	lm, _ := cuda.Spec.Metadata["linger"].(map[string]any)
	if lm["gpu"] != "NVIDIA H200" || lm["total_bytes"] != 150000000000.0 || lm["driver"] != "13.0" || lm["compute_capability"] != "9.0" {
		t.Errorf("linger-cuda metadata %v", cuda.Spec.Metadata)
	}
	if cuda.Spec.Metadata["debugger"] != false {
		t.Errorf("linger-cuda metadata lacks debugger: false: %v", cuda.Spec.Metadata)
	}
	if got.Kernelspecs["linger"].Spec.DisplayName != "Linger (Starlark)" {
		t.Errorf("linger spec %+v", got.Kernelspecs["linger"])
	}

	for _, tt := range []struct {
		method, path, body string
		want               int
		contains           string
	}{
		{"GET", "/api/kernelspecs/linger-cuda", "", 200, `"display_name":"Linger (CUDA)"`},
		{"GET", "/api/kernelspecs/python3", "", 404, `Linger has \"linger\", \"linger-cuda\"`},
		{"POST", "/api/kernels", `{"name":"linger-cuda"}`, 201, `"name":"linger-cuda"`},
		{"POST", "/api/kernels", `{}`, 201, `"name":"linger"`},
		{"POST", "/api/kernels", `{"name":"python3"}`, 400, `no such kernelspec \"python3\" (Linger has \"linger\", \"linger-cuda\")`},
		{"POST", "/api/sessions", `{"path":"a.ipynb","type":"notebook","kernel":{"name":"linger-cuda"}}`, 201, `"name":"linger-cuda"`},
		{"POST", "/api/sessions", `{"path":"b.ipynb","type":"notebook","kernel":{"name":"cuda"}}`, 400, `no such kernelspec`},
	} {
		code, b := ts.do(t, tt.method, tt.path, tt.body)
		if code != tt.want || !strings.Contains(string(b), tt.contains) {
			t.Errorf("%s %s %s: %d %s, want %d with %s", tt.method, tt.path, tt.body, code, b, tt.want, tt.contains)
		}
	}
}

// TestNotebookPageKernelPicker: the notebook page's picker lists the
// server's specs and shows the one the notebook's metadata asks for when
// it is offered, else the default; with the plain kernel alone it is
// disabled.
func TestNotebookPageKernelPicker(t *testing.T) {
	nb := func(name string) json.RawMessage {
		return json.RawMessage(`{"cells":[],"metadata":{"kernelspec":{"name":"` + name + `","display_name":"x","language":"starlark"}},"nbformat":4,"nbformat_minor":5}`)
	}
	option := func(name, display string, selected bool) string {
		o := `<option value="` + name + `" data-language="starlark"`
		if selected {
			o += ` selected`
		}
		return o + `>` + display + `</option>`
	}
	for _, tt := range []struct {
		specs []kernels.Spec
		path  string
		want  []string
	}{
		{nil, "gpu.ipynb", []string{`<select id="kernel-picker" data-testid="kernel-picker" disabled`, option("linger", "Linger (Starlark)", true)}},
		{[]kernels.Spec{kernels.LingerSpec("linger", "kernel"), kernels.CUDASpec("/opt/linger-cuda", testGPU)}, "gpu.ipynb",
			[]string{option("linger", "Linger (Starlark)", false), option("linger-cuda", "Linger (CUDA)", true)}},
		{[]kernels.Spec{kernels.LingerSpec("linger", "kernel"), kernels.CUDASpec("/opt/linger-cuda", testGPU)}, "py.ipynb",
			[]string{option("linger", "Linger (Starlark)", true), option("linger-cuda", "Linger (CUDA)", false)}},
	} {
		ts := newTestServer(t, nil)
		ts.ks.specs = tt.specs
		ts.cs.files["gpu.ipynb"], ts.cs.files["py.ipynb"] = nb("linger-cuda"), nb("python3")
		code, b := ts.do(t, "GET", "/notebooks/"+tt.path, "")
		if code != 200 {
			t.Fatalf("GET /notebooks/%s: %d %s", tt.path, code, b)
		}
		for _, w := range tt.want {
			if !strings.Contains(string(b), w) {
				t.Errorf("%d specs, %s: the page lacks %s", len(tt.specs), tt.path, w)
			}
		}
	}
}

// fakeCUDA writes a linger-cuda shell script into a fresh directory: its
// probe runs probe (shell), and its kernel is the real linger's. It
// returns the path a linger binary in that directory would have.
func fakeCUDA(t *testing.T, bin, probe string) (exe string) {
	t.Helper()
	dir := t.TempDir()
	script := "#!/bin/sh\ncase \"$1\" in\nprobe) " + probe + " ;;\nkernel) exec '" + bin + "' kernel ;;\n*) echo \"usage: linger-cuda probe|kernel\" >&2; exit 2 ;;\nesac\n"
	if err := os.WriteFile(filepath.Join(dir, kernels.CUDABinary), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, "linger")
}

const probeJSON = `echo '{"device":"NVIDIA H200","total_bytes":150000000000,"free_bytes":149000000000,"driver_version":13000,"compute_capability":"9.0"}'`

// TestE2ECUDAKernelspec: a linger-cuda beside linger that answers its
// probe is a second kernelspec, and a kernel of it starts (here the real
// linger kernel behind a script) and runs a cell.
func TestE2ECUDAKernelspec(t *testing.T) {
	bin := linger(t)
	exe := fakeCUDA(t, bin, probeJSON)
	spec, gpu, err := kernels.DiscoverCUDA(t.Context(), exe, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if gpu != testGPU {
		t.Fatalf("probe: %+v", gpu)
	}
	ts := newE2EServerSpecs(t, []kernels.Spec{kernels.LingerSpec(bin, "kernel"), spec})
	code, b := ts.do(t, "GET", "/api/kernelspecs", "")
	var got kernelspecsBody
	if err := json.Unmarshal(b, &got); code != 200 || err != nil {
		t.Fatalf("GET /api/kernelspecs: %d %s", code, b)
	}
	if _, ok := got.Kernelspecs["linger-cuda"]; !ok || len(got.Kernelspecs) != 2 || got.Default != "linger" {
		t.Fatalf("kernelspecs %s", b)
	}
	code, b = ts.do(t, "POST", "/api/sessions", `{"path":"gpu.ipynb","type":"notebook","kernel":{"name":"linger-cuda"}}`)
	if code != http.StatusCreated {
		t.Fatalf("start a linger-cuda session: %d %s", code, b)
	}
	var se struct {
		Kernel kernelModel `json:"kernel"`
	}
	if err := json.Unmarshal(b, &se); err != nil || se.Kernel.Name != "linger-cuda" {
		t.Fatalf("session %s (%v)", b, err)
	}
	c := dialKernel(t, ts, se.Kernel.ID, true, "cuda-client")
	out := c.execute(t, "6*7")
	result := ""
	for _, m := range out {
		if m.Header.MsgType == "execute_result" {
			result = string(m.Content)
		}
	}
	if !strings.Contains(result, `"42"`) {
		t.Fatalf("6*7 on linger-cuda: %s, result %s", types(out), result)
	}
	if code, b := ts.do(t, "POST", "/api/kernels/"+se.Kernel.ID+"/restart", ""); code != 200 || !strings.Contains(string(b), `"name":"linger-cuda"`) {
		t.Fatalf("restart: %d %s", code, b)
	}
}

// TestE2ECUDAKernelFails: a linger-cuda kernel that cannot start (its
// driver fails after the probe answered) is a 500 naming the cause, and
// the server goes on starting plain kernels.
func TestE2ECUDAKernelFails(t *testing.T) {
	bin := linger(t)
	exe := fakeCUDA(t, bin, probeJSON)
	spec, _, err := kernels.DiscoverCUDA(t.Context(), exe, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	script := "#!/bin/sh\necho 'linger-cuda: cuInit: CUDA_ERROR_NO_DEVICE' >&2\nexit 1\n"
	if err := os.WriteFile(spec.Argv[0], []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	ts := newE2EServerSpecs(t, []kernels.Spec{kernels.LingerSpec(bin, "kernel"), spec})
	code, b := ts.do(t, "POST", "/api/sessions", `{"path":"gpu.ipynb","type":"notebook","kernel":{"name":"linger-cuda"}}`)
	if code != http.StatusInternalServerError || !strings.Contains(string(b), `exited before it was ready (exit status 1): linger-cuda: cuInit: CUDA_ERROR_NO_DEVICE`) {
		t.Fatalf("a linger-cuda kernel that fails: %d %s", code, b)
	}
	if code, b := ts.do(t, "POST", "/api/sessions", `{"path":"cpu.ipynb","type":"notebook","kernel":{"name":"linger"}}`); code != http.StatusCreated {
		t.Fatalf("a plain kernel after it: %d %s", code, b)
	}
}
