"""Writes the pickle package's golden files: one value pickled at every
protocol Python offers (0 to 5), and the value as JSON in a neutral form
the Go test builds from what it decodes. Run from this directory:

    python3 gen.py

The value is shaped as PyTorch's memory snapshots are (a dict of
segments and per-device trace lists, frames shared between entries, as
the snapshot's cached tracebacks are), with every kind of plain value a
pickle can hold beside it.
"""
import json
import pickle

frames = [{"filename": "model.py", "line": 12, "name": "forward"},
          {"filename": "/usr/lib/python3/dist-packages/torch/nn/modules/module.py", "line": 1501, "name": "_call_impl"}]
entries = []
for i in range(1200):
    entries.append({"action": ["alloc", "free_requested", "free_completed"][i % 3],
                    "addr": 0x7F0000000000 + 512 * i, "size": 512 * (i % 7 + 1),
                    "stream": 0, "time_us": 1_700_000_000_000_000 + i,
                    "frames": frames if i % 2 else []})
value = {
    "segments": [{"device": 0, "address": 0x7F0000000000, "total_size": 2 << 20,
                  "blocks": [{"address": 0x7F0000000000, "size": 512, "state": "active_allocated"}]}],
    "device_traces": [entries, []],
    "kinds": [None, True, False, 0, 1, -1, 255, 256, 65535, 65536, -2**31, 2**31 - 1, 2**31,
              2**63 - 1, -2**63, 2**63 + 5, 2**70, -(2**70), 1.5, -0.0, 1e300,
              "", "ascii", "naïve", "日本", "🙂", "a'b\"c\\d\n",
              (), (1,), (1, 2), (1, 2, 3), (1, 2, 3, 4), [], {}],
    "wide": {f"k{i}": i for i in range(1100)},
    "shared": [frames, frames],
}


def neutral(v):
    if isinstance(v, bool) or v is None:
        return v
    if isinstance(v, int):
        return v if -2**63 <= v < 2**63 else {"int": str(v)}
    if isinstance(v, float):
        return {"float": repr(v)}
    if isinstance(v, str):
        return v
    if isinstance(v, bytes):
        return {"bytes": v.hex()}
    if isinstance(v, tuple):
        return {"tuple": [neutral(x) for x in v]}
    if isinstance(v, (set, frozenset)):
        return {"set": sorted(json.dumps(neutral(x), sort_keys=True) for x in v)}
    if isinstance(v, list):
        return [neutral(x) for x in v]
    if isinstance(v, dict):
        return {"dict": [[neutral(k), neutral(x)] for k, x in v.items()]}
    raise TypeError(type(v))


for proto in range(0, pickle.HIGHEST_PROTOCOL + 1):
    with open(f"value.p{proto}.pickle", "wb") as f:
        pickle.dump(value, f, protocol=proto)
with open("value.json", "w") as f:
    json.dump(neutral(value), f, sort_keys=True)
    f.write("\n")

# Bytes and sets have opcodes of their own from protocol 4 (before, the
# pickler writes them as a call of builtins.set or _codecs.encode, which
# the reader refuses: a snapshot holds neither).
extra = [b"", b"\x00\xffbytes", set(), {3, 1, 2}, frozenset({"x"})]
for proto in range(0, pickle.HIGHEST_PROTOCOL + 1):
    with open(f"extra.p{proto}.pickle", "wb") as f:
        pickle.dump(extra, f, protocol=proto)
with open("extra.json", "w") as f:
    json.dump(neutral([bytes(x) if isinstance(x, bytearray) else x for x in extra]), f, sort_keys=True)
    f.write("\n")
