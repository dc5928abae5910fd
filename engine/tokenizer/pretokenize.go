package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// A splitter returns the length in bytes of the first pre-token of s, which
// is not empty. Splitters partition any string, valid UTF-8 or not, so
// encoding never drops a byte.
type splitter func(s string) int

// Pre-tokenizer regular expressions this package implements by hand, as they
// appear in tokenizer.json files. Go's regexp lacks the lookahead (?!\S) they
// all use.
const (
	// patternGPT2 is GPT-2's split, also used by a ByteLevel pre-tokenizer
	// with use_regex true.
	patternGPT2 = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
	// patternLlama3 is Llama-3's split: digits in groups of up to three.
	patternLlama3 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// patternQwen2 is Qwen2's split: Llama-3's with single digits.
	patternQwen2 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

// splitters maps each supported pattern to its implementation.
var splitters = map[string]splitter{
	patternGPT2:   splitGPT2,
	patternLlama3: func(s string) int { return splitLlama(s, 3) },
	patternQwen2:  func(s string) int { return splitLlama(s, 1) },
}

// Rune classes of the patterns: \p{L}, \p{N}, \s and everything else.
const (
	classOther = iota
	classLetter
	classNumber
	classSpace
)

func classOf(r rune) int {
	switch {
	case r < utf8.RuneSelf:
		return asciiClass[r]
	case unicode.IsLetter(r):
		return classLetter
	case unicode.IsNumber(r):
		return classNumber
	case unicode.IsSpace(r):
		return classSpace
	}
	// Includes utf8.RuneError for invalid bytes: they join punctuation runs.
	return classOther
}

var asciiClass = func() (t [utf8.RuneSelf]int) {
	for r := range t {
		t[r] = classOther
		switch {
		case 'a' <= r && r <= 'z', 'A' <= r && r <= 'Z':
			t[r] = classLetter
		case '0' <= r && r <= '9':
			t[r] = classNumber
		case unicode.IsSpace(rune(r)):
			t[r] = classSpace
		}
	}
	return t
}()

// next decodes the rune at the start of s with its class and width.
func next(s string) (r rune, class, width int) {
	if c := s[0]; c < utf8.RuneSelf {
		return rune(c), asciiClass[c], 1
	}
	r, width = utf8.DecodeRuneInString(s)
	return r, classOf(r), width
}

// run returns the length of the longest prefix of s whose runes are all of
// class c.
func run(s string, c int) int {
	n := 0
	for n < len(s) {
		_, rc, w := next(s[n:])
		if rc != c {
			break
		}
		n += w
	}
	return n
}

// spaces matches \s+(?!\S)|\s+ at the start of s, which begins with
// whitespace: the whole run if it ends the text or is one rune long,
// otherwise all but its last rune, which then prefixes the next word.
func spaces(s string) int {
	n, last, count := 0, 0, 0
	for n < len(s) {
		_, c, w := next(s[n:])
		if c != classSpace {
			break
		}
		n, last = n+w, w
		count++
	}
	if n == len(s) || count == 1 {
		return n
	}
	return n - last
}

// contraction returns the length of 's|'t|'re|'ve|'m|'ll|'d at the start of
// s, or 0. With fold it matches ASCII case-insensitively.
func contraction(s string, fold bool) int {
	if len(s) < 2 || s[0] != '\'' {
		return 0
	}
	lower := func(c byte) byte {
		if fold && 'A' <= c && c <= 'Z' {
			return c + 'a' - 'A'
		}
		return c
	}
	switch lower(s[1]) {
	case 's', 't', 'm', 'd':
		return 2
	case 'r', 'v':
		if len(s) > 2 && lower(s[2]) == 'e' {
			return 3
		}
	case 'l':
		if len(s) > 2 && lower(s[2]) == 'l' {
			return 3
		}
	}
	return 0
}

// splitGPT2 implements patternGPT2.
func splitGPT2(s string) int {
	if n := contraction(s, false); n > 0 {
		return n
	}
	r, c, w := next(s)
	if r == ' ' && len(s) > 1 {
		if _, c2, w2 := next(s[1:]); c2 != classSpace {
			return 1 + w2 + run(s[1+w2:], c2)
		}
	}
	if c == classSpace {
		return spaces(s)
	}
	return w + run(s[w:], c)
}

// splitLlama implements patternLlama3 (digits 3) and patternQwen2 (digits 1).
func splitLlama(s string, digits int) int {
	if n := contraction(s, true); n > 0 {
		return n
	}
	r, c, w := next(s)
	// [^\r\n\p{L}\p{N}]?\p{L}+
	if c == classLetter {
		return w + run(s[w:], classLetter)
	}
	if c != classNumber && r != '\r' && r != '\n' && len(s) > w {
		if _, c2, w2 := next(s[w:]); c2 == classLetter {
			return w + w2 + run(s[w+w2:], classLetter)
		}
	}
	// \p{N}{1,digits}
	if c == classNumber {
		n := w
		for i := 1; i < digits && n < len(s); i++ {
			_, c2, w2 := next(s[n:])
			if c2 != classNumber {
				break
			}
			n += w2
		}
		return n
	}
	//  ?[^\s\p{L}\p{N}]+[\r\n]*
	start := -1
	if c == classOther {
		start = 0
	} else if r == ' ' && len(s) > 1 {
		if _, c2, _ := next(s[1:]); c2 == classOther {
			start = 1
		}
	}
	if start >= 0 {
		n := start + run(s[start:], classOther)
		for n < len(s) && (s[n] == '\r' || s[n] == '\n') {
			n++
		}
		return n
	}
	// \s*[\r\n]+ : through the last newline of the whitespace run.
	n, end := 0, 0
	for n < len(s) {
		r2, c2, w2 := next(s[n:])
		if c2 != classSpace {
			break
		}
		n += w2
		if r2 == '\r' || r2 == '\n' {
			end = n
		}
	}
	if end > 0 {
		return end
	}
	return spaces(s)
}
