"""How a sparse-MLA attention backend of a Python serving engine uses the plugin.

Runs on the CPU backend with numpy (python3 examples/sparse_mla_backend.py, NVFP4_MLA_PLUGIN set; the
interpreter must have numpy: Debian's python3-numpy for /usr/bin/python3, or pip install numpy);
with PyTorch CUDA tensors the same calls take device="cuda:0" and a stream.

Start-up: load the plugin, snapshot the cache format once, refuse a plugin that cannot serve it, and
bind the hot calls to the engine's persistent buffers (prepare_write / prepare_attend: every array
checked once, here). Per step: (1) the cache update copies the step's new tokens into the bound
buffers and writes the first n (write.run(n)); (2) a chunked-prefill path re-quantises a gathered
chunk into a separate scratch buffer with the one-shot calls (not the hot loop); (3) a decode step
copies its queries and top-k into the bound buffers and runs attend.run(n) (or gather + attention
where attend is absent). On CUDA, (1) and (3) are what an engine captures in a CUDA graph
(torch.cuda.graph on a side stream, with stream=that stream at bind): run() only updates the bound
struct and launches, and the prepared attend keeps its workspace as long as it lives.

(4) An engine that compiles its model calls the same steps as PyTorch operators
(nvfp4_mla.torch_ops, where PyTorch is installed): bind(ctx, cfg) once, then ops.write / ops.attend
inside the compiled function, which torch.compile(fullgraph=True) traces as one graph (on CUDA,
mode="reduce-overhead" captures it in a CUDA graph). Same bytes as the prepared calls.
"""
import os
import sys

try:
    import numpy as np
except ImportError:  # the package needs no numpy; this example's arrays do
    sys.exit(f"{os.path.basename(__file__)} needs numpy, which {sys.executable} (Python {sys.version.split()[0]}) "
             "does not have: install it (python3 -m pip install numpy; Debian: apt-get install python3-numpy for "
             "/usr/bin/python3), or run the example with an interpreter that has it")

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import nvfp4_mla  # noqa: E402
from nvfp4_mla import LAYOUT_FP8_ROPE_368  # noqa: E402

BLOCK = 64


MAX_TOKENS, MAX_QUERIES, HEADS, TOPK = 8, 4, 16, 8


def bind(ctx, cache, layout, mode, scale):
    """Start-up: the engine's persistent step buffers and the prepared calls bound to them."""
    buf = {"kv": np.zeros((MAX_TOKENS, 576), np.uint16), "slot_mapping": np.full(MAX_TOKENS, -1, np.int64),
           "q": np.zeros((MAX_QUERIES, HEADS, 576), np.uint16), "topk": np.full((MAX_QUERIES, TOPK), -1, np.int32),
           "out": np.zeros((MAX_QUERIES, HEADS, 512), np.uint16)}
    write = ctx.prepare_write(buf["kv"][:, :512], buf["kv"][:, 512:], buf["slot_mapping"], cache, layout=layout,
                              scale_mode=mode, outer_scale=scale)
    try:
        attend = ctx.prepare_attend(buf["q"], buf["topk"], cache, buf["out"], layout=layout, scale_mode=mode,
                                    outer_scale=scale, sm_scale=576 ** -0.5)
    except nvfp4_mla.Unsupported as exc:
        print("attend unavailable, gather + reference attention instead:", exc.plugin_message)
        attend = None
    return buf, write, attend


def decode(ctx, cache, buf, attend, q, topk, layout, mode, scale):
    """(3) One decode step for len(q) queries; returns their outputs."""
    n = len(q)
    buf["q"][:n], buf["topk"][:n] = q, topk
    if attend is not None:
        attend.run(n)
        return buf["out"][:n]
    out = np.zeros((n, HEADS, 512), np.uint16)
    for i in range(n):
        rows = np.zeros((topk.shape[1], 576), np.uint16)
        ctx.gather(cache, topk[i], rows, layout=layout, scale_mode=mode, outer_scale=scale)
        keys = nvfp4_mla.bf16_to_float32(rows)[topk[i] >= 0]
        scores = nvfp4_mla.bf16_to_float32(q[i]) @ keys.T * 576 ** -0.5
        p = np.exp(scores - scores.max(axis=1, keepdims=True))
        out[i] = nvfp4_mla.bf16_bits((p / p.sum(axis=1, keepdims=True)) @ keys[:, :512])
    return out


