"""The tables of BENCHMARKS.md and README.md and the lines of results/PROVENANCE, from the JSON files
of results/ (bench/compare_table.py writes them into the documents). One function a block; each
names its file and the file's provenance. Standard library only.
"""

GRID_CLAIM_MODE = "after_gemm"  # the small-batch claims: a call after an ordinary kernel, as in a model
MODE_WORDS = {"after_gemm": "after a GEMM (a call as in a model; the GEMM's own time subtracted)",
              "back_to_back": "back to back (each call may start in the previous call's tail)",
              "after_flush": "after a 256 MB write (L2 flushed; its own time subtracted)"}
LEGACY = "from before issue 47: no provenance inside; one run, no rounds (git history of results/PROVENANCE)"
WHAT = {  # file: (what it holds, the command that makes it on the GPU machine)
    "bench.json": ("writer, gather and attend against same-run ceilings, each timed call's output checked",
                   "build-gpu/bench/nvfp4-mla-bench --json bench.json"),
    "bench-99kb.json": ("attend in the 99 KB configuration (sm_120 parts), on the H200",
                        "NVFP4_MLA_ATTEND_SMEM_CAP=101376 build-gpu/bench/nvfp4-mla-bench --only attend "
                        "--json bench-99kb.json"),
    "flashmla_compare.json": ("attend against FlashMLA: decode grid (two modes), batch 128, prefill; 5 rounds "
                              "(40 s apart since issue 57), drifted cells marked and left out",
                              "python3 bench/flashmla_compare.py --flashmla .anchor/_flashmla_C.abi3.so "
                              "--json flashmla_compare.json"),
    "hot_path.json": ("host launch rate per call through the Python shim, and decode steps (GPU time labelled)",
                      "python3 bench/hot_path.py --device cuda --json hot_path.json"),
    "dcp.json": ("decode context parallelism over NCCL (2 GPUs)", "python3 bench/dcp_measure.py --json dcp.json"),
    "vllm_decode_step.json": ("a DeepSeek-V3.2-shaped decode step through the vLLM plugin's bodies (cache write and "
                              "attend, 4 layers in one CUDA graph) beside FlashMLA on 656-byte records",
                              "python3 bench/vllm_decode_step.py --flashmla .anchor/_flashmla_C.abi3.so "
                              "--json vllm_decode_step.json"),
    "attend_probes.json": ("what bounds attend: the plugin beside its stage-removal probe builds (issue 46), decode "
                           "batch 128 at h = 64 and 128 and prefill at h = 128; the plugin's output checked",
                           "python3 bench/attend_probes.py --probes build-gpu/bench --json attend_probes.json "
                           "(probes: meson -Dattend_probes=true)"),
    "quality.json": ("reconstruction error per layer and mode (CPU; QUALITY.md)",
                     "build/host_shims/cli/nvfp4-mla quality --tokens 512 --json results/quality.json; "
                     "python3 bench/device_code.py --stamp results/quality.json"),
}


# ---- reading files of any age ----

def _one_round(t):
    """A figure of an old file (one run's median and range over its repetitions) as a rounds summary."""
    return {"median": t["median"], "min": t["min"], "max": t["max"], "rounds": None}


def _legacy_ratio(x):
    return {"median": x, "min": x, "max": x, "rounds": None}


def _legacy_check(old, name):
    return {"check": old["check"], "worst_rel_rms": old["worst_rel_rms"], "worst_excess": old.get("worst_rel_max"),
            "worst_lse": None, "bounds": {"rel_rms": old["bounds"][0]}, "reference": name}


def _upgrade_compare(d):
    grid = [{"batch": r["batch"], "s_q": r["s_q"], "h": r["h"], "flashmla_heads": r["flashmla_heads"],
             "modes": {"back_to_back": {"flashmla_us": _one_round(r["flashmla_us"]),
                                        "attend368_us": _one_round(r["attend368_us"]),
                                        "ratio": _legacy_ratio(r["speedup"]), "peer_drift": None,
                                        "attend368_tflops": r["attend368_tflops"]}},
             "checks": {"attend368 back_to_back": _legacy_check(r, "FlashMLA's bf16 prefill")}, "check": r["check"]}
            for r in d.get("grid", [])]
    decode = [{"h": r["h"], "flashmla_heads": r["flashmla_heads"], "flashmla_us": _one_round(r["flashmla_us"]),
               "attend656_us": _one_round(r["attend656_us"]), "attend368_us": _one_round(r["attend368_us"]),
               "ratio368": _legacy_ratio(r["speedup368"]), "ratio656": _legacy_ratio(r["speedup656"]),
               "peer_drift": None, "attend368_tflops": r["attend368_tflops"],
               "checks": {"attend656": _legacy_check(r["check656_vs_flashmla"], "FlashMLA's output"),
                          "attend368": _legacy_check(r["check368_vs_flashmla_bf16"], "FlashMLA's bf16 prefill")},
               "check": "PASS" if r["check656_vs_flashmla"]["check"] == r["check368_vs_flashmla_bf16"]["check"] ==
               "PASS" else "FAIL"} for r in d.get("decode", [])]
    prefill = [{"h": r["h"], "s_q": r["s_q"], "checks": {"attend368": _legacy_check(r, "FlashMLA's bf16 prefill")},
                "check": r["check"],
                "interleaved": {"flashmla_bf16_us": _one_round(r["flashmla_bf16_us"]),
                                "attend368_us": _one_round(r["attend368_us"]),
                                "gather_flashmla_us": _one_round(r["gather_flashmla_us"]),
                                "ratio": _legacy_ratio(r["speedup_vs_flashmla"]),
                                "ratio_vs_gather": _legacy_ratio(r["speedup_vs_gather_flashmla"]), "peer_drift": None,
                                "attend368_tflops": r["attend368_tflops"]}} for r in d.get("prefill", [])]
    return {"legacy": True, "grid": grid, "decode": decode, "prefill": prefill,
            "config": {"rounds": 1, "tokens": d["tokens"]}, "device": d.get("device"),
            "headline": {"refused": False, "legacy": True}}


