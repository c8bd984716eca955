#!/usr/bin/env python3
"""Charts of the results people look at: `nvfp4-mla quality --json` and `nvfp4-mla-bench --json`
to PNG files (matplotlib; Debian: python3-matplotlib). QUALITY.md and BENCHMARKS.md show them.

    plot_results.py --quality results/quality.json --bench results/bench.json --out results/

quality.png: relative RMS error per layer (against the layer's max_abs) of each record mode (the
writer policy mse's too), for Gaussian and Student-t latents, and the attention output error of the
three layers measured.
bench.png: throughput of the writer and the gather reader against the same-run copy and gather368
ceilings, and attend's median time per head count for the 368-byte and the 656-byte records (with
the samples' interquartile range as error bars where the file has it: p25_us, p75_us).
Only what the files hold is drawn; nothing is filled in.
"""
import argparse
import json
import os
import re
import sys

MODES = ("outer-1.0", "static", "per-token", "static-mse", "per-token-mse", "fp8-656")
MODE_LABELS = {"outer-1.0": "NVFP4, outer scale 1.0", "static": "NVFP4, static calibrated",
               "per-token": "NVFP4, per-token", "static-mse": "NVFP4, static calibrated, writer mse",
               "per-token-mse": "NVFP4, per-token, writer mse", "fp8-656": "FP8 656-byte"}


def load(path):
    with open(path) as f:
        return json.load(f)


def figure(plt, panels, width):
    fig, axes = plt.subplots(1, panels, figsize=(width, 4.2), constrained_layout=True)
    return fig, axes


def plot_quality(plt, q, out):
    rows = [r for r in q["layers"] if not r.get("attend")]
    attend = [r for r in q["layers"] if r.get("attend")]
    fig, (recon, att) = figure(plt, 2, 13)
    for dist, style in (("gaussian", "-"), ("student-t3", ":")):
        for mode in MODES:
            pts = sorted((r["max_abs"], r["rel_rms"]) for r in rows if r["dist"] == dist and r["mode"] == mode)
            if pts:
                recon.plot([p[0] for p in pts], [100 * p[1] for p in pts], style, marker=".",
                           label=f"{MODE_LABELS[mode]} ({dist})", color=f"C{MODES.index(mode)}")
    recon.set(xscale="log", yscale="log", xlabel="layer max |kv_c| (real GLM-5.2 profile)",
              ylabel="relative RMS error of the decoded latent (%)",
              title=f"Reconstruction, {q['tokens_per_layer']} tokens per layer, seed {q['seed']}")
    recon.grid(True, which="both", alpha=0.3)
    recon.legend(fontsize=7)
    layers = sorted({r["layer"] for r in attend})
    present = [m for m in MODES if any(r["mode"] == m for r in attend)]
    width = 0.8 / max(len(present), 1)
    for mode in present:
        i = MODES.index(mode)
        vals = {r["layer"]: r["rel_rms"] for r in attend if r["mode"] == mode}
        xs = [k + (present.index(mode) - (len(present) - 1) / 2) * width for k in range(len(layers))]
        att.bar(xs, [100 * vals.get(l, float("nan")) for l in layers], width, label=MODE_LABELS[mode],
                color=f"C{i}")
    max_abs = {r["layer"]: r["max_abs"] for r in rows}
    att.set_xticks(range(len(layers)), [f"layer {l}\nmax_abs {max_abs.get(l, float('nan')):.3g}" for l in layers])
    att.set(ylabel="relative RMS error of attention output (%)",
            title="Attention output vs float64 over the bf16 latents")
    att.grid(True, axis="y", alpha=0.3)
    att.legend(fontsize=7)
    fig.savefig(out, dpi=110)
    plt.close(fig)


def codec_rows(rows, op):
    """(size, TB/s) of the event-timed rows of a writer or gather mode, by size."""
    return sorted((r["size"], r["tbps"]) for r in rows if r["op"] == op)


def plot_bench(plt, b, out):
    rows = b["rows"]
    fig, (codec, att) = figure(plt, 2, 13)
    for i, op in enumerate(("write per-token", "write static", "write per-token mse", "write static mse",
                            "gather per-token", "gather static")):
        pts = codec_rows(rows, op)
        if pts:
            codec.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=op, color=f"C{i}")
    for value, name, style in ((b.get("copy_tbps"), "copy ceiling", "--"), (b.get("gather368_tbps"), "gather368 ceiling", ":")):
        if value:
            codec.axhline(value, color="k", linestyle=style, label=f"{name} ({value:.2f} TB/s)")
    codec.set(xscale="log", xlabel="tokens written / rows gathered", ylabel="TB/s (bytes read + written)",
              title=f"Writer and gather on {b.get('device', '?')}")
    codec.grid(True, which="both", alpha=0.3)
    codec.legend(fontsize=7)
    attend = {}
    for r in rows:
        m = re.fullmatch(r"attend (\S+) h=(\d+)", r["op"])
        if m:
            attend.setdefault(m.group(1), {})[int(m.group(2))] = r
    heads = sorted({h for per in attend.values() for h in per})
    for i, (layout, per) in enumerate(sorted(attend.items(), reverse=True)):
        xs = [k + (i - 0.5) * 0.4 for k in range(len(heads))]
        medians = [per[h]["median_us"] if h in per else float("nan") for h in heads]
        spread = None
        if all("p25_us" in per.get(h, {}) and "p75_us" in per.get(h, {}) for h in heads):
            spread = [[per[h]["median_us"] - per[h]["p25_us"] for h in heads],
                      [per[h]["p75_us"] - per[h]["median_us"] for h in heads]]
        att.bar(xs, medians, 0.4, yerr=spread, capsize=3, label=f"{layout} records", color=f"C{i + 4}")
    att.set_xticks(range(len(heads)), [f"h = {h}" for h in heads])
    att.set(ylabel="median time per call (us)", title="attend: 128 queries, top-k 2048, random slots")
    att.grid(True, axis="y", alpha=0.3)
    att.legend(fontsize=7)
    fig.savefig(out, dpi=110)
    plt.close(fig)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quality", help="quality.json from `nvfp4-mla quality --json`")
    parser.add_argument("--bench", help="bench.json from `nvfp4-mla-bench --json` (GPU machine)")
    parser.add_argument("--out", default=".", help="folder for quality.png and bench.png")
    args = parser.parse_args(argv)
    if not args.quality and not args.bench:
        parser.error("give --quality and/or --bench")
    try:
        import matplotlib
        matplotlib.use("Agg")  # files only, no display
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("plot_results.py needs matplotlib (apt-get install python3-matplotlib)")
    os.makedirs(args.out, exist_ok=True)
    for path, plot, name in ((args.quality, plot_quality, "quality.png"), (args.bench, plot_bench, "bench.png")):
        if path:
            target = os.path.join(args.out, name)
            plot(plt, load(path), target)
            print(f"wrote {target} from {path}")


if __name__ == "__main__":
    main()
