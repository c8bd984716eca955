"""attend against FlashMLA in one process, on the same records (BENCHMARKS.md, issues 12 and 18).

Decode: batch 128 queries, top-k 2048 random slots over a ~3.9 GB cache of 656-byte fp8_ds_mla
records written by FlashMLA's rule (power-of-two tile scales, docs/record-format.md section 8):
  - FlashMLA sparse_decode_fwd on those bytes (h < 64 padded to 64, as FlashMLA requires);
  - attend on the same 656-byte bytes, checked against FlashMLA's output;
  - attend on 368-byte per-token records of the same tokens (the plugin's writer).
Prefill / extend: 4096 query tokens, top-k 2048 each, over 2M tokens:
  - FlashMLA sparse_prefill_fwd on a bf16 cache of those tokens;
  - attend on 368-byte records of the same tokens;
  - gather the records to bf16, then FlashMLA's prefill (checked against attend on a subset).
Ceilings of the same run: a gather of the 368-byte records the decode reads (torch index_select),
and a bf16 matmul. Times: medians of back-to-back launches between CUDA events; attend is called
through the plugin's table with prepared argument structs so that host time stays out of it.

Usage (GPU machine; FlashMLA from `tools/flashmla-fetch` or an installed vLLM):
  NVFP4_MLA_PLUGIN=build-gpu/plugin PYTHONPATH=host_shims/python \\
      python3 bench/flashmla_compare.py [--flashmla .anchor/_flashmla_C.abi3.so] [--json out.json]
"""
import argparse
import ctypes as C
import json
import math
import sys

import torch

import nvfp4_mla
from nvfp4_mla import _abi
from nvfp4_mla.arrays import tensor

D, DV = 576, 512


def load_flashmla(path):
    if path:
        torch.ops.load_library(path)
    else:
        import vllm._flashmla_C  # noqa: F401  (registers torch.ops._flashmla_C)
    return torch.ops._flashmla_C


def time_us(fn, launches=20, reps=7, warmup=3):
    """Median over `reps` of (event-bracketed `launches` back-to-back calls) / launches."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(launches):
            fn()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1000.0 / launches)
    samples.sort()
    return samples[len(samples) // 2]


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


def make_tokens(n, chunk, gen, fn):
    """Calls fn(first, x) for chunks of n random tokens x [chunk, 576] bf16 (norms vary per token)."""
    for first in range(0, n, chunk):
        m = min(chunk, n - first)
        x = torch.randn(m, D, device="cuda", generator=gen)
        x *= torch.exp(0.5 * torch.randn(m, 1, device="cuda", generator=gen))
        fn(first, x.to(torch.bfloat16))


class PreparedAttend:
    """attend through the plugin's table with the argument struct built once (kernel time only)."""

    def __init__(self, ctx, q, slots, cache, out, layout, scale_mode, sm_scale, lse=None):
        self.ctx, self.keep = ctx, (q, slots, cache, out, lse)
        dev = ctx.device
        self.args = _abi.AttendArgs(struct_size=C.sizeof(_abi.AttendArgs), layout=layout, scale_mode=scale_mode,
                                    outer_scale=_abi.default_outer_scale(scale_mode), sm_scale=sm_scale)
        self.args.q, _ = tensor(q, "q", (_abi.DTYPE_BF16,), 3, dev)
        self.args.slots, _ = tensor(slots, "slots", (_abi.DTYPE_I32,), 2, dev)
        self.args.cache, _ = tensor(cache, "cache", (_abi.DTYPE_U8,), 3, dev)
        self.args.out, _ = tensor(out, "out", (_abi.DTYPE_BF16,), 3, dev)
        if lse is not None:
            self.args.lse, _ = tensor(lse, "lse", (_abi.DTYPE_F32,), 2, dev)
        self.args.stream = torch.cuda.current_stream().cuda_stream
        need = ctx.attend_workspace_bytes(self.args)
        self.ws = torch.empty(max(need, 1), dtype=torch.uint8, device="cuda")
        if need:
            self.args.workspace, _ = tensor(self.ws[:need], "workspace", (_abi.DTYPE_U8,), 1, dev)
        self.fn, self.handle, self.ref = ctx.plugin.table.attend, ctx._handle, C.byref(self.args)

    def __call__(self):
        st = self.fn(self.handle, self.ref)
        if st:
            raise RuntimeError(f"attend: {self.ctx.plugin.table.last_error().decode()}")


def rel_check(got, want, abs_of_max=1e-3):
    """The gpu suite's bound: |got - want| <= 2/128 |want| + abs_of_max * max|want| (worst excess
    reported as a fraction of max|want|)."""
    got, want = got.float(), want.float()
    excess = ((got - want).abs() - (2.0 / 128) * want.abs()).max().item()
    vmax = want.abs().max().item()
    return excess <= abs_of_max * vmax, excess / max(vmax, 1e-30)


