"""run.py report: the results of `run.py evaluate` (and of needle.py) -> QUALITY.md's tables.

The tables go between the markers `<!-- quality-lm:begin -->` and `<!-- quality-lm:end -->` of
QUALITY.md (--print: to standard output instead). Each figure is a mean over the seeds (draws of
held-out windows) with its standard deviation; a writer lever (a policy, a rotation) is "shown" only
when it lowers the KL against bf16 in every seed AND its mean paired difference from the baseline is
below minus twice its standard error (the spread of that difference over seeds / sqrt(seeds)); else it
is "not shown".
"""
import json
import math
import statistics

BEGIN, END = "<!-- quality-lm:begin -->", "<!-- quality-lm:end -->"
BYTES = {"bf16": 1152, "fp8-656": 656}
# lever, baseline: what each lever is judged against (report.levers)
LEVERS = (("368 per-token mse", "368 per-token rtn"), ("368 static mse", "368 static rtn"),
          ("432 static mse", "432 static rtn"), ("368 per-token 4over6 (emulated)", "368 per-token rtn"),
          ("368 per-token 4over6 (emulated)", "368 per-token mse"), ("368 per-token rtn + Hadamard", "368 per-token rtn"),
          ("368 per-token mse + Hadamard", "368 per-token mse"),
          ("368 per-token rtn (float32 reader)", "368 per-token rtn"))


def add_arguments(s):
    s.add_argument("results", nargs="?", help="run.py evaluate's JSON")
    s.add_argument("--needle", help="needle.py's JSON")
    s.add_argument("--quality", default="QUALITY.md")
    s.add_argument("--label", default="", help="a line saying what produced the figures (else from the JSON)")
    s.add_argument("--print", action="store_true", help="print the section instead of replacing it in --quality")


def record_bytes(mode):
    return BYTES.get(mode) or int(mode.split()[0])


def ms(values, scale=1.0, fmt="{:.4f}"):
    m = statistics.mean(values) * scale
    sd = statistics.pstdev(values) * scale if len(values) > 1 else 0.0
    return f"{fmt.format(m)} ({fmt.format(sd)})"


def paired(rows, mode, base, key="kl"):
    """mean and standard deviation of the per-seed difference mode - base, seeds where mode is lower."""
    d = [r[key] - b[key] for r, b in zip(rows[mode], rows[base])]
    sd = statistics.stdev(d) if len(d) > 1 else 0.0
    return statistics.mean(d), sd, sum(x < 0 for x in d), len(d)


def verdict(mean, sd, lower, n):
    sem = sd / math.sqrt(n) if n > 1 else float("inf")
    return "shown" if lower == n and n > 1 and mean < -2 * sem else "not shown"


def model_table(res):
    lines = []
    for label, s in res["settings"].items():
        rows = s["rows"]
        base = "368 per-token rtn" if "368 per-token rtn" in rows else None
        what = "every earlier token" if s["topk"] is None else f"the {s['topk']} earlier tokens the bf16 cache weighs most"
        lines += [f"**{label}** ({what}, windows of {res['seq']} bytes; {res['seeds']} seeds x {res['batch']} windows):",
                  "",
                  "| cache | bytes/token | perplexity | KL vs bf16 (1e-3 nats/token) | KL p99 (1e-3) | top-1 = bf16 |"
                  + (" KL - per-token rtn (1e-3), seeds lower |" if base else ""),
                  "|---|---|---|---|---|---|" + ("---|" if base else "")]
        for mode, r in rows.items():
            cells = [mode, str(record_bytes(mode)), ms([x["ppl"] for x in r]),
                     "-" if mode == "bf16" else ms([x["kl"] for x in r], 1e3, "{:.3f}"),
                     "-" if mode == "bf16" else ms([x["kl_p99"] for x in r], 1e3, "{:.2f}"),
                     "-" if mode == "bf16" else ms([x["top1_agree"] for x in r], 100, "{:.2f}") + "%"]
            if base:
                if mode in ("bf16", base):
                    cells.append("-")
                else:
                    m, sd, lower, n = paired(rows, mode, base)
                    cells.append(f"{m * 1e3:+.3f} ({sd * 1e3:.3f}), {lower} of {n}")
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    return lines


def levers_table(res):
    lines = ["Writer levers (KL against bf16; paired per seed; 'shown': lower in every seed and the mean "
             "difference below minus twice its standard error):", "",
             "| setting | lever | against | KL difference (1e-3), mean (sd) | seeds lower | verdict |",
             "|---|---|---|---|---|---|"]
    for label, s in res["settings"].items():
        rows = s["rows"]
        for mode, base in LEVERS:
            if mode in rows and base in rows:
                m, sd, lower, n = paired(rows, mode, base)
                lines.append(f"| {label} | {mode} | {base} | {m * 1e3:+.3f} ({sd * 1e3:.3f}) | {lower} of {n} | "
                             f"{verdict(m, sd, lower, n)} |")
    return lines + [""]


def summary_lines(res):
    """A few sentences of the headline figures, for the closing note."""
    lines = ["In short:", ""]
    for label, s in res["settings"].items():
        rows = s["rows"]
        kl = {m: statistics.mean(x["kl"] for x in r) for m, r in rows.items() if m != "bf16"}
        ppl = {m: statistics.mean(x["ppl"] for x in r) for m, r in rows.items()}
        fp8 = kl.get("fp8-656")
        parts = [f"{m} {v * 1e3:.3f}" + (f" ({v / fp8:.1f}x FP8's)" if fp8 and m != "fp8-656" else "")
                 for m, v in kl.items()]
        lines.append(f"- {label}: mean KL against bf16 (1e-3 nats/token): " + "; ".join(parts) + ". Perplexity "
                     f"bf16 {ppl['bf16']:.4f}, the formats " + f"{min(v for m, v in ppl.items() if m != 'bf16'):.4f} to "
                     f"{max(v for m, v in ppl.items() if m != 'bf16'):.4f}.")
        shown = [f"{m} over {b}" for m, b in LEVERS if m in rows and b in rows
                 and verdict(*paired(rows, m, b)) == "shown"]
        lines.append(f"- {label}: levers shown: " + ("; ".join(shown) if shown else "none") + ".")
    return lines + [""]