def _drift(values):
    """bench/flashmla_compare.py's drift(): (max - min) / min of the rounds, from 5 rounds on over the
    middle ones (the fastest and slowest set aside)."""
    if not values or len(values) < 2:
        return None
    kept = sorted(values)[1:-1] if len(values) >= 5 else list(values)
    return (max(kept) - min(kept)) / min(kept)


def _stable(m, limit, ours="attend368_us"):
    """A comparison cell's "kept" (issue 57: neither side moved more than the limit between rounds),
    for files written before the run said so itself: from the drifts it recorded, attend's computed
    from its rounds where the file recorded FlashMLA's alone (a legacy file has no rounds: a drift
    not known is not held against it)."""
    if "attend_drift" not in m and m.get(ours, {}).get("rounds"):
        m["attend_drift"] = _drift(m[ours]["rounds"])
    if "kept" not in m:
        drifts = [m.get(k) for k in ("peer_drift", "attend_drift")]
        m["kept"] = all(d is None or d <= limit for d in drifts)
    return m


def _mark_kept(d):
    cfg = d.get("config", {})
    limit = cfg.get("max_drift", cfg.get("max_peer_drift", 0.03))
    for r in d.get("grid", []):
        for m in r["modes"].values():
            _stable(m, limit)
    for r in d.get("decode", []):
        _stable(r, limit)
        if "kept656" not in r:
            d656 = _drift((r.get("attend656_us") or {}).get("rounds"))
            r["attend656_drift"] = d656
            r["kept656"] = (r.get("peer_drift") or 0) <= limit and (d656 is None or d656 <= limit)
    for r in d.get("prefill", []):
        for kind in ("alone", "interleaved"):
            if kind in r:
                _stable(r[kind], limit)
    return d


def upgrade(name, data):
    """A results file in the shape this module reads; files without provenance are marked legacy."""
    if name == "flashmla_compare.json" and "provenance" not in data:
        return _mark_kept(_upgrade_compare(data))
    if "provenance" not in data and isinstance(data, dict):
        data = dict(data, legacy=True)
    if name == "flashmla_compare.json":
        _mark_kept(data)
    return data


# ---- the device code a file measured (issue 57) ----

STALE = "STALE"


def mark_code(res, current, recorded_of):
    """Each file's "_code": {"recorded": its digest or None, "stale": whether it is none of
    `current`, "same_as": the equivalence's evidence when it is current through one}; current is
    bench/device_code.py's current() ({the tree's digest: None, an equivalent digest: its evidence}),
    recorded_of(data) reads a file's digest."""
    for d in res.values():
        if isinstance(d, dict):
            d["_code"] = code_of(recorded_of(d), current)
    return res


def code_of(rec, current):
    return {"recorded": rec, "stale": rec not in current, "same_as": current.get(rec)}


def stale(d):
    """True when a file measured device code other than the tree's (or recorded none); False for a
    file this module was not told about (the tables of one file printed alone)."""
    return bool(d and d.get("_code", {}).get("stale"))


def code_words(d):
    """The caption's words on the file's device code: the tree's, or the stale mark and why."""
    code = d.get("_code")
    if not code:
        return ""
    if code["recorded"] is None:
        return f"; **{STALE}**: no device-code digest recorded, so not shown to be the tree's kernels"
    short = code["recorded"][:12]
    if code["stale"]:
        return f"; **{STALE}**: measured on device code {short}, not the tree's (bench/device_code.py): rerun"
    if code.get("same_as"):
        return f"; device code {short}, machine code identical to the tree's (results/device_code_equivalence.tsv)"
    return f"; device code {short} (the tree's)"


def stale_prefix(d):
    return f"**{STALE}** " if stale(d) else ""


def refused(res):
    """Why the results cannot be tabulated (a comparison without a headline), else ""."""
    cmp = res.get("flashmla_compare.json")
    if cmp and cmp.get("headline", {}).get("refused"):
        return f"results/flashmla_compare.json has no headline: {cmp['headline']['reason']}"
    return ""


# ---- formatting ----

def med(t):
    return t["median"]


def us(t, digits=1):
    return f"{t['median']:.{digits}f}"


def ratio(x):
    """2.10x, with the rounds' range when the file has rounds."""
    if x.get("rounds") and len(x["rounds"]) > 1:
        return f"{x['median']:.2f}x ({x['min']:.2f}-{x['max']:.2f})"
    return f"{x['median']:.2f}x"


def pct(x):
    return "-" if x is None else f"{x:.1%}"


