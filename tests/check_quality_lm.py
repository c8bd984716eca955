#!/usr/bin/env python3
"""bench/quality_lm (issue 59) on the CPU backend, at toy size: what the GPU run relies on.
  - the emulated writers (writers.py) against the plugin's own bytes: rtn identical record for record
    (zero tokens, E4M3-subnormal group scales included), mse on nearly all; 4over6 picks c6 or c4 for
    every group, never a larger squared error than rtn; the Hadamard matrix is orthonormal;
  - the slot tables: dense is causal within each sequence; top-k keeps only earlier tokens, at most k;
  - the chain prepare -> train -> evaluate -> report end to end (a tiny text, a few steps): the bf16
    row's KL is 0 and every format's is > 0 (a cache that silently attended over bf16 would give 0),
    the static scales come back from `nvfp4-mla calibrate` through the plugin as max_abs / 2688, the
    report fills QUALITY.md's section and refuses a page without one; the lever verdict;
  - the needle: at GLM-5.2's shallowest layer, uncalibrated static records lose the needle (weight far
    below bf16's 0.5: its group scales subnormal, most of the layer's zero), per-token and calibrated ones keep it.
Skips (77) without PyTorch and numpy.
    usage: check_quality_lm.py SOURCE_ROOT   (NVFP4_MLA_PLUGIN_PATH: the built plugin; NVFP4_MLA_CLI)
"""
import json
import os
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
lm = os.path.join(root, "bench", "quality_lm")
sys.path[:0] = [lm, os.path.join(root, "bench"), os.path.join(root, "host_shims", "python")]
os.environ["NVFP4_MLA_PLUGIN"] = os.environ["NVFP4_MLA_PLUGIN_PATH"]
import caches as K  # noqa: E402
import report  # noqa: E402
import writers  # noqa: E402
from nvfp4_mla import Context, _abi, load, torch_ops  # noqa: E402

torch.set_num_threads(2)
from check_harness import expect, finish  # noqa: E402  (tests/, beside this script)


