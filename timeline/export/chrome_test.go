package export

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

type chromeEvent struct {
	Ph   string         `json:"ph"`
	Name string         `json:"name"`
	Cat  string         `json:"cat"`
	ID   *string        `json:"id"`
	PID  *int           `json:"pid"`
	TID  *int           `json:"tid"`
	TS   *float64       `json:"ts"`
	Dur  *float64       `json:"dur"`
	S    string         `json:"s"`
	Args map[string]any `json:"args"`
}

type chromeFile struct {
	TraceEvents     []chromeEvent  `json:"traceEvents"`
	DisplayTimeUnit string         `json:"displayTimeUnit"`
	Metadata        map[string]any `json:"metadata"`
}

// chromeSummary is what checkChrome saw.
type chromeSummary struct {
	objects   int                // outer async slices of objects
	lingering map[string]bool    // id → leaked
	since     map[string]string  // id → scope_kind of its nested slice
	scopes    map[string]int     // X events by args.kind
	counters  map[string]float64 // last value per counter
	instants  []string
	groups    int
	meta      map[string]any
}

// checkChrome walks a Chrome export and fails t on any broken rule: valid
// JSON in the object form; only b, e, X, C, i and M events; every b closed
// by an e of the same cat and id, innermost first, never before it began;
// counters with non-negative values and non-decreasing ts per track;
// complete events with dur ≥ 0 that nest on their thread, each thread
// named; instants global.
func checkChrome(t *testing.T, data []byte) chromeSummary {
	t.Helper()
	var f chromeFile
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatalf("not JSON: %v", err)
	}
	if f.DisplayTimeUnit != "ns" || f.Metadata == nil || f.TraceEvents == nil {
		t.Fatalf("displayTimeUnit %q, metadata %v, traceEvents nil: %v", f.DisplayTimeUnit, f.Metadata, f.TraceEvents == nil)
	}
	sum := chromeSummary{lingering: map[string]bool{}, since: map[string]string{}, scopes: map[string]int{},
		counters: map[string]float64{}, meta: f.Metadata}
	type open struct {
		name string
		ts   float64
	}
	async := map[string][]open{} // cat+id → stack
	counterTS := map[string]float64{}
	named := map[int]bool{}
	type xspan struct{ start, end float64 }
	threads := map[int][]xspan{} // open X stack per tid
	for i, e := range f.TraceEvents {
		where := fmt.Sprintf("event %d (%s %q)", i, e.Ph, e.Name)
		if e.PID == nil {
			t.Errorf("%s: no pid", where)
		}
		if e.Ph != "M" && (e.TS == nil || *e.TS < 0) {
			t.Fatalf("%s: bad ts", where)
		}
		switch e.Ph {
		case "M":
			if e.Name == "thread_name" {
				named[*e.TID] = true
			}
		case "b", "e":
			if e.ID == nil || *e.ID == "" || e.Cat == "" {
				t.Fatalf("%s: async event without id or cat", where)
			}
			k := e.Cat + "\x00" + *e.ID
			if e.Ph == "b" {
				if len(async[k]) == 0 {
					if strings.HasPrefix(e.Cat, "aggregated,") {
						sum.groups++
					} else {
						sum.objects++
					}
					if strings.HasPrefix(e.Cat, "lingering,") {
						if !strings.HasPrefix(e.Name, "lingering: ") {
							t.Errorf("%s: lingering cat but name %q", where, e.Name)
						}
						sum.lingering[*e.ID] = false
					}
				} else if strings.HasPrefix(e.Cat, "lingering,") {
					sum.since[*e.ID], _ = e.Args["scope_kind"].(string)
				}
				async[k] = append(async[k], open{e.Name, *e.TS})
				break
			}
			st := async[k]
			if len(st) == 0 {
				t.Fatalf("%s: e without b (cat %q id %q)", where, e.Cat, *e.ID)
			}
			top := st[len(st)-1]
			if top.name != e.Name || *e.TS < top.ts {
				t.Fatalf("%s: closes %q begun at %v", where, top.name, top.ts)
			}
			async[k] = st[:len(st)-1]
			if len(st) == 1 {
				if leak, _ := e.Args["leak"].(bool); leak {
					if _, ok := sum.lingering[*e.ID]; !ok && !strings.HasPrefix(e.Cat, "aggregated,") {
						t.Errorf("%s: leak that is not lingering", where)
					}
					sum.lingering[*e.ID] = true
				}
			}
		case "C":
			for k, v := range e.Args {
				x, ok := v.(float64)
				if !ok || x < 0 {
					t.Fatalf("%s: counter %s = %v", where, k, v)
				}
				sum.counters[e.Name] = x
			}
			if *e.TS < counterTS[e.Name] {
				t.Fatalf("%s: counter goes back in time", where)
			}
			counterTS[e.Name] = *e.TS
		case "X":
			if e.Dur == nil || *e.Dur < 0 {
				t.Fatalf("%s: dur %v", where, e.Dur)
			}
			if !named[*e.TID] {
				t.Errorf("%s: thread %d not named before use", where, *e.TID)
			}
			kind, _ := e.Args["kind"].(string)
			sum.scopes[kind]++
			st := threads[*e.TID]
			for len(st) > 0 && st[len(st)-1].end <= *e.TS {
				st = st[:len(st)-1]
			}
			end := *e.TS + *e.Dur
			if len(st) > 0 && (end > st[len(st)-1].end || *e.TS < st[len(st)-1].start) {
				t.Fatalf("%s: [%v, %v] overlaps [%v, %v] on thread %d", where, *e.TS, end, st[len(st)-1].start, st[len(st)-1].end, *e.TID)
			}
			threads[*e.TID] = append(st, xspan{*e.TS, end})
		case "i":
			if e.S != "g" {
				t.Errorf("%s: instant scope %q", where, e.S)
			}
			sum.instants = append(sum.instants, e.Name)
		default:
			t.Fatalf("%s: phase %q not allowed", where, e.Ph)
		}
	}
	for k, st := range async {
		if len(st) > 0 {
			t.Errorf("async %q: %d slices never end", k, len(st))
		}
	}
	return sum
}

