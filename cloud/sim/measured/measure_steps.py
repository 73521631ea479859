#!/usr/bin/env python3
"""Times real transformer engine steps on a GPU, for calibrating cloud/sim.

The simulator prices a step by a roofline (cloud/sim/profile.go, Deployment.Cost):
compute at PeakFLOPS x ComputeEff, attention at PeakFLOPS x AttnEff, weights and
KV at HBM bandwidth x MemEff, plus a fixed StepOverhead. This script measures
what those efficiencies are on a real chip instead of assuming them: it builds a
Llama-style decoder (random bf16 weights, the exact shapes of the simulator's
model profiles), and times whole engine steps of the kinds the simulator prices:

  prefill   one sequence, a chunk of N new tokens after P cached ones
  decode    B sequences, one new token each, each attending to L cached tokens
  mixed     B decodes plus one prefill chunk of C tokens in the same step
            (chunked prefill, as vLLM batches them)

A step is: embedding lookup, per layer RMSNorm, fused QKV projection, RoPE,
writing the new K/V into the cache, attention (PyTorch's fused
scaled_dot_product_attention: flash on Hopper), output projection, RMSNorm,
fused gate/up projection, SiLU-and-multiply, down projection; then the final
norm and the LM head for the sampled rows (one per sequence). What it leaves
out and the simulator's StepOverhead stands for: sampling, the scheduler,
detokenization and the API server; paged-KV indirection (the cache here is
contiguous per sequence, as FlashAttention's non-paged path reads it).

Decode steps are timed as CUDA graph replays (vLLM captures decode batches in
graphs) and eagerly; prefill and mixed steps eagerly (launch cost is small
against their compute). A tensor-parallel shard is timed as the per-GPU share
of the layer (heads and FFN divided by TP) on one GPU: the all-reduce between
GPUs is not measured here (one GPU) and stays the simulator's link model.

Output: one JSON object per line (config, reference and step records) to the
file given by --out, flushed as it goes, so a run cut short keeps what it
measured. --budget-s stops starting new measurements past that many seconds.

Run (on a machine with a CUDA GPU and PyTorch >= 2.5):
    python3 cloud/sim/measured/measure_steps.py --out h200-steps.jsonl
A quick check of the script itself on a CPU (tiny shapes, no timing value):
    python3 cloud/sim/measured/measure_steps.py --smoke --out /tmp/smoke.jsonl
"""

import argparse
import json
import math
import os
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

# The simulator's model profiles (cloud/sim/profile.go; each model's
# config.json). Params are used only to report the matrix FLOPs the
# simulator would count.
MODELS = {
    "llama3.1-8b": dict(layers=32, hidden=4096, heads=32, kv_heads=8, head_dim=128, ffn=14336, vocab=128256),
    "qwen2.5-7b": dict(layers=28, hidden=3584, heads=28, kv_heads=4, head_dim=128, ffn=18944, vocab=152064),
    "llama3.1-70b": dict(layers=80, hidden=8192, heads=64, kv_heads=8, head_dim=128, ffn=28672, vocab=128256),
}

# What to time per (model, tp). Decode (B, L) pairs past the KV budget are
# skipped. The lists are chosen to span the simulator's operating range:
# batch 1 (pure weight streaming) to 256 (vLLM's default max_num_seqs),
# contexts of a chat turn to a long document.
PLAN = [
    ("llama3.1-8b", 1),
    ("qwen2.5-7b", 1),
    ("llama3.1-8b", 2),
    ("llama3.1-70b", 4),
]
PREFILL = [(128, 0), (512, 0), (1024, 0), (2048, 0), (4096, 0), (8192, 0), (2048, 2048), (2048, 8192), (512, 16384)]
DECODE_B = [1, 4, 16, 32, 64, 128, 256]
DECODE_L = [256, 1024, 4096, 16384]
MIXED = [(32, 1024, 512), (64, 2048, 2048), (128, 1024, 1024), (16, 4096, 8192)]  # (B, L, C)

