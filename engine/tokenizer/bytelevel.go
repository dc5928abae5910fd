package tokenizer

import "unicode/utf8"

// byteRune maps each byte to the printable rune GPT-2's byte-level BPE uses
// for it in vocabulary files: printable Latin-1 bytes map to themselves and
// the rest (controls, space, soft hyphen) to U+0100 upwards, so that no token
// string contains whitespace or control characters.
var byteRune [256]rune

// runeByte inverts byteRune; runes outside the table are absent.
var runeByte = map[rune]byte{}

func init() {
	n := rune(0)
	for b := 0; b < 256; b++ {
		printable := ('!' <= b && b <= '~') || (0xA1 <= b && b <= 0xAC) || (0xAE <= b && b <= 0xFF)
		if printable {
			byteRune[b] = rune(b)
		} else {
			byteRune[b] = 256 + n
			n++
		}
		runeByte[byteRune[b]] = byte(b)
	}
}

// toByteLevel renders raw bytes in the byte-level alphabet of vocab files.
func toByteLevel(raw string) string {
	buf := make([]byte, 0, 2*len(raw))
	for i := 0; i < len(raw); i++ {
		buf = utf8.AppendRune(buf, byteRune[raw[i]])
	}
	return string(buf)
}

// fromByteLevel decodes a vocab-file token to its raw bytes. ok is false when
// the token contains a rune outside the byte-level alphabet; such a token
// cannot come from a byte-level pre-tokenizer.
func fromByteLevel(tok string) (raw string, ok bool) {
	buf := make([]byte, 0, len(tok))
	for _, r := range tok {
		b, in := runeByte[r]
		if !in {
			return "", false
		}
		buf = append(buf, b)
	}
	return string(buf), true
}
