// Package deploy holds the image and the JupyterHub configuration Linger is
// deployed with (deploy/Dockerfile, deploy/z2jh/config.yaml; see
// docs/deploy.md), and the tests that check them here, where neither a
// container engine nor a Kubernetes cluster runs: the Dockerfile's COPY
// sources exist and survive .dockerignore, the values file uses only keys
// the chart knows, and the two agree on the user, the home and the command.
package deploy

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"linger/internal/units"
	"linger/kernel"
)

// root is the repository root, the build context of deploy/Dockerfile.
const root = ".."

// chartKeys are the key paths of the Zero to JupyterHub chart's values
// that config.yaml may use, written down from the chart's schema,
// jupyterhub/values.schema.yaml in jupyterhub/zero-to-jupyterhub-k8s
// (branch main at commit 02dd73df01bdbb6d602fed21b0be12565ab38080, the
// 4.x chart of JupyterHub 5; each path below is also in 3.x). It is the
// part of the schema Linger's values touch, not all of it: a path missing
// here fails the test, so adding one means checking it in the schema.
// true marks a value the schema leaves open (additionalProperties: true, a
// free map of strings, or an array): its contents are not walked here,
// and the ones that matter are checked by the tests below.
var chartKeys = map[string]bool{
	// top level (schema: properties, with additionalProperties: false)
	"hub": false, "proxy": true, "singleuser": false, "scheduling": true, "ingress": true,
	"prePuller": true, "cull": true, "debug": true, "rbac": true, "global": true, "custom": true,
	"imagePullSecret": true, "imagePullSecrets": true, "fullnameOverride": false, "nameOverride": false, "enabled": false,

	// hub (only config is used; its KubeSpawner section is checked
	// against kubeSpawnerTraits)
	"hub.config":             false,
	"hub.config.JupyterHub":  true,
	"hub.config.KubeSpawner": true,
	"hub.extraConfig":        true,
	"hub.extraEnv":           true,

	// singleuser
	"singleuser.image":                                    false,
	"singleuser.image.name":                               false,
	"singleuser.image.tag":                                false,
	"singleuser.image.pullPolicy":                         false,
	"singleuser.image.pullSecrets":                        true,
	"singleuser.cmd":                                      true,
	"singleuser.defaultUrl":                               false,
	"singleuser.uid":                                      false,
	"singleuser.fsGid":                                    false,
	"singleuser.cpu":                                      false,
	"singleuser.cpu.limit":                                false,
	"singleuser.cpu.guarantee":                            false,
	"singleuser.memory":                                   false,
	"singleuser.memory.limit":                             false,
	"singleuser.memory.guarantee":                         false,
	"singleuser.startTimeout":                             false,
	"singleuser.storage":                                  false,
	"singleuser.storage.type":                             false,
	"singleuser.storage.capacity":                         false,
	"singleuser.storage.homeMountPath":                    false,
	"singleuser.storage.dynamic":                          false,
	"singleuser.storage.dynamic.storageClass":             false,
	"singleuser.storage.dynamic.pvcNameTemplate":          false,
	"singleuser.storage.dynamic.volumeNameTemplate":       false,
	"singleuser.storage.dynamic.storageAccessModes":       true,
	"singleuser.storage.extraLabels":                      true,
	"singleuser.storage.extraVolumes":                     true,
	"singleuser.storage.extraVolumeMounts":                true,
	"singleuser.extraAnnotations":                         true,
	"singleuser.extraLabels":                              true,
	"singleuser.extraEnv":                                 true,
	"singleuser.extraPodConfig":                           true,
	"singleuser.extraResource":                            false,
	"singleuser.extraResource.limits":                     true,
	"singleuser.extraResource.guarantees":                 true,
	"singleuser.extraTolerations":                         true,
	"singleuser.nodeSelector":                             true,
	"singleuser.lifecycleHooks":                           true,
	"singleuser.networkPolicy":                            false,
	"singleuser.networkPolicy.enabled":                    false,
	"singleuser.networkPolicy.ingress":                    true,
	"singleuser.networkPolicy.egress":                     true,
	"singleuser.networkPolicy.egressAllowRules":           true,
	"singleuser.networkPolicy.interNamespaceAccessLabels": false,
	"singleuser.networkPolicy.allowedIngressPorts":        true,
	"singleuser.profileList":                              true,
}

