#!/usr/bin/env python3
"""Decode context parallelism (DCP) over NCCL with the nvfp4-mla plugin: records cross GPUs as
records, partial attentions merge (issue 15; docs/integration.md, "Decode context parallelism").

A DCP group of W processes, one per GPU, shares every request's tokens: token t lives on rank
(t // I) % W at local slot (t // (I * W)) * I + t % I, round-robin by token (interleave I = 1) or by
blocks of I tokens (I = 64 here), the two layouts serving engines use. The engine owns NCCL; the
plugin provides the pieces:
  write   each rank quantises only its own tokens into its own cache (Context.write);
  decode  every rank gets all queries and the global top-k, maps the top-k to its local slots (-1 for
          tokens it does not hold; optionally held entries first with valid_len, so that its attend
          walks only those), attends, all-gathers out and lse, and merges (Context.merge): every rank
          ends with the same attention over the whole top-k;
  gather  all-gathering the raw 368-byte records gives every rank the cache the single-GPU writer
          would have written, byte for byte (a third of the bytes of bf16 rows, no second
          quantisation).
This script runs the recipe and checks it on every rank (exit 1 on any failure):
  decode  h in {16, 128} x top-k in {64, 2048} x per-token and static x both layouts x sparse and
          compacted local rows: the merged result against one attend over the whole cache on the
          rank's own GPU, within the gpu suite's tolerances (out: 2/128 |ref| + 1e-3 max|V|; lse:
          1e-5 max(|lse|, 1)); a query with no valid entry anywhere gives zeros and -inf; a query whose
          entries one rank holds alone; every rank's merged bytes equal;
  gather  both modes and both layouts.
Usage (one process per GPU is started here; NVLink multicast is kept off in them):
  NVFP4_MLA_PLUGIN=build-gpu/plugin PYTHONPATH=host_shims/python \\
      python3 host_shims/python/examples/dcp_decode.py [--world-size N]
N defaults to every visible GPU; fewer than 2 GPUs (or than N) exits 77. `--device cpu` runs the same
recipe on the plugin's CPU backend over gloo (development without a GPU; use small --heads/--topk).
"""
import argparse
import os
import socket
import sys

try:
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
except ImportError as exc:  # a user without PyTorch gets the reason, not a traceback
    if __name__ != "__main__":
        raise  # imported (bench/dcp_measure.py): the importer's error to report
    sys.stderr.write(f"dcp_decode.py: needs PyTorch with torch.distributed ({exc}): pip install torch, then run it "
                     "again; exiting 77, as without enough GPUs\n")
    sys.exit(77)

import nvfp4_mla
from nvfp4_mla import LAYOUT_FP8_ROPE_368 as LAYOUT, SCALE_PER_TOKEN, SCALE_STATIC, _abi

SKIP = 77
BLOCK = 64  # tokens per cache block
REC = _abi.RECORD_BYTES_368
MODES = {"per-token": (SCALE_PER_TOKEN, None), "static": (SCALE_STATIC, 0.002)}
LAYOUTS = {"token": 1, "block": BLOCK}  # interleave: round-robin by token, by blocks of 64 tokens
# Set in every process this script starts: NVLink multicast (NVLS) stays off.
NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


