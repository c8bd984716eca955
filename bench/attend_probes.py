"""What bounds attend: the plugin beside its stage-removal probe builds, on the same data (issue 46;
BENCHMARKS.md, "What bounds attend").

Builds: the plugin (NVFP4_MLA_PLUGIN) and the probe plugins in --probes (default build-gpu/bench:
libnvfp4_mla_attend_probe<BITS>.so, built by `meson setup ... -Dattend_probes=true`), whose 368-byte
attention kernels leave out (kernels/attend/lib/attend_probe.cuh, bits of NVFP4_MLA_ATTEND_PROBE):
  1  the producer's global loads after its warm tiles (slot indices, records): it dequantises the
     bytes it already holds;
  2  the producer's dequantisation and operand writes after its warm tiles (loads and the key
     metadata kept);
  4  the consumers' tensor-core products (wgmma; mma.sync): waits, softmax, P and releases kept;
and their sums (3: the producer reduced to barriers and key metadata; 7: all three). A probe keeps
every barrier, so it runs to the end; its outputs are garbage by design and are not checked.

Cases: decode at batch 128, h = 64 and 128 (s_q 1), and prefill, 4096 queries at h = 128; top-k 2048
random slots, 368-byte per-token records (a cache of --tokens written by the plugin's writer, random
latents with log-normal per-token magnitudes: bench/flashmla_compare.py's data), the prefill's top-k
over the first 2 M tokens. Each build has its own prepared attend on the same q, top-k and cache.

Timing: `launches` back-to-back eager launches of a build's prepared call (20 decode, 3 prefill)
between CUDA events, us a call; --reps samples a round with the builds interleaved; --rounds rounds
(one pass over every case a round, after --warmup-rounds); a time is the median over the rounds of
each round's median, with the rounds' range, and a probe's share of the plugin's time is the median of
the rounds' ratios. Per CTA-tile: the time over (tiles / CTAs), the plan's 64-key tiles (items x tiles
an item) over its persistent CTAs, from tests/data/attend_plan.tsv (the plan's table, which the unit
suite holds attend_plan_for to) for the device of its rows; another device gets no per-tile figure.

Check: the plugin's output of its last timed launch (out and lse filled with NaN before each of its
blocks) against a float32 attention over the records (bench/attend_reference.py, as
flashmla_compare.py checks it); a failed check: exit 1. Probe rows say "unchecked (probe)".

Usage (GPU machine):
  NVFP4_MLA_PLUGIN=build-gpu/plugin PYTHONPATH=host_shims/python \\
      python3 bench/attend_probes.py [--probes build-gpu/bench] [--json attend_probes.json] [--quick]
A run takes about a minute on the H200 (most of it writing the cache and the checks).
"""
import argparse
import glob
import json
import math
import os
import re
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path[:0] = [HERE, os.path.join(ROOT, "host_shims", "python")]

TOPK = 2048
# "cuda"; tests/check_bench_scripts.py runs the whole script on the CPU backend with "cpu", small cases
# and the plugin standing in for a probe (its times are then wall-clock and mean nothing).
DEVICE = "cuda"
PLAN_TABLE = os.path.join(ROOT, "tests", "data", "attend_plan.tsv")
PROBE_FILE = re.compile(r"libnvfp4_mla_attend_probe(\d+)\.so$")
# The switches (kernels/attend/lib/attend_probe.cuh, ATT_PROBE_*): bit -> name.
SWITCHES = {1: "NO_LOADS", 2: "NO_DEQUANT", 4: "NO_MMA", 8: "NO_PV_VALUE", 16: "NO_PV_SCORE"}
# What a build leaves out, by its bits (0: the plugin as committed).
WHAT = {0: "as committed",
        1: "producer: no global loads after its warm tiles (dequantises the bytes it holds)",
        2: "producer: no dequantisation or operand writes after its warm tiles (loads, key metadata kept)",
        3: "producer reduced to barriers and key metadata after its warm tiles (no loads, no dequantisation)",
        4: "consumers: no wgmma / mma.sync (waits, softmax, P and releases kept)",
        5: "no producer loads, no tensor-core products",
        6: "no dequantisation, no tensor-core products",
        7: "all three: barriers, key metadata and the softmax alone",
        8: "wide kind: value warpgroup 1's P.V skipped (dims 256..511)",
        16: "wide kind: score warpgroup 0's P.V skipped (dims 0..255)"}
# The cases: (name, batch, s_q, heads, launches between events); a case's queries are batch x s_q.
CASES = (("decode b=128 h=64", 128, 1, 64, 20), ("decode b=128 h=128", 128, 1, 128, 20),
         ("prefill 4096 h=128", 1, 4096, 128, 3))
PREFILL_CONTEXT = 2 << 20