def caption(res, name):
    """Which file a table comes from, and where that file came from."""
    d = res.get(name)
    if d is None:
        return f"`results/{name}`: not in results/ (no figures)"
    if d.get("legacy"):
        return f"`results/{name}` ({LEGACY}{code_words(d)})"
    p = d["provenance"]
    peer = p.get("peer")
    peer_text = f"; FlashMLA from {peer.get('wheel')} (sha256 {str(peer.get('sha256'))[:12]})" if peer else ""
    return (f"`results/{name}`: plugin git {p['plugin']['git_revision']}, {p['build']['buildtype']} build, "
            f"{p['device']['name']}, driver {p['device']['driver']}, {p['date_utc']}{peer_text}{code_words(d)}")


def checks_word(row):
    """PASS, or FAIL, for a row; the old comparison's check is named so."""
    legacy = any(c.get("reference") for c in row["checks"].values())
    return row["check"] + (" (old check)" if legacy else "")


def table(header, rows):
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


# ---- flashmla_compare.json ----

def modes_of(cmp):
    order = ["after_gemm", "back_to_back", "after_flush"]
    present = {m for r in cmp["grid"] for m in r["modes"]}
    return [m for m in order if m in present]


def grid_table(cmp, mode, s_q):
    cells = {(r["batch"], r["h"]): r for r in cmp["grid"] if r["s_q"] == s_q and mode in r["modes"]}
    heads = sorted({h for _, h in cells})
    rows = []
    for b in sorted({b for b, _ in cells}):
        line = [str(b)]
        for h in heads:
            r = cells.get((b, h))
            if r is None:
                line.append("")
                continue
            m = r["modes"][mode]
            mark = ("" if r["check"] == "PASS" else " CHECK FAILED") + ("" if m["kept"] else f" {DRIFTED}")
            line.append(f"{us(m['flashmla_us'])} / {us(m['attend368_us'])} ({ratio(m['ratio'])}){mark}")
        rows.append(line)
    return table(["batch"] + [f"h = {h}: FlashMLA / attend" for h in heads], rows)


DRIFTED = "drifted"  # a cell where a side moved more than the run's limit between rounds: in no claim


def drift_words(m):
    """FlashMLA's and attend's moves between rounds in a cell, and the mark when it was not kept."""
    p, a = m.get("peer_drift"), m.get("attend_drift")
    text = pct(p) + (f" / {pct(a)}" if a is not None else "")
    return text + ("" if m["kept"] else f" ({DRIFTED})")


def kept_cells(cmp):
    """(kept, all) over the cells a claim can use: grid cells a mode, batch-128 rows (368 and 656),
    prefill rows a way of timing."""
    flags = [m["kept"] for r in cmp["grid"] for m in r["modes"].values()]
    flags += [f for r in cmp["decode"] for f in (r["kept"], r["kept656"])]
    flags += [v["kept"] for _, _, v in prefill_kinds(cmp)]
    return sum(flags), len(flags)


def grid_counts(cmp, mode):
    """The issue-34 targets over batch <= 64 in one mode: cells >= 1.2x, cells <= 12 us where
    batch x s_q x h <= 256, and the largest cost of a call of 2b queries over a call of b; over the
    kept cells only (a drifted cell is counted apart, in no claim)."""
    every = [r for r in cmp["grid"] if r["batch"] <= 64 and mode in r["modes"]]
    small = [r for r in every if r["modes"][mode]["kept"]]
    fast = [r for r in small if med(r["modes"][mode]["ratio"]) >= 1.2]
    light = [r for r in small if r["batch"] * r["s_q"] * r["h"] <= 256]
    quick = [r for r in light if med(r["modes"][mode]["attend368_us"]) <= 12.0]
    by = {(r["batch"], r["s_q"], r["h"]): med(r["modes"][mode]["attend368_us"]) for r in cmp["grid"]
          if mode in r["modes"] and r["modes"][mode]["kept"]}
    mtp = [by[(b, 2, h)] / by[(b, 1, h)] for (b, s, h) in by if s == 2 and (b, 1, h) in by]
    short = [r for r in small if r not in fast]
    return {"cells": len(small), "drifted": len(every) - len(small), "fast": len(fast), "light": len(light), "quick": len(quick),
            "mtp_worst": max(mtp) if mtp else None, "short": short,
            "slow_light": [med(r["modes"][mode]["attend368_us"]) for r in light if r not in quick]}


def grid_section(cmp):
    out = []
    for mode in modes_of(cmp):
        for s_q in (1, 2):
            if any(r["s_q"] == s_q and mode in r["modes"] for r in cmp["grid"]):
                out.append(f"\nDecode in a CUDA graph, {MODE_WORDS[mode]}, s_q = {s_q} (us a call, median over "
                           "rounds; ratio = FlashMLA / attend, with its range over rounds):\n")
                out.append(grid_table(cmp, mode, s_q))
        c = grid_counts(cmp, mode)
        ms = [r["modes"][mode] for r in cmp["grid"] if mode in r["modes"]]
        moved = [max(d for d in (m.get("peer_drift"), m.get("attend_drift")) if d is not None) for m in ms
                 if m["kept"] and m.get("peer_drift") is not None]
        out.append(f"\n{MODE_WORDS[mode].split(' (')[0].capitalize()}: {c['fast']} of {c['cells']} kept cells of "
                   f"batch <= 64 at >= 1.2x " + (f"({c['drifted']} drifted, left out)" if c["drifted"] else "(none drifted)")
                   + f"; {c['quick']} of {c['light']} kept "
                   f"cells with batch x s_q x h <= 256 at <= 12 us"
                   + (f"; in the kept cells a side moved at most {max(moved):.1%} between rounds" if moved else "")
                   + ".")
    if cmp["grid"]:
        worst = max((c for r in cmp["grid"] for c in r["checks"].values()), key=lambda c: c["worst_rel_rms"])
        ok = sum(r["check"] == "PASS" for r in cmp["grid"])
        what = ("the old check: attend against FlashMLA's bf16 prefill over the gathered records" if cmp.get("legacy")
                else "every timed output of both sides, every query, against a float32 reference")
        out.append(f"\nChecks: {ok} of {len(cmp['grid'])} cells PASS ({what}); worst row relative RMS "
                   f"{worst['worst_rel_rms']:.1e} against a bound of "
                   f"{worst['bounds']['rel_rms']:.1e}" + ("." if worst.get("worst_lse") is None else
                                                           f"; worst lse {worst['worst_lse']:.1e}."))
    return "\n".join(out).lstrip("\n")


