#!/usr/bin/env python3
"""The comparison's machinery on the CPU backend (issue 47), what can be shown without a GPU:
  - the check (bench/attend_reference.py): the plugin's attend (the CPU backend: float64 over the
    records' binary32 values, what the GPU tests hold the kernels to) passes against the float32
    reference over the records through the plugin's gather, with room (its own rounding, printed);
    on 656 records against their decode; and fails a 1% softmax-scale error, P rounded to 4
    significant bits and a wrong lse, which the old check (5e-2 relative RMS against a bf16
    reference, no lse) passed;
  - the rounds (bench/flashmla_compare.py): a cell where either side moved more than 3% between
    rounds is dropped from the claims and counted, the others kept (issue 57: the run reports, it
    vetoes nothing); fewer than 3 rounds give no headline; the rows' JSON as the GPU run writes it
    (the classes' own row() over made-up round times) renders through bench/compare_table.py, a
    drifted cell marked and out of the counts;
  - provenance (bench/provenance.py) and hot_path.py --device cpu: the JSON carries it;
  - bench/attend_probes.py end to end, the plugin standing in for its probe builds (issue 46);
  - bench/attend_ab.py end to end with three builds (the plugin under three names): every build's
    output checked against the float32 reference, and a wrong reference failing the run (issue 54);
  - bench/attend_roles.py's summary of a made-up Nsight Compute source page (its regions and shares).
Skips (77) without PyTorch and numpy.
    usage: check_bench_scripts.py SOURCE_ROOT   (NVFP4_MLA_PLUGIN_PATH: the built plugin)
"""
import contextlib
import io
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

root = sys.argv[1]
try:
    import numpy  # noqa: F401
    import torch
except ImportError as exc:
    print(f"{exc.name} not installed: skipped")
    sys.exit(77)
sys.path[:0] = [os.path.join(root, "bench"), os.path.join(root, "host_shims", "python")]
import attend_reference as ref  # noqa: E402
import compare_table  # noqa: E402
import flashmla_compare as fc  # noqa: E402
import nvfp4_mla  # noqa: E402
import provenance  # noqa: E402

PLUGIN = os.environ["NVFP4_MLA_PLUGIN_PATH"]
N, NQ, H, SM = 8192, 6, 16, 1.0 / math.sqrt(576)
from check_harness import expect, finish  # noqa: E402  (tests/, beside this script)


def summary(c):
    return (f"{c['check']} rows {c['rows']} failed {c['failed_rows']}, worst rel RMS {c['worst_rel_rms']:.2e}, "
            f"excess {c['worst_excess']:.2e}, lse {c['worst_lse']:.2e}")


