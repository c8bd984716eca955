#!/usr/bin/env python3
"""Decode context parallelism over NCCL, measured (issue 15; BENCHMARKS.md, "Decode context
parallelism"). One process per GPU (examples/dcp_decode.py starts them, NVLink multicast off):

  all-gather  N tokens (16k, 64k, 256k) spread over the W ranks, all-gathered by every rank as the
              368-byte records themselves, or as bf16 rows [576] (1152 bytes) that every rank then
              quantises again (a write of N tokens, timed too); bytes each rank's gathered tensor
              holds, NCCL time;
  decode      the bench's shape (batch 128, top-k 2048 random tokens of a --cache-tokens cache,
              per-token 368-byte records, tokens round-robin over the ranks), h = 16 and 128: one
              attend over the whole cache on one GPU against the DCP step (map the top-k to local
              slots, attend, all-gather out and lse, merge), with sparse local rows (-1 for the
              other ranks' tokens) and compacted ones (held entries first, valid_len), and each phase
              alone.
Times: CUDA events around `inner` back-to-back calls, median of --reps after warm-up, the slowest
rank's median (collectives end together; kernels are per rank). Prints a table (rank 0) and writes
JSON (--json). Skips (77) with fewer than 2 GPUs. `--device cpu` runs it over gloo on the plugin's
CPU backend (development only: those are not figures).
Usage, on a machine with 2 or more GPUs:
  NVFP4_MLA_PLUGIN=build-gpu/plugin PYTHONPATH=host_shims/python \\
      python3 bench/dcp_measure.py [--world-size N] [--json dcp.json] [--quick]
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "host_shims", "python", "examples"))
import dcp_decode as dcp  # noqa: E402  (the recipe: Sharding, Rank, launch)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import provenance  # noqa: E402  (bench/provenance.py: what the JSON records of where it came from)

ROW_BYTES = 576 * 2
CHUNK = 1 << 18  # tokens written per call while the decode caches are filled


def median_us(r, fn, reps, inner=1):
    """The slowest rank's median microseconds per call of `inner` back-to-back calls of fn."""
    for _ in range(3):
        fn()
    samples = []
    for _ in range(reps):
        if r.cuda:
            torch.cuda.synchronize(r.device)
        dist.barrier()  # every rank starts the sample together: collectives wait for the last one
        if r.cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(inner):
                fn()
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) * 1e3 / inner)
        else:
            t0 = time.perf_counter()
            for _ in range(inner):
                fn()
            samples.append((time.perf_counter() - t0) * 1e6 / inner)
    slowest = torch.tensor([statistics.median(samples)], dtype=torch.float64, device=r.device)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    return slowest.item()


def allgather_case(r, tokens, reps):
    """Records vs bf16 rows for `tokens` tokens spread evenly over the ranks."""
    n = tokens // r.world
    records = torch.randint(0, 256, (n, dcp.REC), dtype=torch.uint8, device=r.device)
    rows = torch.randn(n, 576, device=r.device).to(torch.bfloat16)
    records_all = torch.empty(n * r.world, dcp.REC, dtype=torch.uint8, device=r.device)
    rows_all = torch.empty(n * r.world, 576, dtype=torch.bfloat16, device=r.device)
    cache, slots = r.new_cache(n * r.world), torch.arange(n * r.world, device=r.device)
    records_us = median_us(r, lambda: dist.all_gather_into_tensor(records_all, records), reps)
    rows_us = median_us(r, lambda: dist.all_gather_into_tensor(rows_all, rows), reps)
    requantise_us = median_us(r, lambda: r.write(rows_all, slots, cache, "per-token"), reps)
    return {"tokens": n * r.world, "records_bytes": n * r.world * dcp.REC, "records_us": records_us,
            "rows_bytes": n * r.world * ROW_BYTES, "rows_us": rows_us, "requantise_us": requantise_us,
            "rows_total_us": rows_us + requantise_us,
            "records_gbps": n * r.world * dcp.REC / records_us / 1e3, "rows_gbps": n * r.world * ROW_BYTES / rows_us / 1e3}