def compiled_step(ctx, cfg, cache, step, slot_mapping, q, topk, want):
    """(4) The decode step of (1) and (3) as PyTorch operators under torch.compile, on CPU tensors
    sharing the numpy buffers: the same output bytes as the prepared calls."""
    try:
        import torch
        from nvfp4_mla import torch_ops
    except ImportError:
        print("PyTorch is not installed: the compiled path (nvfp4_mla.torch_ops) is not shown")
        return
    ops = torch_ops.bind(ctx, cfg)  # the context and the start-up format (layout, scale mode, policy)
    scale = cfg.layer_scale(0)

    @torch.compile(fullgraph=True)  # one graph: a graph break would raise
    def decode_step(kv, slot_mapping, q, topk, cache):
        ops.write(kv[:, :512], kv[:, 512:], slot_mapping, cache, outer_scale=scale)
        out, _lse = ops.attend(q, topk, cache, sm_scale=576 ** -0.5, outer_scale=scale)
        return out

    def bf16(bits):
        return torch.from_numpy(bits.view(np.int16)).view(torch.bfloat16)

    # The step's tokens again, into a copy of the cache: the same records, so the same attention.
    out = decode_step(bf16(step), torch.from_numpy(slot_mapping), bf16(q), torch.from_numpy(topk),
                      torch.from_numpy(cache.copy()))
    assert bytes(out.view(torch.int16).numpy()) == bytes(want)
    print("compiled torch ops and prepared outputs agree")


def main():
    plugin = nvfp4_mla.load()                                   # NVFP4_MLA_PLUGIN
    fmt = nvfp4_mla.CacheFormat.from_env({"KV_FP8_ROPE": "1"})  # a server reads os.environ once
    print(nvfp4_mla.require(plugin, fmt))                       # raises with the missing capabilities
    cfg = fmt.open(plugin, "nvfp4_ds_mla")
    layout, mode, scale = cfg.layout, cfg.scale_mode, cfg.layer_scale(0)
    print("cache identity for offload namespaces:", cfg.identity)
    ctx = nvfp4_mla.Context(plugin, "cpu", log=lambda level, msg: print("plugin:", msg))
    rng = np.random.default_rng(0)
    cache = np.zeros((16, BLOCK, nvfp4_mla._abi.record_bytes(layout)), np.uint8)  # one layer's pages
    buf, write, attend = bind(ctx, cache, layout, mode, scale)

    # (1) Per-step cache update: new tokens' kv_c / k_pe into their slots (-1 = padding, skipped).
    step = nvfp4_mla.bf16_bits(rng.standard_normal((6, 576)).astype(np.float32))
    buf["kv"][:6], buf["slot_mapping"][:6] = step, [3, 4, 5, 64, 65, 66]
    write.run(6)

    # (2) Re-quantising a gathered chunk into a separate buffer (e.g. a prefill chunk's scratch).
    chunk = np.zeros((6, 576), np.uint16)
    ctx.gather(cache, buf["slot_mapping"][:6].astype(np.int32), chunk, layout=layout, scale_mode=mode,
               outer_scale=scale)
    scratch = np.zeros((1, 8, cache.shape[2]), np.uint8)
    ctx.write(chunk[:, :512], chunk[:, 512:], np.arange(6, dtype=np.int64), scratch, layout=layout,
              scale_mode=mode, outer_scale=scale)

    # (3) Decode: two queries of 16 heads over their top-k slots (-1 = unused).
    q = nvfp4_mla.bf16_bits(rng.standard_normal((2, HEADS, 576)).astype(np.float32))
    topk = np.array([[3, 4, 5, 64, -1, -1, -1, -1], [64, 65, 66, 3, 4, -1, -1, -1]], np.int32)
    out = decode(ctx, cache, buf, attend, q, topk, layout, mode, scale)
    print("decode output norm per query:", np.linalg.norm(nvfp4_mla.bf16_to_float32(out).reshape(2, -1), axis=1))
    if attend is not None:  # the checked one-shot call gives the same bytes
        once = np.zeros_like(out)
        ctx.attend(q, topk, cache, once, layout=layout, scale_mode=mode, outer_scale=scale, sm_scale=576 ** -0.5)
        assert bytes(once) == bytes(out)
        print("prepared and one-shot outputs agree")
        compiled_step(ctx, cfg, cache, step, buf["slot_mapping"][:6].copy(), q, topk, out)
    cfg.close()
    ctx.close()
    assert LAYOUT_FP8_ROPE_368 == layout


if __name__ == "__main__":
    main()
