"""attend against FlashMLA in one process, on the same tokens, every timed output checked
(BENCHMARKS.md; issues 34 and 35).

Data: random latents with log-normal per-token magnitudes (sigma 0.5) in every record a call can
read, RoPE included: a cache of 4 M tokens written twice, as 368-byte per-token records (the plugin's
writer) and as 656-byte fp8_ds_mla records (FlashMLA's rule: power-of-two tile scales,
docs/record-format.md); top-k 2048 random slots per query.

1. Decode grid, as a serving engine replays it: each side's call captured `--calls` times in one CUDA
   graph on a side stream and replayed between CUDA events (GPU time per call, no host time), the
   two sides' replays interleaved (ABAB...), median and range printed. Batch 1, 2, 4, 8, 16, 32, 64,
   128 x h 16, 32, 64, 128, and two queries per sequence (MTP, FlashMLA's s_q = 2; attend takes the
   2b queries) for batch 1-32. FlashMLA: sparse_decode_fwd on the 656 bytes (its metadata computed
   before capture, as vLLM does; h < 64 padded to 64, printed); attend on the 368 bytes.
   Check: every query of the timed attend output against FlashMLA's sparse_prefill_fwd over the same
   368-byte records dequantised to bf16 by the plugin's gather (attend reads the records' binary32
   values, the gathered cache their bf16 rounding: keys and values differ by up to 2^-9 relative).
   `--flush-l2`: a 256 MB write before every call inside the graph, its own time subtracted (a graph
   of the writes alone).
2. Batch 128, back-to-back eager launches: FlashMLA, attend on the same 656 bytes (checked against
   FlashMLA's output) and attend on the 368 bytes (checked as in 1), interleaved.
3. Prefill / extend, 4096 query tokens: FlashMLA's bf16 prefill over the gathered cache, attend on the
   368 records (every query checked against that prefill), and gather + prefill.
The check of a row: relative RMS error ||got - ref|| / ||ref|| and max |got - ref| over the row's max
|ref|, the worst row printed. Bounds: 1e-2 where both sides read the same bytes (attend and FlashMLA on
the 656 records); 5e-2 against the bf16-gathered reference, whose own rounding of keys and values
moves rows by up to ~1e-2 on this data (the CPU backend's float64 attention over the records'
binary32 values against the same bf16 reference: 0.4-1.0e-2 worst over 16 rows), more in the tails
of thousands of rows. The GPU tests (tests/test_gpu_attend*.c) hold the kernels to the CPU
reference over the same values, tighter. TFLOP/s count real heads for both sides.

Usage (GPU machine; FlashMLA from tools/flashmla-fetch (into .anchor/) or an installed vLLM):
  NVFP4_MLA_PLUGIN=build-gpu/plugin PYTHONPATH=host_shims/python \\
      python3 bench/flashmla_compare.py [--flashmla .anchor/_flashmla_C.abi3.so] [--json out.json]
"""
import argparse
import json
import math
import statistics
import sys

import torch

import nvfp4_mla
from nvfp4_mla import _abi

D, DV, TOPK = 576, 512, 2048
SAME_BYTES = (1e-2, 1e-2)    # (relative RMS, max over the row's max): both sides read the same records
BF16_GATHERED = (5e-2, 5e-2)  # against FlashMLA's prefill over the records gathered to bf16


def load_flashmla(path):
    if path:
        torch.ops.load_library(path)
    else:
        import vllm._flashmla_C  # noqa: F401  (registers torch.ops._flashmla_C)
    return torch.ops._flashmla_C


def spread(samples):
    return {"median": statistics.median(samples), "min": min(samples), "max": max(samples)}


def interleaved(fns, reps, warmup=2):
    """Times each fn (returns microseconds per call) `reps` times, the fns alternating."""
    for _ in range(warmup):
        for fn in fns:
            fn()
    samples = [[] for _ in fns]
    for _ in range(reps):
        for i, fn in enumerate(fns):
            samples[i].append(fn())
    return [spread(s) for s in samples]


def event_us(body, calls):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    body()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1000.0 / calls


class Graph:
    """`calls` captures of fn (after flush() when given) in one CUDA graph on a side stream."""

    def __init__(self, fn, calls, side, flush=None):
        self.g, self.calls = torch.cuda.CUDAGraph(), calls
        with torch.cuda.graph(self.g, stream=side):
            for _ in range(calls):
                if flush:
                    flush()
                fn()

    def time(self):
        return event_us(self.g.replay, self.calls)