def make_case(ctx, gen):
    """A 368 per-token cache and a 656 cache of the same random tokens, q, top-k, the gathered rows."""
    x = torch.randn(N, 576, generator=gen) * torch.exp(0.5 * torch.randn(N, 1, generator=gen))
    x = x.to(torch.bfloat16)
    c368 = torch.zeros(N // 64, 64, 368, dtype=torch.uint8)
    ctx.write(x[:, :512], x[:, 512:], torch.arange(N), c368, **fc.L368)
    dense = torch.empty(N, 576, dtype=torch.bfloat16)
    ctx.gather(c368, torch.arange(N, dtype=torch.int32), dense, **fc.L368)
    c656 = ref.fp8_ds_mla_records(x).view(N // 64, 64, 656)
    q = torch.randn(NQ, H, 576, generator=gen).to(torch.bfloat16)
    idx = torch.randint(0, N, (NQ, 2048), generator=gen, dtype=torch.int32)
    return c368, c656, dense, q, idx


def attend(ctx, q, idx, cache, layout, sm=SM):
    out = torch.empty(q.shape[0], q.shape[1], 512, dtype=torch.bfloat16)
    lse = torch.empty(q.shape[0], q.shape[1], dtype=torch.float32)
    ctx.attend(q, idx, cache, out, lse=lse, sm_scale=sm, **layout)
    return out, lse


def p_rounded(q, idx, keys_of, bits):
    """The attention with each softmax weight rounded to `bits` significant bits (a kernel's fault)."""
    keys = keys_of(idx)
    s = torch.matmul(q.float(), keys.transpose(1, 2)) * SM
    p = torch.exp(s - s.amax(dim=-1, keepdim=True))
    m, e = torch.frexp(p)
    p = torch.ldexp(torch.round(m * 2**bits) / 2**bits, e)
    return torch.matmul(p, keys[:, :, :512]) / p.sum(dim=-1, keepdim=True)


def old_check(got, want):
    """The comparison's check before issue 47: relative RMS and max a row, 5e-2, no lse."""
    g, w = got.float().reshape(-1, 512), want.float().reshape(-1, 512)
    rms = ((g - w).norm(dim=1) / w.norm(dim=1)).max().item()
    mx = ((g - w).abs().amax(dim=1) / w.abs().amax(dim=1)).max().item()
    return rms <= 5e-2 and mx <= 5e-2


def checks_on_cpu():
    plugin = nvfp4_mla.load(PLUGIN)
    gen = torch.Generator().manual_seed(47)
    with nvfp4_mla.Context(plugin, "cpu") as ctx:
        c368, c656, dense, q, idx = make_case(ctx, gen)
        expect(ref.matches_gather(c368.view(N, 368), dense), "368: bf16 of the decoded values is the plugin's gather")
        keys368 = lambda ix: ref.decode_368(c368.view(N, 368)[ix.reshape(-1)]).view(*ix.shape, 576)  # noqa: E731
        keys656 = lambda ix: ref.decode_656(c656.view(N, 656)[ix.reshape(-1)]).view(*ix.shape, 576)  # noqa: E731
        gathered = lambda ix: dense[ix.reshape(-1)].float().view(*ix.shape, 576)  # noqa: E731
        want368, want656 = ref.reference(q, idx, keys368, SM), ref.reference(q, idx, keys656, SM)
        got368 = attend(ctx, q, idx, c368, fc.L368)
        good = ref.row_check(*got368, *want368)
        print(f"368, the plugin's attend against the float32 reference over the records' values: {summary(good)}; "
              f"headroom {ref.headroom(good):.1f}x")
        expect(good["check"] == "PASS" and ref.headroom(good) >= 2, "368: a correct output passes with >= 2x room")
        over_gather = ref.row_check(*got368, *ref.reference(q, idx, gathered, SM))
        print(f"(the same output against a float32 attention over the gathered bf16 rows: {summary(over_gather)}: "
              "not a reference at these bounds)")
        good656 = ref.row_check(*attend(ctx, q, idx, c656, fc.L656), *want656)
        print(f"656 against its decode: {summary(good656)}; headroom {ref.headroom(good656):.1f}x")
        expect(good656["check"] == "PASS" and ref.headroom(good656) >= 2, "656: a correct output passes with >= 2x room")
        faults = {"softmax scale 1% off": attend(ctx, q, idx, c368, fc.L368, SM * 1.01),
                  "P rounded to 4 significant bits": (p_rounded(q, idx, keys368, 4), want368[1]),
                  "lse + 1e-4": (want368[0], want368[1] + 1e-4)}
        for what, (out, lse) in faults.items():
            c = ref.row_check(out, lse, *want368)
            print(f"fault, {what}: {summary(c)}; the old check {'passed' if old_check(out, want368[0]) else 'failed'} it")
            expect(c["check"] == "FAIL", f"the check fails: {what}")
        return good


def rounds_and_headline():
    ok_rows = [("a", fc.drift([100.0, 101.0, 102.5]), 0.01), ("b", fc.drift([50.0, 50.2, 50.1]), 0.0)]
    h = fc.headline(ok_rows, 3, 0.03)
    expect(not h["refused"] and h["kept"] == h["cells"] == 2 and not h["dropped"]
           and abs(h["worst_kept_drift"] - 0.025) < 1e-9 and h["where"] == "a",
           "both sides within 3% between rounds in every cell: all cells kept")
    h = fc.headline(ok_rows + [("c", fc.drift([100.0, 104.0, 101.0]), 0.0), ("d", 0.0, 0.05)], 3, 0.03)
    expect(not h["refused"] and h["kept"] == 2 and h["cells"] == 4
           and [d["where"] for d in h["dropped"]] == ["c", "d"],
           "a peer that moved 4%, or attend 5%: that cell dropped and named, the others kept, no veto")
    two = fc.headline(ok_rows, 2, 0.03)
    expect(two["refused"] and "at least 3" in two["reason"], "two rounds: no headline")
    st = fc.stability([19.0, 19.1, 18.9], [9.0, 9.5, 9.0], 0.03)
    expect(not st["kept"] and abs(st["attend_drift"] - 0.5 / 9.0) < 1e-9 and st["peer_drift"] < 0.03,
           "stability(): attend's own move drops a cell")
    # Five rounds: one round apart from the rest (here 9% slow) is set aside; two apart are not.
    expect(abs(fc.drift([100.0, 109.0, 101.0, 100.5, 102.0]) - 1.5 / 100.5) < 1e-9,
           "five rounds: the drift of the middle three (100.5 .. 102)")
    expect(fc.drift([100.0, 109.0, 108.0, 100.5, 102.0]) > 0.03, "five rounds, two of them 8-9% slow: still a drift")
    expect(abs(fc.drift([100.0, 104.0, 101.0]) - 0.04) < 1e-9, "three rounds: every round counts")
    s = fc.ratio_summary([20.0, 21.0, 19.0], [10.0, 10.0, 10.0])
    expect(s["median"] == 2.0 and s["min"] == 1.9 and s["max"] == 2.1, "a ratio is the median of the rounds' ratios")


def made_up_report(check):
    """The JSON a GPU run writes, from the classes' own row() over made-up round times, and its
    tables through bench/compare_table.py."""
    grid = []
    for b, sq, h in ((1, 1, 16), (2, 1, 16), (1, 2, 16), (64, 1, 128)):
        c = object.__new__(fc.GridCell)
        c.b, c.sq, c.h, c.q = b, sq, h, torch.empty(1, 1, max(h, 64), 1)
        c.times = {"back_to_back": {"flashmla": [19.0, 19.1, 18.9], "attend368": [9.0, 9.1, 9.0]},
                   "after_gemm": {"flashmla": [19.3, 19.2, 19.4], "attend368": [11.0, 10.9, 11.1], "gap": [7.0] * 3}}
        if (b, sq) == (2, 1):  # attend moved 6% between rounds after a GEMM: a drifted cell
            c.times["after_gemm"]["attend368"] = [11.0, 11.7, 11.1]
        grid.append(c.row({"attend368 back_to_back": check, "flashmla back_to_back": check}))
    d = object.__new__(fc.Decode128)
    d.h, d.q = 16, torch.empty(1, 1, 64, 1)
    d.times = {"flashmla": [120.0, 121.0, 122.0], "attend656": [105.0] * 3, "attend368": [78.0, 77.0, 79.0]}
    p = object.__new__(fc.Prefill)
    p.h = 16
    p.times = {k: {"flashmla_bf16": [3000.0] * 3, "attend368": [2100.0] * 3, "gather_flashmla": [4200.0] * 3}
               for k in ("alone", "interleaved")}
    plugin = nvfp4_mla.load(PLUGIN)
    report = {"provenance": provenance.collect(plugin, torch), "grid": grid, "decode": [d.row({"attend368": check})],
              "prefill": [p.row({"attend368": check})]}
    report["headline"] = fc.headline([x for r in (d,) for x in r.drifts()], 3, 0.03)
    expect(not provenance.check(report["provenance"]), "a run's provenance holds every required key")
    tables = compare_table.figures.compare_tables(compare_table.figures.upgrade("flashmla_compare.json", report))
    print(tables)
    expect("| 1 | 19.3 / 11.0 (1.75x (1.75-1.76))" in tables, "the grid renders the after_gemm medians and ratio range")
    expect("| 16 | 121.0 (64) | 105.0 (1.15x (1.14-1.16)) | 78.0 (1.54x (1.54-1.57))" in tables,
           "the batch-128 row renders the median over rounds and the range of the ratios")
    expect("| 2 | 19.3 / 11.1 (1.75x (1.64-1.75)) drifted |" in tables and
           "After a gemm: 3 of 3 kept cells of batch <= 64 at >= 1.2x (1 drifted, left out)" in tables,
           "the drifted cell is marked and left out of the counts")
    refused = dict(report, headline=fc.headline([("x", 0.05, 0.0)], 2, 0.03))
    expect("at least 3" in compare_table.figures.refused({"flashmla_compare.json": refused}),
           "compare_table refuses a file of fewer than 3 rounds")
    return report


def documents_from_new_files(report, hot):
    """The whole regeneration (BENCHMARKS.md, README.md, results/PROVENANCE) from files of the new
    shape: the made-up comparison, the committed bench files given provenance and timed-call checks
    as nvfp4-mla-bench now writes them, and hot_path.py's CPU file."""
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copytree(os.path.join(root, "results"), os.path.join(tmp, "results"))  # the quoted files too
        for doc in ("BENCHMARKS.md", "README.md"):
            with open(os.path.join(root, doc)) as f, open(os.path.join(tmp, doc), "w") as g:
                g.write(f.read())
        files = {"flashmla_compare.json": report, "hot_path.json": hot}
        for name in ("bench.json", "bench-99kb.json"):
            with open(os.path.join(root, "results", name)) as f:
                b = json.load(f)
            b["provenance"] = report["provenance"]
            for r in b["rows"]:
                if r["check"] != "-":
                    r.update(timed_calls=23, timed_bad_elements=0)
            files[name] = b
        for name, data in files.items():
            with open(os.path.join(tmp, "results", name), "w") as f:
                json.dump(data, f)
        code = compare_table.main(["--root", tmp])
        with open(os.path.join(tmp, "BENCHMARKS.md")) as f:
            bench_md = f.read()
        with open(os.path.join(tmp, "results", "PROVENANCE")) as f:
            index = f.read()
        git = report["provenance"]["plugin"]["git_revision"]
        expect(code == 0 and f"plugin git {git}" in bench_md and "23 timed calls checked, 0 bad" in bench_md
               and f"git {git}" in index and "one run" not in bench_md.split("<!-- end figures -->")[0],
               "compare_table rewrites the documents and the index from files of the new shape")
        expect(compare_table.main(["--check", "--root", tmp]) == 0, "and --check then finds them up to date")


def hot_path_cpu():
    """hot_path.py --device cpu: its labels and its JSON (returned)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "hot.json")
        run = subprocess.run([sys.executable, os.path.join(root, "bench", "hot_path.py"), "--device", "cpu",
                              "--plugin", PLUGIN, "--calls", "5", "--reps", "3", "--json", out],
                             capture_output=True, text=True, timeout=600,
                             env=dict(os.environ, PYTHONPATH=os.path.join(root, "host_shims", "python")))
        print(run.stdout[-1500:], run.stderr[-1500:])
        expect(run.returncode == 0 and "host launch rate" in run.stdout and "8 us target" in run.stdout,
               "hot_path.py --device cpu labels its figures and says per cell whether run() meets 8 us")
        with open(out) as f:
            data = json.load(f)
        expect(not provenance.check(data["provenance"]), "hot_path.json carries its provenance")
        return data


class FakeFlashMLA:
    """FlashMLA's two calls as flashmla_compare.py makes them, in PyTorch on the CPU (the float32
    reference rounded to bf16): the peer of the dry run."""

    def sparse_decode_fwd(self, q, kv, idx, *rest):
        b, sq, hq, _ = q.shape
        sm, out = rest[8], rest[9]
        rec = kv.view(torch.uint8).reshape(-1, 656)
        o, lse = ref.reference(q.reshape(b * sq, hq, 576), idx.reshape(b * sq, -1),
                               lambda ix: ref.decode_656(rec[ix.reshape(-1)]).view(*ix.shape, 576), sm)
        o = o.to(torch.bfloat16).view(b, sq, hq, 512)
        if out is not None:
            out.copy_(o)
            o = out
        return o, lse.view(b, sq, hq).transpose(1, 2).contiguous(), torch.zeros(1), torch.zeros(1)

    def sparse_prefill_fwd(self, q, kv, ind, sm, *rest):
        rows = kv.reshape(-1, 576)
        o, lse = ref.reference(q, ind[:, 0], lambda ix: rows[ix.reshape(-1)].float().view(*ix.shape, 576), sm)
        return o.to(torch.bfloat16), lse.clone(), lse


def dry_run_cpu():
    """bench/flashmla_compare.py end to end on the CPU backend (small shapes, top-k 128, a stand-in
    FlashMLA, wall-clock times that mean nothing): set-up, rounds, every check, the JSON, and the
    documents compare_table.py writes from it."""
    fc.DEVICE, fc.TOPK, fc.GEMM = "cpu", 128, (16, 256, 256)
    fc.Decode128.BATCH, fc.Prefill.S_Q = 4, 8
    fc.load_flashmla = lambda path: FakeFlashMLA()
    os.environ["NVFP4_MLA_PLUGIN"] = PLUGIN
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "flashmla_compare.json")
        code = fc.main(["--tokens", "16384", "--batches", "1", "2", "--heads", "16", "64", "--prefill-heads", "16",
                        "--calls", "2", "--reps", "2", "--max-drift", "1e12", "--round-gap", "0.2", "--warmup-rounds", "0",
                        "--json", out])  # (no warm-up round: a sixth of the run's minutes on a slow CPU)
        with open(out) as f:
            report = json.load(f)
    rows = report["grid"] + report["decode"] + report["prefill"]
    expect(code == 0 and report["checks"] == "all PASS" and len(report["grid"]) == 8 and
           all(len(c) == 4 for c in (r["checks"] for r in report["grid"])) and not report["headline"]["refused"]
           and report["headline"]["kept"] == report["headline"]["cells"] == 8 * 2 + 2 * 2 + 2,
           "flashmla_compare.py runs end to end on the CPU: 8 grid cells in two modes, batch 128 and prefill rows, "
           "every check PASS, a headline, every cell kept")
    expect(report["config"]["decode_matches_gather"] and all(len(r["flashmla_us"]["rounds"]) == 5 for r in report["decode"]),
           "its reference decode matches the gather and every figure has five rounds (the default)")
    expect(all("alone" in r and "interleaved" in r for r in report["prefill"]), "prefill is timed alone and interleaved")
    print(compare_table.figures.compare_tables(compare_table.figures.upgrade("flashmla_compare.json", report)))
    return rows


def probes_dry_run_cpu():
    """bench/attend_probes.py end to end on the CPU backend (issue 46): the plugin standing in for two
    probe builds (links under their names), small cases, top-k 128, wall-clock times that mean
    nothing: several plugins loaded at once, the rounds, the plugin's check, the JSON with every
    build's provenance, and its block of BENCHMARKS.md."""
    import attend_probes as ap
    fc.DEVICE, ap.DEVICE, ap.TOPK, ap.PREFILL_CONTEXT = "cpu", "cpu", 128, 8192
    ap.CASES = (("decode b=4 h=64", 4, 1, 64, 2), ("prefill 8 h=16", 1, 8, 16, 1))
    os.environ["NVFP4_MLA_PLUGIN"] = PLUGIN
    with tempfile.TemporaryDirectory() as tmp:
        for bits in (3, 4):
            os.symlink(os.path.abspath(PLUGIN), os.path.join(tmp, f"libnvfp4_mla_attend_probe{bits}.so"))
        out = os.path.join(tmp, "attend_probes.json")
        code = ap.main(["--probes", tmp, "--tokens", "16384", "--rounds", "3", "--reps", "2", "--json", out])
        with open(out) as f:
            report = json.load(f)
    builds = [[b["build"] for b in c["builds"]] for c in report["cases"]]
    expect(code == 0 and report["checks"] == "all PASS" and builds == [["plugin", "probe3", "probe4"]] * 2 and
           all(b["check"] == "unchecked (probe)" for c in report["cases"] for b in c["builds"][1:]) and
           all(len(b["us"]["rounds"]) == 3 and b["us_per_cta_tile"] is None for c in report["cases"]
               for b in c["builds"]),
           "attend_probes.py runs end to end on the CPU: three builds a case, three rounds, the plugin's rows "
           "checked (PASS), the probes' unchecked, no per-tile figure off the plan's devices")
    expect(not provenance.check(report["provenance"]) and sorted(report["provenance"]["probes"]) == ["probe3", "probe4"]
           and report["provenance"]["probes"]["probe3"]["switches"] == ["NO_LOADS", "NO_DEQUANT"],
           "attend_probes.json carries the run's provenance and each probe plugin's, with its switches")
    text = compare_table.figures.probes_section(report)
    print(text)
    expect("| probe 4 | consumers: no wgmma" in text, "its block renders a row a build")


def ab_dry_run_cpu():
    """bench/attend_ab.py end to end on the CPU backend (issue 54 times several designs in one call):
    the plugin under three build-folder names, two small shapes, top-k 128. Every build's row is
    timed against the base, bit-identical to it (one plugin) and checked (PASS); then a reference
    scaled by 1.01 makes every check FAIL and the exit status 1 (the check reaches the verdict)."""
    import attend_ab as ab
    fc.DEVICE, ab.TOKENS, ab.TOPK, ab.SAMPLES = "cpu", 16384, 128, 2
    shapes = "decode 4 x h 64:4:64:1,prefill 8 x h 16:8:16:1"
    with tempfile.TemporaryDirectory() as tmp:
        plugins = []
        for name in ("build-base", "build-d1", "build-d2"):
            os.makedirs(os.path.join(tmp, name, "plugin"))
            plugins.append(os.path.join(tmp, name, "plugin", "libnvfp4_mla.so"))
            os.symlink(os.path.abspath(PLUGIN), plugins[-1])
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = ab.main(plugins + ["--shapes", shapes])
        lines = out.getvalue().splitlines()
        print("\n".join(lines))
        expect(code == 0 and len(lines) == 6 and all("check PASS" in l and "bit-identical to build-base: True" in l
                                                      for l in lines) and
               sum("x of build-base" in l for l in lines) == 4 and lines[2].startswith("decode 4 x h 64: build-d2"),
               "attend_ab.py times three builds a shape against the first, each output checked (PASS) and compared")
        good_reference = ab.ref.reference
        ab.ref.reference = lambda *a, **k: tuple(t * 1.01 for t in good_reference(*a, **k))
        try:
            with contextlib.redirect_stdout(io.StringIO()) as bad:
                bad_code = ab.main(plugins[:2] + ["--shapes", shapes])
        finally:
            ab.ref.reference = good_reference
        expect(bad_code == 1 and bad.getvalue().count("check FAIL") == 4 and "do not count" in bad.getvalue(),
               "attend_ab.py fails the run when an output misses the reference (a 1% error in it)")


def roles_summary():
    """attend_roles.py summary: regions split at the setmaxnreg points, shares of the samples."""
    import contextlib
    import io

    import attend_roles

    head = ["Address", "Source", "Warp Stall Sampling (All Samples)", "stall_barrier", "stall_long_sb"]
    sass = [("0x0", "MOV R1, c[0x0][0x28]", 10, 0, 10),
            ("0x10", "USETMAXREG.TRY_ALLOC.CTAPOOL UP0, 0xe8 ;", 0, 0, 0),
            ("0x20", "BAR.SYNC 0x3, 0x100", 30, 30, 0),
            ("0x30", "HGMMA.64x64x16.F32.BF16 R152", 10, 0, 10),
            ("0x40", "USETMAXREG.DEALLOC.CTAPOOL 0x38 ;", 0, 0, 0),
            ("0x50", "LDG.E.128 R4, [R2]", 50, 0, 50)]
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "src.csv")
        with open(path, "w") as f:
            f.write('"Kernel Name","k"\n' + ",".join(f'"{h}"' for h in head) + "\n")
            f.writelines(",".join(f'"{v}"' for v in row) + "\n" for row in sass)
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            attend_roles.summary(path, 2)
    text = out.getvalue()
    print(text)
    expect("== registers 232 (SASS lines 1-4): 40.0% of samples; barrier 75%, long_sb 25%" in text and
           "== registers 56 (SASS lines 4-6): 50.0% of samples; long_sb 100%" in text and
           "== prologue (SASS lines 0-1): 10.0% of samples" in text,
           "attend_roles.py summary splits the kernel at its setmaxnreg points and gives each region's share")


if __name__ == "__main__":
    roles_summary()
    good = checks_on_cpu()
    rounds_and_headline()
    report = made_up_report(good)
    documents_from_new_files(report, hot_path_cpu())
    dry_run_cpu()
    probes_dry_run_cpu()
    ab_dry_run_cpu()
    sys.exit(finish())
