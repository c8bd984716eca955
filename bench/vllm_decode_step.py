"""A DeepSeek-V3.2-shaped decode step as vLLM's NVFP4_MLA_SPARSE backend runs it, beside the same step
on FLASHMLA_SPARSE's 656-byte FP8 records (issue 45; BENCHMARKS.md).

One step, per layer, for `layers` layers (each its own cache of `tokens` records), all captured in
ONE CUDA graph on a side stream and replayed between CUDA events, the two paths' replays
interleaved (ABAB...), median and range printed:

  plugin path   nvfp4_mla.vllm_plugin.kernels, the Impl's own bodies: cache_update (the plugin's
                writer: the step's `batch` tokens, bf16 kv_c [b, 512] and k_pe [b, 1, 64], to 368-byte
                records) and forward_mqa (the (q_nope, q_pe) pair concatenated, then attend over the
                flat rows, valid counts given);
  FlashMLA path the step's `batch` 656-byte rows stored into the cache (one index_copy_ of rows
                quantised beforehand: a lower bound on vLLM's writer, which it fuses into the norm+RoPE
                kernel), the query concatenated into a buffer of FlashMLA's head count (64 or 128 on
                Hopper: h = 16 runs 64 heads, as vLLM pads them), then sparse_decode_fwd (its
                scheduling metadata computed before capture, as vLLM's builder does).

Batch 1, 8, 32, 128 x h 16, 128; top-k 2048 random slots a query (every query also reads the records
this step wrote). Both paths read the same tokens: the caches are written from one set of random
latents (log-normal per-token magnitudes), as 368-byte per-token records by the plugin's writer and
as 656-byte records by FlashMLA's rule (bench/flashmla_compare.py).

Every timed output is checked, from the last replay, each side against a float32 attention over its
own records' decoded values with the comparison's bounds (attend_reference.BOUNDS, lse included): the
plugin path's out and lse over the 368-byte records (attend_reference.decode_368, held to the plugin's
gather bit for bit) and the records its writer stored against a direct write (bytes); FlashMLA's out
and lse over its 656-byte records (decode_656) and its stored rows against the quantised ones (bytes).
Bytes a token each path stores are
printed: a layer's record (368 / 656) and, with DeepSeek-V3.2's 132-byte indexer row, 500 / 788.

Usage (GPU machine; FlashMLA from tools/flashmla-fetch into .anchor/, PyTorch with CUDA; ~1 minute):
  NVFP4_MLA_PLUGIN=build-gpu/plugin PYTHONPATH=host_shims/python \\
      python3 bench/vllm_decode_step.py [--flashmla .anchor/_flashmla_C.abi3.so] [--json vllm_step.json]
Without a GPU, `--dry-run` runs the plugin path once, eagerly, on the CPU backend at small sizes, with
every check (what can be tried off the GPU machine; nothing is timed).
"""
import argparse
import json
import math
import statistics
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "host_shims", "python"))
sys.path.insert(0, HERE)
import nvfp4_mla  # noqa: E402
from nvfp4_mla import _abi  # noqa: E402
from nvfp4_mla.vllm_plugin import kernels, serving  # noqa: E402
from attend_reference import BOUNDS, decode_368, decode_656, fp8_ds_mla_records, matches_gather, reference, row_check  # noqa: E402,E501
from flashmla_compare import Graph, interleaved, load_flashmla, peer_lse_check, peer_view  # noqa: E402
import provenance  # noqa: E402  (bench/provenance.py)

# attend_reference.row_check's bounds (attend_reference.BOUNDS) for both sides, each against a float32
# attention over its own records' decoded binary32 values: the plugin's 368-byte records through
# attend_reference.decode_368 (held to the plugin's gather bit for bit), FlashMLA's 656-byte records through
# decode_656, its lse included (flashmla_compare.peer_lse_check, as the comparison checks it). Against the
# gathered bf16 rows instead, the gather's own rounding moved the worst of 65536 rows by up to 7.2e-2 relative
# RMS on the H200, so that reference could not tell a wrong kernel from its own error; FlashMLA against the
# plugin's attend over the same 656 records with no per-element allowance failed 1 row of 4096 by 1.2% of its
# row's largest value (two bf16 outputs, each within the bound of the exact one): both are gone.

