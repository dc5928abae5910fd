package kernel

import (
	"fmt"

	"go.starlark.net/starlark"

	"linger/timeline/event"
)

// timelineScope runs fn(*args, **kwargs) inside a scope of the given kind:
// timeline.scope(kind, label, fn, *args, **kwargs) → fn's result. The
// scope ends on every path, when fn fails too, so that a cell cannot leave
// one open (Starlark has no with statement). Only the kinds a user's own
// loop has are allowed: cells, the session and engines are the kernel's.
func timelineScope(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	rt, _ := runtimeOf(thread)
	if len(args) < 3 {
		return nil, fmt.Errorf("%s: want (kind, label, fn, *args, **kwargs), got %d positional arguments", b.Name(), len(args))
	}
	kindName, ok := starlark.AsString(args[0])
	if !ok {
		return nil, fmt.Errorf("%s: kind must be a string, not %s", b.Name(), args[0].Type())
	}
	label, ok := starlark.AsString(args[1])
	if !ok {
		return nil, fmt.Errorf("%s: label must be a string, not %s", b.Name(), args[1].Type())
	}
	fn, ok := args[2].(starlark.Callable)
	if !ok {
		return nil, fmt.Errorf("%s: fn must be callable, not %s", b.Name(), args[2].Type())
	}
	kind, err := event.ParseScopeKind(kindName)
	if err != nil || (kind != event.ScopeLayer && kind != event.ScopeStep && kind != event.ScopeRequest && kind != event.ScopeBatch) {
		return nil, fmt.Errorf("%s: kind %q: want \"layer\", \"step\", \"request\" or \"batch\" (cells, the session and engines have their own scopes)", b.Name(), kindName)
	}
	id := rt.em.Begin(kind, label)
	defer rt.em.End(id)
	return starlark.Call(thread, fn, args[3:], kwargs)
}
