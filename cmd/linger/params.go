package main

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"go.starlark.net/syntax"

	"linger/notebooks/nbformat"
)

// param is one --param NAME=VALUE of linger run: VALUE as Starlark source.
type param struct{ name, value string }

// parseParam reads NAME=VALUE. NAME is a Starlark identifier; VALUE is a
// Starlark literal ("cuda" with its quotes, 16, [1, 2], True) or else a
// string: anything that does not parse, or names a variable, is taken as
// text, so that DEVICE=cuda means DEVICE = "cuda", as papermill's
// -p DEVICE cuda does.
func parseParam(s string) (param, error) {
	name, value, ok := strings.Cut(s, "=")
	name = strings.TrimSpace(name)
	if !ok || !isIdent(name) {
		return param{}, fmt.Errorf("want NAME=VALUE, NAME a Starlark name, not %q", s)
	}
	value = strings.TrimSpace(value)
	if !isLiteral(value) {
		value = strconv.Quote(value)
	}
	return param{name, value}, nil
}

// isLiteral says whether s is a Starlark expression that names no
// variable (True, False and None aside).
func isLiteral(s string) bool {
	e, err := syntax.ParseExpr("--param", s, 0)
	if err != nil {
		return false
	}
	ok := true
	syntax.Walk(e, func(n syntax.Node) bool {
		if id, isID := n.(*syntax.Ident); isID && !slices.Contains([]string{"True", "False", "None"}, id.Name) {
			ok = false
		}
		if _, isCall := n.(*syntax.CallExpr); isCall {
			ok = false
		}
		return ok
	})
	return ok
}

// isIdent says whether s is a Starlark identifier.
func isIdent(s string) bool {
	e, err := syntax.ParseExpr("", s, 0)
	_, ok := e.(*syntax.Ident)
	return err == nil && ok
}

// injectedID is the id and the tag of the cell injectParams adds.
const injectedID = "injected-parameters"

// injectParams adds, as papermill does, a code cell "injected-parameters"
// (tagged so) right after the notebook's cell tagged "parameters",
// assigning each parameter in order, so that its values override the
// notebook's defaults and the executed notebook shows what ran. A cell
// injected by an earlier run is replaced. It fails when no cell is tagged
// "parameters".
func injectParams(nb *nbformat.Notebook, params []param) error {
	if len(params) == 0 {
		return nil
	}
	nb.Cells = slices.DeleteFunc(nb.Cells, func(c *nbformat.Cell) bool { return c.ID == injectedID })
	at := slices.IndexFunc(nb.Cells, func(c *nbformat.Cell) bool {
		var tags []string
		_, err := c.Metadata.Get("tags", &tags)
		return c.Type == nbformat.CellCode && err == nil && slices.Contains(tags, "parameters")
	})
	if at < 0 {
		return fmt.Errorf("%w: --param: the notebook has no code cell tagged \"parameters\" to override", errUsage)
	}
	var b strings.Builder
	b.WriteString("# Parameters\n")
	for _, p := range params {
		fmt.Fprintf(&b, "%s = %s\n", p.name, p.value)
	}
	c := nbformat.NewCell(nbformat.CellCode, b.String())
	c.ID = injectedID
	if err := c.Metadata.Set("tags", []string{injectedID}); err != nil {
		return err
	}
	nb.Cells = slices.Insert(nb.Cells, at+1, c)
	return nil
}
