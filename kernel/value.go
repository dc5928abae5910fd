package kernel

import (
	"fmt"
	"maps"
	"slices"

	"go.starlark.net/starlark"

	"linger/internal/units"
)

// The Starlark values of the library (Engine, KVCache, Tensor, ...) are
// Go types, each with a static method table: a method is its table's
// Builtin bound to the receiver when a cell reads it, as go.starlark.net's
// lib/time does. The other attributes are computed on each read.

// methods is a type's method table, by Starlark name.
type methods map[string]*starlark.Builtin

// bound returns the method name bound to recv, or nil when there is none.
func (ms methods) bound(recv starlark.Value, name string) starlark.Value {
	if b, ok := ms[name]; ok {
		return b.BindReceiver(recv)
	}
	return nil
}

// attrNames returns the sorted names of a type's fields and methods.
func (ms methods) attrNames(fields ...string) []string {
	names := slices.Concat(fields, slices.Collect(maps.Keys(ms)))
	slices.Sort(names)
	return names
}

// A referrer is a library value the retention walk looks through.
type referrer interface {
	starlark.Value
	// pathName names the value in a retention path, e.g. "KVCache#3"; ""
	// leaves it out.
	pathName() string
	// refs yields what the value keeps alive, each child (a Starlark
	// value, an *engine.Tensor or an *alloc.Block) with the step that
	// names it: "" none, ".x" or "[i]" as is, anything else after a dot.
	refs(yield func(step string, child any))
}

// A richValue renders itself as a cell's result: its mime bundle
// (text/plain and, say, text/html) is the execute_result's data, where
// other values send their String as text/plain alone. The bundle's
// text/plain is what linger run and clients without HTML show.
type richValue interface {
	starlark.Value
	mimeBundle() map[string]string
}

// unhashable is the Hash of the library's values: none is hashable.
func unhashable(v starlark.Value) (uint32, error) {
	return 0, fmt.Errorf("unhashable type: %s", v.Type())
}

// sizeArg reads a byte size: an int, a string such as "16GiB" or "16G",
// or None (0).
func sizeArg(v starlark.Value) (uint64, error) {
	switch x := v.(type) {
	case nil, starlark.NoneType:
		return 0, nil
	case starlark.Int:
		n, ok := x.Uint64()
		if !ok {
			return 0, fmt.Errorf("bad size %s", x)
		}
		return n, nil
	case starlark.String:
		return units.Parse(string(x))
	}
	return 0, fmt.Errorf("size must be an int or a string like \"16GiB\", not %s", v.Type())
}

// sizeLiteral writes n exactly as sizeArg reads it, for an error's
// suggested argument: "1TiB", "1280GiB", "23MiB", else bytes.
func sizeLiteral(n uint64) string {
	switch {
	case n != 0 && n%(1<<40) == 0:
		return fmt.Sprintf("%dTiB", n>>40)
	case n != 0 && n%(1<<30) == 0:
		return fmt.Sprintf("%dGiB", n>>30)
	case n != 0 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	}
	return fmt.Sprint(n)
}

func intList(xs []int) *starlark.List {
	vs := make([]starlark.Value, len(xs))
	for i, x := range xs {
		vs[i] = starlark.MakeInt(x)
	}
	return starlark.NewList(vs)
}

func intsOf(it starlark.Iterable) ([]int, error) {
	var out []int
	iter := it.Iterate()
	defer iter.Done()
	var v starlark.Value
	for iter.Next(&v) {
		n, err := starlark.AsInt32(v)
		if err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, nil
}

// wrapErr prefixes a non-nil err with the operation's name.
func wrapErr(op string, err error) error {
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	return nil
}

// without returns xs without x.
func without[T comparable](xs []T, x T) []T {
	if i := slices.Index(xs, x); i >= 0 {
		return slices.Delete(xs, i, i+1)
	}
	return xs
}