// kubeSpawnerTraits are the KubeSpawner options (traitlets of
// kubespawner.KubeSpawner, https://jupyterhub-kubespawner.readthedocs.io/
// en/latest/spawner.html) that hub.config.KubeSpawner and a profile's
// kubespawner_override may set here.
var kubeSpawnerTraits = []string{
	"delete_grace_period", "start_timeout", "http_timeout",
	"cpu_guarantee", "cpu_limit", "mem_guarantee", "mem_limit",
	"extra_resource_guarantees", "extra_resource_limits",
	"tolerations", "node_selector", "image", "environment", "cmd", "args",
}

// profileKeys are the keys of a KubeSpawner.profile_list entry.
var profileKeys = []string{"display_name", "slug", "description", "default", "kubespawner_override", "profile_options"}

func readConfig(t *testing.T) map[string]any {
	t.Helper()
	data, err := os.ReadFile("z2jh/config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		t.Fatalf("z2jh/config.yaml: %v", err)
	}
	return cfg
}

// get returns the value at a dotted key path ("singleuser.storage.type"),
// nil when absent. Keys with dots (annotations) are reached with getMap.
func get(cfg map[string]any, path string) any {
	var v any = cfg
	for _, k := range strings.Split(path, ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

func getMap(t *testing.T, cfg map[string]any, path string) map[string]any {
	t.Helper()
	m, ok := get(cfg, path).(map[string]any)
	if !ok {
		t.Fatalf("config.yaml: %s is not a map", path)
	}
	return m
}

func str(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case int:
		return strconv.Itoa(v)
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64)
	case bool:
		return strconv.FormatBool(v)
	}
	return ""
}

func strList(t *testing.T, v any, what string) []string {
	t.Helper()
	l, ok := v.([]any)
	if !ok {
		t.Fatalf("%s is not a list: %v", what, v)
	}
	var out []string
	for _, e := range l {
		s, ok := e.(string)
		if !ok {
			t.Fatalf("%s: %v is not a string", what, e)
		}
		out = append(out, s)
	}
	return out
}

// TestChartKeys walks config.yaml and fails on any key the chart's schema
// does not have (the chart rejects them: additionalProperties: false).
func TestChartKeys(t *testing.T) {
	cfg := readConfig(t)
	var walk func(prefix string, m map[string]any)
	walk = func(prefix string, m map[string]any) {
		for k, v := range m {
			path := k
			if prefix != "" {
				path = prefix + "." + k
			}
			open, ok := chartKeys[path]
			if !ok {
				t.Errorf("config.yaml: %s is not a key of the jupyterhub chart's values (see chartKeys)", path)
				continue
			}
			if sub, isMap := v.(map[string]any); isMap && !open {
				walk(path, sub)
			}
		}
	}
	walk("", cfg)

	for k := range getMap(t, cfg, "hub.config.KubeSpawner") {
		if !slices.Contains(kubeSpawnerTraits, k) {
			t.Errorf("config.yaml: hub.config.KubeSpawner.%s is not a KubeSpawner option listed in kubeSpawnerTraits", k)
		}
	}
	for i, p := range profiles(t, cfg) {
		for k := range p {
			if !slices.Contains(profileKeys, k) {
				t.Errorf("config.yaml: profileList[%d].%s is not a key of a KubeSpawner profile", i, k)
			}
		}
		if o, ok := p["kubespawner_override"].(map[string]any); ok {
			for k := range o {
				if !slices.Contains(kubeSpawnerTraits, k) {
					t.Errorf("config.yaml: profileList[%d].kubespawner_override.%s is not a KubeSpawner option listed in kubeSpawnerTraits", i, k)
				}
			}
		}
	}
}

func profiles(t *testing.T, cfg map[string]any) []map[string]any {
	t.Helper()
	l, ok := get(cfg, "singleuser.profileList").([]any)
	if !ok || len(l) == 0 {
		t.Fatal("config.yaml: singleuser.profileList is missing or empty")
	}
	var out []map[string]any
	for i, e := range l {
		p, ok := e.(map[string]any)
		if !ok {
			t.Fatalf("config.yaml: profileList[%d] is not a map", i)
		}
		out = append(out, p)
	}
	return out
}

// flagValue returns the value of --name in args (--name V or --name=V).
func flagValue(args []string, name string) (string, bool) {
	for i, a := range args {
		if a == "--"+name && i+1 < len(args) {
			return args[i+1], true
		}
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v, true
		}
	}
	return "", false
}