# ---- the plan's tiles (standard library only: tests/check_attend_probes.py runs these) ----

def plan_table(path=PLAN_TABLE):
    """The rows of the plan's table as dicts, by its header line ("# device\\tarch...")."""
    names, rows = None, []
    with open(path) as f:
        for line in f:
            line = line.rstrip("\n")
            if line.startswith("# device\t"):
                names = line[2:].split("\t")
            elif line and not line.startswith("#"):
                if names is None:
                    raise ValueError(f"{path}: no '# device' header line before the rows")
                rows.append(dict(zip(names, line.split("\t"))))
    return rows


def plan_for(rows, sms, arch, smem, sync, n_q, h, topk=TOPK, record=368):
    """The plan of a call (n_q queries x h heads over top-k on 368-byte records) on a device (SMs,
    arch as 10 x major + minor, opt-in shared memory a block, NVFP4_MLA_ATTEND_MMA=sync), from the
    table: {kind, items, tiles_per_item, ctas, tiles, tiles_per_cta, most_tiles_a_cta}; None when the
    table has no row for that device and call."""
    for r in rows:
        if (int(r["sms"]), int(r["arch"]), int(r["smem"]), int(r["sync"])) != (sms, arch, smem, int(sync)):
            continue
        if (int(r["record"]), int(r["nq"]), int(r["h"]), int(r["topk"]), r["merge"]) != (record, n_q, h, topk, "auto"):
            continue
        items, per_item, ctas = int(r["items"]), int(r["tiles"]), int(r["grid"])
        return {"device": r["device"], "kind": r["kind"], "splits": int(r["splits"]), "items": items,
                "tiles_per_item": per_item, "ctas": ctas, "tiles": items * per_item,
                "tiles_per_cta": items * per_item / ctas, "most_tiles_a_cta": -(-items // ctas) * per_item}
    return None


def probe_files(folder):
    """{bits: path} of the probe plugins in a folder."""
    out = {}
    for path in sorted(glob.glob(os.path.join(folder, "libnvfp4_mla_attend_probe*.so"))):
        m = PROBE_FILE.search(os.path.basename(path))
        if m:
            out[int(m.group(1))] = path
    return out


def build_name(bits):
    return "plugin" if bits == 0 else f"probe{bits}"


def what(bits):
    return WHAT.get(bits) or " + ".join(SWITCHES[b] for b in SWITCHES if bits & b)


def case_row(case, plan, times, plugin_check):
    """A case's JSON row: case as CASES lists it, times {build name: [round medians]} (the plugin's
    first, under "plugin"), the plugin's check (attend_reference.row_check's dict); the probes' rows
    say 'unchecked (probe)'."""
    name, batch, s_q, h, launches = case
    base = times["plugin"]
    builds = []
    for build, t in times.items():
        bits = 0 if build == "plugin" else int(build[len("probe"):])
        fig = summarize(t)
        builds.append({"build": build, "bits": bits, "what": what(bits), "us": fig,
                       "us_per_cta_tile": fig["median"] / plan["tiles_per_cta"] if plan else None,
                       "of_plugin": summarize([x / b for x, b in zip(t, base)]),
                       "check": plugin_check if bits == 0 else "unchecked (probe)"})
    return {"case": name, "batch": batch, "s_q": s_q, "n_q": batch * s_q, "h": h, "launches": launches, "plan": plan,
            "builds": builds, "check": plugin_check["check"]}


def summarize(values):
    """A figure over rounds (flashmla_compare.summarize's shape, without importing PyTorch)."""
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "rounds": list(values)}


# ---- the run (PyTorch with CUDA) ----

def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--probes", default="build-gpu/bench",
                    help="folder of libnvfp4_mla_attend_probe<BITS>.so (meson -Dattend_probes=true: BUILD/bench)")
    ap.add_argument("--bits", type=int, nargs="*", help="the probes to time (default: every one in --probes)")
    ap.add_argument("--json", help="write the figures here")
    ap.add_argument("--tokens", type=int, default=4 << 20, help="records in the cache (default 4 M)")
    ap.add_argument("--reps", type=int, default=7, help="interleaved samples of each build, a round")
    ap.add_argument("--rounds", type=int, default=5, help="passes over every case")
    ap.add_argument("--warmup-rounds", type=int, default=1, help="unrecorded passes before the rounds")
    ap.add_argument("--quick", action="store_true", help="1 M tokens, 3 rounds of 3 reps")
    args = ap.parse_args(argv)
    if args.quick:
        args.tokens, args.rounds, args.reps = 1 << 20, 3, 3
    return args


