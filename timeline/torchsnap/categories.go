package torchsnap

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strings"

	"linger/timeline/event"
)

// A Rule gives the category of a block whose stack has a frame matching
// it, that was allocated inside an annotation matching it, or whose
// trace entry carries metadata or a compile context matching it. Each
// field set must match:
//   - Name: a frame's function, exactly or as the last part of a qualified
//     one ("update" matches "DynamicCache.update");
//   - File: a frame's path contains it (with Name: the same frame's);
//   - Annotation: an annotation open when the block was allocated (a
//     record_function range recorded with the history) has this name, or
//     matches it as a pattern ("ProfilerStep#*");
//   - Metadata: the alloc entry's user_metadata (what
//     torch.cuda.memory._set_memory_metadata set when the block was
//     allocated) is this text, or matches it as a pattern;
//   - CompileContext: the alloc entry's compile_context (the
//     torch.compile region it was allocated in, "Torch-Compiled Region:
//     0/1") is this text, or matches it as a pattern. PyTorch writes
//     "N/A" outside compiled code, which no rule matches.
//
// A pattern is path.Match's, except that * and ? match a / too: an
// annotation or a compile context is no path.
type Rule struct {
	Name           string         `json:"name,omitempty"`
	File           string         `json:"file,omitempty"`
	Annotation     string         `json:"annotation,omitempty"`
	Metadata       string         `json:"metadata,omitempty"`
	CompileContext string         `json:"compile_context,omitempty"`
	Category       event.Category `json:"-"`
}

// MaxEntryRules bounds the rules of a RuleSet that read an entry's
// metadata or compile context: the import carries which of them an
// alloc matched from its first pass over the snapshot to its second as
// one bit each.
const MaxEntryRules = 64

// Rules is the built-in table Categorize applies, first match wins, each
// rule tried on every frame of a stack from the innermost out. What no
// rule matches is event.CategoryOther, and the import says how much that
// was: never a guess (docs/pytorch.md).
var Rules = []Rule{
	// KV caches: transformers' caches and paged-attention pools.
	{Name: "update", File: "cache_utils", Category: event.CategoryKVCache},
	{Name: "DynamicCache.update", Category: event.CategoryKVCache},
	{Name: "allocate_kv_cache", Category: event.CategoryKVCache},
	{Name: "_allocate_kv_cache", Category: event.CategoryKVCache},
	// Attention masks: transformers' mask builders.
	{Name: "_prepare_4d_causal_attention_mask", Category: event.CategoryAttnMask},
	{Name: "_prepare_4d_attention_mask", Category: event.CategoryAttnMask},
	{Name: "_update_causal_mask", Category: event.CategoryAttnMask},
	{Name: "create_causal_mask", Category: event.CategoryAttnMask},
	{Name: "build_mask", Category: event.CategoryAttnMask},
	// Weights: a module's parameters moved or loaded.
	{Name: "_apply", File: "torch/nn/modules/module.py", Category: event.CategoryWeights},
	{Name: "load_state_dict", Category: event.CategoryWeights},
	{Name: "_load_from_state_dict", Category: event.CategoryWeights},
	{Name: "reset_parameters", Category: event.CategoryWeights},
}

// Library lists the path parts of code that is not the user's: a frame
// whose file contains one is folded when a stack is named by its user's
// frames.
var Library = []string{"/torch/", "/transformers/", "/site-packages/", "/dist-packages/", "/lib/python3", "<frozen ", "/accelerate/", "/vllm/"}

// A RuleSet is what categorizes a snapshot's blocks and tells the user's
// frames from the libraries': the rules, first match wins, and the path
// parts of library code.
type RuleSet struct {
	Rules   []Rule
	Library []string
	// Own is how many of Rules, the first, are the user's (ReadRules).
	Own int
}

// Context is what of a block's allocation beyond its frames the rules
// may read: the annotations open (outermost first), and which of the
// rules over an entry's metadata or compile context matched its alloc
// entry (EntryMatches).
type Context struct {
	Annotations []string
	Entry       uint64
}