def decode_section(cmp):
    rows = []
    for r in cmp["decode"]:
        d656 = "" if r["kept656"] else f" {DRIFTED}"
        rows.append([r["h"], f"{us(r['flashmla_us'])} ({r['flashmla_heads']})",
                     f"{us(r['attend656_us'])} ({ratio(r['ratio656'])}){d656}", f"{us(r['attend368_us'])} "
                     f"({ratio(r['ratio368'])})", f"{r['attend368_tflops']:.1f}", drift_words(r), checks_word(r)])
    return table(["h", "FlashMLA (padded h)", "attend 656", "attend 368", "368 TFLOP/s",
                  "drift FlashMLA / attend 368", "checks"], rows)


def prefill_kinds(cmp):
    """(row, "alone" or "interleaved", its figures) of every prefill row and measure the file has."""
    return [(r, kind, r[kind]) for r in cmp["prefill"] for kind in ("alone", "interleaved") if kind in r]


def prefill_section(cmp):
    rows = []
    for r, kind, v in prefill_kinds(cmp):
        rows.append([r["h"], kind, f"{med(v['flashmla_bf16_us']) / 1e3:.2f} ms",
                     f"{med(v['attend368_us']) / 1e3:.2f} ms ({ratio(v['ratio'])})",
                     f"{med(v['gather_flashmla_us']) / 1e3:.2f} ms ({ratio(v['ratio_vs_gather'])})",
                     drift_words(v), checks_word(r)])
    return table(["h", "timed", "FlashMLA bf16", "attend 368 (vs FlashMLA)", "gather + FlashMLA (vs attend)",
                  "drift FlashMLA / attend", "check"], rows)


def compare_tables(cmp):
    parts = []
    if cmp["grid"]:
        parts.append(grid_section(cmp))
    if cmp["decode"]:
        parts.append("Batch 128, eager back-to-back launches (us a call; ratio = FlashMLA / attend):\n\n"
                     + decode_section(cmp))
    if cmp["prefill"]:
        parts.append("Prefill, 4096 queries, top-k 2048:\n\n" + prefill_section(cmp))
    return "\n\n".join(parts)


# ---- bench.json, bench-99kb.json ----

def bench_row(b, op, size=None):
    for r in b["rows"]:
        if r["op"] == op and (size is None or r["size"] == size):
            return r
    return None


def g368_us(b):
    """The gather368 ceiling's time for attend's 128 x 2048 records: read + written bytes and the index."""
    return 262144 * (368 * 2 + 4) / (b["gather368_tbps"] * 1e6)


def codec_section(b):
    g = bench_row(b, "ceiling: gather368")
    mma, scatter = bench_row(b, "ceiling: mma.sync bf16"), bench_row(b, "ceiling: scatter368")
    head = (f"Same-run ceilings: copy {b['copy_tbps']:.2f} TB/s; gather368 {g['median_us']:.1f} us for 256k random "
            f"368-byte records ({g['tbps']:.2f} TB/s, {g['ratio']:.2f} of copy); scatter368 {scatter['tbps']:.2f} "
            f"TB/s ({scatter['ratio']:.2f} of copy); mma.sync bf16 {mma['tbps']:.0f} TFLOP/s.")
    rows = []
    for op in ("write per-token", "write static", "write per-token mse", "write static mse"):
        big, mid = bench_row(b, op, 262144), bench_row(b, op, 16384)
        graph = [bench_row(b, f"{op} (graph)", n) for n in (1, 64, 512)]
        rows.append([op, f"{big['median_us']:.1f} us, {big['tbps']:.2f} TB/s", f"{big['ratio']:.2f}",
                     f"{mid['median_us']:.1f} us", " / ".join(f"{r['median_us']:.2f}" for r in graph) + " us",
                     _timed_check(big)])
    for op in ("gather per-token", "gather static"):
        r = bench_row(b, op, 262144)
        rows.append([op, f"{r['median_us']:.1f} us, {r['tbps']:.2f} TB/s",
                     f"{r['ratio']:.2f} ({r['tbps'] / g['tbps']:.2f} of gather368)", "", "", _timed_check(r)])
    return head + "\n\n" + table(["operation", "256k tokens / rows", "ratio to copy", "16k",
                                  "one launch in a graph: 1 / 64 / 512 tokens", "check"], rows)