func exportChrome(t *testing.T, tr Trace, opts ChromeOptions) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := Chrome(&b, tr, opts); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestChromeHandTrace(t *testing.T) {
	sum := checkChrome(t, exportChrome(t, handTrace(), ChromeOptions{}))
	if sum.objects != 3 || sum.groups != 0 {
		t.Errorf("objects %d, groups %d; want 3, 0", sum.objects, sum.groups)
	}
	want := map[string]bool{fmt.Sprintf("%x-5", smallSeg+1024): false, fmt.Sprintf("%x-7", largeSeg): true}
	if fmt.Sprint(sum.lingering) != fmt.Sprint(want) {
		t.Errorf("lingering (id → leaked) %v, want %v", sum.lingering, want)
	}
	for id := range want {
		if sum.since[id] != "request" {
			t.Errorf("%s: lingering since %q, want request", id, sum.since[id])
		}
	}
	if sum.scopes["request"] != 1 || sum.scopes["step"] != 1 {
		t.Errorf("scopes %v", sum.scopes)
	}
	wantCounters := map[string]float64{"allocated": 5 << 29, "reserved": 2<<20 + 3<<30, "device_used": 2<<20 + 3<<30 + 4<<20,
		"live kv_cache": 5 << 29, "live attn_mask": 0, "go_heap_inuse": 123456}
	for k, v := range wantCounters {
		if got, ok := sum.counters[k]; !ok || got != v {
			t.Errorf("counter %s = %v (present %v), want %v", k, got, ok, v)
		}
	}
	if len(sum.instants) != 2 || !strings.HasPrefix(sum.instants[0], "checkpoint") || !strings.HasPrefix(sum.instants[1], "OOM") {
		t.Errorf("instants %q", sum.instants)
	}
}

