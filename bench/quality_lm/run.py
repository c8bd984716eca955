#!/usr/bin/env python3
"""Issue 59's language-model quality experiment, step by step (README.md beside this file):

    run.py prepare  [--source DIR] [--out build-quality/data]        text -> byte tokens (here)
    run.py train    [--config small] [--steps N] [--device cuda]      fixed seed -> build-quality/model.pt
    run.py evaluate [--device cuda] [--seeds 5] [--topk 128] --out results.json
                    calibration through `nvfp4-mla calibrate`, then perplexity and per-token KL against
                    the bf16 cache for every cache format, dense and top-k, its KV cache through the
                    plugin's write and attend (NVFP4_MLA_PLUGIN)
    run.py report   results.json [--needle needle.json] [--quality QUALITY.md]   tables into QUALITY.md

The text is the reStructuredText sources of the Python 3.11 documentation that Debian's package
`python3.11-doc` installs (/usr/share/doc/python3.11/html/_sources, 497 files, about 12 MB); bytes are
the tokens. Weights and data stay in the git-ignored build-quality/.
"""
import argparse
import hashlib
import json
import math
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path[:0] = [HERE, os.path.join(ROOT, "bench"), os.path.join(ROOT, "host_shims", "python")]

DEFAULT_SOURCE = "/usr/share/doc/python3.11/html/_sources"
PACKAGE = "python3.11-doc"
HELD_OUT_EVERY = 20  # every 20th file (sorted by path) is held out: 5% of the text, never trained on


def package_version(name):
    try:
        return subprocess.run(["dpkg-query", "-W", "-f=${Version}", name], capture_output=True, text=True,
                              check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def cmd_prepare(a):
    files = sorted(os.path.join(d, f) for d, _, fs in os.walk(a.source) for f in fs if f.endswith(a.suffix))
    if len(files) < 2:
        sys.exit(f"prepare: {a.source}: {len(files)} files ending in {a.suffix!r}; need at least 2 "
                 f"(install Debian's {PACKAGE}: apt-get install -y {PACKAGE})")
    parts = {"train": bytearray(), "heldout": bytearray()}
    digest = hashlib.sha256()
    for i, path in enumerate(files):
        with open(path, "rb") as f:
            text = f.read()
        digest.update(os.path.relpath(path, a.source).encode() + b"\0" + text)
        parts["heldout" if i % HELD_OUT_EVERY == 0 else "train"] += text + b"\n\n"
    os.makedirs(a.out, exist_ok=True)
    for name, data in parts.items():
        with open(os.path.join(a.out, name + ".u8"), "wb") as f:
            f.write(data)
    meta = {"source": a.source, "package": PACKAGE if a.source == DEFAULT_SOURCE else None,
            "package_version": package_version(PACKAGE) if a.source == DEFAULT_SOURCE else None,
            "files": len(files), "held_out_every": HELD_OUT_EVERY, "sha256_of_sources": digest.hexdigest(),
            "train_bytes": len(parts["train"]), "heldout_bytes": len(parts["heldout"])}
    with open(os.path.join(a.out, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
    print(json.dumps(meta))


def load_split(data, name):
    import torch
    with open(os.path.join(data, name + ".u8"), "rb") as f:
        return torch.frombuffer(bytearray(f.read()), dtype=torch.uint8).long()  # no numpy needed


def windows(tokens, B, T, gen):
    """B random windows of T+1 tokens: inputs [B, T], targets [B, T]."""
    import torch
    if tokens.numel() < T + 2:
        sys.exit(f"only {tokens.numel()} tokens, fewer than a window of {T + 1}")
    start = torch.randint(0, tokens.numel() - T - 1, (B,), generator=gen)
    w = torch.stack([tokens[s:s + T + 1] for s in start.tolist()])
    return w[:, :-1], w[:, 1:]


def cmd_train(a):
    import torch
    import model as M
    torch.manual_seed(a.seed)
    dev = torch.device(a.device)
    c = dict(M.CONFIGS[a.config])
    net = M.ByteMLA(c).to(dev)
    train, held = load_split(a.data, "train"), load_split(a.data, "heldout")
    gen = torch.Generator().manual_seed(a.seed)
    opt = torch.optim.AdamW(net.parameters(), lr=a.lr, betas=(0.9, 0.95), weight_decay=0.1, fused=dev.type == "cuda")
    warm = max(1, a.steps // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warm) * (
        0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, s / a.steps)))))
    amp = torch.autocast("cuda", dtype=torch.bfloat16) if dev.type == "cuda" else torch.autocast("cpu", enabled=False)
    start, losses, step = time.time(), [], 0
    for step in range(a.steps):
        x, y = windows(train, a.batch, c["seq"], gen)
        x, y = x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)
        with amp:
            loss = torch.nn.functional.cross_entropy(net(x).view(-1, 256), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        opt.step()
        sched.step()
        if step % 50 == 0 or step == a.steps - 1:
            losses.append((step, loss.item()))
            print(f"step {step} loss {losses[-1][1]:.4f} ({time.time() - start:.1f} s)", flush=True)
        if a.max_seconds and time.time() - start > a.max_seconds:
            print(f"stopped at step {step + 1} of {a.steps}: --max-seconds {a.max_seconds} reached", flush=True)
            break
    net.eval()
    with torch.no_grad():
        x, y = windows(held, 8, c["seq"], torch.Generator().manual_seed(12345))
        held_loss = torch.nn.functional.cross_entropy(net(x.to(dev)).view(-1, 256), y.to(dev).reshape(-1)).item()
    meta = {"config": c, "config_name": a.config, "seed": a.seed, "steps_run": step + 1, "steps": a.steps,
            "batch": a.batch, "lr": a.lr, "seconds": round(time.time() - start, 1), "losses": losses,
            "heldout_loss_dense_bf16_sdpa": held_loss, "device": torch.cuda.get_device_name(dev) if dev.type == "cuda"
            else "cpu", "torch": str(torch.__version__)}
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    torch.save({"state": {k: v.cpu() for k, v in net.state_dict().items()}, "meta": meta}, a.out)
    print(json.dumps({k: v for k, v in meta.items() if k != "losses"}))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("prepare", help="the package's text -> byte tokens (train.u8, heldout.u8, meta.json)")
    s.add_argument("--source", default=DEFAULT_SOURCE)
    s.add_argument("--suffix", default=".txt")
    s.add_argument("--out", default="build-quality/data")
    s = sub.add_parser("train", help="train the model (fixed seed)")
    s.add_argument("--data", default="build-quality/data")
    s.add_argument("--config", default="small", choices=("toy", "small"))
    s.add_argument("--steps", type=int, default=1200)
    s.add_argument("--batch", type=int, default=32)
    s.add_argument("--lr", type=float, default=2e-3)
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--max-seconds", type=float, default=0, help="a safety stop (recorded); 0: none")
    s.add_argument("--device", default="cuda")
    s.add_argument("--out", default="build-quality/model.pt")
    s = sub.add_parser("evaluate", help="perplexity and KL per cache format through the plugin")
    import evaluate
    evaluate.add_arguments(s)
    s = sub.add_parser("report", help="results JSON -> QUALITY.md tables")
    import report
    report.add_arguments(s)
    a = p.parse_args(argv)
    if a.cmd == "prepare":
        return cmd_prepare(a)
    if a.cmd == "train":
        return cmd_train(a)
    if a.cmd == "evaluate":
        return evaluate.run(a)
    return report.run(a)


if __name__ == "__main__":
    sys.exit(main())