// DefaultRules is the built-in RuleSet: Rules and Library.
func DefaultRules() *RuleSet {
	return &RuleSet{Rules: slices.Clone(Rules), Library: slices.Clone(Library)}
}

// rulesFile is the JSON of a user's rules file (docs/pytorch.md).
type rulesFile struct {
	Rules []struct {
		Rule
		Category string `json:"category"`
	} `json:"rules"`
	Library []string `json:"library"`
	// Replace drops the built-in rules and library paths: the file's are
	// all there is.
	Replace bool `json:"replace"`
}

// ReadRules reads a user's rules, JSON: {"rules": [{"name": …, "file": …,
// "annotation": …, "category": "kv_cache"}, …], "library": ["/mylib/"],
// "replace": false}. The file's rules come before the built-in ones (so
// they win), its library paths join the built-in ones; with "replace"
// they are the only ones. A rule that matches nothing, a category that
// does not exist or a field this version does not know is an error that
// names it.
func ReadRules(r io.Reader) (*RuleSet, error) {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	var f rulesFile
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("rules: %w", err)
	}
	var own []Rule
	for i, r := range f.Rules {
		c, err := event.ParseCategory(r.Category)
		if err != nil || c == event.CategoryNone {
			return nil, fmt.Errorf("rules: rule %d: category %q is not one of %s", i+1, r.Category, strings.Join(categoryNames(), ", "))
		}
		if r.Name == "" && r.File == "" && r.Annotation == "" && r.Metadata == "" && r.CompileContext == "" {
			return nil, fmt.Errorf("rules: rule %d (%s) has none of name, file, annotation, metadata and compile_context: it would match every block", i+1, r.Category)
		}
		for _, p := range []struct{ field, pattern string }{{"annotation", r.Annotation}, {"metadata", r.Metadata}, {"compile_context", r.CompileContext}} {
			if _, err := path.Match(p.pattern, ""); err != nil {
				return nil, fmt.Errorf("rules: rule %d: %s pattern %q: %w", i+1, p.field, p.pattern, err)
			}
		}
		r.Rule.Category = c
		own = append(own, r.Rule)
	}
	for _, p := range f.Library {
		if p == "" {
			return nil, errors.New("rules: an empty library path would fold every frame")
		}
	}
	rs := &RuleSet{Rules: own, Library: f.Library, Own: len(own)}
	if !f.Replace {
		rs = &RuleSet{Rules: append(own, Rules...), Library: append(slices.Clone(f.Library), Library...), Own: len(own)}
	}
	if n := len(rs.entryRules()); n > MaxEntryRules {
		return nil, fmt.Errorf("rules: %d rules read metadata or compile_context, more than the %d a rule set may have", n, MaxEntryRules)
	}
	return rs, nil
}

// ReadRulesFile is ReadRules of the file at name.
func ReadRulesFile(name string) (*RuleSet, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, fmt.Errorf("rules: %w", err)
	}
	defer f.Close()
	rs, err := ReadRules(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return rs, nil
}

func categoryNames() []string {
	var out []string
	for c := event.CategoryWeights; c.Valid(); c++ {
		out = append(out, c.String())
	}
	return out
}

// Categorize is the category of a block allocated at frames (innermost
// first) by the built-in Rules, with no annotation open.
func Categorize(frames []Frame) event.Category {
	c, _ := DefaultRules().Categorize(frames, Context{})
	return c
}

// Categorize is the category of a block allocated at frames (innermost
// first) in the context ctx, and the index of the rule that gave it; -1
// and CategoryOther when none matched.
func (rs *RuleSet) Categorize(frames []Frame, ctx Context) (event.Category, int) {
	entry := 0 // the index of r among the entry rules
	for i, r := range rs.Rules {
		if r.Metadata != "" || r.CompileContext != "" {
			bit := entry
			entry++
			if ctx.Entry&(1<<bit) == 0 {
				continue
			}
		}
		if r.Annotation != "" && !slices.ContainsFunc(ctx.Annotations, func(a string) bool { return match(r.Annotation, a) }) {
			continue
		}
		if r.Name == "" && r.File == "" {
			return r.Category, i
		}
		for _, f := range frames {
			if r.matches(f) {
				return r.Category, i
			}
		}
	}
	return event.CategoryOther, -1
}

