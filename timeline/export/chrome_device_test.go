package export

import (
	"encoding/json"
	"slices"
	"testing"

	"linger/timeline/event"
)

// TestChromeDeviceUsedCounter checks that the device_used track has one
// source at a time, as package analyze counts it: the segments until the
// trace's own device_used counter appears, then that counter alone.
// Writing both made the track jump 2 → 5 → 4 → 7 MiB.
func TestChromeDeviceUsedCounter(t *testing.T) {
	const MiB = 1 << 20
	tr := deviceTrace{
		{Seq: 1, Time: 1000, Kind: event.KindSegmentAlloc, Addr: 0x7f00_0000_0000, Size: 2 * MiB, Extra: event.PoolSmall},
		{Seq: 2, Time: 2000, Kind: event.KindCounter, Label: 1, Size: 5 * MiB},
		{Seq: 3, Time: 3000, Kind: event.KindSegmentAlloc, Addr: 0x10_0000_0000, Size: 2 * MiB, Extra: event.PoolOutside},
		{Seq: 4, Time: 4000, Kind: event.KindCounter, Label: 1, Size: 7 * MiB},
	}
	data := exportChrome(t, tr, ChromeOptions{})
	checkChrome(t, data)
	var f chromeFile
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatal(err)
	}
	var got []float64
	for _, e := range f.TraceEvents {
		if e.Ph == "C" && e.Name == event.CounterDeviceUsed {
			got = append(got, e.Args["value"].(float64)/MiB)
		}
	}
	if want := []float64{2, 5, 7}; !slices.Equal(got, want) {
		t.Errorf("device_used track %v MiB, want %v", got, want)
	}
}

// deviceTrace is a trace of segment events and device_used counters (string
// 1), with no sites.
type deviceTrace []event.Event

func (deviceTrace) String(id event.StringID) string {
	if id == 1 {
		return event.CounterDeviceUsed
	}
	return ""
}

func (deviceTrace) Site(event.SiteID) (event.Site, bool) { return event.Site{}, false }

func (tr deviceTrace) Replay(fn func(event.Event) error) error {
	for _, e := range tr {
		if err := fn(e); err != nil {
			return err
		}
	}
	return nil
}