func TestChromeEngine(t *testing.T) {
	for _, keep := range []bool{false, true} {
		t.Run(fmt.Sprintf("keep=%v", keep), func(t *testing.T) {
			f := engineTrace(t, keep)
			sum := checkChrome(t, exportChrome(t, f, ChromeOptions{}))
			if sum.scopes["request"] != 1 || sum.scopes["step"] != 3+3 || sum.scopes["layer"] == 0 {
				t.Errorf("scopes %v", sum.scopes)
			}
			if !keep && len(sum.lingering) != 0 {
				t.Errorf("a correct run has lingering objects: %v", sum.lingering)
			}
			if keep {
				if len(sum.lingering) == 0 {
					t.Fatal("kept cache not marked lingering")
				}
				for id, leaked := range sum.lingering {
					if !leaked || sum.since[id] != "request" {
						t.Errorf("%s: leaked %v, since %q", id, leaked, sum.since[id])
					}
				}
			}
			if sum.counters["allocated"] < 0 || sum.meta["aggregated_objects"] != float64(0) {
				t.Errorf("metadata %v", sum.meta)
			}
		})
	}
}

func TestChromeAggregates(t *testing.T) {
	f := engineTrace(t, true)
	full := checkChrome(t, exportChrome(t, f, ChromeOptions{MaxObjects: -1}))
	const max = 50
	sum := checkChrome(t, exportChrome(t, f, ChromeOptions{MaxObjects: max}))
	if sum.objects > max || sum.groups == 0 {
		t.Errorf("%d objects and %d groups; want at most %d objects", sum.objects, sum.groups, max)
	}
	agg, _ := sum.meta["aggregated_objects"].(float64)
	if int(agg)+sum.objects != full.objects {
		t.Errorf("%v aggregated + %d kept != %d objects", agg, sum.objects, full.objects)
	}
	if fmt.Sprint(sum.lingering) != fmt.Sprint(full.lingering) {
		t.Errorf("aggregation changed the lingering objects: %v, want %v", sum.lingering, full.lingering)
	}
	if sum.meta["aggregate_threshold"] != float64(max) || sum.meta["aggregated_below_bytes"] == nil {
		t.Errorf("metadata %v", sum.meta)
	}
	// Sampled counters keep the peak and the final value.
	for _, k := range []string{"allocated", "reserved"} {
		if sum.counters[k] != full.counters[k] {
			t.Errorf("final %s %v, want %v", k, sum.counters[k], full.counters[k])
		}
	}
}

func TestChromeOmitsInnerScopes(t *testing.T) {
	f := engineTrace(t, false)
	sum := checkChrome(t, exportChrome(t, f, ChromeOptions{MaxObjects: 10}))
	// 1 request, 6 steps and 12 layers: leaving out the layers is enough.
	if sum.scopes["layer"] != 0 || sum.scopes["step"] != 6 || sum.scopes["request"] != 1 {
		t.Errorf("scopes %v", sum.scopes)
	}
	if sum.meta["omitted_scopes"] != float64(12) || sum.meta["omitted_scope_kinds_up_to"] != "layer" {
		t.Errorf("metadata %v", sum.meta)
	}
}

func TestChromeOverlappingRequests(t *testing.T) {
	data := exportChrome(t, schedulerTrace(t), ChromeOptions{})
	sum := checkChrome(t, data)
	if sum.scopes["request"] != 5 || sum.scopes["batch"] == 0 {
		t.Errorf("scopes %v", sum.scopes)
	}
	if len(sum.lingering) != 0 {
		t.Errorf("continuous batching that frees correctly has lingering objects: %v", sum.lingering)
	}
	if !bytes.Contains(data, []byte(`"name":"requests #2"`)) {
		t.Error("overlapping requests share one thread")
	}
}