def _timed_check(r):
    """A row's check: the first call against the CPU, then every timed call (issue 47's bench)."""
    word = {"pass": "PASS", "fail": "FAIL"}.get(r["check"], r["check"])
    if "timed_calls" in r:
        return f"{word} ({r['timed_calls']} timed calls checked, {r['timed_bad_elements']} bad)"
    return word


def attend_bench_section(b, b99):
    rows = []
    for h in (16, 32, 64, 128):
        r3, r6 = bench_row(b, f"attend nvfp4-368 h={h}"), bench_row(b, f"attend fp8-656 h={h}")
        if not r3 or not r6:
            continue
        line = [h, f"{r3['median_us']:.1f} ({r3['median_us'] / g368_us(b):.2f}x gather368)", f"{r6['median_us']:.1f}",
                f"{r6['median_us'] / r3['median_us']:.2f}x", f"{r3['tflops']:.1f}"]
        if b99:
            q3, q6 = bench_row(b99, f"attend nvfp4-368 h={h}"), bench_row(b99, f"attend fp8-656 h={h}")
            line += [f"{q3['median_us']:.1f} ({q3['median_us'] / r3['median_us']:.2f}x)", f"{q6['median_us']:.1f}",
                     f"{_timed_check(q3)} / {_timed_check(q6)}"]
        line.append(f"{_timed_check(r3)} / {_timed_check(r6)}")
        rows.append(line)
    header = ["h", "368 us", "656 us", "656 / 368", "368 TFLOP/s"]
    if b99:
        header += ["99 KB: 368 us (of full)", "99 KB: 656 us", "99 KB checks 368 / 656"]
    return table(header + ["checks 368 / 656"], rows)


# ---- hot_path.json ----

HOST_COLUMNS = ["write one-shot", "write arrays", "write run", "attend one-shot", "attend arrays", "attend run",
                "write op", "attend op", "attend op new"]
STEP_COLUMNS = ["step one-shot", "step prepared", "step graph replay", "graph replay host", "step graph GPU",
                "replay bound by"]


def cell(r, k):
    v = r.get(k)
    return "-" if v is None else f"{v:.2f}" if isinstance(v, float) else str(v)


def hot_path_section(hp):
    target = hp.get("target_attend_run_us", 8.0)  # files before issue 47 hold no target: issue 17's 8 us
    host = table(["h", "batch"] + HOST_COLUMNS + [f"attend run <= {target:g} us"],
                 [[r["h"], r["batch"]] + [cell(r, k) for k in HOST_COLUMNS]
                  + [("yes" if r["attend run"] <= target else "no")] for r in hp["host_us_per_call"]])
    steps = table(["h", "batch"] + STEP_COLUMNS,
                  [[r["h"], r["batch"]] + [cell(r, k) for k in STEP_COLUMNS] for r in hp["step_us"]])
    return ("Host launch rate (the calling thread's us a call, not GPU time):\n\n" + host +
            "\n\nA decode step (write of the batch's tokens, then attend), us between CUDA events: eager and "
            "one-step graph replays are launch rates where the host bounds them (last column); "
            "`step graph GPU` is a graph of 20 steps, GPU time a step:\n\n" + steps)


def vllm_step_section(v):
    """The vLLM-shaped decode step (issue 45): per cell the step's GPU time a layer on each side, the
    ratio and the check; a cell whose check failed gives no figure."""
    rows = []
    for c in v["cells"]:
        ok = c["check"] == "PASS"
        rows.append([c["h"], c["batch"],
                     f"{c['plugin_us_per_layer']:.1f}" if ok else "-", f"{c['flashmla_us_per_layer']:.1f}" if ok else "-",
                     f"{c['speedup']:.2f}x" if ok else "-", c["check"]])
    b = v["bytes_per_token"]
    return (f"Bytes a token and layer: {b['nvfp4_mla368_ds_mla']} against FlashMLA's {b['fp8_ds_mla']}; with "
            f"DeepSeek-V3.2's {b['indexer_row']}-byte indexer row {b['gain_with_indexer']:.2f}x the tokens "
            f"({b['gain_without_indexer']:.2f}x without). A step: {v['cells'][0]['layers']} layers in one CUDA graph, "
            "graph replays between CUDA events, us a layer:\n\n"
            + table(["h", "batch", "nvfp4 368 us", "FlashMLA 656 us", "speedup", "check"], rows))


# ---- attend_probes.json (issue 46) ----

def _probe_time(b):
    """A build's time in a case (us; ms for prefill), with its us a CTA-tile and its share of the
    plugin's time."""
    t = med(b["us"])
    time_text = f"{t / 1e3:.2f} ms" if t >= 1e3 else f"{t:.1f} us"
    tile = "-" if b["us_per_cta_tile"] is None else f"{b['us_per_cta_tile']:.2f}"
    return f"{time_text} ({tile}; {med(b['of_plugin']):.2f})"


