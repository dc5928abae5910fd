#!/usr/bin/env python3
"""PyTorch's side of scripts/gpu-check.sh: the same model shape and request
as Linger's stress run, on the same GPU, with PyTorch.

A plain torch module of Linger's model shape (Qwen2-style: RMSNorm, grouped
query attention with RoPE, SwiGLU, tied or untied lm head) with random bf16
weights, a contiguous KV cache allocated up front as Linger's contiguous
layout does, a chunked prefill and greedy decode steps. Attention is
PyTorch's scaled_dot_product_attention with a lower-right causal bias (no
mask tensor, as Linger's fused attention) where the installed torch has it.

It measures what gpu-check.sh compares with Linger:
  - torch.cuda.max_memory_allocated and max_memory_reserved over the run;
  - prefill and decode tokens/s (wall time, the device synchronized);
  - the cost of recording: the run with
    torch.cuda.memory._record_memory_history on against off, the fastest of
    --repeat runs each, as a ratio, with the entries recorded and bytes per
    entry of the pickled snapshot.
and prints one JSON object (also written to --out).

With --snapshot PATH it also dumps, as a PyTorch user would, the memory
history of its last recorded run (torch.cuda.memory._dump_snapshot, or
pickle of _snapshot() where the torch has no _dump_snapshot), with the
peaks of that run alone (torch.cuda.max_memory_allocated/_reserved after
a reset of the peak stats just before it) and the card's total memory
(torch.cuda.mem_get_info), so that gpu-check.sh can import the snapshot
into Linger and compare: a real snapshot, read as a user's would be.

--device cpu runs the same code without the CUDA figures (a dry run of the
script on a machine without a GPU; torch >= 1.13).
"""

import argparse
import json
import math
import pickle
import sys
import time

import torch
import torch.nn.functional as F


def parse():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--layers", type=int, required=True)
    p.add_argument("--hidden", type=int, required=True)
    p.add_argument("--heads", type=int, required=True)
    p.add_argument("--kv-heads", type=int, required=True)
    p.add_argument("--head-dim", type=int, required=True)
    p.add_argument("--ffn", type=int, required=True)
    p.add_argument("--vocab", type=int, required=True)
    p.add_argument("--rope-theta", type=float, default=1e6)
    p.add_argument("--eps", type=float, default=1e-6)
    p.add_argument("--tied", action="store_true", help="lm head tied to the embedding")
    p.add_argument("--tokens", type=int, required=True, help="prompt tokens")
    p.add_argument("--chunk", type=int, default=2048)
    p.add_argument("--decode", type=int, default=16)
    p.add_argument("--overhead-tokens", type=int, default=0, help="prompt tokens of the recording-overhead runs (0: --tokens)")
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--device", default="cuda")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", default="")
    p.add_argument("--snapshot", default="", help="dump the last recorded run's memory snapshot here")
    return p.parse_args()


