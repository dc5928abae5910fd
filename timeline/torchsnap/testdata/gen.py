"""Writes torchsnap's test snapshots, shaped exactly as PyTorch's writer
shapes them (torch/csrc/cuda/Module.cpp, THCPModule_memorySnapshot, and
torch/csrc/profiler/combined_traceback.cpp's py_symbolize): a dict of
segments (with their blocks), device_traces (a list per device) and
allocator_settings; an oom entry has device_free in place of addr; one
list of frames per traceback, shared by the entries it caused, and one
dict per distinct frame, shared by the lists. Written as pickles of
protocols 2 to 5 (torch.cuda.memory._dump_snapshot uses pickle.dump),
as JSON (gzipped, as a large one travels), and a pickle gzipped; expected.json is the construction itself, which
the Go test compares with what it reads. Run from this directory:

    python3 gen.py
"""
import gzip
import json
import pickle

frame_cache = {}


def frame(filename, line, name):
    key = (filename, line, name)
    if key not in frame_cache:
        frame_cache[key] = {"filename": filename, "line": line, "name": name}
    return frame_cache[key]


def stack(*frames):
    return [frame(*f) for f in frames]


user = stack(("/home/u/model.py", 40, "forward"),
             ("/usr/lib/python3/dist-packages/torch/nn/modules/module.py", 1501, "_call_impl"),
             ("/home/u/train.py", 12, "step"))
mask = stack(("/home/u/model.py", 22, "build_mask"), ("/home/u/train.py", 12, "step"))
MB = 1 << 20
base = 0x7F0000000000
t0 = 1_733_000_000_000_000

trace0 = []
t = t0
trace0.append({"action": "segment_alloc", "addr": base, "size": 20 * MB, "stream": 0, "time_us": t, "frames": user})
for i in range(400):
    t += 10
    addr = base + (i % 10) * 2 * MB
    tb = user if i % 2 else mask  # one list per traceback, shared
    trace0.append({"action": "alloc", "addr": addr, "size": 2 * MB, "stream": 0, "time_us": t, "frames": tb})
    t += 10
    trace0.append({"action": "free_requested", "addr": addr, "size": 2 * MB, "stream": 0, "time_us": t, "frames": tb})
    trace0.append({"action": "free_completed", "addr": addr, "size": 2 * MB, "stream": 0, "time_us": t, "frames": tb})
t += 10
trace0.append({"action": "alloc", "addr": base, "size": 2 * MB, "stream": 0, "time_us": t, "frames": user, "new_field": 7})
t += 10
trace0.append({"action": "oom", "device_free": 3 * MB, "size": 64 * MB, "stream": 0, "time_us": t, "frames": user})
t += 10
trace0.append({"action": "segment_map", "addr": base + 64 * MB, "size": 2 * MB, "stream": 0, "time_us": t, "frames": []})
t += 10
trace0.append({"action": "segment_unmap", "addr": base + 64 * MB, "size": 2 * MB, "stream": 0, "time_us": t, "frames": []})
t += 10
trace0.append({"action": "snapshot", "addr": 0, "size": 0, "stream": 0, "time_us": t, "frames": []})

base2 = 0x7E0000000000
trace2 = []
for i in range(50):
    trace2.append({"action": "alloc", "addr": base2 + i * 512, "size": 512, "stream": 7, "time_us": t0 + i, "frames": mask})

snapshot = {
    "segments": [
        {"device": 0, "address": base, "total_size": 20 * MB, "allocated_size": 2 * MB, "active_size": 2 * MB,
         "requested_size": 2 * MB, "stream": 0, "segment_type": "large", "segment_pool_id": (0, 0),
         "is_expandable": False, "frames": user, "new_segment_field": "x",
         "blocks": [{"address": base, "size": 2 * MB, "requested_size": 2 * MB - 100, "state": "active_allocated", "frames": user},
                    {"address": base + 2 * MB, "size": 18 * MB, "requested_size": 0, "state": "inactive", "frames": []}]},
        {"device": 2, "address": base2, "total_size": 2 * MB, "allocated_size": 50 * 512, "active_size": 50 * 512,
         "requested_size": 50 * 512, "stream": 7, "segment_type": "small", "segment_pool_id": (1, 3),
         "is_expandable": True, "frames": mask, "blocks": []},
    ],
    "device_traces": [trace0, [], trace2],
    "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True", "max_split_size": -1,
                           "expandable_segments": True, "roundup_power2_divisions": {"1": 0}},
}

for proto in range(2, pickle.HIGHEST_PROTOCOL + 1):
    with open(f"snap.p{proto}.pickle", "wb") as f:
        pickle.dump(snapshot, f, protocol=proto)
with gzip.open("snap.p4.pickle.gz", "wb") as f:
    pickle.dump(snapshot, f, protocol=4)
with gzip.open("snap.json.gz", "wt") as f:
    json.dump(snapshot, f)

expected = {
    "segments": len(snapshot["segments"]),
    "devices": [0, 2],
    "entries": [len(trace0), len(trace2)],
    # Each entry as [action, addr (device_free for an oom), size,
    # time_us, stream, its frames as "file:line name" strings].
    "traces": [[[e["action"], e.get("addr", e.get("device_free")), e["size"], e["time_us"], e["stream"],
                 [f"{f['filename']}:{f['line']} {f['name']}" for f in e["frames"]]] for e in tr]
               for tr in (trace0, trace2)],
    "skipped": ["entry.new_field", "segments[].new_segment_field"],
}
with open("expected.json", "w") as f:
    json.dump(expected, f)

# A ring buffer that wrapped: _record_memory_history(max_entries=N) keeps
# the newest N entries. Dropping the first 30 of device 0's leaves its
# first entry the free_completed of the 10th block (allocated before the
# trace begins) and the segment at base never allocated in it: two things
# alive before the first entry.
wrapped = dict(snapshot)
wrapped["device_traces"] = [trace0[30:], [], trace2]
with open("snap.wrapped.p4.pickle", "wb") as f:
    pickle.dump(wrapped, f, protocol=4)