class Sharding:
    """Where each of `tokens` tokens lives in a group of `world` ranks, for interleave I."""

    def __init__(self, tokens, world, interleave, device):
        t = torch.arange(tokens, device=device)
        self.tokens, self.world, self.interleave = tokens, world, interleave
        self.owner = (t // interleave) % world
        self.local = (t // (interleave * world)) * interleave + t % interleave
        held = -(-tokens // (interleave * world)) * interleave  # the most any rank holds
        self.local_capacity = -(-held // BLOCK) * BLOCK  # one cache size for every rank

    def mine(self, rank):
        """The token ids this rank holds, ascending."""
        return torch.nonzero(self.owner == rank).flatten()

    def local_slots(self, topk, rank, compact=False):
        """The global top-k [n_q, k] (token ids, -1 unused) as this rank's slots: -1 where another rank
        holds the token. compact: the held entries first (in top-k order) and their count per query
        as valid_len, so that attend skips the rest; else valid_len is None."""
        t = topk.clamp(min=0).long()
        held = (topk >= 0) & (self.owner[t] == rank)
        slots = torch.where(held, self.local[t], -1).to(torch.int32)
        if not compact:
            return slots, None
        order = torch.argsort((~held).to(torch.int8), dim=1, stable=True)
        return torch.gather(slots, 1, order), held.sum(1, dtype=torch.int32)


class Rank:
    """One process of the group: its device, its plugin context, the streams it calls on."""

    def __init__(self, rank, world, device_type):
        self.rank, self.world = rank, world
        self.cuda = device_type == "cuda"
        self.device = torch.device("cuda", rank) if self.cuda else torch.device("cpu")
        self.ctx = nvfp4_mla.Context(nvfp4_mla.load(), f"cuda:{rank}" if self.cuda else "cpu")
        if not self.ctx.capability_bits & _abi.CAP["op.merge_partials"]:
            raise nvfp4_mla.PluginError(f"plugin {self.ctx.plugin.path} (ABI {self.ctx.plugin.abi}) lacks "
                                        "op.merge_partials: DCP needs ABI 1.1", "missing_capability")

    def stream(self):
        """The stream torch runs this rank's work on (the collectives wait on it), or None on the CPU."""
        return torch.cuda.current_stream(self.device) if self.cuda else None

    def new_cache(self, slots):
        return torch.zeros(-(-slots // BLOCK), BLOCK, REC, dtype=torch.uint8, device=self.device)

    def write(self, kv, slots, cache, mode):
        """Quantise kv [T, 576] bf16 into `cache` at slots [T] (int64)."""
        scale_mode, outer = MODES[mode]
        self.ctx.write(kv[:, :512], kv[:, 512:], slots, cache, layout=LAYOUT, scale_mode=scale_mode,
                       outer_scale=outer, stream=self.stream())

    def write_shard(self, kv, shard, mode):
        """This rank's cache: its own tokens of kv [N, 576], at their local slots."""
        cache = self.new_cache(shard.local_capacity)
        mine = shard.mine(self.rank)
        self.write(kv[mine], shard.local[mine], cache, mode)
        return cache

    def attend(self, q, slots, cache, mode, sm_scale, valid_len=None):
        scale_mode, outer = MODES[mode]
        out = torch.empty(q.shape[0], q.shape[1], 512, dtype=torch.bfloat16, device=self.device)
        lse = torch.empty(q.shape[0], q.shape[1], dtype=torch.float32, device=self.device)
        self.ctx.attend(q, slots, cache, out, lse=lse, valid_len=valid_len, layout=LAYOUT, scale_mode=scale_mode,
                        outer_scale=outer, sm_scale=sm_scale, stream=self.stream())
        return out, lse

    def dcp_attend(self, q, topk, shard, cache, mode, sm_scale, compact=False):
        """One DCP decode step: local attend, all-gather of out and lse, merge. Returns this rank's
        merged out [n_q, h, 512] bf16 and lse [n_q, h] f32 (the same bytes on every rank)."""
        slots, valid_len = shard.local_slots(topk, self.rank, compact)
        out, lse = self.attend(q, slots, cache, mode, sm_scale, valid_len)
        n_q, h = out.shape[0], out.shape[1]
        parts_out = torch.empty(self.world * n_q, h, 512, dtype=out.dtype, device=self.device)
        parts_lse = torch.empty(self.world * n_q, h, dtype=lse.dtype, device=self.device)
        dist.all_gather_into_tensor(parts_out, out)
        dist.all_gather_into_tensor(parts_lse, lse)
        merged, merged_lse = torch.empty_like(out), torch.empty_like(lse)
        self.ctx.merge(parts_out.view(self.world, n_q, h, 512), parts_lse.view(self.world, n_q, h), merged,
                       lse=merged_lse, stream=self.stream())
        return merged, merged_lse

    def gather_records(self, cache, shard):
        """Every rank's records, all-gathered as bytes, laid out as the single-GPU cache of all
        tokens: [tokens, 368] u8 with token t in row t."""
        everyone = torch.empty(self.world * shard.local_capacity, REC, dtype=torch.uint8, device=self.device)
        dist.all_gather_into_tensor(everyone, cache.view(-1, REC)[:shard.local_capacity])
        return everyone.view(self.world, shard.local_capacity, REC)[shard.owner, shard.local]


def tokens(n, seed, device):
    """n latents + RoPE keys [n, 576] bf16, the same on every rank (a CPU generator)."""
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(n, 576, generator=g) * 0.5).to(torch.bfloat16).to(device)


def queries(n_q, heads, topk, shard, seed, device):
    """q [n_q, h, 576] and a global top-k [n_q, k] (10% unused): query 0 has no valid entry, query 1
    only tokens rank 0 holds (every other rank's part is empty), the rest anything."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(n_q, heads, 576, generator=g).to(torch.bfloat16)
    ids = torch.randint(0, shard.tokens, (n_q, topk), generator=g, dtype=torch.int32)
    ids[torch.rand(n_q, topk, generator=g) < 0.1] = -1
    ids[0] = -1
    held = shard.mine(0).cpu()
    ids[1] = held[torch.randint(0, held.numel(), (topk,), generator=g)].to(torch.int32)
    return q.to(device), ids.to(device)


def compare(out, lse, ref, ref_lse, vmax):
    """The gpu suite's tolerances: (failure text or "", worst out excess in units of vmax, worst lse
    error). -inf lse (no valid entry) must match exactly, with zero rows."""
    o, r = out.float(), ref.float()
    excess = ((o - r).abs() - 2 / 128 * r.abs()).max().item() / vmax
    empty = torch.isneginf(ref_lse)
    if not torch.equal(torch.isneginf(lse), empty) or (empty.any() and o[empty].abs().max().item() != 0):
        return "rows without a valid entry differ (-inf lse, zero out)", excess, 0.0
    err = ((lse - ref_lse).abs() / ref_lse.abs().clamp(min=1))[~empty]
    lse_err = err.max().item() if err.numel() else 0.0
    if excess > 1e-3:
        return f"out beyond 2/128 |ref| by {excess:.2e} of max|V| (bound 1e-3)", excess, lse_err
    if lse_err > 1e-5:
        return f"lse off by {lse_err:.2e} relative (bound 1e-5)", excess, lse_err
    return "", excess, lse_err


def check_decode(r, kv, full, shard, mode, heads, topk, compact):
    """One case of the decode check on this rank: its failure text ("" when it passed) and the
    worst errors seen."""
    cache = r.write_shard(kv, shard, mode)
    q, ids = queries(8, heads, topk, shard, seed=heads * 7 + topk, device=r.device)
    sm_scale = 576 ** -0.5
    merged, merged_lse = r.dcp_attend(q, ids, shard, cache, mode, sm_scale, compact)
    ref, ref_lse = r.attend(q, ids, full, mode, sm_scale)  # one attend over every token on this GPU
    rows = torch.empty(shard.tokens, 576, dtype=torch.bfloat16, device=r.device)
    scale_mode, outer = MODES[mode]
    r.ctx.gather(full, torch.arange(shard.tokens, dtype=torch.int32, device=r.device), rows, layout=LAYOUT,
                 scale_mode=scale_mode, outer_scale=outer, stream=r.stream())
    vmax = rows[:, :512].float().abs().max().item()
    failure, excess, lse_err = compare(merged, merged_lse, ref, ref_lse, vmax)
    everyone = torch.empty(r.world * merged.numel(), dtype=merged.dtype, device=r.device)
    dist.all_gather_into_tensor(everyone, merged.flatten())
    if not failure and not all(torch.equal(part, merged.flatten()) for part in everyone.view(r.world, -1)):
        failure = "the ranks' merged outputs differ"
    return failure, excess, lse_err


def check_gather(r, kv, full, shard, mode):
    """All-gathered records against this GPU's writer output for all tokens: "" when identical."""
    rebuilt = r.gather_records(r.write_shard(kv, shard, mode), shard)
    same = torch.equal(rebuilt, full.view(-1, REC)[:shard.tokens])
    return "" if same else f"{int((rebuilt != full.view(-1, REC)[:shard.tokens]).any(1).sum())} records differ"


def run_checks(r, opts):
    """Every case on this rank; returns the number of failures (rank 0 prints the table)."""
    failures = 0
    for mode in MODES:
        kv = tokens(opts.tokens, seed=1, device=r.device)
        full = r.new_cache(opts.tokens)
        r.write(kv, torch.arange(opts.tokens, device=r.device), full, mode)
        for name, interleave in LAYOUTS.items():
            shard = Sharding(opts.tokens, r.world, interleave, r.device)
            failure = check_gather(r, kv, full, shard, mode)
            failures += report(r, f"gather  {mode:9} by {name:5}", failure, "records byte-identical")
            for heads in opts.heads:
                for topk in opts.topk:
                    for compact in (False, True):
                        failure, excess, lse_err = check_decode(r, kv, full, shard, mode, heads, topk, compact)
                        label = f"decode  {mode:9} by {name:5} h {heads:3} topk {topk:4} {'compact' if compact else 'sparse '}"
                        failures += report(r, label, failure, f"out excess {excess:.1e}, lse {lse_err:.1e}")
    return failures


def report(r, label, failure, detail):
    """One line per case: rank 0's result, and any rank's failure."""
    if failure:
        print(f"rank {r.rank}: {label}: FAILED: {failure}", flush=True)
    elif r.rank == 0:
        print(f"{label}: ok ({detail})", flush=True)
    return 1 if failure else 0


def worker(rank, world, opts):
    cuda = opts.device == "cuda"
    if cuda:
        torch.cuda.set_device(rank)
    dist.init_process_group("nccl" if cuda else "gloo", rank=rank, world_size=world)
    try:
        r = Rank(rank, world, opts.device)
        failures = torch.tensor([run_checks(r, opts)], device=r.device)
        dist.all_reduce(failures)
        if rank == 0:
            print(f"world {world}: {'all checks passed' if failures.item() == 0 else f'{failures.item()} failures'}")
        if failures.item():
            sys.exit(1)
    finally:
        dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(fn, world, opts):
    """Runs fn(rank, world, opts) in `world` processes (one per GPU), NVLink multicast off in each:
    0 when all returned, 1 when any failed."""
    os.environ.update(NO_MULTICAST)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ["MASTER_PORT"] = str(free_port())
    try:
        mp.spawn(fn, args=(world, opts), nprocs=world, join=True)
    except mp.ProcessExitedException as exc:
        print(f"a rank exited with {exc.exit_code}", file=sys.stderr)
        return 1
    except mp.ProcessRaisedException as exc:
        print(f"a rank raised:\n{exc}", file=sys.stderr)
        return 1
    return 0


def world_size(opts):
    """The group size to run, or None (after saying why) when this machine cannot run it."""
    if opts.device == "cpu":
        return opts.world_size or 2
    visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
    world = opts.world_size or visible
    if visible < 2 or world > visible:
        print(f"skipped: DCP needs {max(world, 2)} GPUs, {visible} visible")
        return None
    if world < 2:
        sys.exit("--world-size must be at least 2")
    return world


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--world-size", type=int, default=0, help="ranks, one per GPU (default: every visible GPU)")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda", help="cpu: gloo and the CPU backend")
    p.add_argument("--tokens", type=int, default=8000, help="tokens of the sharded sequence")
    p.add_argument("--heads", type=int, nargs="+", default=[16, 128])
    p.add_argument("--topk", type=int, nargs="+", default=[64, 2048])
    return p.parse_args(argv)


def main():
    opts = parse()
    world = world_size(opts)
    if world is None:
        return SKIP
    return launch(worker, world, opts)


if __name__ == "__main__":
    sys.exit(main())
