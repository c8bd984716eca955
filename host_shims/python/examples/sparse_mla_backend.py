"""How a sparse-MLA attention backend of a Python serving engine uses the plugin.

Runs on the CPU backend with numpy (python3 examples/sparse_mla_backend.py, NVFP4_MLA_PLUGIN set);
with PyTorch CUDA tensors the same calls take device="cuda:0" and a stream.

Start-up: load the plugin, snapshot the cache format once, refuse a plugin that cannot serve it.
Per step: (1) the cache update writes the step's new tokens into their slots; (2) a chunked-prefill
path re-quantises a gathered chunk into a separate scratch buffer with the same writer; (3) a decode
step reads each query's top-k records (attend, or gather + attention where attend is absent).
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import nvfp4_mla  # noqa: E402
from nvfp4_mla import LAYOUT_FP8_ROPE_368  # noqa: E402

BLOCK = 64


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

    # (1) Per-step cache update: new tokens' kv_c / k_pe into their slots (-1 = padding, skipped).
    step = nvfp4_mla.bf16_bits(rng.standard_normal((8, 576)).astype(np.float32))
    slot_mapping = np.array([3, 4, 5, 64, 65, 66, -1, -1], np.int64)
    ctx.write(step[:, :512], step[:, 512:], slot_mapping, cache, layout=layout, scale_mode=mode, outer_scale=scale)

    # (2) Re-quantising a gathered chunk into a separate buffer (e.g. a prefill chunk's scratch).
    chunk = np.zeros((6, 576), np.uint16)
    ctx.gather(cache, slot_mapping[:6].astype(np.int32), chunk, layout=layout, scale_mode=mode, outer_scale=scale)
    scratch = np.zeros((1, 8, cache.shape[2]), np.uint8)
    ctx.write(chunk[:, :512], chunk[:, 512:], np.arange(6, dtype=np.int64), scratch, layout=layout,
              scale_mode=mode, outer_scale=scale)

    # (3) Decode: two queries of 16 heads over their top-k slots (-1 = unused).
    q = nvfp4_mla.bf16_bits(rng.standard_normal((2, 16, 576)).astype(np.float32))
    topk = np.array([[3, 4, 5, 64, -1, -1, -1, -1], [64, 65, 66, 3, 4, -1, -1, -1]], np.int32)
    out = np.zeros((2, 16, 512), np.uint16)
    try:
        ctx.attend(q, topk, cache, out, layout=layout, scale_mode=mode, outer_scale=scale, sm_scale=576 ** -0.5)
    except nvfp4_mla.Unsupported as exc:
        print("attend unavailable, gather + reference attention instead:", exc.plugin_message)
        for i in range(2):
            rows = np.zeros((topk.shape[1], 576), np.uint16)
            ctx.gather(cache, topk[i], rows, layout=layout, scale_mode=mode, outer_scale=scale)
            keys = nvfp4_mla.bf16_to_float32(rows)[topk[i] >= 0]
            scores = nvfp4_mla.bf16_to_float32(q[i]) @ keys.T * 576 ** -0.5
            p = np.exp(scores - scores.max(axis=1, keepdims=True))
            out[i] = nvfp4_mla.bf16_bits((p / p.sum(axis=1, keepdims=True)) @ keys[:, :512])
    print("decode output norm per query:", np.linalg.norm(nvfp4_mla.bf16_to_float32(out).reshape(2, -1), axis=1))
    cfg.close()
    ctx.close()
    assert LAYOUT_FP8_ROPE_368 == layout


if __name__ == "__main__":
    main()