def fill_caches(r, shard):
    """The whole cache (this GPU's single-GPU twin) and this rank's share, per-token records of the
    same random tokens, written in chunks."""
    full, local = r.new_cache(shard.tokens), r.new_cache(shard.local_capacity)
    g = torch.Generator(device=r.device).manual_seed(3)
    for start in range(0, shard.tokens, CHUNK):
        ids = torch.arange(start, min(start + CHUNK, shard.tokens), device=r.device)
        kv = (torch.randn(ids.numel(), 576, device=r.device, generator=g) * 0.5).to(torch.bfloat16)
        r.write(kv, ids, full, "per-token")
        mine = shard.owner[ids] == r.rank
        r.write(kv[mine], shard.local[ids[mine]], local, "per-token")
    return full, local


class DecodeBuffers:
    """One head count's decode step, bound once: the single-GPU attend, the local attends (sparse and
    compacted rows), the all-gathered partials and the merge, as prepared calls."""

    def __init__(self, r, shard, full, local, heads, opts):
        g = torch.Generator().manual_seed(heads)
        dev, kw = r.device, dict(layout=dcp.LAYOUT, scale_mode=dcp.SCALE_PER_TOKEN, sm_scale=576 ** -0.5,
                                 stream=r.stream())
        self.q = torch.randn(opts.batch, heads, 576, generator=g).to(torch.bfloat16).to(dev)
        self.ids = torch.randint(0, shard.tokens, (opts.batch, opts.topk), generator=g, dtype=torch.int32).to(dev)
        self.out, self.lse = self.outputs(r, opts.batch, heads)
        self.single = r.ctx.prepare_attend(self.q, self.ids, full, self.out, lse=self.lse, **kw)
        self.slots, _ = shard.local_slots(self.ids, r.rank)
        self.packed, self.valid = shard.local_slots(self.ids, r.rank, compact=True)
        self.part_out, self.part_lse = self.outputs(r, opts.batch, heads)
        self.sparse = r.ctx.prepare_attend(self.q, self.slots, local, self.part_out, lse=self.part_lse, **kw)
        self.compact = r.ctx.prepare_attend(self.q, self.packed, local, self.part_out, lse=self.part_lse,
                                            valid_len=self.valid, **kw)
        self.all_out, self.all_lse = self.outputs(r, r.world * opts.batch, heads)
        self.merged, self.merged_lse = self.outputs(r, opts.batch, heads)
        w, b = r.world, opts.batch
        self.merge = r.ctx.prepare_merge(self.all_out.view(w, b, heads, 512), self.all_lse.view(w, b, heads),
                                         self.merged, lse=self.merged_lse, stream=r.stream())

    @staticmethod
    def outputs(r, n, heads):
        return (torch.empty(n, heads, 512, dtype=torch.bfloat16, device=r.device),
                torch.empty(n, heads, dtype=torch.float32, device=r.device))

    def all_gather(self):
        dist.all_gather_into_tensor(self.all_out, self.part_out)
        dist.all_gather_into_tensor(self.all_lse, self.part_lse)


def decode_case(r, shard, full, local, heads, opts):
    """Single-GPU attend against the DCP step at one head count, each phase alone too (us)."""
    b, rank, reps = DecodeBuffers(r, shard, full, local, heads, opts), r.rank, opts.reps

    def step(compact):
        slots, valid = shard.local_slots(b.ids, rank, compact)
        if compact:
            b.compact(b.q, slots, b.part_out, lse=b.part_lse, valid_len=valid)
        else:
            b.sparse(b.q, slots, b.part_out, lse=b.part_lse)
        b.all_gather()
        b.merge.run()

    row = {"h": heads, "batch": opts.batch, "topk": opts.topk, "cache_tokens": shard.tokens,
           "single_us": median_us(r, b.single.run, reps, 10),
           "map_sparse_us": median_us(r, lambda: shard.local_slots(b.ids, rank), reps, 10),
           "map_compact_us": median_us(r, lambda: shard.local_slots(b.ids, rank, True), reps, 10),
           "attend_sparse_us": median_us(r, b.sparse.run, reps, 10),
           "attend_compact_us": median_us(r, b.compact.run, reps, 10),
           "allgather_us": median_us(r, b.all_gather, reps, 10),
           "merge_us": median_us(r, b.merge.run, reps, 10),
           "step_sparse_us": median_us(r, lambda: step(False), reps, 10),
           "step_compact_us": median_us(r, lambda: step(True), reps, 10),
           "allgather_bytes": r.world * opts.batch * heads * (512 * 2 + 4)}
    row["speedup_compact"] = row["single_us"] / row["step_compact_us"]
    return row