D, DV = _abi.ROW_DIM, _abi.LATENT_DIM
LAYOUT, MODE = _abi.LAYOUT_FP8_ROPE_368, _abi.SCALE_PER_TOKEN
SM_SCALE = 1.0 / math.sqrt(192)  # DeepSeek-V3.2: qk_nope 128 + RoPE 64


def latents(n, gen, device):
    x = torch.randn(n, D, device=device, generator=gen)
    x *= torch.exp(0.5 * torch.randn(n, 1, device=device, generator=gen))
    return x.to(torch.bfloat16)


class Layer:
    """One layer's caches (both formats, the same tokens) and its step's inputs, persistent (what the
    graph captures); refill() draws a new step into them."""

    def __init__(self, ops, tokens, batch, heads, topk, gen, device, fm):
        self.ops, self.tokens, self.batch, self.heads, self.topk, self.gen = ops, tokens, batch, heads, topk, gen
        self.c368 = torch.zeros(tokens // 64, 64, 368, dtype=torch.uint8, device=device)
        self.c656 = torch.zeros(tokens // 64, 64, 656, dtype=torch.uint8, device=device)
        for first in range(0, tokens, 1 << 18):  # the context: every slot written, both formats
            x = latents(min(1 << 18, tokens - first), gen, device)
            slots = torch.arange(first, first + x.shape[0], device=device)
            ops.write(x[:, :DV], x[:, DV:], slots, self.c368)
            if fm is not None:
                self.c656.view(tokens, 656)[first:first + x.shape[0]] = fp8_ds_mla_records(x)
        self.hq = max(heads, 64) if fm is not None else heads  # FlashMLA's Hopper head counts: 64, 128
        self.kv_c = torch.empty(batch, DV, dtype=torch.bfloat16, device=device)
        self.k_pe = torch.empty(batch, 1, D - DV, dtype=torch.bfloat16, device=device)
        self.rows656 = torch.empty(batch, 656, dtype=torch.uint8, device=device)
        self.slots = torch.empty(batch, dtype=torch.int64, device=device)
        self.q_nope = torch.zeros(batch, self.hq, DV, dtype=torch.bfloat16, device=device)  # heads past h: 0
        self.q_pe = torch.zeros(batch, self.hq, D - DV, dtype=torch.bfloat16, device=device)
        self.q_buf = torch.empty(batch, self.hq, D, dtype=torch.bfloat16, device=device)
        self.idx = torch.empty(batch, topk, dtype=torch.int32, device=device)
        self.valid = torch.full((batch,), topk, dtype=torch.int32, device=device)

    def refill(self):
        b, device = self.batch, self.c368.device
        x = latents(b, self.gen, device)
        self.kv_c.copy_(x[:, :DV])
        self.k_pe.copy_(x[:, DV:].unsqueeze(1))
        self.rows656.copy_(fp8_ds_mla_records(x))
        self.slots.copy_(torch.randperm(self.tokens, device=device, generator=self.gen)[:b])
        q = torch.randn(b, self.heads, D, device=device, generator=self.gen).to(torch.bfloat16)
        self.q_nope[:, :self.heads].copy_(q[..., :DV])
        self.q_pe[:, :self.heads].copy_(q[..., DV:])
        idx = torch.randint(0, self.tokens, (b, self.topk), device=device, generator=self.gen, dtype=torch.int32)
        idx[:, :b] = self.slots.to(torch.int32)  # every query reads what this step wrote
        self.idx.copy_(idx)

    def q(self):
        return self.q_nope[:, :self.heads], self.q_pe[:, :self.heads]

    def plugin_step(self):
        kernels.cache_update(self.ops, self.kv_c, self.k_pe, self.c368, self.slots)
        self.out, self.lse = kernels.forward_mqa(self.ops, self.q(), self.c368, self.idx, self.valid,
                                                 sm_scale=SM_SCALE)

    def flashmla_step(self, fm, meta):
        self.c656.view(self.tokens, 656).index_copy_(0, self.slots, self.rows656)
        torch.cat((self.q_nope, self.q_pe), dim=-1, out=self.q_buf)
        kv = self.c656.view(torch.float8_e4m3fn).unsqueeze(2)
        out, lse, m, s = fm.sparse_decode_fwd(self.q_buf.unsqueeze(1), kv, self.idx.unsqueeze(1), None, None,
                                            meta.get("m"), meta.get("n"), None, None, None, DV, SM_SCALE, None, False)
        meta["m"], meta["n"] = m, s
        self.fm_out, self.fm_lse = out, lse

    def check(self, fm_checked):
        """This layer's last step, checked: the plugin path's records and attention, FlashMLA's rows and
        output (against the plugin's attend over the same 656-byte records)."""
        direct = torch.zeros(self.batch, 1, 368, dtype=torch.uint8, device=self.c368.device)
        self.ops.write(self.kv_c, self.k_pe.view(self.batch, D - DV), torch.arange(self.batch, device=direct.device),
                       direct)
        flat = self.c368.view(self.tokens, 368)
        records = bool(torch.equal(flat[self.slots], direct.view(self.batch, 368)))
        keys = decode_368(flat)  # [tokens, 576] float32: the records' own values
        gathered = self.ops.gather(self.c368, torch.arange(self.tokens, device=flat.device, dtype=torch.int32))
        decoded_is_gather = matches_gather(flat, gathered)
        q = torch.cat(self.q(), dim=-1)
        idx = torch.where(torch.arange(self.topk, device=flat.device)[None, :] < self.valid[:, None], self.idx, -1)
        ref_out, ref_lse = reference(q, idx, lambda ix: keys[ix.long()], SM_SCALE)
        result = {"plugin_records_equal_direct_write": records, "reference_decode_equals_gather": decoded_is_gather,
                  "plugin": row_check(self.out, self.lse, ref_out, ref_lse, BOUNDS)}
        if not (records and decoded_is_gather):
            result["plugin"]["check"] = "FAIL"
        if fm_checked:
            rows = bool(torch.equal(self.c656.view(self.tokens, 656)[self.slots], self.rows656))
            keys656 = decode_656(self.c656.view(self.tokens, 656))
            want = reference(self.q_buf[:, :self.heads], self.idx, lambda ix: keys656[ix.long()], SM_SCALE)
            result["flashmla_rows_equal"] = rows
            result["flashmla"] = peer_lse_check(*peer_view(self.fm_out, self.fm_lse, self.heads), *want)
            if not rows:
                result["flashmla"]["check"] = "FAIL"
        return result


def cell(ops, fm, args, batch, heads, device):
    gen = torch.Generator(device=device).manual_seed(45 + batch + heads)
    layers = [Layer(ops, args.tokens, batch, heads, args.topk, gen, device, fm) for _ in range(args.layers)]
    for layer in layers:
        layer.refill()
    row = {"batch": batch, "h": heads, "layers": args.layers, "topk": args.topk, "tokens_per_layer": args.tokens}
    if device == "cpu":  # --dry-run: the plugin path once, eagerly
        for layer in layers:
            layer.plugin_step()
    else:
        metas = [{} for _ in layers]
        for layer, meta in zip(layers, metas):
            layer.flashmla_step(fm, meta)  # FlashMLA's metadata before capture, as vLLM computes it
            layer.plugin_step()  # and each call once outside the capture (kernel loading, checked signatures)
        side = torch.cuda.Stream()
        torch.cuda.synchronize()
        plugin = Graph(lambda: [layer.plugin_step() for layer in layers], 1, side)  # one step a replay
        flash = Graph(lambda: [layer.flashmla_step(fm, meta) for layer, meta in zip(layers, metas)], 1, side)
        for layer in layers:  # the timed replays write the same step again: records land where they did
            layer.refill()
        torch.cuda.synchronize()
        samples = interleaved([plugin.time, flash.time], args.reps)  # a list of samples a side
        times = [{"median": statistics.median(v), "min": min(v), "max": max(v)} for v in samples]
        row["plugin_us"], row["flashmla_us"] = times
        row["plugin_us_per_layer"] = times[0]["median"] / args.layers
        row["flashmla_us_per_layer"] = times[1]["median"] / args.layers
        row["speedup"] = times[1]["median"] / times[0]["median"]
        row["flashmla_heads"] = layers[0].hq
    checks = [layer.check(device != "cpu") for layer in layers]
    row["checks"] = checks
    row["check"] = "PASS" if all(c["plugin"]["check"] == "PASS" and c.get("flashmla", {"check": "PASS"})["check"]
                                 == "PASS" for c in checks) else "FAIL"
    worst = max(c["plugin"]["worst_rel_rms"] for c in checks)
    if device == "cpu":
        print(f"dry run b={batch:3d} h={heads:3d} x {args.layers} layers: plugin path checked {row['check']} "
              f"(worst relative rms {worst:.1e})")
    else:
        t0, t1 = row["plugin_us"], row["flashmla_us"]
        fm_worst = max(c["flashmla"]["worst_rel_rms"] for c in checks)
        print(f"b={batch:3d} h={heads:3d} x {args.layers} layers | nvfp4 (368 B) {t0['median']:8.1f} us "
              f"[{t0['min']:.1f}-{t0['max']:.1f}] {row['plugin_us_per_layer']:6.1f} /layer | FlashMLA (656 B, h "
              f"{row['flashmla_heads']}) {t1['median']:8.1f} us [{t1['min']:.1f}-{t1['max']:.1f}] "
              f"{row['flashmla_us_per_layer']:6.1f} /layer | {row['speedup']:4.2f}x | check {row['check']} "
              f"(rms {worst:.1e} / {fm_worst:.1e})")
    sys.stdout.flush()
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--flashmla", help="path of _flashmla_C.abi3.so (default: .anchor/'s, else import "
                                       "vllm._flashmla_C)")
    ap.add_argument("--json", help="write the figures here")
    ap.add_argument("--batches", type=int, nargs="*", default=[1, 8, 32, 128])
    ap.add_argument("--heads", type=int, nargs="*", default=[16, 128])
    ap.add_argument("--layers", type=int, default=4, help="layers a step (each its own caches), one graph")
    ap.add_argument("--tokens", type=int, default=1 << 18, help="records a layer's cache holds (multiple of 64)")
    ap.add_argument("--topk", type=int, default=2048)
    ap.add_argument("--reps", type=int, default=25, help="interleaved timed replays a path")
    ap.add_argument("--dry-run", action="store_true", help="CPU backend, small sizes, the plugin path once, checked")
    args = ap.parse_args()
    device = "cpu" if args.dry_run else "cuda"
    if args.dry_run:
        args.batches, args.heads, args.layers, args.tokens, args.topk = [1, 8], [16], 2, 4096, 256
    elif not torch.cuda.is_available():
        sys.exit("no CUDA device: run on the GPU machine, or --dry-run for the CPU backend")
    fm, peer = None, None
    if not args.dry_run:
        default = os.path.join(HERE, "..", ".anchor", "_flashmla_C.abi3.so")
        peer_path = args.flashmla or (default if os.path.exists(default) else None)
        fm = load_flashmla(peer_path)
        peer = {"path": peer_path, "wheel": "vllm==0.33.0"} if peer_path else None
    plugin = nvfp4_mla.load()
    ops = kernels.bound_ops(plugin, device, LAYOUT, MODE)
    info = provenance.collect(plugin, torch, peer=peer)  # bench/provenance.py, as every results file
    record, fp8 = _abi.record_bytes(LAYOUT), serving.FP8_DS_MLA_BYTES
    stored = {"nvfp4_mla368_ds_mla": record, "fp8_ds_mla": fp8, "indexer_row": serving.INDEXER_ROW_BYTES,
              "gain_with_indexer": serving.capacity_gain(serving.DTYPE_368),
              "gain_without_indexer": serving.capacity_gain(serving.DTYPE_368, indexer=False)}
    print(f"device: {info['device']['name']}; plugin {plugin.path} ({info['plugin']['git_revision'] or 'no revision'})")
    print(f"bytes a token and layer: nvfp4 {record} / FlashMLA {fp8}; with DeepSeek-V3.2's {serving.INDEXER_ROW_BYTES}-"
          f"byte indexer row {record + serving.INDEXER_ROW_BYTES} / {fp8 + serving.INDEXER_ROW_BYTES}: "
          f"{stored['gain_with_indexer']:.2f}x the tokens ({stored['gain_without_indexer']:.2f}x without an indexer)")
    report = {"provenance": info, "bytes_per_token": stored, "sm_scale": SM_SCALE,
              "check_bounds": {"plugin_vs_float32_over_decoded_records": BOUNDS,
                               "flashmla_vs_float32_over_its_656_records": BOUNDS}, "cells": []}
    for heads in args.heads:
        for batch in args.batches:
            report["cells"].append(cell(ops, fm, args, batch, heads, device))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    failed = sum(c["check"] != "PASS" for c in report["cells"])
    print(f"checks: {'all PASS' if not failed else f'{failed} FAIL'}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