def calibration_lines(res):
    c = res.get("calibration")
    if not c:
        return []
    mx = c["max_abs"]
    return [f"Calibration (`nvfp4-mla {c['command'].split(' --plugin')[0]} ...` on the capture of "
            f"{len(mx)} layers over training text): max |kv_c| per layer " + ", ".join(f"{v:.3g}" for v in mx) + ".", ""]


def emulation_lines(res):
    e = res.get("emulation_check")
    if not e:
        return []
    return ["Emulated writers (bench/quality_lm/writers.py) against the plugin's bytes on the same latents: "
            + "; ".join(f"{p} {v['identical']} of {v['records']} records identical" for p, v in e.items()) + ".", ""]


def needle_lines(nd):
    lines = [f"Needle ({nd['tokens']} tokens, {nd['queries']} needles a layer, each given weight {nd['weight']} in "
             f"bf16; device {nd['device']}): the needle's softmax weight (mean over needles) / the output's "
             "relative error against bf16 (mean):", ""]
    layers = list(nd["needle"])
    if layers:
        modes = [m for m in nd["needle"][layers[0]] if m not in ("max_abs", "bf16")]
        lines += ["| layer | max_abs | bf16 | " + " | ".join(modes) + " |", "|---|---|---|" + "---|" * len(modes)]
        for layer in layers:
            r = nd["needle"][layer]
            cells = [layer, f"{r['max_abs']:.3g}", f"{statistics.mean(r['bf16']['needle_weight']):.3f}"]
            cells += [f"{statistics.mean(r[m]['needle_weight']):.3f} / {100 * statistics.mean(r[m]['out_rel_err']):.2f}%"
                      for m in modes]
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    if nd.get("count"):
        cnt = nd["count"]
        modes = list(next(iter(cnt.values())))
        hit = [m for m in modes if any(r[m]["subnormal_share"] or r[m]["zero_scale_share"] for r in cnt.values())]
        with open(nd["profile"]) as f:
            max_abs = json.load(f)["max_abs"]
        lines += [f"Group scales per layer ({nd.get('count_tokens', '?')} tokens a "
                  "layer of every layer of the profile; subnormal: E4M3 code 1..7, of all groups; zero: a non-zero "
                  "group whose scale code is 0, of the non-zero groups; dead: tokens decoded to all zeros). "
                  + "; ".join(f"{m}: no subnormal or zero group scale in any layer" for m in modes if m not in hit)
                  + ".", ""]
        if hit:
            lines += ["| layer | max_abs | " + " | ".join(f"{m}: subnormal / zero / dead" for m in hit) + " |",
                      "|---|---|" + "---|" * len(hit)]
            for layer, r in cnt.items():
                lines.append(f"| {layer} | {max_abs[int(layer)]:.3g} | " + " | ".join(
                    f"{100 * r[m]['subnormal_share']:.1f}% / {100 * r[m]['zero_scale_share']:.1f}% / "
                    f"{100 * r[m]['zero_token_share']:.1f}%" for m in hit) + " |")
            lines.append("")
        for m in hit:
            n_sub = sum(1 for r in cnt.values() if r[m]["subnormal_share"] > 0)
            lines.append(f"- {m}: {n_sub} of {len(cnt)} layers have subnormal group scales (mean share "
                         f"{100 * statistics.mean(r[m]['subnormal_share'] for r in cnt.values()):.1f}%); zero scales "
                         f"in {sum(1 for r in cnt.values() if r[m]['zero_scale_share'] > 0)} layers.")
        lines.append("")
    return lines


def section(res, nd, label):
    lines = [BEGIN, ""]
    if label:
        lines += [label, ""]
    if res:
        m = res["model"]
        c = m["config"]
        lines += [f"Model: {c['n_layers']} layers, {c['n_heads']} heads, d_model {c['d_model']}, latent 512 + RoPE 64 "
                  f"(absorbed MLA), trained {m['steps_run']} steps x {m['batch']} x {c['seq']} bytes, seed {m['seed']}, "
                  f"{m['seconds']} s on {m['device']}; evaluated on {res['device']} (torch {res['torch']}"
                  + (f", plugin git {res['provenance']['plugin'].get('git_revision', '?')}" if res.get("provenance") else "")
                  + ").", ""]
        lines += (summary_lines(res) + model_table(res) + levers_table(res) + calibration_lines(res)
                  + emulation_lines(res))
    if nd:
        lines += needle_lines(nd)
    return "\n".join(lines + [END])


def run(a):
    res = nd = None
    if a.results:
        with open(a.results) as f:
            res = json.load(f)
    if a.needle:
        with open(a.needle) as f:
            nd = json.load(f)
    if res is None and nd is None:
        raise SystemExit("report: give a results JSON, --needle, or both")
    text = section(res, nd, a.label)
    if a.print:
        print(text)
        return 0
    with open(a.quality) as f:
        page = f.read()
    if BEGIN not in page or END not in page:
        raise SystemExit(f"report: {a.quality} has no {BEGIN} ... {END} section to replace")
    head, rest = page.split(BEGIN, 1)
    tail = rest.split(END, 1)[1]
    with open(a.quality, "w") as f:
        f.write(head + text + tail)
    print(f"report: {a.quality} updated")
    return 0
