package kernel

import (
	"errors"
	"slices"
	"strings"

	"go.starlark.net/starlark"
	"go.starlark.net/syntax"
)

// isComplete answers is_complete_request with the Starlark parser.
func isComplete(code string) map[string]any {
	if strings.TrimSpace(code) == "" {
		return map[string]any{"status": "complete"}
	}
	src, _ := cutProfMagic(code)
	_, err := fileOptions.Parse("<input>", src, 0)
	if err == nil {
		lines := strings.Split(strings.TrimRight(code, "\n"), "\n")
		last := lines[len(lines)-1]
		// An indented block still open wants a blank line, as in Python.
		if len(lines) > 1 && (strings.HasPrefix(last, " ") || strings.HasPrefix(last, "\t")) && !strings.HasSuffix(code, "\n\n") {
			return map[string]any{"status": "incomplete", "indent": leadingSpace(last)}
		}
		return map[string]any{"status": "complete"}
	}
	var se syntax.Error
	if errors.As(err, &se) {
		lines := strings.Split(code, "\n")
		atEnd := int(se.Pos.Line) >= len(lines) || strings.Contains(se.Msg, "end of file") || strings.Contains(se.Msg, "unexpected EOF")
		if atEnd {
			last := strings.TrimRight(code, "\n")
			ls := strings.Split(last, "\n")
			indent := leadingSpace(ls[len(ls)-1])
			if strings.HasSuffix(strings.TrimSpace(last), ":") {
				indent += "    "
			}
			return map[string]any{"status": "incomplete", "indent": indent}
		}
	}
	return map[string]any{"status": "invalid"}
}

func leadingSpace(s string) string {
	return s[:len(s)-len(strings.TrimLeft(s, " \t"))]
}

// wordAt returns the dotted identifier ending at cursor (in runes) and
// its start.
func wordAt(code string, cursor int) (string, int) {
	rs := []rune(code)
	if cursor < 0 || cursor > len(rs) {
		cursor = len(rs)
	}
	start := cursor
	for start > 0 {
		if r := rs[start-1]; r != '.' && !isIdentRune(r) {
			break
		}
		start--
	}
	return string(rs[start:cursor]), start
}

// isIdentRune reports whether r may be part of an (ASCII) identifier.
func isIdentRune(r rune) bool {
	return r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9'
}

func (k *kernelProc) complete(code string, cursor int) map[string]any {
	word, start := wordAt(code, cursor)
	matches := []string{}
	if i := strings.LastIndexByte(word, '.'); i >= 0 {
		base, prefix := word[:i], word[i+1:]
		if v := lookup(base, k.s.globals); v != nil {
			if ha, ok := v.(starlark.HasAttrs); ok {
				for _, n := range ha.AttrNames() {
					if strings.HasPrefix(n, prefix) {
						matches = append(matches, base+"."+n)
					}
				}
			}
		}
	} else {
		seen := map[string]bool{}
		for _, names := range [][]string{k.s.globals.Keys(), builtinNames} {
			for _, n := range names {
				if strings.HasPrefix(n, word) && !seen[n] {
					seen[n] = true
					matches = append(matches, n)
				}
			}
		}
	}
	if cursor < 0 || cursor > len([]rune(code)) {
		cursor = len([]rune(code))
	}
	return map[string]any{"status": "ok", "matches": matches, "cursor_start": start, "cursor_end": cursor, "metadata": map[string]any{}}
}

// lookup resolves a dotted name against scopes in order (a cell's
// globals), then the names every cell sees.
func lookup(name string, scopes ...starlark.StringDict) starlark.Value {
	parts := strings.Split(name, ".")
	var v starlark.Value
	for _, sc := range slices.Concat(scopes, []starlark.StringDict{predeclared, starlark.Universe}) {
		if v = sc[parts[0]]; v != nil {
			break
		}
	}
	if v == nil {
		return nil
	}
	for _, p := range parts[1:] {
		ha, ok := v.(starlark.HasAttrs)
		if !ok {
			return nil
		}
		nv, err := ha.Attr(p)
		if err != nil || nv == nil {
			return nil
		}
		v = nv
	}
	return v
}

func (k *kernelProc) inspect(code string, cursor int) map[string]any {
	// The cursor may sit inside the name: extend it to the name's end.
	rs := []rune(code)
	if cursor < 0 || cursor > len(rs) {
		cursor = len(rs)
	}
	for cursor < len(rs) && isIdentRune(rs[cursor]) {
		cursor++
	}
	word, _ := wordAt(code, cursor)
	v := lookup(word, k.s.globals)
	if v == nil {
		return map[string]any{"status": "ok", "found": false, "data": map[string]any{}, "metadata": map[string]any{}}
	}
	return map[string]any{"status": "ok", "found": true, "data": map[string]any{"text/plain": helpText(word, v, k.s.cellCounts)}, "metadata": map[string]any{}}
}