// TestConfig checks what the deployment depends on: the command, the
// metrics port agreed by the flag, the annotations and the network
// policy, the GPU profile, the home volume and the grace period.
func TestConfig(t *testing.T) {
	cfg := readConfig(t)

	cmd := strList(t, get(cfg, "singleuser.cmd"), "singleuser.cmd")
	if len(cmd) < 2 || cmd[0] != "linger" || cmd[1] != "singleuser" {
		t.Errorf("singleuser.cmd = %q, want linger singleuser ... (the chart's default is jupyterhub-singleuser)", cmd)
	}

	addr, ok := flagValue(cmd, "metrics-addr")
	if !ok {
		t.Fatalf("singleuser.cmd %q has no --metrics-addr", cmd)
	}
	_, port, found := strings.Cut(addr, ":")
	if !found || port == "" {
		t.Fatalf("--metrics-addr %q has no port", addr)
	}
	ann := getMap(t, cfg, "singleuser.extraAnnotations")
	for k, want := range map[string]string{"prometheus.io/scrape": "true", "prometheus.io/port": port, "prometheus.io/path": "/metrics"} {
		if got, ok := ann[k].(string); !ok || got != want {
			t.Errorf("singleuser.extraAnnotations[%s] = %v, want the string %q", k, ann[k], want)
		}
	}
	if get(cfg, "singleuser.networkPolicy.enabled") == true {
		rules, _ := get(cfg, "singleuser.networkPolicy.ingress").([]any)
		admitted := false
		for _, r := range rules {
			ports, _ := r.(map[string]any)["ports"].([]any)
			for _, p := range ports {
				if str(p.(map[string]any)["port"]) == port {
					admitted = true
				}
			}
		}
		if !admitted {
			t.Errorf("singleuser.networkPolicy is enabled but no ingress rule admits the metrics port %s", port)
		}
	}

	var defaults, gpus int
	for i, p := range profiles(t, cfg) {
		o, _ := p["kubespawner_override"].(map[string]any)
		limits, _ := o["extra_resource_limits"].(map[string]any)
		gpu, hasGPU := limits["nvidia.com/gpu"]
		if p["default"] == true {
			defaults++
			if hasGPU {
				t.Errorf("profileList[%d], the default, requests a GPU: the default should be CPU-only", i)
			}
		}
		if hasGPU {
			gpus++
			if s, ok := gpu.(string); !ok || s != "1" {
				t.Errorf("profileList[%d] requests nvidia.com/gpu %#v, want the string \"1\"", i, gpu)
			}
		}
		if m, ok := o["mem_limit"]; ok {
			checkMemory(t, cmd, "profileList["+strconv.Itoa(i)+"].kubespawner_override.mem_limit", str(m))
		}
	}
	if defaults != 1 {
		t.Errorf("profileList has %d default profiles, want 1", defaults)
	}
	if gpus != 1 {
		t.Errorf("profileList has %d GPU profiles, want 1", gpus)
	}
	checkMemory(t, cmd, "singleuser.memory.limit", str(get(cfg, "singleuser.memory.limit")))

	if got := get(cfg, "singleuser.storage.type"); got != "dynamic" {
		t.Errorf("singleuser.storage.type = %v, want dynamic", got)
	}
	if str(get(cfg, "singleuser.storage.capacity")) == "" {
		t.Error("singleuser.storage.capacity is not set")
	}
	if g, ok := get(cfg, "hub.config.KubeSpawner.delete_grace_period").(int); !ok || g < 10 {
		t.Errorf("hub.config.KubeSpawner.delete_grace_period = %v, want at least 10 s (KubeSpawner's default, 1 s, kills kernels before their traces end)", get(cfg, "hub.config.KubeSpawner.delete_grace_period"))
	}
}