def probes_section(p):
    """Each build's time per case, its us a CTA-tile and its share of the plugin's time (rounds'
    median); the plugin's row checked, the probes' unchecked by design; then the plans' tiles."""
    cases = p["cases"]
    rows = []
    for i, first in enumerate(cases[0]["builds"]):
        bs = [c["builds"][i] for c in cases]
        if first["bits"] == 0:
            check = " / ".join(b["check"]["check"] for b in bs)
        else:
            check = "unchecked (probe: garbage by design)"
        label = "plugin" if first["bits"] == 0 else f"probe {first['bits']}"
        rows.append([label, first["what"]] + [_probe_time(b) for b in bs] + [check])
    header = ["build", "leaves out"] + [c["case"] for c in cases] + ["check"]
    plans = "; ".join(f"{c['case']}: {c['plan']['items']} items x {c['plan']['tiles_per_item']} tiles on "
                      f"{c['plan']['ctas']} CTAs ({c['plan']['tiles_per_cta']:.2f} a CTA, {c['plan']['kind']} kind)"
                      if c["plan"] else f"{c['case']}: no plan row for the device" for c in cases)
    cfg = p["config"]
    return ("Time a call (us; prefill ms), median over rounds of back-to-back eager launches, each cell "
            "`time (us a CTA-tile; share of the plugin's time)`:\n\n" + table(header, rows) +
            f"\n\nCTA-tiles: {plans}. {cfg['rounds']} rounds of {cfg['reps']} interleaved samples a build; "
            f"{cfg['tokens']} records of {cfg['record_bytes']} bytes, top-k {cfg['topk']}. The plugin's check: "
            f"{p['checks']} (its output against a float32 attention over the records).")


# ---- the opening table, README's list, results/PROVENANCE ----

def _verdict(ok):
    return "met" if ok else "missed"


def _claimed(r, key="ratio368", kept="kept"):
    """A batch-128 ratio, or the drift mark where the row was not kept."""
    return ratio(r[key]) if r[kept] else DRIFTED


def _judged(rows_kept, ok):
    """The verdict, or none where a row the target needs drifted (no claim either way)."""
    return _verdict(ok()) if all(rows_kept) else f"not judged ({DRIFTED})"


def _decode_targets(cmp):
    d = {r["h"]: r for r in cmp["decode"]}
    rows = []
    if 16 in d and 32 in d:
        rows.append(["attend vs FlashMLA, batch 128 eager, h = 16 / 32: >= 1.35x (issues 12, 18)",
                     f"{_claimed(d[16])} / {_claimed(d[32])}",
                     _judged([d[16]["kept"], d[32]["kept"]], lambda: min(med(d[h]["ratio368"]) for h in (16, 32)) >= 1.35)])
    if 64 in d:
        rows.append(["h = 64: >= 1.35x (issue 18)", _claimed(d[64]),
                     _judged([d[64]["kept"]], lambda: med(d[64]["ratio368"]) >= 1.35)])
    if 128 in d:
        r = d[128]
        rows.append(["h = 128: >= 1.2x and >= 420 TFLOP/s (issue 18)",
                     f"{_claimed(r)}, {r['attend368_tflops']:.0f} TFLOP/s",
                     _judged([r["kept"]], lambda: med(r["ratio368"]) >= 1.2 and r["attend368_tflops"] >= 420)])
    if d:
        hs = sorted(d)
        rows.append(["attend on FlashMLA's own 656-byte records no slower than FlashMLA (issue 18)",
                     " / ".join(_claimed(d[h], "ratio656", "kept656") for h in hs) + f" at h = {' / '.join(map(str, hs))}",
                     _judged([d[h]["kept656"] for h in hs], lambda: all(med(d[h]["ratio656"]) >= 1.0 for h in hs))])
    return rows


def _grid_targets(cmp):
    rows = []
    for mode in modes_of(cmp):
        c = grid_counts(cmp, mode)
        word = "after a GEMM" if mode == "after_gemm" else mode.replace("_", " ")
        short = ", ".join(f"{r['batch']}x{r['s_q']} h {r['h']} {ratio(r['modes'][mode]['ratio'])}" for r in c["short"])
        rows.append([f"small batches in a graph ({word}), batch <= 64: every cell >= 1.2x FlashMLA (issue 34)",
                     f"{c['fast']} of {c['cells']} kept cells" + (f" ({c['drifted']} drifted, left out)" if c["drifted"]
                                                                 else "") + (f"; short: {short}" if short else ""),
                     _verdict(c["fast"] == c["cells"])])
        slow = c["slow_light"]
        rows.append([f"({word}) <= 12 us where batch x s_q x h <= 256 (issue 34)",
                     f"{c['quick']} of {c['light']}" + (f"; the others {min(slow):.1f}-{max(slow):.1f} us" if slow else ""),
                     _verdict(c["quick"] == c["light"])])
        if c["mtp_worst"] is not None:
            rows.append([f"({word}) MTP: a call of 2b queries under twice a call of b (issue 34)",
                         f"at most {c['mtp_worst']:.2f}x", _verdict(c["mtp_worst"] < 2)])
    return rows


def _prefill_targets(cmp):
    rows = []
    for r, kind, v in prefill_kinds(cmp):
        want = 2.0 if r["h"] == 16 else 1.0
        rows.append([f"prefill h = {r['h']} ({kind}): >= {want:g}x FlashMLA's bf16 prefill, faster than gather + "
                     "FlashMLA (issue 18)",
                     f"{ratio(v['ratio'])}; {ratio(v['ratio_vs_gather'])} over gather + FlashMLA" if v["kept"] else DRIFTED,
                     _judged([v["kept"]], lambda: med(v["ratio"]) >= want and med(v["ratio_vs_gather"]) > 1)])
    return rows