def check_writers(ctx):
    g = torch.Generator().manual_seed(3)
    n = 2048
    x = torch.randn(n, 512, generator=g) * torch.exp(2 * torch.randn(n, 1, generator=g))
    x[:64] *= 1e-3  # group scales in E4M3's subnormal range on the 1.0 path is not this one: tiny tokens
    x[64] = 0       # a zero token
    x = x.to(torch.bfloat16)
    pe = (torch.randn(n, 64, generator=g) * 3).to(torch.bfloat16)
    pe[65] = 0      # a zero RoPE key
    for policy in ("rtn", "mse"):
        ops = torch_ops.bind(ctx, layout=_abi.LAYOUT_FP8_ROPE_368, scale_mode=_abi.SCALE_PER_TOKEN, writer_policy=policy)
        cache = torch.zeros(n // 64, 64, 368, dtype=torch.uint8)
        ops.write(x, pe, torch.arange(n), cache)
        same = int((writers.encode_368(x, pe, policy) == cache.view(n, 368)).all(-1).sum())
        need = n if policy == "rtn" else int(0.99 * n)
        expect(same >= need, f"emulated {policy} writer: {same} of {n} records identical to the plugin's (need {need})")
    xf = x.float()[66:]  # past the zero token: y as the per-token writer forms it (section 4 steps 1-2)
    y = (xf * (1 / (xf.abs().amax(-1, keepdim=True) * writers.K2688))).view(-1, 32, 16)
    c6 = writers.pick_codes(y, "rtn")
    c46 = writers.pick_codes(y, "4over6")
    c4 = writers.e4m3_code(y.abs().amax(-1) * 0.25)
    expect(bool(((c46 == c6) | (c46 == c4)).all()) and bool((c46 != c6).any()),
           "4over6 picks rtn's code or the four-scaled one for every group, and the latter for some")

    def sq_err(codes):
        d = writers.e4m3_value(codes)[..., None]
        m = torch.tensor(writers.E2M1)[writers.magnitude_index(y.abs(), d)]
        return ((y.abs() - m * d) ** 2).sum(-1)
    expect(bool((sq_err(c46) <= sq_err(c6)).all()), "4over6's squared error is never above rtn's in any group")
    h = writers.hadamard()
    expect(torch.allclose(h @ h.t(), torch.eye(512), atol=1e-5), "the Hadamard matrix is orthonormal")


def check_slots():
    s = K.Slots(2, 8, "cpu")
    table, valid = s.table(0)
    expect(table.shape == (16, 8) and table[9].tolist() == [8, 9] + [-1] * 6 and valid[9] == 2
           and table[7].tolist() == list(range(8)), "dense slots: causal within each sequence, offset per sequence")
    s = K.Slots(2, 8, "cpu", topk=3)
    g = torch.Generator().manual_seed(1)
    q = torch.randn(16, 2, 576, generator=g)
    kv = torch.randn(16, 576, generator=g)
    K.Reference(s).attend(0, q, kv[:, :512], kv[:, 512:], 0.05)
    picked, mask = s.picked[0], s.mask(0)
    rows = torch.arange(16)
    ok = all(((p < 0) | ((p // 8 == r // 8) & (p <= r))).all() for r, p in zip(rows.tolist(), picked))
    expect(ok and bool((mask.sum(-1) == torch.tensor([1, 2, 3, 3, 3, 3, 3, 3]).repeat(2, 1)).all()),
           "top-k slots: only earlier tokens of the same sequence, min(k, t + 1) of them")


def run(*args):
    cmd = [sys.executable, os.path.join(lm, "run.py"), *args]
    done = subprocess.run(cmd, capture_output=True, text=True)
    expect(done.returncode == 0, " ".join(["run.py", *args[:1]]) + (f": {done.stderr[-800:]}" if done.returncode else ""))
    return done


def check_chain(tmp):
    src = os.path.join(tmp, "text")
    os.makedirs(src)
    for i, name in enumerate(sorted(os.listdir(os.path.join(root, "docs")))):
        with open(os.path.join(root, "docs", name), "rb") as f, open(os.path.join(src, f"{i}.txt"), "wb") as g:
            g.write(f.read())
    data, model, res = os.path.join(tmp, "data"), os.path.join(tmp, "m.pt"), os.path.join(tmp, "r.json")
    run("prepare", "--source", src, "--out", data)
    run("train", "--data", data, "--config", "toy", "--steps", "3", "--batch", "2", "--device", "cpu", "--out", model)
    run("evaluate", "--data", data, "--model", model, "--device", "cpu", "--seeds", "2", "--batch", "1",
        "--seq", "64", "--topk", "16", "--calib-windows", "1", "--workdir", os.path.join(tmp, "eval"),
        "--modes", "fp8-656,368 per-token rtn,368 static rtn,432 static mse,368 per-token 4over6 (emulated),"
        "368 per-token rtn + Hadamard,368 per-token rtn (float32 reader)", "--out", res, *(["--cli", os.environ["NVFP4_MLA_CLI"]]
                                                        if os.environ.get("NVFP4_MLA_CLI") else []))
    if not os.path.exists(res):
        return
    with open(res) as f:
        r = json.load(f)
    for label, s in r["settings"].items():
        kls = {m: [x["kl"] for x in rows] for m, rows in s["rows"].items()}
        expect(kls["bf16"] == [0.0, 0.0] and all(v > 0 for m, vs in kls.items() if m != "bf16" for v in vs),
               f"{label}: KL of bf16 against itself is 0, of every format > 0")
    c = r["calibration"]
    expect(all(abs(s - m / 2688) <= 1e-6 * s for s, m in zip(c["scales"], c["max_abs"]))
           and all(abs(s - f) <= 1e-6 * s for s, f in zip(c["scales"], c["file"]["scales"])) and len(c["scales"]) == 2,
           "static scales: the capture's max_abs / 2688, through nvfp4-mla calibrate and the plugin's config")
    page = os.path.join(tmp, "Q.md")
    with open(page, "w") as f:
        f.write(f"# head\n{report.BEGIN}\nold\n{report.END}\ntail\n")
    run("report", res, "--quality", page)
    with open(page) as f:
        text = f.read()
    expect("old" not in text and text.startswith("# head") and text.endswith("tail\n")
           and all(f"| {m} |" in text for m in r["modes"]) and "top-16" in text,
           "report: the section replaced between its markers, a row for every mode, both settings")
    with open(page, "w") as f:
        f.write("# no markers\n")
    done = subprocess.run([sys.executable, os.path.join(lm, "run.py"), "report", res, "--quality", page],
                          capture_output=True, text=True)
    expect(done.returncode != 0 and "quality-lm:begin" in done.stderr, "report: refuses a page without the section")


def check_verdict():
    expect(report.verdict(*report.paired({"a": [{"kl": 1.0}, {"kl": 2.0}, {"kl": 3.0}],
                                          "b": [{"kl": 1.1}, {"kl": 2.1}, {"kl": 3.1}]}, "a", "b")) == "shown"
           and report.verdict(*report.paired({"a": [{"kl": 1.0}, {"kl": 2.2}, {"kl": 3.0}],
                                              "b": [{"kl": 1.1}, {"kl": 2.1}, {"kl": 3.1}]}, "a", "b")) == "not shown",
           "lever verdict: shown only when lower in every seed and beyond twice the standard error")


def check_needle(tmp):
    out = os.path.join(tmp, "needle.json")
    done = subprocess.run([sys.executable, os.path.join(lm, "needle.py"), "--tokens", "4096", "--layers", "1",
                           "--count-tokens", "128", "--out", out], capture_output=True, text=True)
    expect(done.returncode == 0, "needle.py" + (f": {done.stderr[-800:]}" if done.returncode else ""))
    if done.returncode:
        return
    with open(out) as f:
        nd = json.load(f)
    w = {m: sum(v["needle_weight"]) / len(v["needle_weight"]) for m, v in nd["needle"]["1"].items() if m != "max_abs"}
    expect(abs(w["bf16"] - 0.5) < 1e-3, f"needle: weight {w['bf16']:.4f} in bf16 (0.5 asked)")
    expect(w["368 static 1.0 rtn"] < 0.45 and all(abs(w[m] - 0.5) < 0.05 for m in
                                                   ("368 per-token rtn", "368 static rtn", "fp8-656", "432 static rtn")),
           "needle at layer 1 (max_abs 0.022): lost uncalibrated (" + f"{w['368 static 1.0 rtn']:.3f}), kept per-token "
           f"({w['368 per-token rtn']:.3f}), calibrated ({w['368 static rtn']:.3f}) and in FP8 ({w['fp8-656']:.3f})")
    c = nd["count"]["1"]
    expect(c["368 static 1.0 rtn"]["zero_scale_share"] > 0.5 and c["368 per-token rtn"]["zero_scale_share"] == 0
           and c["368 per-token rtn"]["subnormal_share"] == 0 and len(nd["count"]) == 78,
           "group scales at layer 1: most zero uncalibrated, none zero or subnormal per-token; 78 layers counted")


def main():
    plugin = load()
    ctx = Context(plugin, "cpu")
    check_writers(ctx)
    check_slots()
    check_verdict()
    with tempfile.TemporaryDirectory() as tmp:
        check_chain(tmp)
        check_needle(tmp)
    return finish()


if __name__ == "__main__":
    sys.exit(main())