def decode_rows(fm, ctx, args, out_rows):
    b, topk, blocks, bs = 128, 2048, (3_900_000_000 // 656) // 64, 64
    n = blocks * bs
    gen = torch.Generator(device="cuda").manual_seed(12)
    c656 = torch.empty(blocks, bs, 656, dtype=torch.uint8, device="cuda")
    c368 = torch.zeros(blocks, bs, 368, dtype=torch.uint8, device="cuda")
    flat656, flat368 = c656.view(n, 656), c368.view(n, 368)

    def fill(first, x):
        flat656[first:first + x.shape[0]] = fp8_ds_mla_records(x)
        slots = torch.arange(first, first + x.shape[0], device="cuda", dtype=torch.int64)
        ctx.write(x[:, :DV], x[:, DV:], slots, c368, layout=_abi.LAYOUT_FP8_ROPE_368,
                  scale_mode=_abi.SCALE_PER_TOKEN)

    make_tokens(n, 1 << 20, gen, fill)
    idx = torch.randint(0, n, (b, topk), device="cuda", generator=gen, dtype=torch.int32)
    sm_scale = 1.0 / math.sqrt(D)
    # Ceiling: gather the decode's records (368 bytes each) into a dense buffer.
    rows32 = c368.view(n, 368).view(torch.int32)
    flat_idx = idx.view(-1).long()
    dense = torch.empty(flat_idx.numel(), 92, dtype=torch.int32, device="cuda")
    g_us = time_us(lambda: torch.index_select(rows32, 0, flat_idx, out=dense))
    result = {"cache_bytes_656": c656.numel(), "cache_bytes_368": c368.numel(), "gather368_us": g_us,
              "gather368_tbps": flat_idx.numel() * 368 * 2 / g_us / 1e6}
    print(f"gather of the records by torch index_select ({flat_idx.numel()} records; the bench's plain "
          f"gather368 kernel is the ceiling the targets use): {g_us:.1f} us "
          f"({result['gather368_tbps']:.2f} TB/s read+write)")
    for h in args.heads:
        hq = max(h, 64)
        q = torch.randn(b, 1, hq, D, device="cuda", generator=gen).to(torch.bfloat16)
        if h < hq:
            q[:, :, h:] = 0
        kv = c656.view(torch.float8_e4m3fn).unsqueeze(2)
        ind = idx.view(b, 1, topk)
        meta = {"m": None, "n": None}

        def flash():
            out, lse, m, s = fm.sparse_decode_fwd(q, kv, ind, None, None, meta["m"], meta["n"], None, None, None, DV,
                                                  sm_scale, None, False)
            meta["m"], meta["n"] = m, s
            return out

        ref = flash()[:, 0, :h]
        qh = q[:, 0, :h].contiguous()
        out656 = torch.empty(b, h, DV, dtype=torch.bfloat16, device="cuda")
        out368 = torch.empty_like(out656)
        a656 = PreparedAttend(ctx, qh, idx, c656, out656, _abi.LAYOUT_FP8_DS_MLA_656, _abi.SCALE_STATIC, sm_scale)
        a368 = PreparedAttend(ctx, qh, idx, c368, out368, _abi.LAYOUT_FP8_ROPE_368, _abi.SCALE_PER_TOKEN, sm_scale)
        a656()
        torch.cuda.synchronize()
        ok, excess = rel_check(out656, ref)
        t_f, t_656, t_368 = time_us(flash), time_us(a656), time_us(a368)
        flops = 2.0 * b * h * topk * (D + DV)
        row = {"h": h, "flashmla_us": t_f, "attend656_us": t_656, "attend368_us": t_368,
               "attend368_tflops": flops / t_368 / 1e6, "flashmla_tflops": 2.0 * b * hq * topk * (D + DV) / t_f / 1e6,
               "speedup368": t_f / t_368, "speedup656": t_f / t_656, "time_over_gather368": t_368 / g_us,
               "check656_vs_flashmla": "PASS" if ok else "FAIL", "check_excess_of_max": excess}
        out_rows.append(row)
        print(f"decode h={h:3d}: FlashMLA {t_f:7.1f} us | attend-656 {t_656:7.1f} us ({t_f / t_656:4.2f}x) | "
              f"attend-368 {t_368:7.1f} us ({t_f / t_368:4.2f}x, {row['attend368_tflops']:5.1f} TFLOP/s, "
              f"{t_368 / g_us:4.2f}x the torch gather) | 656 vs FlashMLA {row['check656_vs_flashmla']} ({excess:.1e})")
        sys.stdout.flush()
    del c656, c368, rows32, dense
    torch.cuda.empty_cache()
    return result


def prefill_rows(fm, ctx, args, out_rows):
    s_q, topk, n = 4096, 2048, 2 * 1024 * 1024
    gen = torch.Generator(device="cuda").manual_seed(18)
    kv = torch.empty(n, 1, D, dtype=torch.bfloat16, device="cuda")
    c368 = torch.zeros(n // 64, 64, 368, dtype=torch.uint8, device="cuda")

    def fill(first, x):
        kv[first:first + x.shape[0], 0] = x
        slots = torch.arange(first, first + x.shape[0], device="cuda", dtype=torch.int64)
        ctx.write(x[:, :DV], x[:, DV:], slots, c368, layout=_abi.LAYOUT_FP8_ROPE_368,
                  scale_mode=_abi.SCALE_PER_TOKEN)

    make_tokens(n, 1 << 20, gen, fill)
    idx = torch.randint(0, n, (s_q, topk), device="cuda", generator=gen, dtype=torch.int32)
    ind = idx.view(s_q, 1, topk)
    sm_scale = 1.0 / math.sqrt(D)
    dense = torch.empty(n, D, dtype=torch.bfloat16, device="cuda")
    all_slots = torch.arange(n, device="cuda", dtype=torch.int32)

    def gather():
        ctx.gather(c368, all_slots, dense, layout=_abi.LAYOUT_FP8_ROPE_368, scale_mode=_abi.SCALE_PER_TOKEN)

    for h in args.prefill_heads:
        q = torch.randn(s_q, h, D, device="cuda", generator=gen).to(torch.bfloat16)
        out = torch.empty(s_q, h, DV, dtype=torch.bfloat16, device="cuda")
        a368 = PreparedAttend(ctx, q, idx, c368, out, _abi.LAYOUT_FP8_ROPE_368, _abi.SCALE_PER_TOKEN, sm_scale)
        flash_bf16 = lambda: fm.sparse_prefill_fwd(q, kv, ind, sm_scale, DV, None, None, None)  # noqa: E731
        flash_gathered = lambda: fm.sparse_prefill_fwd(q, dense.view(n, 1, D), ind, sm_scale, DV, None, None, None)  # noqa: E731

        def gather_then_flash():
            gather()
            return flash_gathered()

        a368()
        ref = gather_then_flash()[0]
        torch.cuda.synchronize()
        # attend reads the records' binary32 values, FlashMLA here their bf16 rounding (gather):
        # keys and values differ by up to 2^-9 relative, so the bound is looser than the suite's.
        ok, excess = rel_check(out[:256], ref[:256], abs_of_max=1e-2)
        t_f = time_us(flash_bf16, launches=5, reps=5, warmup=2)
        t_a = time_us(a368, launches=5, reps=5, warmup=2)
        t_g = time_us(gather_then_flash, launches=5, reps=5, warmup=2)
        flops = 2.0 * s_q * h * topk * (D + DV)
        row = {"h": h, "s_q": s_q, "flashmla_bf16_ms": t_f / 1e3, "attend368_ms": t_a / 1e3,
               "gather_flashmla_ms": t_g / 1e3, "flashmla_tflops": flops / t_f / 1e6,
               "attend368_tflops": flops / t_a / 1e6, "speedup_vs_flashmla": t_f / t_a,
               "speedup_vs_gather_flashmla": t_g / t_a, "check_vs_gather_flashmla": "PASS" if ok else "FAIL",
               "check_excess_of_max": excess}
        out_rows.append(row)
        print(f"prefill h={h:3d}: FlashMLA bf16 {t_f / 1e3:6.2f} ms ({row['flashmla_tflops']:5.1f} TFLOP/s) | "
              f"attend-368 {t_a / 1e3:6.2f} ms ({row['attend368_tflops']:5.1f} TFLOP/s, {t_f / t_a:4.2f}x) | "
              f"gather+FlashMLA {t_g / 1e3:6.2f} ms | check {row['check_vs_gather_flashmla']} ({excess:.1e})")
        sys.stdout.flush()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--flashmla", help="path of _flashmla_C.abi3.so (default: import vllm._flashmla_C)")
    ap.add_argument("--json", help="write the figures here")
    ap.add_argument("--heads", type=int, nargs="*", default=[16, 32, 64, 128])
    ap.add_argument("--prefill-heads", type=int, nargs="*", default=[16, 128])
    ap.add_argument("--skip", choices=["decode", "prefill"], action="append", default=[])
    args = ap.parse_args()
    fm = load_flashmla(args.flashmla)
    plugin = nvfp4_mla.load()
    ctx = nvfp4_mla.Context(plugin, "cuda:0")
    print(f"device: {torch.cuda.get_device_name()} ({ctx.device_name}); plugin {plugin.path}")
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    mm_us = time_us(lambda: a @ a, launches=5, reps=5)
    report = {"device": torch.cuda.get_device_name(), "bf16_matmul_tflops": 2 * 8192**3 / mm_us / 1e6,
              "decode": [], "prefill": []}
    print(f"ceiling bf16 matmul 8192^3: {report['bf16_matmul_tflops']:.0f} TFLOP/s")
    del a
    if "decode" not in args.skip:
        report.update(decode_rows(fm, ctx, args, report["decode"]))
    if "prefill" not in args.skip:
        prefill_rows(fm, ctx, args, report["prefill"])
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    failed = [r for r in report["decode"] + report["prefill"] if "FAIL" in r.values()]
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