// kubeSpawnerBytes parses a KubeSpawner ByteSpecification (mem_limit):
// a number with an optional K, M, G or T, powers of 1024.
func kubeSpawnerBytes(s string) (uint64, bool) {
	mult := uint64(1)
	if n := len(s); n > 0 {
		if i := strings.IndexByte("KMGT", s[n-1]); i >= 0 {
			mult = 1 << (10 * (i + 1))
			s = s[:n-1]
		}
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || v <= 0 {
		return 0, false
	}
	return uint64(v * float64(mult)), true
}

// checkMemory checks a pod memory limit against the kernels' budget: an
// explicit --kernel-memory must leave room for two kernels and the
// server; without it linger takes 3/8 of the limit it reads from its
// cgroup (kernel.DefaultMemory), which must be a usable budget.
func checkMemory(t *testing.T, cmd []string, what, limit string) {
	t.Helper()
	n, ok := kubeSpawnerBytes(limit)
	if !ok {
		t.Errorf("%s = %q is not a KubeSpawner byte size", what, limit)
		return
	}
	if v, ok := flagValue(cmd, "kernel-memory"); ok {
		budget, err := units.Parse(v)
		if err != nil {
			t.Errorf("--kernel-memory %q: %v", v, err)
		} else if 2*budget > n {
			t.Errorf("--kernel-memory %s: two kernels take more than %s = %s", v, what, limit)
		}
		return
	}
	if b := kernel.DefaultMemory(n); b < 1<<30 {
		t.Errorf("%s = %s gives each kernel a default budget of %s, under 1 GiB", what, limit, units.Format(b))
	}
}

// instruction is one Dockerfile instruction, continuation lines joined.
type instruction struct {
	cmd, args string
	line      int
}

type stage struct {
	name  string
	insts []instruction
}

// parseDockerfile splits deploy/Dockerfile into stages (the instructions
// before the first FROM, ARGs, are left out).
func parseDockerfile(t *testing.T) []stage {
	t.Helper()
	data, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	var stages []stage
	var cur strings.Builder
	start := 0
	flush := func() {
		s := strings.TrimSpace(cur.String())
		cur.Reset()
		if s == "" {
			return
		}
		cmd, args, _ := strings.Cut(s, " ")
		cmd = strings.ToUpper(cmd)
		args = strings.TrimSpace(args)
		if cmd == "FROM" {
			f := strings.Fields(args)
			name := ""
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				name = f[2]
			}
			stages = append(stages, stage{name: name})
		}
		if len(stages) > 0 {
			stages[len(stages)-1].insts = append(stages[len(stages)-1].insts, instruction{cmd, args, start})
		}
	}
	for i, l := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "#") {
			continue
		}
		if cur.Len() == 0 {
			start = i + 1
		}
		if s, ok := strings.CutSuffix(strings.TrimRight(l, " \t"), "\\"); ok {
			cur.WriteString(s + " ")
			continue
		}
		cur.WriteString(l)
		flush()
	}
	flush()
	if len(stages) == 0 {
		t.Fatal("Dockerfile has no FROM")
	}
	return stages
}

// copyArgs splits a COPY's arguments into its flags, sources and
// destination.
func copyArgs(args string) (flags map[string]string, srcs []string, dst string) {
	flags = map[string]string{}
	f := strings.Fields(args)
	for len(f) > 0 && strings.HasPrefix(f[0], "--") {
		k, v, _ := strings.Cut(strings.TrimPrefix(f[0], "--"), "=")
		flags[k] = v
		f = f[1:]
	}
	if len(f) < 2 {
		return flags, nil, ""
	}
	return flags, f[:len(f)-1], f[len(f)-1]
}

// dockerignore reads the root's .dockerignore patterns.
func dockerignore(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	var pats []string
	for _, l := range strings.Split(string(data), "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		if strings.HasPrefix(l, "!") {
			t.Fatalf(".dockerignore: %q: exceptions are not understood by this test", l)
		}
		pats = append(pats, strings.TrimPrefix(l, "/"))
	}
	return pats
}

// ignored reports whether .dockerignore leaves path (relative to the
// root, slash-separated) or a folder above it out of the build context. It
// knows the forms the file uses: a path, a glob, and **/ before either.
func ignored(pats []string, path string) (string, bool) {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	for _, p := range pats {
		anywhere := false
		if rest, ok := strings.CutPrefix(p, "**/"); ok {
			p, anywhere = rest, true
		}
		n := len(strings.Split(p, "/"))
		for i := 0; i+n <= len(parts); i++ {
			if i > 0 && !anywhere {
				break
			}
			if ok, _ := filepath.Match(p, strings.Join(parts[i:i+n], "/")); ok {
				return p, true
			}
		}
	}
	return "", false
}

func TestIgnored(t *testing.T) {
	pats := []string{"bin", "**/node_modules", "docs/gallery", "**/*.test"}
	for path, want := range map[string]bool{
		"bin": true, "bin/linger": true, "cmd/linger": false, "web/ui/node_modules/x": true,
		"docs/gallery/a.png": true, "docs/cuda.md": false, "deploy/deploy.test": true, "examples": false,
	} {
		if _, got := ignored(pats, path); got != want {
			t.Errorf("ignored(%q) = %v, want %v", path, got, want)
		}
	}
}