def device_plan_key(torch):
    """(SMs, arch, opt-in shared memory a block, sync) of cuda:0 as the plugin's context reads them."""
    p = torch.cuda.get_device_properties(0)
    arch = 10 * p.major + p.minor
    smem = getattr(p, "shared_memory_per_block_optin", None) or (232448 if arch == 90 else 0)
    cap = os.environ.get("NVFP4_MLA_ATTEND_SMEM_CAP")
    if cap and cap.strip().isdigit():
        smem = min(smem, int(cap))
    return p.multi_processor_count, arch, smem, os.environ.get("NVFP4_MLA_ATTEND_MMA") == "sync"


class Data:
    """The cache of 368-byte records (the plugin's writer) and the reference's keys."""

    def __init__(self, torch, fc, ref, ctx, tokens):
        self.torch, self.ref, self.n = torch, ref, tokens
        self.gen = torch.Generator(device=DEVICE).manual_seed(46)
        self.cache = torch.empty(tokens // 64, 64, 368, dtype=torch.uint8, device=DEVICE)
        flat = self.cache.view(tokens, 368)

        def fill(first, x):
            slots = torch.arange(first, first + x.shape[0], device=DEVICE, dtype=torch.int64)
            ctx.write(x[:, :512], x[:, 512:], slots, self.cache, **fc.L368)

        fc.make_tokens(tokens, self.gen, fill)
        # The reference's decode held to the plugin's gather, every record (attend_reference.matches_gather).
        chunk = 1 << 18
        rows = torch.empty(chunk, 576, dtype=torch.bfloat16, device=DEVICE)
        self.decode_matches_gather = True
        for s in range(0, tokens, chunk):
            e = min(tokens, s + chunk)
            ctx.gather(self.cache, torch.arange(s, e, device=DEVICE, dtype=torch.int32), rows[:e - s], **fc.L368)
            self.decode_matches_gather &= ref.matches_gather(flat[s:e], rows[:e - s])

    def keys(self, ix):
        return self.ref.decode_368(self.cache.view(self.n, 368)[ix.reshape(-1)]).view(*ix.shape, 576)


class Case:
    """One case: q and top-k, each build's prepared attend with its own out and lse, round medians."""

    def __init__(self, torch, fc, data, builds, case, plan):
        self.fc, self.data, self.case, self.plan = fc, data, case, plan
        _, batch, s_q, h, self.launches = case
        n_q = batch * s_q
        self.sm = 1.0 / math.sqrt(576)
        context = data.n if s_q == 1 else min(data.n, PREFILL_CONTEXT)
        self.q = torch.randn(n_q, h, 576, device=DEVICE, generator=data.gen).to(torch.bfloat16)
        self.idx = torch.randint(0, context, (n_q, TOPK), device=DEVICE, generator=data.gen, dtype=torch.int32)
        self.out, self.lse, self.runs = {}, {}, {}
        stream = fc.current_stream()
        for build, ctx in builds.items():
            self.out[build] = torch.empty(n_q, h, 512, dtype=torch.bfloat16, device=DEVICE)
            self.lse[build] = torch.empty(n_q, h, dtype=torch.float32, device=DEVICE)
            self.runs[build] = ctx.prepare_attend(self.q, self.idx, data.cache, self.out[build], lse=self.lse[build],
                                                  sm_scale=self.sm, stream=stream, **fc.L368).run
        self.times = {build: [] for build in builds}

    def measure(self, reps):
        fc = self.fc
        poison = {"plugin": lambda: fc.nan_(self.out["plugin"], self.lse["plugin"])}
        timers = [fc.launches_us(self.runs[b], self.launches, poison.get(b)) for b in self.times]
        for b, samples in zip(self.times, fc.interleaved(timers, reps, warmup=1)):
            self.times[b].append(statistics.median(samples))

    def check(self):
        self.fc.sync()
        want = self.data.ref.reference(self.q, self.idx, self.data.keys, self.sm)
        return {"plugin": self.data.ref.row_check(self.out["plugin"], self.lse["plugin"], *want)}

    def name(self):
        return self.case[0]


def print_case(r):
    plan = r["plan"]
    tiles = (f"{plan['items']} items x {plan['tiles_per_item']} tiles on {plan['ctas']} CTAs "
             f"({plan['tiles_per_cta']:.2f} tiles a CTA)" if plan else "no plan row for this device: no per-tile figure")
    print(f"== {r['case']}: {r['launches']} launches between events; {tiles}")
    for b in r["builds"]:
        t, tile = b["us"], b["us_per_cta_tile"]
        check = b["check"] if isinstance(b["check"], str) else (
            f"check {b['check']['check']} (worst rel RMS {b['check']['worst_rel_rms']:.1e}, "
            f"lse {b['check']['worst_lse']:.1e})")
        print(f"  {b['build']:7s} {t['median']:9.1f} us [{t['min']:.1f}-{t['max']:.1f}]"
              + (f" {tile:6.2f} us a CTA-tile" if tile is not None else "")
              + f"  {b['of_plugin']['median']:.3f} of the plugin  {check}  ({b['what']})")
    sys.stdout.flush()


def load_builds(args, torch, nvfp4_mla, provenance, argv):
    """{build name: context} of the plugin and the probes asked for, and the run's provenance (each
    probe plugin's under "probes"); None when a probe plugin is missing (said why)."""
    found = probe_files(args.probes)
    bits = sorted(found) if args.bits is None else args.bits
    missing = [b for b in bits if b not in found]
    if missing or not bits:
        print(f"no probe plugin{'s' if len(missing) != 1 else ''} "
              f"{', '.join(f'libnvfp4_mla_attend_probe{b}.so' for b in missing) or 'at all'} in {args.probes}: "
              "build them with meson setup BUILD -Dcuda=enabled -Dattend_probes=true (BUILD/bench), or pass --probes")
        return None, None
    plugins = {"plugin": nvfp4_mla.load()}
    plugins.update({build_name(b): nvfp4_mla.load(found[b]) for b in bits})
    ctxs = {name: nvfp4_mla.Context(p, "cuda:0" if DEVICE == "cuda" else "cpu") for name, p in plugins.items()}
    prov = provenance.collect(plugins["plugin"], torch,
                              argv=sys.argv if argv is None else ["bench/attend_probes.py"] + list(argv))
    prov["probes"] = {build_name(b): dict(provenance.plugin_info(plugins[build_name(b)]), bits=b,
                                          switches=[SWITCHES[s] for s in SWITCHES if b & s]) for b in bits}
    print(f"device: {ctxs['plugin'].device_name}; plugin {plugins['plugin'].path} (git "
          f"{prov['plugin']['git_revision']}); probes {', '.join(build_name(b) for b in bits)} from {args.probes}")
    return ctxs, prov


def config_of(args, data):
    return {"tokens": args.tokens, "topk": TOPK, "record_bytes": 368, "scale_mode": "per-token", "reps": args.reps,
            "rounds": args.rounds, "warmup_rounds": args.warmup_rounds, "quick": args.quick,
            "timing": "back-to-back eager launches of each build's prepared attend between CUDA events, builds "
                      "interleaved; median over rounds of each round's median",
            "per_cta_tile": "time / (tiles / CTAs): the plan's 64-key tiles (items x tiles an item) over its CTAs, "
                            "from tests/data/attend_plan.tsv",
            "check": "the plugin's output against a float32 attention over the records (bench/attend_reference.py); "
                     "probe outputs are garbage by design and unchecked",
            "decode_matches_gather": data.decode_matches_gather}


def main(argv=None):
    args = parse_args(argv)
    started = time.time()
    import torch

    import flashmla_compare as fc  # bench/: the timing helpers, the data and the check
    import attend_reference as ref
    import nvfp4_mla
    import provenance

    if DEVICE == "cuda" and not torch.cuda.is_available():
        print("attend_probes.py times CUDA kernels: no CUDA device here")
        return 77
    ctxs, prov = load_builds(args, torch, nvfp4_mla, provenance, argv)
    if ctxs is None:
        return 2
    ref.strict_float32()
    key = device_plan_key(torch) if DEVICE == "cuda" else None
    if key:
        print(f"plan of the device: {key[0]} SMs, sm_{key[1]}, {key[2]} bytes of shared memory a block")
    data = Data(torch, fc, ref, ctxs["plugin"], args.tokens)
    if not data.decode_matches_gather:
        print("the reference's decode of the 368 records differs from the plugin's gather: no check would mean "
              "anything (bench/attend_reference.py, decode_368)")
        return 1
    table = plan_table()
    cases = [Case(torch, fc, data, ctxs, c, plan_for(table, *key, c[1] * c[2], c[3]) if key else None) for c in CASES]
    fc.sync()
    print(f"set-up: {time.time() - started:.0f} s")
    fc.run_rounds(cases, args)
    rows = []
    for case in cases:
        checks = fc.checked(case)  # {"plugin": ...}, or {"error": ...} when the check could not run
        rows.append(case_row(case.case, case.plan, case.times, checks.get("plugin") or checks["error"]))
        print_case(rows[-1])
    failed = [r["case"] for r in rows if r["check"] != "PASS"]
    report = {"provenance": prov, "config": config_of(args, data), "cases": rows,
              "checks": "all PASS" if not failed else f"FAIL: {', '.join(failed)}",
              "seconds": round(time.time() - started, 1)}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    print(f"checks of the plugin's rows: {report['checks']}; {report['seconds']:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