def _bench_targets(b, b99):
    rows = []
    r16, r32 = bench_row(b, "attend nvfp4-368 h=16"), bench_row(b, "attend nvfp4-368 h=32")
    if r16 and r32:
        x = [r["median_us"] / g368_us(b) for r in (r16, r32)]
        rows.append(["attend h = 16 / 32, batch 128: <= 1.25x the gather368 ceiling (issue 12)",
                     f"{x[0]:.2f}x / {x[1]:.2f}x", _verdict(max(x) <= 1.25)])
    w, g = bench_row(b, "write per-token", 262144), bench_row(b, "gather per-token", 262144)
    graph = [bench_row(b, f"write {m} (graph)", n)["median_us"] for m in ("per-token", "static") for n in (1, 64, 512)]
    rows.append(["writer >= 0.85x copy at 256k tokens; <= 5 us a launch at <= 512 tokens (issue 5)",
                 f"{w['ratio']:.2f}x copy; {min(graph):.2f}-{max(graph):.2f} us in a graph",
                 "missed" if w["ratio"] < 0.85 else _verdict(max(graph) <= 5)])
    rows.append(["gather >= 0.80x copy at 256k rows (issue 5)", f"{g['ratio']:.2f}x", _verdict(g["ratio"] >= 0.8)])
    mse = bench_row(b, "write per-token mse", 262144)
    rows.append(["writer policy mse <= 1.5x rtn's time (issue 16)", f"{mse['median_us'] / w['median_us']:.2f}x",
                 _verdict(mse["median_us"] / w["median_us"] <= 1.5)])
    if b99:
        x = [bench_row(b99, f"attend nvfp4-368 h={h}")["median_us"] / bench_row(b, f"attend nvfp4-368 h={h}")["median_us"]
             for h in (16, 32, 64, 128)]
        rows.append(["99 KB configuration within 1.5x of the full one (issue 12)",
                     " / ".join(f"{v:.2f}x" for v in x) + " at h = 16 / 32 / 64 / 128", _verdict(max(x) <= 1.5)])
    return rows


def _host_targets(hp):
    host, target = hp["host_us_per_call"], hp.get("target_attend_run_us", 8.0)
    a = [r["attend run"] for r in host]
    w = [r["write run"] for r in host]
    over = [f"h {r['h']} b {r['batch']} {r['attend run']:.1f}" for r in host if r["attend run"] > target]
    return [[f"<= {target:g} us host a prepared call's run() (issue 17)",
             f"attend {min(a):.1f}-{max(a):.1f} us ({len(a) - len(over)} of {len(a)} cells)"
             + (f"; over: {', '.join(over)}" if over else "") + f"; write {min(w):.1f}-{max(w):.1f} us",
             _verdict(not over and max(w) <= target)]]


def summary_section(res):
    cmp, b, b99, hp = (res.get(n) for n in ("flashmla_compare.json", "bench.json", "bench-99kb.json", "hot_path.json"))
    rows = []
    for name, part in (("flashmla_compare.json", lambda: _decode_targets(cmp) + _grid_targets(cmp)
                        + _prefill_targets(cmp)),
                       ("bench.json", lambda: _bench_targets(b, b99)), ("hot_path.json", lambda: _host_targets(hp))):
        if res.get(name) is None:
            rows.append([f"(the targets of `{name}`)", "no file", "-", "-"])
            continue
        one_run = " (one run)" if res[name].get("legacy") and name == "flashmla_compare.json" else ""
        where = f"`{name}`" + (f" **{STALE}**" if stale(res[name]) else "")
        rows += [r[:2] + [r[2] + one_run, where] for r in part()]
        if name == "flashmla_compare.json":
            k, n = kept_cells(cmp)
            rows.append(["the comparison's cells kept: neither side moved more than the run's limit between rounds "
                         "(issue 57)", f"{k} of {n}", "-", where])
    files = "; ".join(caption(res, n) for n in ("flashmla_compare.json", "bench.json", "bench-99kb.json",
                                                "hot_path.json") if n in res)
    return table(["target (issue)", "measured (median; range over rounds)", "", "file"], rows) + "\n\nFiles: " + files + "."


def readme_section(res):
    cmp, b = res.get("flashmla_compare.json"), res.get("bench.json")
    out = []
    mark = stale_prefix(cmp)
    if cmp and cmp["grid"]:
        for mode in modes_of(cmp):
            ones = {r["h"]: r for r in cmp["grid"] if r["batch"] == 1 and r["s_q"] == 1 and mode in r["modes"]}
            hs = sorted(ones)
            c = grid_counts(cmp, mode)

            def one(h, key):
                m = ones[h]["modes"][mode]
                return us(m[key]) + ("" if m["kept"] else f" ({DRIFTED})")
            out.append(f"- {mark}Small-batch decode in a CUDA graph, {MODE_WORDS[mode].split(' (')[0]}: batch 1 takes "
                       + " / ".join(one(h, "attend368_us") for h in hs) + f" us at h = "
                       + " / ".join(map(str, hs)) + " against FlashMLA's "
                       + " / ".join(one(h, "flashmla_us") for h in hs) + f"; {c['fast']} of "
                       f"{c['cells']} kept cells of batch <= 64 at >= 1.2x"
                       + (f" ({c['drifted']} drifted, left out)" if c["drifted"] else "") + ".")
    if cmp and cmp["decode"]:
        d = cmp["decode"]
        out.append(f"- {mark}Batch 128, eager: " + " / ".join(_claimed(r) for r in d) + " FlashMLA's speed at h = "
                   + " / ".join(str(r["h"]) for r in d) + "; on FlashMLA's own 656-byte records "
                   + " / ".join(_claimed(r, "ratio656", "kept656") for r in d) + ".")
    if cmp and cmp["prefill"]:
        parts = [f"h = {r['h']} {ratio(v['ratio']) if v['kept'] else DRIFTED} {k}" for r, k, v in prefill_kinds(cmp)]
        out.append(f"- {mark}Prefill, 4096 queries, against FlashMLA's bf16 prefill: " + "; ".join(parts) + ".")
    if cmp:
        k, n = kept_cells(cmp)
        out.append(f"- {mark}The comparison kept {k} of its {n} cells" + (
            " (none drifted between rounds)." if k == n else f" (in the other {n - k} a side moved more than the run's "
            "limit between rounds: left out of every claim)."))
    if b:
        w, g = bench_row(b, "write per-token", 262144), bench_row(b, "gather per-token", 262144)
        out.append(f"- {stale_prefix(b)}Writer {w['ratio']:.2f}x and gather {g['ratio']:.2f}x a device copy at 256k "
                   "tokens.")
    out.append("\nFiles: " + "; ".join(caption(res, n) for n in ("flashmla_compare.json", "bench.json") if n in res) + ".")
    return "\n".join(out)


