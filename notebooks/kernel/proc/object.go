package proc

import (
	"fmt"
	"reflect"
	"sort"
	"strings"
	"unicode"

	"go.starlark.net/starlark"

	"linger/engine"
)

// object is the Starlark value of every engine binding (Engine, KVCache,
// Tensor, ...): a type name, methods and computed attributes, and the
// references it holds, which the retention walk follows.
type object struct {
	typ   string
	str   func() string
	attrs map[string]func() (starlark.Value, error)
	// refs yields what the object keeps alive: each child with the step
	// that names it in a retention path.
	refs func(yield func(step string, child any))

	name string // short identity in retention paths, e.g. "KVCache#3"

	t  *engine.Tensor // for Tensor values
	kv engine.KVCache // for KVCache values
}

var _ starlark.HasAttrs = (*object)(nil)

func newObject(typ string, str func() string) *object {
	return &object{typ: typ, str: str, attrs: map[string]func() (starlark.Value, error){}}
}

// method adds a method named name.
func (o *object) method(name string, fn func(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error)) {
	bi := starlark.NewBuiltin(name, fn).BindReceiver(o)
	o.attrs[name] = func() (starlark.Value, error) { return bi, nil }
}

// field adds a computed attribute.
func (o *object) field(name string, fn func() starlark.Value) {
	o.attrs[name] = func() (starlark.Value, error) { return fn(), nil }
}

func (o *object) short() string {
	if o.name != "" {
		return o.name
	}
	return o.typ
}

func (o *object) String() string        { return o.str() }
func (o *object) Type() string          { return o.typ }
func (o *object) Freeze()               {}
func (o *object) Truth() starlark.Bool  { return true }
func (o *object) Hash() (uint32, error) { return 0, fmt.Errorf("unhashable type: %s", o.typ) }

func (o *object) Attr(name string) (starlark.Value, error) {
	if f, ok := o.attrs[name]; ok {
		return f()
	}
	return nil, nil
}

func (o *object) AttrNames() []string {
	names := make([]string, 0, len(o.attrs))
	for n := range o.attrs {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// fieldsOf returns the exported scalar fields of a struct by snake_case
// name.
func fieldsOf(v any) map[string]any {
	out := map[string]any{}
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Struct {
		return out
	}
	rt := rv.Type()
	for i := 0; i < rt.NumField(); i++ {
		f := rt.Field(i)
		if !f.IsExported() {
			continue
		}
		out[snake(f.Name)] = rv.Field(i).Interface()
	}
	return out
}

func snake(s string) string {
	var b strings.Builder
	for i, r := range s {
		if unicode.IsUpper(r) {
			if i > 0 && !unicode.IsUpper(rune(s[i-1])) {
				b.WriteByte('_')
			}
			b.WriteRune(unicode.ToLower(r))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}