KV_BUDGET_BYTES = 48e9  # largest KV cache allocated for one decode shape


def rms_norm(x, w, eps=1e-5):
    v = x.float().pow(2).mean(-1, keepdim=True)
    return (x.float() * torch.rsqrt(v + eps)).to(x.dtype) * w


def rope(x, pos, theta=500000.0):
    # x: [B, H, T, D]; pos: [B, T] absolute positions. Rotates half pairs
    # (the GPT-NeoX layout Llama's HF weights use).
    d = x.shape[-1]
    inv = 1.0 / (theta ** (torch.arange(0, d, 2, device=x.device, dtype=torch.float32) / d))
    ang = pos.float()[:, None, :, None] * inv  # [B,1,T,D/2]
    cos, sin = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
    x1, x2 = x[..., : d // 2], x[..., d // 2 :]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


# Whether this PyTorch's fused attention takes enable_gqa, per kind of call
# (with a mask, without): cleared at the first refusal.
_sdpa_gqa = {True: True, False: True}


def attention(q, k, v, causal, gqa):
    """Attention of q's tokens, the last of the cached positions, to every
    cached position up to their own (causal: bottom-right aligned, as a
    prefill chunk after cached tokens needs)."""
    tq, tk = q.shape[2], k.shape[2]
    mask, is_causal = None, causal
    if causal and tq != tk:
        try:
            from torch.nn.attention.bias import causal_lower_right
            mask, is_causal = causal_lower_right(tq, tk), False
        except ImportError:
            mask = None
    if hasattr(F, "scaled_dot_product_attention") and (mask is not None or not (causal and tq != tk)):
        if gqa and _sdpa_gqa[mask is not None]:
            try:
                return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal, enable_gqa=True)
            except (TypeError, RuntimeError) as e:
                print(f"sdpa enable_gqa refused (mask: {mask is not None}): {e}; repeating KV heads", file=sys.stderr)
                _sdpa_gqa[mask is not None] = False
        if gqa:
            rep = q.shape[1] // k.shape[1]
            k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal)
    rep = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(rep, dim=1)
    v = v.repeat_interleave(rep, dim=1)
    s = (q.float() @ k.float().transpose(-1, -2)) / math.sqrt(q.shape[-1])
    if causal:
        m = torch.ones(tq, tk, dtype=torch.bool, device=q.device).tril(tk - tq)
        s = s.masked_fill(~m, float("-inf"))
    return (s.softmax(-1) @ v.float()).to(q.dtype)


