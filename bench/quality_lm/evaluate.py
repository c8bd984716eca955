"""run.py evaluate: calibrate, then perplexity and per-token KL against the bf16 cache per cache format.

Calibration, as a server's: a capture run over training text (never the held-out text) in which every
layer's write reduces max |kv_c| into capture_max_abs; the "layer,max_abs" file goes to `nvfp4-mla
calibrate`, which writes the v1 scales file once the plugin accepts it; the static modes take their
layer scales from the plugin's configuration opened on that file (PluginConfig.layer_scale), as a
server does. Then for each setting (dense causal attention over the whole window; top-k) and each
seed (a draw of held-out windows): the model's logits with every cache format, perplexity, the mean
KL(p_bf16 || p_format) per token and the share of tokens whose top-1 byte agrees with bf16's.
"""
import json
import os
import subprocess
import sys
import time

from nvfp4_mla import _abi

torch = K = M = writers = None  # imported by run(): the parser (run.py --help, prepare) needs no PyTorch


def _imports():
    global torch, K, M, writers
    import torch
    import caches as K
    import model as M
    import writers

# name -> (layout, scale mode, writer policy, static scales: None / "calibrated" / "one", emulated
# policy, Hadamard). The first NVFP4 row is the baseline the writer levers are compared with.
MODES = {
    "fp8-656": (_abi.LAYOUT_FP8_DS_MLA_656, _abi.SCALE_STATIC, "rtn", "one", None, False),
    "368 per-token rtn": (_abi.LAYOUT_FP8_ROPE_368, _abi.SCALE_PER_TOKEN, "rtn", None, None, False),
    "368 per-token mse": (_abi.LAYOUT_FP8_ROPE_368, _abi.SCALE_PER_TOKEN, "mse", None, None, False),
    "368 static rtn": (_abi.LAYOUT_FP8_ROPE_368, _abi.SCALE_STATIC, "rtn", "calibrated", None, False),
    "368 static mse": (_abi.LAYOUT_FP8_ROPE_368, _abi.SCALE_STATIC, "mse", "calibrated", None, False),
    "368 static 1.0 rtn": (_abi.LAYOUT_FP8_ROPE_368, _abi.SCALE_STATIC, "rtn", "one", None, False),
    "432 static rtn": (_abi.LAYOUT_BF16_ROPE_432, _abi.SCALE_STATIC, "rtn", "calibrated", None, False),
    "432 static mse": (_abi.LAYOUT_BF16_ROPE_432, _abi.SCALE_STATIC, "mse", "calibrated", None, False),
    "368 per-token 4over6 (emulated)": (_abi.LAYOUT_FP8_ROPE_368, _abi.SCALE_PER_TOKEN, "rtn", None, "4over6", False),
    "368 per-token rtn + Hadamard": (_abi.LAYOUT_FP8_ROPE_368, _abi.SCALE_PER_TOKEN, "rtn", None, None, True),
    "368 per-token mse + Hadamard": (_abi.LAYOUT_FP8_ROPE_368, _abi.SCALE_PER_TOKEN, "mse", None, None, True),
    "368 per-token rtn (float32 reader)": (_abi.LAYOUT_FP8_ROPE_368, _abi.SCALE_PER_TOKEN, "rtn", None, None, False),
}
READER = "368 per-token rtn (float32 reader)"  # the plugin's records read by PyTorch (caches.DecodedCache)


def add_arguments(s):
    s.add_argument("--model", default="build-quality/model.pt")
    s.add_argument("--data", default="build-quality/data")
    s.add_argument("--device", default="cuda")
    s.add_argument("--seeds", type=int, default=5, help="draws of held-out windows")
    s.add_argument("--batch", type=int, default=16, help="windows a draw")
    s.add_argument("--seq", type=int, default=0, help="window length (0: the model's training length)")
    s.add_argument("--topk", type=int, default=128, help="top-k of the sparse setting (0: dense only)")
    s.add_argument("--calib-windows", type=int, default=16)
    s.add_argument("--modes", default="all", help="comma-separated names of MODES, or all")
    s.add_argument("--cli", default="", help="the nvfp4-mla tool (default: beside NVFP4_MLA_PLUGIN's build)")
    s.add_argument("--workdir", default="build-quality/eval", help="where the capture and scales files go")
    s.add_argument("--out", required=True, help="results JSON")