def meta(r):
    """What the figures were measured on."""
    cuda, nccl = r.cuda, torch.cuda.nccl.version() if r.cuda else None
    return {"world": r.world, "device": torch.cuda.get_device_name(r.device) if cuda else "cpu (gloo; not figures)",
            "torch": torch.__version__, "nccl": ".".join(map(str, nccl)) if isinstance(nccl, tuple) else nccl,
            "plugin": r.ctx.plugin.path, "plugin_abi": r.ctx.plugin.abi,
            "plugin_git_revision": r.ctx.plugin.table.git_revision.decode(),
            "nvls": {k: os.environ.get(k) for k in dcp.NO_MULTICAST}}


def print_tables(result):
    print(f"DCP over {result['meta']['world']} x {result['meta']['device']}, NCCL {result['meta']['nccl']}")
    print("\n| tokens | records MB | records us | rows MB | rows us | re-quantise us | rows + re-quantise us "
          "| bytes | time |")
    print("|---|---|---|---|---|---|---|---|---|")
    for a in result["allgather"]:
        print(f"| {a['tokens']} | {a['records_bytes'] / 1e6:.1f} | {a['records_us']:.1f} | {a['rows_bytes'] / 1e6:.1f} "
              f"| {a['rows_us']:.1f} | {a['requantise_us']:.1f} | {a['rows_total_us']:.1f} "
              f"| {a['rows_bytes'] / a['records_bytes']:.2f}x | {a['rows_total_us'] / a['records_us']:.2f}x |")
    print("\n| h | single-GPU attend us | DCP step us (sparse / compact) | map | local attend (sparse / compact) "
          "| all-gather out+lse | merge | single / step |")
    print("|---|---|---|---|---|---|---|---|")
    for d in result["decode"]:
        print(f"| {d['h']} | {d['single_us']:.1f} | {d['step_sparse_us']:.1f} / {d['step_compact_us']:.1f} "
              f"| {d['map_sparse_us']:.1f} / {d['map_compact_us']:.1f} "
              f"| {d['attend_sparse_us']:.1f} / {d['attend_compact_us']:.1f} | {d['allgather_us']:.1f} "
              f"| {d['merge_us']:.1f} | {d['speedup_compact']:.2f}x |")


def worker(rank, world, opts):
    if opts.device == "cuda":
        torch.cuda.set_device(rank)
    dist.init_process_group("nccl" if opts.device == "cuda" else "gloo", rank=rank, world_size=world)
    try:
        r = dcp.Rank(rank, world, opts.device)
        result = {"meta": meta(r), "allgather": [allgather_case(r, n, opts.reps) for n in opts.sizes], "decode": []}
        shard = dcp.Sharding(opts.cache_tokens, world, 1, r.device)
        full, local = fill_caches(r, shard)
        result["decode"] = [decode_case(r, shard, full, local, h, opts) for h in opts.heads]
        if rank == 0:
            print_tables(result)
            if opts.json:
                import nvfp4_mla
                result["provenance"] = provenance.collect(nvfp4_mla.load(), torch if opts.device == "cuda" else None)
                with open(opts.json + ".tmp", "w") as f:
                    json.dump(result, f, indent=1)
                os.replace(opts.json + ".tmp", opts.json)
    finally:
        dist.destroy_process_group()


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--world-size", type=int, default=0, help="ranks, one per GPU (default: every visible GPU)")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda", help="cpu: gloo and the CPU backend")
    p.add_argument("--json", help="write the figures here")
    p.add_argument("--quick", action="store_true", help="16k tokens, h = 16, a 256k-token cache, 5 samples")
    p.add_argument("--sizes", type=int, nargs="+", default=[1 << 14, 1 << 16, 1 << 18], help="all-gather tokens")
    p.add_argument("--cache-tokens", type=int, default=1 << 22, help="decode: tokens in the cache")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--topk", type=int, default=2048)
    p.add_argument("--heads", type=int, nargs="+", default=[16, 128])
    p.add_argument("--reps", type=int, default=20)
    opts = p.parse_args(argv)
    if opts.quick:
        opts.sizes, opts.heads, opts.cache_tokens, opts.reps = opts.sizes[:1], opts.heads[:1], 1 << 18, 5
    return opts


def main():
    opts = parse()
    world = dcp.world_size(opts)
    if world is None:
        return dcp.SKIP
    return dcp.launch(worker, world, opts)


if __name__ == "__main__":
    sys.exit(main())