def fp8_ds_mla_records(x):
    """FlashMLA's quantiser: x [n, 576] bf16 -> [n, 656] uint8 (power-of-two tile scales)."""
    n = x.shape[0]
    lat = x[:, :DV].float().view(n, 4, 128)
    amax = lat.abs().amax(dim=2)
    scale = torch.exp2(torch.ceil(torch.log2(torch.clamp(amax / 448.0, min=1e-4))))
    codes = (lat / scale[:, :, None]).to(torch.float8_e4m3fn).view(torch.uint8).view(n, DV)
    rec = torch.empty(n, 656, dtype=torch.uint8, device=x.device)
    rec[:, :DV] = codes
    rec[:, DV:528] = scale.contiguous().view(torch.uint8).view(n, 16)
    rec[:, 528:] = x[:, DV:].contiguous().view(torch.uint8).view(n, 128)
    return rec


def make_tokens(n, gen, fn, chunk=1 << 20):
    """Calls fn(first, x) for chunks of n random tokens x [chunk, 576] bf16 (norms vary per token)."""
    for first in range(0, n, chunk):
        m = min(chunk, n - first)
        x = torch.randn(m, D, device="cuda", generator=gen)
        x *= torch.exp(0.5 * torch.randn(m, 1, device="cuda", generator=gen))
        fn(first, x.to(torch.bfloat16))


def prepared_attend(ctx, q, slots, cache, out, layout, scale_mode, sm_scale, stream):
    """attend as the shim's prepared call (the argument struct built and checked once, its workspace
    held by the call): what the timings and graphs call, so host work stays out of kernel time."""
    return ctx.prepare_attend(q, slots, cache, out, layout=layout, scale_mode=scale_mode, sm_scale=sm_scale,
                              stream=stream).run


def launches_us(fn, launches):
    """A timer for `interleaved`: us per call of `launches` back-to-back calls of fn between events."""
    return lambda: event_us(lambda: [fn() for _ in range(launches)], launches)


def row_check(got, ref, bounds=BF16_GATHERED):
    """Worst row of (relative RMS error, max error over the row's max |ref|); PASS within `bounds`."""
    got, ref = got.float().reshape(-1, DV), ref.float().reshape(-1, DV)
    err = got - ref
    ref_norm = ref.norm(dim=1).clamp_min(1e-30)
    rms = (err.norm(dim=1) / ref_norm).max().item()
    mx = (err.abs().amax(dim=1) / ref.abs().amax(dim=1).clamp_min(1e-30)).max().item()
    finite = bool(torch.isfinite(got).all().item())
    mean = (err.norm(dim=1) / ref_norm).mean().item()
    ok = finite and rms <= bounds[0] and mx <= bounds[1]
    return {"check": "PASS" if ok else "FAIL", "worst_rel_rms": rms, "worst_rel_max": mx, "mean_rel_rms": mean,
            "bounds": list(bounds), "rows": got.shape[0]}