def cli_path(a):
    if a.cli:
        return a.cli
    plugin = os.environ.get("NVFP4_MLA_PLUGIN", "")
    build = plugin if os.path.isdir(plugin) else os.path.dirname(plugin)
    return os.path.join(os.path.dirname(os.path.abspath(build)), "host_shims", "cli", "nvfp4-mla")


def calibrate(a, net, plugin, ctx, train, T, dev):
    """max |kv_c| per layer from the capture, through `nvfp4-mla calibrate`, back through the plugin."""
    from nvfp4_mla import CacheFormat, torch_ops
    import run
    n_layers = net.config["n_layers"]
    ops = torch_ops.bind(ctx, layout=_abi.LAYOUT_FP8_ROPE_368, scale_mode=_abi.SCALE_PER_TOKEN)
    x, _ = run.windows(train, a.calib_windows, T, torch.Generator().manual_seed(1000))
    cap = K.Capture(K.Slots(a.calib_windows, T, dev), ops, n_layers, dev)
    net(x.to(dev), cache=cap)
    os.makedirs(a.workdir, exist_ok=True)
    capture = os.path.join(a.workdir, "capture.csv")
    with open(capture, "w") as f:
        f.write("# max |kv_c| per layer (plugin write capture_max_abs), run.py evaluate\n")
        f.writelines(f"{i},{v:.9g}\n" for i, v in enumerate(cap.max_abs.tolist()))
    scales_file = os.path.join(a.workdir, "scales.json")
    cmd = [cli_path(a), "calibrate", "--out", scales_file, "--plugin", os.environ.get("NVFP4_MLA_PLUGIN", ""),
           "--model", "bench/quality_lm ByteMLA " + net.config_name, "--dataset", "python3.11-doc train split",
           "--created-utc", "1970-01-01T00:00:00Z", capture]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"evaluate: {' '.join(cmd)} failed ({done.returncode}): {done.stderr.strip()}")
    cfg = CacheFormat(fp8_rope=True, scales_file=scales_file).open(plugin)
    scales = [cfg.layer_scale(i) for i in range(n_layers)]
    cfg.close()
    with open(scales_file) as f:
        v1 = json.load(f)
    return {"max_abs": cap.max_abs.tolist(), "scales": scales, "file": v1, "command": " ".join(cmd[1:]),
            "cli_stdout": done.stdout.strip()}


def make_cache(name, ctx, slots, scales):
    from nvfp4_mla import torch_ops
    layout, mode, policy, static, emulate, rotate = MODES[name]
    ops = torch_ops.bind(ctx, layout=layout, scale_mode=mode, writer_policy=policy)
    outer = scales if static == "calibrated" else None
    kind = K.DecodedCache if name == READER else K.PluginCache
    return kind(name, ops, slots, layout, outer=outer, emulate=emulate, rotate=rotate)


def token_stats(logits, ref_logits, y):
    """nll [N], KL(ref || this) [N], top-1 agreement [N] over the batch's tokens."""
    lp = torch.log_softmax(logits.view(-1, 256).double(), -1)
    lr = torch.log_softmax(ref_logits.view(-1, 256).double(), -1)
    nll = -lp.gather(1, y.reshape(-1, 1))[:, 0]
    kl = (lr.exp() * (lr - lp)).sum(-1).clamp_min(0)
    agree = (lp.argmax(-1) == lr.argmax(-1)).double()
    return nll, kl, agree


def summarize(nll, kl, agree):
    return {"ppl": float(torch.exp(nll.mean())), "nll": float(nll.mean()), "kl": float(kl.mean()),
            "kl_median": float(kl.median()), "kl_p99": float(torch.quantile(kl.float(), 0.99)), "top1_agree": float(agree.mean()), "tokens": nll.numel()}


