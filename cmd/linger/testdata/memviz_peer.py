"""What PyTorch's own reader, torch.cuda._memory_viz, reports of a memory
snapshot and of Linger's export of it (cmd/linger's TestRoundTrip runs it
with Debian's python3-torch, 1.13).

    memviz_peer.py ORIGINAL DEVICE EXPORT.pickle EXPORT.json [ORIGINAL ...]

1.13's reader takes a list of segments (torch.cuda.memory_snapshot()): its
stats(), segments() and compare() are given the file's "segments", as a
user of 1.13 would pass them; segments() gets a format_flamegraph that
returns its folded lines rather than running flamegraph.pl. ORIGINAL is
loaded as 1.13's command line loads a file, with pickle.load, which fails
for JSON and gzip. Prints a JSON list, one object per four arguments
(torch is imported once):

    {"torch": version, "reader": the _memory_viz file,
     "original": {"protocol", "stats", "folded"} or {"error"},
     "export": {"protocol", "stats", "folded", "compare", "trace",
                "device_free", "keys", "json_equal"}}

stats are in bytes; compare is 1.13's compare() of the original's
segments of DEVICE with the export's: the segments only in one of them;
trace counts the export's entries by action, [entries, bytes].
"""
import contextlib
import io
import json
import pickle
import pickletools
import sys

import torch
import torch.cuda._memory_viz as memviz


def protocol(path):
    with open(path, "rb") as f:
        op, arg, _ = next(pickletools.genops(f))
    return arg if op.name == "PROTO" else None


def stats(segments):
    return {k: v if isinstance(v, int) else v.value for k, v in memviz.stats(segments).items()}


def folded(segments):
    return memviz.segments(segments, format_flamegraph=lambda lines: lines).splitlines()


def compare(before, after):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        memviz.compare(before, after, format_flamegraph=lambda lines: lines)
    got = {}
    for line in out.getvalue().splitlines():
        k, _, v = line.partition(" = ")
        got[k] = sorted(json.loads(v))
    return got


def lists(v):
    if isinstance(v, (list, tuple)):
        return [lists(x) for x in v]
    if isinstance(v, dict):
        return {k: lists(x) for k, x in v.items()}
    return v


def report(original, device, exported, exported_json):
    res = {"torch": torch.__version__, "reader": memviz.__file__}
    before = None
    try:
        with open(original, "rb") as f:
            o = pickle.load(f)
        before = [s for s in o["segments"] if s["device"] == device]
        res["original"] = {"protocol": protocol(original), "stats": stats(o["segments"]), "folded": folded(o["segments"])}
    except Exception as e:  # what 1.13's command line would stop at
        res["original"] = {"error": f"{type(e).__name__}: {e}"}
    with open(exported, "rb") as f:
        x = pickle.load(f)
    with open(exported_json) as f:
        j = json.load(f)
    trace = {}
    for e in x["device_traces"][0]:
        n = trace.setdefault(e["action"], [0, 0])
        n[0] += 1
        n[1] += e["size"]
    res["export"] = {
        "protocol": protocol(exported),
        "keys": sorted(x),
        "stats": stats(x["segments"]),
        "folded": folded(x["segments"]),
        "compare": compare(before, x["segments"]) if before is not None else None,
        "trace": trace,
        "device_free": [e["device_free"] for e in x["device_traces"][0] if e["action"] == "oom"],
        "json_equal": lists(x) == j,
    }
    return res


if __name__ == "__main__":
    a = sys.argv[1:]
    if not a or len(a) % 4:
        sys.exit(__doc__)
    json.dump([report(a[i], int(a[i + 1]), a[i + 2], a[i + 3]) for i in range(0, len(a), 4)], sys.stdout)