// entryRules are the rules that read an entry's metadata or compile
// context, in order: bit i of Context.Entry is the i-th's.
func (rs *RuleSet) entryRules() []Rule {
	var out []Rule
	for _, r := range rs.Rules {
		if r.Metadata != "" || r.CompileContext != "" {
			out = append(out, r)
		}
	}
	return out
}

// EntryMatches is Context.Entry for an alloc entry with this
// user_metadata and compile_context: bit i set when the i-th of the
// rules that read them (in the set's order) matches both of its fields
// that are set. Empty metadata, and PyTorch's "N/A" outside compiled
// code, match no rule.
func (rs *RuleSet) EntryMatches(metadata, compileContext string) uint64 {
	if compileContext == "N/A" {
		compileContext = ""
	}
	if metadata == "" && compileContext == "" {
		return 0
	}
	var m uint64
	for i, r := range rs.entryRules() {
		if (r.Metadata == "" || metadata != "" && match(r.Metadata, metadata)) &&
			(r.CompileContext == "" || compileContext != "" && match(r.CompileContext, compileContext)) {
			m |= 1 << i
		}
	}
	return m
}

// hasAnnotationRules reports whether a rule needs the annotations open.
func (rs *RuleSet) hasAnnotationRules() bool {
	return slices.ContainsFunc(rs.Rules, func(r Rule) bool { return r.Annotation != "" })
}

// match reports whether text is pattern, or matches it as path.Match's
// pattern with / an ordinary character.
func match(pattern, text string) bool {
	if text == pattern {
		return true
	}
	ok, _ := path.Match(strings.ReplaceAll(pattern, "/", "\x00"), strings.ReplaceAll(text, "/", "\x00"))
	return ok
}

func (r Rule) matches(f Frame) bool {
	if r.Name != "" && f.Name != r.Name && !strings.HasSuffix(f.Name, "."+r.Name) {
		return false
	}
	return r.File == "" || strings.Contains(f.Filename, r.File)
}

// library reports whether f is a library's frame (or one with no file,
// as an unresolved C++ frame).
func (rs *RuleSet) library(f Frame) bool {
	if f.Filename == "" || f.Filename == "??" {
		return true
	}
	for _, p := range rs.Library {
		if strings.Contains(f.Filename, p) {
			return true
		}
	}
	return false
}

// UserFrames are the frames of the user's own code in frames (innermost
// first, as PyTorch gives them), outermost first, as a Python traceback
// reads: everything not in torch, transformers, the interpreter or an
// installed package (Library). None when every frame is a library's.
func (rs *RuleSet) UserFrames(frames []Frame) []Frame {
	var out []Frame
	for i := len(frames) - 1; i >= 0; i-- {
		if !rs.library(frames[i]) {
			out = append(out, frames[i])
		}
	}
	return out
}

// UserFrame returns the innermost frame of the user's own code by the
// built-in Library: not in torch, transformers, the interpreter or an
// installed package; the innermost frame, and false, when all are.
func UserFrame(frames []Frame) (Frame, bool) {
	return DefaultRules().userFrame(frames)
}

func (rs *RuleSet) userFrame(frames []Frame) (Frame, bool) {
	for _, f := range frames {
		if !rs.library(f) {
			return f, true
		}
	}
	if len(frames) > 0 {
		return frames[0], false
	}
	return Frame{}, false
}

// label is a block's label: the function of its user frame and where,
// "forward (model.py:52)".
func (rs *RuleSet) label(frames []Frame) string {
	f, _ := rs.userFrame(frames)
	if f.Filename == "" || f.Filename == "??" {
		return f.Name
	}
	return fmt.Sprintf("%s (%s:%d)", f.Name, path.Base(f.Filename), f.Line)
}