def emulation_check(ctx, dev):
    """Bytes of the emulated rtn and mse writers against the plugin's, on latents like a layer's."""
    from nvfp4_mla import torch_ops
    g = torch.Generator(device="cpu").manual_seed(7)
    n = 4096
    x = (torch.randn(n, 512, generator=g) * torch.exp(torch.randn(n, 1, generator=g))).to(torch.bfloat16).to(dev)
    pe = torch.randn(n, 64, generator=g).to(torch.bfloat16).to(dev)
    out = {}
    for policy in ("rtn", "mse"):
        ops = torch_ops.bind(ctx, layout=_abi.LAYOUT_FP8_ROPE_368, scale_mode=_abi.SCALE_PER_TOKEN,
                             writer_policy=policy)
        cache = torch.zeros(n // 64, 64, 368, dtype=torch.uint8, device=dev)
        ops.write(x, pe, torch.arange(n, dtype=torch.int64, device=dev), cache)
        mine = writers.encode_368(x, pe, policy)
        same = (mine == cache.view(n, 368)).all(-1)
        out[policy] = {"records": n, "identical": int(same.sum())}
    return out


def save(path, res, start, plugin, dev):
    import provenance
    res["seconds"] = round(time.time() - start, 1)
    res["provenance"] = provenance.collect(plugin, torch if dev.type == "cuda" else None)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(res, f, indent=1)


def run(a):
    _imports()
    from nvfp4_mla import Context, load
    import run as R
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    dev = torch.device(a.device)
    saved = torch.load(a.model, map_location="cpu")
    net = M.ByteMLA(saved["meta"]["config"])
    net.load_state_dict(saved["state"])
    net.config_name = saved["meta"]["config_name"]
    net = net.to(dev).eval()
    T = a.seq or net.config["seq"]
    plugin = load()
    ctx = Context(plugin, "cuda:0" if dev.type == "cuda" else "cpu")
    names = list(MODES) if a.modes == "all" else [m.strip() for m in a.modes.split(",")]
    for m in names:
        if m not in MODES:
            sys.exit(f"evaluate: --modes: {m!r} is not a mode (known: {', '.join(MODES)})")
    train, held = R.load_split(a.data, "train"), R.load_split(a.data, "heldout")
    start = time.time()
    res = {"model": saved["meta"], "seq": T, "batch": a.batch, "seeds": a.seeds, "modes": names,
           "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu", "torch": torch.__version__,
           "plugin": os.environ.get("NVFP4_MLA_PLUGIN", ""), "settings": {}}
    with torch.no_grad():
        res["emulation_check"] = emulation_check(ctx, dev)
        res["calibration"] = calibrate(a, net, plugin, ctx, train, T, dev)
        scales = res["calibration"]["scales"]
        settings = [("dense", None)] + ([(f"top-{a.topk}", a.topk)] if a.topk and a.topk < T else [])
        for label, topk in settings:
            rows = {m: [] for m in ["bf16"] + names}
            for seed in range(a.seeds):
                x, y = R.windows(held, a.batch, T, torch.Generator().manual_seed(seed))
                x, y = x.to(dev), y.to(dev)
                slots = K.Slots(a.batch, T, dev, topk)
                ref_logits = net(x, cache=K.Reference(slots))
                rows["bf16"].append(summarize(*token_stats(ref_logits, ref_logits, y)))
                for m in names:
                    logits = net(x, cache=make_cache(m, ctx, slots, scales))
                    rows[m].append(summarize(*token_stats(logits, ref_logits, y)))
                print(f"{label} seed {seed}: " + "; ".join(f"{m} ppl {r[-1]['ppl']:.4f} kl {r[-1]['kl']:.2e}"
                                                          for m, r in rows.items()), flush=True)
            res["settings"][label] = {"topk": topk, "rows": rows}
            save(a.out, res, start, plugin, dev)  # after each setting: a run cut short keeps what it measured
    print(f"evaluate: {a.out} ({res['seconds']} s)")
    return 0
