# Regenerates split_golden.json: the pre-tokenizer patterns applied by
# Python's third-party `regex` module, which (unlike Go's regexp) supports
# the lookahead the patterns use. It is the independent reference for the
# hand-written splitters in pretokenize.go; TestSplitGolden compares them.
#
#   python3 testdata/split_golden.py > testdata/split_golden.json
import json, random, regex

PATTERNS = {
    "gpt2": r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""",
    "llama3": r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""",
    "qwen2": r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""",
}
ALPHABET = ["a", "Z", "é", "東", "1", "٣", "½", " ", "  ", "\t", "\n", "\r", "\u00a0",
            "\u2003", "'", "'s", "'LL", "'ve", "'re", ".", "<|", "|>", "🙂", "-", "_",
            "ǅ", "ⅷ", "\u0085", "\x0b", "\x0c"]

random.seed(7)
inputs = ["".join(random.choice(ALPHABET) for _ in range(random.randint(1, 14))) for _ in range(600)]
inputs.append("func (m *model) bpe(word string) []int {\n\treturn nil // x += 1\n}\n")
inputs.append("I'm sure they'll've said 'TWAS OK.  \n\n   Next 12345 items: 3.14159!")
out = {"inputs": inputs}
for name, p in PATTERNS.items():
    r = regex.compile(p)
    out[name] = [r.findall(s) for s in inputs]
print(json.dumps(out, ensure_ascii=False))