// TestDockerfileSources checks every COPY source from the build context:
// it exists, and .dockerignore does not leave it out; and every file a
// go:embed of the module needs is in the context too.
func TestDockerfileSources(t *testing.T) {
	stages := parseDockerfile(t)
	pats := dockerignore(t)
	var names []string
	for _, s := range stages {
		for _, in := range s.insts {
			if in.cmd != "COPY" && in.cmd != "ADD" {
				continue
			}
			flags, srcs, _ := copyArgs(in.args)
			if len(srcs) == 0 {
				t.Errorf("Dockerfile:%d: %s %s has no source", in.line, in.cmd, in.args)
			}
			if from, ok := flags["from"]; ok {
				if !slices.Contains(names, from) {
					t.Errorf("Dockerfile:%d: COPY --from=%s names no earlier stage (%v)", in.line, from, names)
				}
				continue
			}
			for _, src := range srcs {
				if _, err := os.Stat(filepath.Join(root, src)); err != nil {
					t.Errorf("Dockerfile:%d: COPY source %s: %v", in.line, src, err)
				}
				if src == "." {
					continue
				}
				if p, ok := ignored(pats, src); ok {
					t.Errorf("Dockerfile:%d: COPY source %s is excluded by .dockerignore (%s)", in.line, src, p)
				}
			}
		}
		names = append(names, s.name)
	}

	// The packages the RUN lines build.
	re := regexp.MustCompile(`\./cmd/[a-z0-9-]+`)
	built := 0
	for _, s := range stages {
		for _, in := range s.insts {
			if in.cmd != "RUN" {
				continue
			}
			for _, pkg := range re.FindAllString(in.args, -1) {
				built++
				if fi, err := os.Stat(filepath.Join(root, pkg)); err != nil || !fi.IsDir() {
					t.Errorf("Dockerfile:%d: builds %s, which is not a package of the repository", in.line, pkg)
				}
				if p, ok := ignored(pats, pkg); ok {
					t.Errorf("Dockerfile:%d: builds %s, which .dockerignore excludes (%s)", in.line, pkg, p)
				}
			}
		}
	}
	if built != 2 {
		t.Errorf("Dockerfile builds %d commands, want 2 (cmd/linger, cmd/linger-cuda)", built)
	}

	// go:embed patterns of the module's non-test files.
	embed := regexp.MustCompile(`(?m)^//go:embed (.+)$`)
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "node_modules" || d.Name() == ".git" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range embed.FindAllStringSubmatch(string(data), -1) {
			for _, f := range strings.Fields(m[1]) {
				rel, _ := filepath.Rel(root, filepath.Join(filepath.Dir(path), f))
				if p, ok := ignored(pats, filepath.ToSlash(rel)); ok {
					t.Errorf("%s embeds %s, which .dockerignore excludes (%s)", path, rel, p)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestDockerfileAgrees checks the final stage against config.yaml and the
// contract of linger singleuser: the user and group KubeSpawner runs as,
// the home the volume is mounted on, the command, the port, both binaries
// side by side and the entrypoint.
func TestDockerfileAgrees(t *testing.T) {
	cfg := readConfig(t)
	stages := parseDockerfile(t)
	final := stages[len(stages)-1]
	last := map[string]string{}
	var copies []instruction
	var runs string
	env := map[string]string{}
	for _, in := range final.insts {
		last[in.cmd] = in.args
		switch in.cmd {
		case "COPY":
			copies = append(copies, in)
		case "RUN":
			runs += in.args + "\n"
		case "ENV":
			for _, kv := range strings.Fields(in.args) {
				k, v, _ := strings.Cut(kv, "=")
				env[k] = v
			}
		}
	}

	uid, gid := str(get(cfg, "singleuser.uid")), str(get(cfg, "singleuser.fsGid"))
	home := str(get(cfg, "singleuser.storage.homeMountPath"))
	if home != "/home/jovyan" || uid != "1000" || gid != "100" {
		t.Errorf("config.yaml: uid %s, fsGid %s, homeMountPath %s; want 1000, 100, /home/jovyan as Jupyter's images", uid, gid, home)
	}
	if got := last["USER"]; got != uid+":"+gid {
		t.Errorf("Dockerfile USER %q, want %s:%s (singleuser.uid:singleuser.fsGid)", got, uid, gid)
	}
	if !regexp.MustCompile(`useradd (.* )?--uid ` + uid + ` --gid ` + gid + ` .*--home-dir ` + regexp.QuoteMeta(home) + ` .*jovyan`).MatchString(runs) {
		t.Errorf("Dockerfile: no useradd of jovyan with uid %s, gid %s, home %s", uid, gid, home)
	}
	if got := last["WORKDIR"]; got != home {
		t.Errorf("Dockerfile WORKDIR %q, want the home volume's mount path %s", got, home)
	}
	if env["HOME"] != home {
		t.Errorf("Dockerfile ENV HOME=%q, want %s", env["HOME"], home)
	}
	if got := last["EXPOSE"]; got != "8888" {
		t.Errorf("Dockerfile EXPOSE %q, want 8888 (KubeSpawner's port)", got)
	}

	var cmd, entry []string
	if err := json.Unmarshal([]byte(last["CMD"]), &cmd); err != nil {
		t.Errorf("Dockerfile CMD %s: not exec form: %v", last["CMD"], err)
	}
	if !slices.Equal(cmd, []string{"linger", "singleuser"}) {
		t.Errorf("Dockerfile CMD %q, want [linger singleuser]", cmd)
	}
	if c := strList(t, get(cfg, "singleuser.cmd"), "singleuser.cmd"); len(c) < 2 || !slices.Equal(c[:2], cmd) {
		t.Errorf("singleuser.cmd %q does not start with the image's CMD %q", c, cmd)
	}
	if err := json.Unmarshal([]byte(last["ENTRYPOINT"]), &entry); err != nil || len(entry) != 1 {
		t.Fatalf("Dockerfile ENTRYPOINT %s: want one program in exec form (%v)", last["ENTRYPOINT"], err)
	}

	// Where each file of the final image comes from.
	dests := map[string]string{}
	for _, in := range copies {
		flags, srcs, dst := copyArgs(in.args)
		for _, s := range srcs {
			from := flags["from"]
			if from == "" {
				from = "context"
			}
			dests[dst] = from + ":" + s
		}
	}
	for dst, want := range map[string]string{
		"/usr/local/bin/linger":                               "build:/out/linger",
		"/usr/local/bin/":                                     "cuda:/out/",
		"/usr/local/bin/" + entry[0]:                          "context:deploy/entrypoint.sh",
		strings.TrimSuffix(env["LINGER_EXAMPLES"], "/") + "/": "context:examples/",
	} {
		if dests[dst] != want {
			t.Errorf("Dockerfile: %s comes from %q, want %q", dst, dests[dst], want)
		}
	}
	if fi, err := os.Stat("entrypoint.sh"); err != nil || fi.Mode()&0o111 == 0 {
		t.Errorf("deploy/entrypoint.sh is missing or not executable: %v", err)
	}
}

// TestEntrypoint runs deploy/entrypoint.sh as the image does: the first
// start copies the scenario notebooks into the home, later starts leave the
// user's home alone, and the command runs.
func TestEntrypoint(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	examples, err := filepath.Abs(filepath.Join(root, "examples"))
	if err != nil {
		t.Fatal(err)
	}
	script, _ := filepath.Abs("entrypoint.sh")
	home := t.TempDir()
	run := func(args ...string) string {
		c := exec.Command(sh, append([]string{script}, args...)...)
		c.Dir = home
		c.Env = []string{"PATH=" + os.Getenv("PATH"), "LINGER_EXAMPLES=" + examples, "PWD=" + home}
		out, err := c.CombinedOutput()
		if err != nil {
			t.Fatalf("entrypoint.sh %q: %v\n%s", args, err, out)
		}
		return string(out)
	}
	out := run("echo", "started")
	if !strings.Contains(out, "started") {
		t.Errorf("the command did not run: %q", out)
	}
	nbs, _ := filepath.Glob(filepath.Join(examples, "*.ipynb"))
	got, _ := filepath.Glob(filepath.Join(home, "examples", "*.ipynb"))
	if len(nbs) == 0 || len(got) != len(nbs) {
		t.Errorf("first start copied %d notebooks, want the %d of examples/", len(got), len(nbs))
	}
	if _, err := os.Stat(filepath.Join(home, ".linger", "examples-copied")); err != nil {
		t.Errorf("no marker after the first start: %v", err)
	}
	// A user who deleted the examples does not get them back.
	if err := os.RemoveAll(filepath.Join(home, "examples")); err != nil {
		t.Fatal(err)
	}
	run("true")
	if _, err := os.Stat(filepath.Join(home, "examples")); err == nil {
		t.Error("a later start copied the examples again")
	}
}