class Bench:
    def __init__(self, fm, ctx, args):
        self.fm, self.ctx, self.args = fm, ctx, args
        self.sm = 1.0 / math.sqrt(D)
        n = args.tokens
        self.n, blocks = n, n // 64
        self.gen = torch.Generator(device="cuda").manual_seed(34)
        self.c656 = torch.empty(blocks, 64, 656, dtype=torch.uint8, device="cuda")
        self.c368 = torch.empty(blocks, 64, 368, dtype=torch.uint8, device="cuda")
        flat656 = self.c656.view(n, 656)

        def fill(first, x):
            flat656[first:first + x.shape[0]] = fp8_ds_mla_records(x)
            slots = torch.arange(first, first + x.shape[0], device="cuda", dtype=torch.int64)
            ctx.write(x[:, :DV], x[:, DV:], slots, self.c368, layout=_abi.LAYOUT_FP8_ROPE_368,
                      scale_mode=_abi.SCALE_PER_TOKEN)

        make_tokens(n, self.gen, fill)
        # The 368 records as bf16 (the plugin's gather): what FlashMLA's prefill reads as the reference.
        self.dense = torch.empty(n, 1, D, dtype=torch.bfloat16, device="cuda")
        all_slots = torch.arange(n, device="cuda", dtype=torch.int32)
        ctx.gather(self.c368, all_slots, self.dense.view(n, D), layout=_abi.LAYOUT_FP8_ROPE_368,
                   scale_mode=_abi.SCALE_PER_TOKEN)
        self.side = torch.cuda.Stream()
        self.flush_buf = torch.empty(256 << 20, dtype=torch.uint8, device="cuda") if args.flush_l2 else None
        torch.cuda.synchronize()

    def reference(self, q, idx):
        """FlashMLA's bf16 prefill over the gathered records: q [nq, h, 576], idx [nq, topk] -> [nq, h, 512]."""
        nq, h = q.shape[0], q.shape[1]
        out = torch.empty(nq, h, DV, dtype=torch.bfloat16, device="cuda")
        hp = (h + 63) // 64 * 64  # FlashMLA's prefill takes any head count on some builds, 64k on others
        for s in range(0, nq, 1024):  # bounded scratch for big query counts
            e = min(nq, s + 1024)
            qs = q[s:e] if hp == h else torch.cat([q[s:e], q.new_zeros(e - s, hp - h, D)], dim=1)
            out[s:e] = self.fm.sparse_prefill_fwd(qs.contiguous(), self.dense, idx[s:e].unsqueeze(1), self.sm, DV,
                                                  None, None, None)[0][:, :h]
        return out

    def flash_decode(self, q, idx, meta):
        kv = self.c656.view(torch.float8_e4m3fn).unsqueeze(2)
        out, _, m, s = self.fm.sparse_decode_fwd(q, kv, idx, None, None, meta.get("m"), meta.get("n"), None, None,
                                                 None, DV, self.sm, None, False)
        meta["m"], meta["n"] = m, s
        return out

    def grid_cell(self, b, sq, h):
        hq = max(h, 64)
        q = torch.randn(b, sq, hq, D, device="cuda", generator=self.gen).to(torch.bfloat16)
        if h < hq:
            q[:, :, h:] = 0
        idx = torch.randint(0, self.n, (b, sq, TOPK), device="cuda", generator=self.gen, dtype=torch.int32)
        nq = b * sq
        qh = q[:, :, :h].reshape(nq, h, D).contiguous()
        ix = idx.view(nq, TOPK)
        out = torch.full((nq, h, DV), float("nan"), dtype=torch.bfloat16, device="cuda")
        meta = {}
        self.flash_decode(q, idx, meta)  # metadata before capture, as vLLM computes it
        attend = prepared_attend(self.ctx, qh, ix, self.c368, out, _abi.LAYOUT_FP8_ROPE_368, _abi.SCALE_PER_TOKEN,
                                self.sm, self.side)
        flush = (lambda: self.flush_buf.fill_(1)) if self.flush_buf is not None else None
        calls = self.args.calls
        graphs = [Graph(lambda: self.flash_decode(q, idx, meta), calls, self.side, flush),
                  Graph(attend, calls, self.side, flush)]
        if flush:
            graphs.append(Graph(lambda: None, calls, self.side, flush))
        torch.cuda.synchronize()
        times = interleaved([g.time for g in graphs], self.args.reps)
        if flush:
            for t in times[:2]:
                for k in t:
                    t[k] -= times[2]["median"]
        # The check reads what the timed graph's last replay wrote.
        check = row_check(out, self.reference(qh, ix))
        flops = 2.0 * nq * h * TOPK * (D + DV)
        tf, ta = times[0]["median"], times[1]["median"]
        row = {"batch": b, "s_q": sq, "h": h, "flashmla_heads": hq, "flashmla_us": times[0], "attend368_us": times[1],
               "speedup": tf / ta, "attend368_tflops": flops / ta / 1e6, "flashmla_tflops": flops / tf / 1e6, **check}
        print(f"b={b:3d} s_q={sq} h={h:3d} | FlashMLA (h {hq:3d}) {tf:7.2f} us [{times[0]['min']:.1f}-"
              f"{times[0]['max']:.1f}] | attend-368 {ta:7.2f} us [{times[1]['min']:.1f}-{times[1]['max']:.1f}] | "
              f"{tf / ta:4.2f}x | check {check['check']} (rms {check['worst_rel_rms']:.1e}, max "
              f"{check['worst_rel_max']:.1e}, mean {check['mean_rel_rms']:.1e}, {check['rows']} rows)")
        sys.stdout.flush()
        del graphs, attend
        return row

    def grid(self, rows):
        cells = [(b, 1, h) for h in self.args.heads for b in self.args.batches]
        cells += [(b, 2, h) for h in self.args.heads for b in self.args.batches if b <= 32]
        for b, sq, h in cells:
            rows.append(self.grid_cell(b, sq, h))

    def decode128(self, rows):
        """Batch 128, eager back-to-back launches: FlashMLA, attend on the 656 bytes, attend on the 368 bytes."""
        b = 128
        stream = torch.cuda.current_stream()
        for h in self.args.heads:
            hq = max(h, 64)
            q = torch.randn(b, 1, hq, D, device="cuda", generator=self.gen).to(torch.bfloat16)
            if h < hq:
                q[:, :, h:] = 0
            idx = torch.randint(0, self.n, (b, 1, TOPK), device="cuda", generator=self.gen, dtype=torch.int32)
            qh, ix = q[:, 0, :h].contiguous(), idx.view(b, TOPK)
            meta = {}
            ref656 = self.flash_decode(q, idx, meta)[:, 0, :h].clone()
            out656 = torch.full((b, h, DV), float("nan"), dtype=torch.bfloat16, device="cuda")
            out368 = torch.full_like(out656, float("nan"))
            a656 = prepared_attend(self.ctx, qh, ix, self.c656, out656, _abi.LAYOUT_FP8_DS_MLA_656, _abi.SCALE_STATIC,
                                  self.sm, stream)
            a368 = prepared_attend(self.ctx, qh, ix, self.c368, out368, _abi.LAYOUT_FP8_ROPE_368,
                                  _abi.SCALE_PER_TOKEN, self.sm, stream)
            times = interleaved([launches_us(lambda: self.flash_decode(q, idx, meta), 20), launches_us(a656, 20),
                                 launches_us(a368, 20)], self.args.reps)
            torch.cuda.synchronize()
            c656 = row_check(out656, ref656, SAME_BYTES)
            c368 = row_check(out368, self.reference(qh, ix))
            flops = 2.0 * b * h * TOPK * (D + DV)
            tf, t6, t3 = (t["median"] for t in times)
            row = {"h": h, "flashmla_heads": hq, "flashmla_us": times[0], "attend656_us": times[1],
                   "attend368_us": times[2], "speedup368": tf / t3, "speedup656": tf / t6,
                   "attend368_tflops": flops / t3 / 1e6, "flashmla_tflops": flops / tf / 1e6,
                   "check656_vs_flashmla": c656, "check368_vs_flashmla_bf16": c368}
            rows.append(row)
            print(f"decode b=128 h={h:3d} eager: FlashMLA (h {hq:3d}) {tf:7.1f} us | attend-656 {t6:7.1f} us "
                  f"({tf / t6:4.2f}x, check {c656['check']} {c656['worst_rel_rms']:.1e}) | attend-368 {t3:7.1f} us "
                  f"({tf / t3:4.2f}x, {row['attend368_tflops']:5.1f} TFLOP/s, check {c368['check']} "
                  f"{c368['worst_rel_rms']:.1e})")
            sys.stdout.flush()

    def prefill(self, rows):
        s_q, context = 4096, min(self.n, 2 << 20)  # 4096 query tokens over a 2 M-token context
        stream = torch.cuda.current_stream()
        idx = torch.randint(0, context, (s_q, TOPK), device="cuda", generator=self.gen, dtype=torch.int32)
        context_slots = torch.arange(context, device="cuda", dtype=torch.int32)
        scratch = torch.empty(context, 1, D, dtype=torch.bfloat16, device="cuda")
        for h in self.args.prefill_heads:
            q = torch.randn(s_q, h, D, device="cuda", generator=self.gen).to(torch.bfloat16)
            out = torch.full((s_q, h, DV), float("nan"), dtype=torch.bfloat16, device="cuda")
            a368 = prepared_attend(self.ctx, q, idx, self.c368, out, _abi.LAYOUT_FP8_ROPE_368, _abi.SCALE_PER_TOKEN,
                                  self.sm, stream)
            ind = idx.view(s_q, 1, TOPK)

            def flash_bf16():
                return self.fm.sparse_prefill_fwd(q, self.dense, ind, self.sm, DV, None, None, None)

            def gather_then_flash():
                # the context's records to bf16 (what an engine without this reader does), then the prefill
                self.ctx.gather(self.c368, context_slots, scratch.view(context, D), layout=_abi.LAYOUT_FP8_ROPE_368,
                                scale_mode=_abi.SCALE_PER_TOKEN)
                return self.fm.sparse_prefill_fwd(q, scratch, ind, self.sm, DV, None, None, None)

            times = interleaved([launches_us(flash_bf16, 3), launches_us(a368, 3), launches_us(gather_then_flash, 3)],
                                max(3, self.args.reps // 3), warmup=1)
            torch.cuda.synchronize()
            check = row_check(out, flash_bf16()[0])
            flops = 2.0 * s_q * h * TOPK * (D + DV)
            tf, ta, tg = (t["median"] for t in times)
            row = {"h": h, "s_q": s_q, "flashmla_bf16_us": times[0], "attend368_us": times[1],
                   "gather_flashmla_us": times[2], "flashmla_tflops": flops / tf / 1e6,
                   "attend368_tflops": flops / ta / 1e6, "speedup_vs_flashmla": tf / ta,
                   "speedup_vs_gather_flashmla": tg / ta, **check}
            rows.append(row)
            print(f"prefill h={h:3d}: FlashMLA bf16 {tf / 1e3:6.2f} ms ({row['flashmla_tflops']:5.1f} TFLOP/s) | "
                  f"attend-368 {ta / 1e3:6.2f} ms ({row['attend368_tflops']:5.1f} TFLOP/s, {tf / ta:4.2f}x) | "
                  f"gather+FlashMLA {tg / 1e3:6.2f} ms | check {check['check']} (rms {check['worst_rel_rms']:.1e}, "
                  f"{check['rows']} rows)")
            sys.stdout.flush()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--flashmla", help="path of _flashmla_C.abi3.so (default: import vllm._flashmla_C)")
    ap.add_argument("--json", help="write the figures here")
    ap.add_argument("--heads", type=int, nargs="*", default=[16, 32, 64, 128])
    ap.add_argument("--batches", type=int, nargs="*", default=[1, 2, 4, 8, 16, 32, 64, 128])
    ap.add_argument("--prefill-heads", type=int, nargs="*", default=[16, 128])
    ap.add_argument("--tokens", type=int, default=4 << 20)
    ap.add_argument("--calls", type=int, default=20, help="captures of each call in one graph")
    ap.add_argument("--reps", type=int, default=9, help="interleaved timed repetitions per side")
    ap.add_argument("--flush-l2", action="store_true", help="a 256 MB write before every timed call")
    ap.add_argument("--skip", choices=["grid", "decode", "prefill"], action="append", default=[])
    args = ap.parse_args()
    fm = load_flashmla(args.flashmla)
    plugin = nvfp4_mla.load()
    ctx = nvfp4_mla.Context(plugin, "cuda:0")
    print(f"device: {torch.cuda.get_device_name()} ({ctx.device_name}); plugin {plugin.path}")
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    mm_us = statistics.median([event_us(lambda: a @ a, 1) for _ in range(7)])
    report = {"device": torch.cuda.get_device_name(), "bf16_matmul_tflops": 2 * 8192**3 / mm_us / 1e6,
              "tokens": args.tokens, "topk": TOPK, "calls_per_graph": args.calls, "reps": args.reps,
              "flush_l2": args.flush_l2, "check_bounds": {"same_bytes": SAME_BYTES, "bf16_gathered": BF16_GATHERED},
              "grid": [], "decode": [], "prefill": []}
    print(f"ceiling bf16 matmul 8192^3: {report['bf16_matmul_tflops']:.0f} TFLOP/s")
    del a
    bench = Bench(fm, ctx, args)
    if "grid" not in args.skip:
        bench.grid(report["grid"])
    if "decode" not in args.skip:
        bench.decode128(report["decode"])
    if "prefill" not in args.skip:
        bench.prefill(report["prefill"])
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    failed = json.dumps(report).count('"FAIL"')
    print(f"checks: {'all PASS' if not failed else f'{failed} FAIL'}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