def provenance_index(res):
    lines = ["# results/: an index. Each JSON file carries its own provenance (key \"provenance\": plugin",
             "# revision and build, device, driver, FlashMLA's wheel and hash, date, command); this index is",
             "# written from them by bench/compare_table.py. Files marked \"before issue 47\" carry none.",
             "# code: the digest of the device code the file measured (bench/device_code.py; issue 57),",
             f"# {STALE} where it is not the tree's.", ""]
    for name in sorted(set(res) | {"bench.png", "quality.png"}):
        what, command = WHAT.get(name, ("", ""))
        d = res.get(name)
        lines.append(f"{name}")
        if name.endswith(".png"):
            src = name.replace(".png", ".json")
            lines.append(f"  what:       the chart of {src}: python3 bench/plot_results.py "
                         f"--{src.split('.')[0]} results/{src} --out results/")
            lines.append("")
            continue
        lines.append(f"  what:       {what}")
        code = d.get("_code")
        if code:
            lines.append(f"  code:       " + (f"device code {code['recorded'][:12]}" if code["recorded"] else
                                               "no device-code digest recorded")
                         + (f" -- {STALE}: not the tree's kernels" if code["stale"] else " (the tree's)"))
        if d.get("legacy"):
            lines += [f"  command:    {command}", f"  provenance: {LEGACY}"]
        else:
            p = d["provenance"]
            lines += [f"  command:    {p['command']}",
                      f"  plugin:     {p['plugin']['name']} {p['plugin']['version']} git {p['plugin']['git_revision']}"
                      f" ({p['plugin']['cuda_archs']}), {p['build']['buildtype']} build",
                      f"  device:     {p['device']['name']}, driver {p['device']['driver']}", f"  date:       {p['date_utc']}"]
            if p.get("peer"):
                lines.append(f"  FlashMLA:   {p['peer'].get('wheel')}, sha256 {p['peer'].get('sha256')}")
        lines.append("")
    return "\n".join(lines)


def blocks(res):
    """{block name: Markdown} of every marked block of the documents."""
    cmp, b, b99, hp = (res.get(n) for n in ("flashmla_compare.json", "bench.json", "bench-99kb.json", "hot_path.json"))
    missing = lambda n: f"No figures: `results/{n}` is not in results/."  # noqa: E731
    return {
        "summary": summary_section(res),
        "readme": readme_section(res),
        "codec": caption(res, "bench.json") + "\n\n" + codec_section(b) if b else missing("bench.json"),
        "attend-bench": (caption(res, "bench.json") + (" and " + caption(res, "bench-99kb.json") if b99 else "")
                         + "\n\n" + attend_bench_section(b, b99)) if b else missing("bench.json"),
        "decode128": caption(res, "flashmla_compare.json") + "\n\n" + decode_section(cmp) if cmp else
        missing("flashmla_compare.json"),
        "grid": caption(res, "flashmla_compare.json") + "\n\n" + grid_section(cmp) if cmp else
        missing("flashmla_compare.json"),
        "prefill": caption(res, "flashmla_compare.json") + "\n\n" + prefill_section(cmp) if cmp else
        missing("flashmla_compare.json"),
        "hot-path": caption(res, "hot_path.json") + "\n\n" + hot_path_section(hp) if hp else missing("hot_path.json"),
        "what-bounds": (caption(res, "attend_probes.json") + "\n\n" + probes_section(res["attend_probes.json"])
                        if res.get("attend_probes.json") else missing("attend_probes.json") +
                        " The probe builds (`-Dattend_probes=true`) and `bench/attend_probes.py` are new (issue 46) "
                        "and have not run on the H200 yet; issue 46's table of the same probes came from builds "
                        "that were never committed, so it is not reproduced here."),
        "vllm-step": (caption(res, "vllm_decode_step.json") + "\n\n" + vllm_step_section(res["vllm_decode_step.json"])
                      if res.get("vllm_decode_step.json") else missing("vllm_decode_step.json") +
                      " Its first run on the H200 (results/runs/) checked the plugin path against a reference that "
                      "could not tell; the run with the decoded reference is the one left for issue 45."),
    }
