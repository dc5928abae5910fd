package httperr

import (
	"cmp"
	"path/filepath"
	"slices"
	"strings"
)

// Root is a directory of the server's and the name clients know it by:
// a path below Dir is said as Name joined with the path relative to Dir
// (Name "" for the notebook root, whose paths clients use as they are).
type Root struct {
	Dir  string
	Name string
}

// Paths rewrites the server's directories in messages. The zero value
// rewrites nothing.
type Paths struct {
	roots []Root // absolute, one per spelling of each Dir, longest first
}

// NewPaths returns the Paths of roots. Each Dir is known by its absolute
// path and by the path its symbolic links resolve to; a root inside
// another is said by its own Name.
func NewPaths(roots ...Root) Paths {
	var p Paths
	for _, r := range roots {
		if r.Dir == "" {
			continue
		}
		spellings := []string{filepath.Clean(r.Dir)}
		if abs, err := filepath.Abs(r.Dir); err == nil {
			spellings = append(spellings, abs)
		}
		if real, err := filepath.EvalSymlinks(r.Dir); err == nil {
			if abs, err := filepath.Abs(real); err == nil {
				spellings = append(spellings, abs)
			}
		}
		for _, d := range spellings {
			if filepath.IsAbs(d) && d != string(filepath.Separator) {
				p.roots = append(p.roots, Root{Dir: d, Name: r.Name})
			}
		}
	}
	slices.SortStableFunc(p.roots, func(a, b Root) int { return cmp.Compare(len(b.Dir), len(a.Dir)) })
	return p
}

// Scrub returns msg with each occurrence of a root's directory, alone or
// at the head of a path, replaced by the root's Name ("." for the
// notebook root alone). A directory name that merely starts with a
// root's (/srv/nb2 beside /srv/nb) is left as it is.
func (p Paths) Scrub(msg string) string {
	for _, r := range p.roots {
		if !strings.Contains(msg, r.Dir) {
			continue
		}
		var b strings.Builder
		rest := msg
		for {
			i := strings.Index(rest, r.Dir)
			if i < 0 {
				b.WriteString(rest)
				break
			}
			b.WriteString(rest[:i])
			after := rest[i+len(r.Dir):]
			switch {
			case strings.HasPrefix(after, string(filepath.Separator)):
				if r.Name == "" {
					after = after[1:] // relative to the root
				} else {
					b.WriteString(r.Name)
				}
			case after == "" || !isPathByte(after[0]):
				b.WriteString(cmp.Or(r.Name, "."))
			default:
				b.WriteString(r.Dir) // another directory that starts alike
			}
			rest = after
		}
		msg = b.String()
	}
	return msg
}

// isPathByte reports whether c may continue a file name in a message.
func isPathByte(c byte) bool {
	return c == '.' || c == '-' || c == '_' || c == '~' || c == '+' ||
		'0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || c >= 0x80
}
