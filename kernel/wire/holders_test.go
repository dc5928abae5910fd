package wire

import (
	"fmt"
	"reflect"
	"testing"
)

// TestGroupHolders: holders are said once per cause. Three abandoned
// caches are three causes; the 24 items of one list are one; the k and v
// blocks of a cache are told apart by their labels.
func TestGroupHolders(t *testing.T) {
	var hs []Holder
	addr := func() uint64 { return 0x1000 * uint64(len(hs)+1) }
	addrs := func(from, n int) []uint64 {
		var a []uint64
		for i := range n {
			a = append(a, 0x1000*uint64(from+i+1))
		}
		return a
	}
	for c := 1; c <= 3; c++ {
		for l := range 2 {
			for _, kv := range []string{"k", "v"} {
				hs = append(hs, Holder{Addr: addr(), Size: 1024, Requested: 1000, Label: fmt.Sprintf("layer.%d.%s", l, kv),
					Path: fmt.Sprintf("engine registry → KVCache#%d → layer[%d].%s", c, l, kv)})
			}
		}
	}
	for i := range 24 {
		hs = append(hs, Holder{Addr: addr(), Size: 1536, Requested: 1200, Label: fmt.Sprintf("stop.%d", i),
			Path: fmt.Sprintf("global stop_state[%d] → Tensor#%d → stop.%d", i, i+7, i)})
	}
	hs = append(hs, Holder{Addr: addr(), Size: 512, Requested: 512, Site: "cell c1:2 ← linger/engine.(*Engine).scratch engine/scratch.go:9 ← main.main",
		Path: "global eng → Engine#1.workspace → WorkspaceGuard#2"})
	got := GroupHolders(hs)
	want := []HolderGroup{
		{Path: "global stop_state[*]", Count: 24, Bytes: 24 * 1536, Requested: 24 * 1200,
			What: []HolderKind{{"stop.*", 24, 24 * 1536, 24 * 1200}}, Example: "global stop_state[0] → Tensor#7 → stop.0", Addrs: addrs(12, 24)},
	}
	for c := 1; c <= 3; c++ {
		want = append(want, HolderGroup{Path: fmt.Sprintf("engine registry → KVCache#%d", c), Count: 4, Bytes: 4 * 1024, Requested: 4 * 1000,
			What:    []HolderKind{{"layer.*.k", 2, 2048, 2000}, {"layer.*.v", 2, 2048, 2000}},
			Example: fmt.Sprintf("engine registry → KVCache#%d → layer[0].k", c), Addrs: addrs(4*(c-1), 4)})
	}
	want = append(want, HolderGroup{Path: "global eng → Engine#1.workspace", Count: 1, Bytes: 512, Requested: 512,
		What:    []HolderKind{{"(unlabeled) from linger/engine.(*Engine).scratch engine/scratch.go:9", 1, 512, 512}},
		Example: "global eng → Engine#1.workspace → WorkspaceGuard#2", Addrs: addrs(36, 1)})
	if !reflect.DeepEqual(got, want) {
		t.Errorf("groups:\n%+v\nwant\n%+v", got, want)
	}
	// An object with neither label nor site is "(unlabeled)", not
	// "(unlabeled) from " with nothing after it.
	if g := GroupHolders([]Holder{{Addr: 1, Size: 512, Requested: 512, Path: "global orphan → Tensor#9"}}); len(g) != 1 || len(g[0].What) != 1 || g[0].What[0].Name != "(unlabeled)" {
		t.Errorf("no label, no site: %+v", g)
	}
}