class Model:
    """Qwen2-shaped weights and a forward over a preallocated KV cache."""

    def __init__(self, a, dev, dtype):
        g = torch.Generator(device="cpu").manual_seed(a.seed)

        def w(*shape):
            fan_in = shape[-1]
            t = (torch.rand(*shape, generator=g) * 2 - 1) * math.sqrt(3 / fan_in)
            return t.to(dev, dtype)

        self.a, self.dev, self.dtype = a, dev, dtype
        qd, kvd = a.heads * a.head_dim, a.kv_heads * a.head_dim
        self.embed = w(a.vocab, a.hidden)
        self.layers = []
        for _ in range(a.layers):
            self.layers.append(dict(
                attn_norm=torch.ones(a.hidden, device=dev, dtype=dtype),
                wq=w(qd, a.hidden), wk=w(kvd, a.hidden), wv=w(kvd, a.hidden), wo=w(a.hidden, qd),
                ffn_norm=torch.ones(a.hidden, device=dev, dtype=dtype),
                gate=w(a.ffn, a.hidden), up=w(a.ffn, a.hidden), down=w(a.hidden, a.ffn)))
        self.norm = torch.ones(a.hidden, device=dev, dtype=dtype)
        self.lm_head = self.embed if a.tied else w(a.vocab, a.hidden)
        half = a.head_dim // 2
        self.inv_freq = (a.rope_theta ** (-torch.arange(0, half, dtype=torch.float64) * 2 / a.head_dim)).to(dev)
        self.bias = None
        try:
            from torch.nn.attention.bias import causal_lower_right  # torch >= 2.3
            self.bias = causal_lower_right
        except ImportError:
            pass
        self.sdpa = hasattr(F, "scaled_dot_product_attention")

    def rms(self, x, w):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.a.eps)).to(self.dtype) * w

    def rope(self, x, pos0):
        # x [T, heads, d], rotate-half, angles in f64 as Linger's
        T, d = x.shape[0], x.shape[-1]
        ang = torch.arange(pos0, pos0 + T, device=self.dev, dtype=torch.float64)[:, None] * self.inv_freq[None, :]
        cos, sin = ang.cos().float()[:, None, :], ang.sin().float()[:, None, :]
        x1, x2 = x[..., : d // 2].float(), x[..., d // 2:].float()
        return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1).to(self.dtype)

    def attend(self, q, k, v, pos0):
        # q [T, H, d]; k, v [S, KV, d], S = pos0 + T
        a = self.a
        T, S = q.shape[0], k.shape[0]
        q, k, v = q.transpose(0, 1)[None], k.transpose(0, 1)[None], v.transpose(0, 1)[None]
        group = a.heads // a.kv_heads
        if self.sdpa and self.bias is not None:
            try:
                o = F.scaled_dot_product_attention(q, k, v, attn_mask=self.bias(T, S), enable_gqa=True)
                return o[0].transpose(0, 1)
            except TypeError:  # no enable_gqa
                pass
        k = k.repeat_interleave(group, dim=1)
        v = v.repeat_interleave(group, dim=1)
        mask = torch.ones(T, S, dtype=torch.bool, device=self.dev).tril(diagonal=pos0)
        if self.sdpa:
            o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        else:
            s = (q.float() @ k.float().transpose(-1, -2)) / math.sqrt(a.head_dim)
            s = s.masked_fill(~mask, float("-inf"))
            o = (s.softmax(-1) @ v.float()).to(self.dtype)
        return o[0].transpose(0, 1)

    def new_cache(self, n):
        a = self.a
        return torch.empty(a.layers, 2, n, a.kv_heads, a.head_dim, device=self.dev, dtype=self.dtype)

    def forward(self, tokens, cache, pos0):
        a = self.a
        T = tokens.shape[0]
        x = self.embed[tokens]
        for l, L in enumerate(self.layers):
            h = self.rms(x, L["attn_norm"])
            q = self.rope((h @ L["wq"].T).view(T, a.heads, a.head_dim), pos0)
            k = self.rope((h @ L["wk"].T).view(T, a.kv_heads, a.head_dim), pos0)
            v = (h @ L["wv"].T).view(T, a.kv_heads, a.head_dim)
            cache[l, 0, pos0:pos0 + T] = k
            cache[l, 1, pos0:pos0 + T] = v
            del h, k, v
            o = self.attend(q, cache[l, 0, :pos0 + T], cache[l, 1, :pos0 + T], pos0)
            x = x + o.reshape(T, -1) @ L["wo"].T
            del q, o
            h = self.rms(x, L["ffn_norm"])
            g = F.silu(h @ L["gate"].T) * (h @ L["up"].T)
            x = x + g @ L["down"].T
            del h, g
        return self.rms(x[-1:], self.norm) @ self.lm_head.T


def sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def run(m, a, tokens, prompt):
    """One request: chunked prefill, greedy decode; returns its times."""
    dev = m.dev
    with torch.no_grad():
        cache = m.new_cache(prompt + a.decode)
        sync(dev)
        t0 = time.perf_counter()
        logits = None
        for lo in range(0, prompt, a.chunk):
            hi = min(lo + a.chunk, prompt)
            logits = m.forward(tokens[lo:hi], cache, lo)
        tok = logits.argmax(-1)
        sync(dev)
        t1 = time.perf_counter()
        for i in range(a.decode - 1):
            logits = m.forward(tok, cache, prompt + i)
            tok = logits.argmax(-1)
        sync(dev)
        t2 = time.perf_counter()
        del cache, logits
    return t1 - t0, t2 - t1


