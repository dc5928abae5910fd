package event

// The browser's copy of the wire constants (kinds, categories, scope
// kinds, pools, counter names) is generated from this package, so that
// it cannot drift; web/ui/src imports it.
//go:generate go run ./internal/genwire -o ../../web/ui/src/timeline/wire.gen.js
