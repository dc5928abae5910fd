//go:build race

package timeline

// raceEnabled scales the recorder tests down under the race detector,
// which slows every event's path tenfold.
const raceEnabled = true