def main():
    a = parse()
    dev = torch.device(a.device)
    cuda = dev.type == "cuda"
    if cuda and not torch.cuda.is_available():
        print("gpu_check_torch: torch sees no CUDA device", file=sys.stderr)
        return 1
    dtype = torch.bfloat16
    torch.manual_seed(a.seed)
    res = {"torch": torch.__version__, "device": torch.cuda.get_device_name(dev) if cuda else "cpu",
           "tokens": a.tokens, "chunk": a.chunk, "decode": a.decode,
           "attention": "sdpa, causal_lower_right" if hasattr(F, "scaled_dot_product_attention") else "matmul+softmax"}
    m = Model(a, dev, dtype)
    if m.bias is None:
        res["attention"] = "sdpa with a bool mask per chunk (no causal_lower_right in this torch)" if m.sdpa else "matmul+softmax, a bool mask per chunk"
    tokens = torch.randint(0, a.vocab, (a.tokens,), generator=torch.Generator().manual_seed(a.seed)).to(dev)
    weights = sum(t.numel() * t.element_size() for L in m.layers for t in L.values())
    weights += m.embed.numel() * 2 + (0 if a.tied else m.lm_head.numel() * 2) + m.norm.numel() * 2
    res["weight_bytes"] = weights

    if cuda:
        torch.cuda.reset_peak_memory_stats(dev)
    prefill, decode = run(m, a, tokens, a.tokens)
    res["prefill_s"] = prefill
    res["decode_s"] = decode
    res["prefill_tokens_per_second"] = a.tokens / prefill
    res["decode_tokens_per_second"] = (a.decode - 1) / decode if a.decode > 1 and decode > 0 else 0
    if cuda:
        res["max_memory_allocated"] = torch.cuda.max_memory_allocated(dev)
        res["max_memory_reserved"] = torch.cuda.max_memory_reserved(dev)

    # Recording overhead: the same request without and with the memory
    # history, alternating, the fastest of each.
    n = a.overhead_tokens or a.tokens
    off, on, entries, snap_bytes = [], [], 0, 0
    for i in range(a.repeat):
        p, d = run(m, a, tokens[:n], n)
        off.append(p + d)
        last = i == a.repeat - 1
        if cuda:
            if last and a.snapshot:
                torch.cuda.synchronize(dev)
                torch.cuda.reset_peak_memory_stats(dev)
            torch.cuda.memory._record_memory_history(max_entries=10_000_000)
        p, d = run(m, a, tokens[:n], n)
        on.append(p + d)
        if cuda:
            snap = torch.cuda.memory._snapshot()
            if last and a.snapshot:
                # The peaks of the recorded run alone, and the card's
                # memory, which a snapshot does not record.
                res["snapshot_max_allocated"] = torch.cuda.max_memory_allocated(dev)
                res["snapshot_max_reserved"] = torch.cuda.max_memory_reserved(dev)
                res["device_total"] = torch.cuda.mem_get_info(dev)[1]
                if hasattr(torch.cuda.memory, "_dump_snapshot"):
                    torch.cuda.memory._dump_snapshot(a.snapshot)
                else:
                    with open(a.snapshot, "wb") as f:
                        pickle.dump(snap, f)
                res["snapshot"] = a.snapshot
            torch.cuda.memory._record_memory_history(enabled=None)
            entries = sum(len(t) for t in snap.get("device_traces", []))
            snap_bytes = len(pickle.dumps(snap))
            res["snapshot_entries"] = entries
            del snap
    res["overhead_tokens"] = n
    res["run_s_record_off"] = min(off)
    res["run_s_record_on"] = min(on)
    res["record_overhead_ratio"] = min(on) / min(off)
    res["record_entries"] = entries
    res["record_bytes_per_entry"] = snap_bytes / entries if entries else 0
    line = json.dumps(res)
    print(line)
    if a.out:
        with open(a.out, "w") as f:
            f.write(line + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