class Shard:
    """One GPU's share of a model at tensor-parallel degree tp: every layer's
    heads and FFN divided by tp (KV heads replicated when fewer than tp)."""

    def __init__(self, m, tp, device, dtype, layers=None):
        self.hidden = m["hidden"]
        self.heads = m["heads"] // tp
        self.kv_heads = max(1, m["kv_heads"] // tp)
        self.d = m["head_dim"]
        self.ffn = m["ffn"] // tp
        self.vocab = m["vocab"] // tp  # vLLM shards the LM head by vocabulary
        self.layers = layers or m["layers"]
        self.device, self.dtype = device, dtype
        qkv = (self.heads + 2 * self.kv_heads) * self.d

        def w(*shape):
            t = torch.empty(*shape, device=device, dtype=dtype)
            return t.normal_(0, 0.02)

        self.embed = w(m["vocab"], self.hidden)
        self.lm_head = w(self.vocab, self.hidden)
        self.final_norm = torch.ones(self.hidden, device=device, dtype=dtype)
        self.L = []
        for _ in range(self.layers):
            self.L.append(dict(
                n1=torch.ones(self.hidden, device=device, dtype=dtype),
                qkv=w(qkv, self.hidden),
                o=w(self.hidden, self.heads * self.d),
                n2=torch.ones(self.hidden, device=device, dtype=dtype),
                gu=w(2 * self.ffn, self.hidden),
                down=w(self.hidden, self.ffn),
            ))

    def kv_bytes_per_token(self):
        return 2 * self.layers * self.kv_heads * self.d * torch.finfo(self.dtype).bits // 8

    def matrix_params(self):
        h, d = self.hidden, self.d
        per = (self.heads + 2 * self.kv_heads) * d * h + self.heads * d * h + 3 * self.ffn * h
        return per * self.layers

    def new_cache(self, seqs, ctx):
        # Per layer K and V: [seqs, kv_heads, ctx, d].
        shape = (seqs, self.kv_heads, ctx, self.d)
        return [(torch.zeros(shape, device=self.device, dtype=self.dtype),
                 torch.zeros(shape, device=self.device, dtype=self.dtype)) for _ in range(self.layers)]

    def layer(self, lw, x, groups):
        """x: [T, hidden], the step's tokens. groups: list of (rows, cache
        K, cache V, start, n, batch): rows = slice of x, a batch of `batch`
        sequences each with n new tokens written at position start of its
        cache and attending to start+n positions."""
        h = rms_norm(x, lw["n1"])
        qkv = h @ lw["qkv"].t()
        outs = []
        for rows, kc, vc, start, n, b in groups:
            part = qkv[rows].view(b, n, self.heads + 2 * self.kv_heads, self.d).transpose(1, 2)
            q = part[:, : self.heads]
            k = part[:, self.heads : self.heads + self.kv_heads]
            v = part[:, self.heads + self.kv_heads :]
            pos = torch.arange(start, start + n, device=x.device).expand(b, n)
            q, k = rope(q, pos), rope(k, pos)
            kc[:b, :, start : start + n] = k
            vc[:b, :, start : start + n] = v
            a = attention(q, kc[:b, :, : start + n], vc[:b, :, : start + n], causal=n > 1, gqa=self.heads != self.kv_heads)
            outs.append(a.transpose(1, 2).reshape(b * n, self.heads * self.d))
        a = torch.cat(outs) if len(outs) > 1 else outs[0]
        x = x + a @ lw["o"].t()
        h = rms_norm(x, lw["n2"])
        gu = h @ lw["gu"].t()
        g, u = gu[:, : self.ffn], gu[:, self.ffn :]
        return x + (F.silu(g) * u) @ lw["down"].t()

    def step(self, ids, groups, caches, sample_rows):
        x = self.embed[ids]
        for i, lw in enumerate(self.L):
            g = [(r, caches[j][i][0], caches[j][i][1], s, n, b) for j, (r, s, n, b) in enumerate(groups)]
            x = self.layer(lw, x, g)
        h = rms_norm(x[sample_rows], self.final_norm)
        return h @ self.lm_head.t()


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def time_fn(fn, device, reps, warm):
    """Median seconds of fn over reps runs after warm warm-ups."""
    for _ in range(warm):
        fn()
    sync(device)
    ts = []
    for _ in range(reps):
        if device.type == "cuda":
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            ts.append(a.elapsed_time(b) / 1e3)
        else:
            t = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t)
    ts.sort()
    return ts[len(ts) // 2], ts[0], ts[-1]


def graphed(fn, device):
    """fn captured in a CUDA graph; returns the replay, or None when capture
    fails (the record then says graph: false)."""
    if device.type != "cuda":
        return None
    try:
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(2):
                fn()
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            fn()
        return g.replay
    except Exception as e:  # noqa: BLE001 - recorded, not fatal
        print(f"graph capture failed: {e}", file=sys.stderr)
        return None


class Out:
    def __init__(self, path):
        self.f = open(path, "a", buffering=1)

    def write(self, **rec):
        self.f.write(json.dumps(rec) + "\n")
        self.f.flush()
        print(json.dumps(rec), flush=True)


def reference(out, device, dtype, smoke):
    """Achievable peaks on this chip, measured the same way: a large bf16
    matrix product and a device-to-device copy."""
    n = 256 if smoke else 8192
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    med, lo, hi = time_fn(lambda: a @ b, device, 3 if smoke else 10, 1 if smoke else 3)
    out.write(kind="reference", what="matmul", n=n, seconds=med, flops_per_s=2 * n**3 / med)
    nbytes = (1 << 20) if smoke else (4 << 30)
    src = torch.empty(nbytes // 2, device=device, dtype=dtype)
    dst = torch.empty_like(src)
    med, lo, hi = time_fn(lambda: dst.copy_(src), device, 3 if smoke else 10, 1 if smoke else 3)
    out.write(kind="reference", what="copy", bytes=nbytes, seconds=med, bytes_per_s=2 * nbytes / med)
    del a, b, src, dst


def measure_model(out, name, tp, device, dtype, args, deadline):
    m = MODELS[name]
    layers = 2 if args.smoke else None
    if args.smoke:
        m = dict(layers=2, hidden=256, heads=8, kv_heads=2, head_dim=32, ffn=512, vocab=1000)
    t0 = time.time()
    sh = Shard(m, tp, device, dtype, layers)
    sync(device)
    base = dict(model=name, tp=tp, layers=sh.layers, matrix_params=sh.matrix_params(),
                lm_head_params=sh.vocab * sh.hidden, kv_bytes_per_token=sh.kv_bytes_per_token())
    out.write(kind="model", init_s=time.time() - t0, **base)
    reps, warm = (2, 1) if args.smoke else (args.reps, 3)
    scale = 16 if args.smoke else 1  # smoke: shrink token counts

    def over():
        return time.time() > deadline

    # Prefill: one sequence, n new tokens after p cached ones.
    for n, p in PREFILL:
        if over():
            return
        n, p = max(1, n // scale), p // scale
        cache = sh.new_cache(1, p + n)
        ids = torch.randint(0, m["vocab"], (n,), device=device)
        groups = [(slice(0, n), p, n, 1)]
        rows = torch.tensor([n - 1], device=device)
        with torch.inference_mode():
            med, lo, hi = time_fn(lambda: sh.step(ids, groups, [cache], rows), device, reps, warm)
        out.write(kind="prefill", tokens=n, cached=p, sampled=1, seconds=med, min_s=lo, max_s=hi, graph=False, **base)
        del cache

    # Decode: b sequences, each one new token at position l (attends to l+1).
    for b in DECODE_B:
        for l in DECODE_L:
            if over():
                return
            b2, l2 = b, max(2, l // scale)
            if b2 * (l2 + 1) * sh.kv_bytes_per_token() > KV_BUDGET_BYTES:
                continue
            cache = sh.new_cache(b2, l2 + 1)
            ids = torch.randint(0, m["vocab"], (b2,), device=device)
            groups = [(slice(0, b2), l2, 1, b2)]
            rows = torch.arange(b2, device=device)
            with torch.inference_mode():
                fn = lambda: sh.step(ids, groups, [cache], rows)  # noqa: E731
                med, lo, hi = time_fn(fn, device, reps, warm)
                out.write(kind="decode", batch=b2, context=l2, tokens=b2, sampled=b2, seconds=med, min_s=lo, max_s=hi, graph=False, **base)
                g = graphed(fn, device)
                if g is not None:
                    med, lo, hi = time_fn(g, device, reps, warm)
                    out.write(kind="decode", batch=b2, context=l2, tokens=b2, sampled=b2, seconds=med, min_s=lo, max_s=hi, graph=True, **base)
                del g
            del cache
            if device.type == "cuda":
                torch.cuda.empty_cache()

    # Mixed: b decodes at context l plus one prefill chunk of c new tokens
    # (attending to itself only: a fresh prompt's first chunk).
    for b, l, c in MIXED:
        if over():
            return
        l2, c2 = max(2, l // scale), max(1, c // scale)
        dcache = sh.new_cache(b, l2 + 1)
        pcache = sh.new_cache(1, c2)
        ids = torch.randint(0, m["vocab"], (b + c2,), device=device)
        groups = [(slice(0, b), l2, 1, b), (slice(b, b + c2), 0, c2, 1)]
        rows = torch.arange(b + 1, device=device)
        rows[-1] = b + c2 - 1
        with torch.inference_mode():
            med, lo, hi = time_fn(lambda: sh.step(ids, groups, [dcache, pcache], rows), device, reps, warm)
        out.write(kind="mixed", batch=b, context=l2, chunk=c2, tokens=b + c2, sampled=b + 1, seconds=med, min_s=lo, max_s=hi, graph=False, **base)
        del dcache, pcache
    del sh
    if device.type == "cuda":
        torch.cuda.empty_cache()


# Component timings: the roofline's terms measured apart, each over all of a
# shard's layers and captured in a CUDA graph (so launch cost is the GPU's
# own, as in an engine that graphs or fuses), to separate what the whole-step
# records mix: matrix products at M tokens (ComputeEff when M is large, weight
# streaming when it is small) and attention (decode: KV read at B x L;
# prefill: N new tokens after P cached).
LINEAR_M = [1, 4, 16, 64, 256, 512, 1024, 2048, 4096, 8192]
ATTN_DECODE = [(1, 1024), (16, 1024), (64, 1024), (256, 1024), (16, 4096), (64, 4096), (16, 16384), (64, 16384)]
ATTN_PREFILL = [(512, 0), (2048, 0), (8192, 0), (2048, 8192), (512, 16384)]
L2_BYTES = 200e6  # working set kept above the H200's 60 MB L2 (and any other's)


def timed_graph(fn, device, reps, warm):
    g = graphed(fn, device)
    med, lo, hi = time_fn(g or fn, device, reps, warm)
    return med, lo, hi, g is not None


def measure_components(out, name, tp, device, dtype, args, deadline):
    m = MODELS[name]
    if args.smoke:
        m = dict(layers=2, hidden=256, heads=8, kv_heads=2, head_dim=32, ffn=512, vocab=1000)
    sh = Shard(m, tp, device, dtype, 2 if args.smoke else None)
    base = dict(model=name, tp=tp, layers=sh.layers, matrix_params=sh.matrix_params(), kv_bytes_per_token=sh.kv_bytes_per_token())
    reps, warm = (2, 1) if args.smoke else (args.reps, 3)
    scale = 16 if args.smoke else 1
    H, KV, D = sh.heads, sh.kv_heads, sh.d
    with torch.inference_mode():
        for M in LINEAR_M:
            if time.time() > deadline:
                return
            M = max(1, M // scale)
            x = torch.randn(M, sh.hidden, device=device, dtype=dtype)
            a = torch.randn(M, H * D, device=device, dtype=dtype)
            act = torch.randn(M, sh.ffn, device=device, dtype=dtype)

            def lin():
                for lw in sh.L:
                    x @ lw["qkv"].t()
                    a @ lw["o"].t()
                    x @ lw["gu"].t()
                    act @ lw["down"].t()
            med, lo, hi, gr = timed_graph(lin, device, reps, warm)
            out.write(kind="linear", tokens=M, seconds=med, min_s=lo, max_s=hi, graph=gr, **base)
            del x, a, act
        per_tok_layer = 2 * KV * D * torch.finfo(dtype).bits // 8  # K and V of one token, one layer

        def bufs(seqs, ctx):
            n = max(1, min(sh.layers, math.ceil(L2_BYTES / max(1, seqs * ctx * per_tok_layer))))
            shape = (seqs, KV, ctx, D)
            return [(torch.randn(shape, device=device, dtype=dtype), torch.randn(shape, device=device, dtype=dtype)) for _ in range(n)]

        for b, l in ATTN_DECODE:
            if time.time() > deadline:
                return
            l = max(2, l // scale)
            if b * l * per_tok_layer * min(sh.layers, 8) > KV_BUDGET_BYTES:
                continue
            kv = bufs(b, l)
            q = torch.randn(b, H, 1, D, device=device, dtype=dtype)

            def dec():
                for i in range(sh.layers):
                    k, v = kv[i % len(kv)]
                    attention(q, k, v, causal=False, gqa=H != KV)
            med, lo, hi, gr = timed_graph(dec, device, reps, warm)
            out.write(kind="attn_decode", batch=b, context=l, seconds=med, min_s=lo, max_s=hi, graph=gr, **base)
            del kv, q
        for n, p in ATTN_PREFILL:
            if time.time() > deadline:
                return
            n, p = max(1, n // scale), p // scale
            kv = bufs(1, p + n)
            q = torch.randn(1, H, n, D, device=device, dtype=dtype)

            def pre():
                for i in range(sh.layers):
                    k, v = kv[i % len(kv)]
                    attention(q, k, v, causal=True, gqa=H != KV)
            med, lo, hi, gr = timed_graph(pre, device, reps, warm)
            pairs = n * p + n * (n + 1) / 2  # attended (query, key) pairs
            out.write(kind="attn_prefill", tokens=n, cached=p, pairs=pairs, seconds=med, min_s=lo, max_s=hi, graph=gr, **base)
            del kv, q
    del sh
    if device.type == "cuda":
        torch.cuda.empty_cache()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--budget-s", type=float, default=420)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--smoke", action="store_true", help="tiny shapes on any device: checks the script, not the chip")
    ap.add_argument("--parts", default="steps,components", help="what to time: steps, components or both")
    ap.add_argument("--only", default="", help="comma-separated model:tp entries of the plan to run")
    args = ap.parse_args()
    start = time.time()
    deadline = start + args.budget_s
    device = torch.device("cuda" if torch.cuda.is_available() and not args.smoke else "cpu")
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    out = Out(args.out)
    info = dict(kind="config", torch=torch.__version__, device=str(device), dtype=str(dtype),
                started=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(start)))
    if device.type == "cuda":
        p = torch.cuda.get_device_properties(0)
        info.update(gpu=p.name, sms=p.multi_processor_count, mem_bytes=p.total_memory,
                    flash=torch.backends.cuda.flash_sdp_enabled())
        try:
            info["nvidia_smi"] = subprocess.run(
                ["nvidia-smi", "--query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem,power.limit", "--format=csv,noheader"],
                capture_output=True, text=True, timeout=20).stdout.strip()
        except Exception as e:  # noqa: BLE001
            info["nvidia_smi"] = f"unavailable: {e}"
    out.write(**info)
    torch.manual_seed(1)
    parts = set(args.parts.split(","))
    with torch.inference_mode():
        reference(out, device, dtype, args.smoke)
    plan = PLAN
    if args.only:
        want = {tuple(x.split(":")) for x in args.only.split(",")}
        plan = [(n, t) for n, t in PLAN if (n, str(t)) in want]
    for name, tp in plan:
        if time.time() > deadline:
            out.write(kind="stopped", reason="budget", before=f"{name}:{tp}")
            break
        try:
            if "steps" in parts:
                measure_model(out, name, tp, device, dtype, args, deadline)
            if "components" in parts:
                measure_components(out, name, tp, device, dtype, args, deadline)
        except torch.cuda.OutOfMemoryError as e:  # recorded; the next model still runs
            out.write(kind="error", model=name, tp=tp, error=str(e)[:300])
            torch.cuda.empty_cache()
    out.write(kind="done", seconds=time.time() - start, sdpa_gqa={"masked": _sdpa_gqa[True], "unmasked": _sdpa_gqa[False]})


if __name__ == "__main__":
    main()
