"""nvfp4_mla: load, probe and call the nvfp4-mla plugin from Python (ctypes, no compiled code).

    from nvfp4_mla import load, require, CacheFormat, Context
    plugin = load()                                  # NVFP4_MLA_PLUGIN, checked header
    fmt = CacheFormat.from_env()                     # immutable, read once
    require(plugin, fmt)                             # fail closed, naming what is missing
    ctx = Context(plugin, "cuda:0")                  # ctx.write(..., writer_policy=cfg.writer_policy)
    attend = ctx.prepare_attend(q, topk, cache, out, layout=..., scale_mode=..., sm_scale=...)
    attend.run(n)                                    # per step: pointers, rows, stream only
    ctx.merge(partial_out, partial_lse, out, lse=lse)  # decode context parallelism (ABI 1.1)

nvfp4_mla.torch_ops (optional; imports torch, which this package otherwise never does) registers the
calls as PyTorch operators (torch.ops.nvfp4_mla.*) for torch.compile and CUDA graphs. Every way in
builds its argument structs with nvfp4_mla.calls (a device and arrays in, a checked struct out) and
takes attend's scratch by the one rule of nvfp4_mla.workspace.
"""

from . import _abi
from ._abi import (LAYOUT_BF16_ROPE_432, LAYOUT_FP8_DS_MLA_656, LAYOUT_FP8_ROPE_368, SCALE_PER_TOKEN, SCALE_STATIC)
from .arrays import ArrayError
from .config import WRITER_POLICY_ENV, CacheFormat, PluginConfig
from .context import Context
from .prepared import PreparedAttend, PreparedGather, PreparedMerge, PreparedWrite
from .errors import ConfigError, DeviceError, InvalidArgument, PluginCallError, Unsupported
from .loader import LoadedPlugin, PluginDisabled, PluginError, PluginNotSelected, load
from . import loader as _loader

__all__ = ["load", "require", "CacheFormat", "PluginConfig", "Context", "PreparedWrite", "PreparedGather",
           "PreparedAttend", "PreparedMerge", "LoadedPlugin", "ArrayError",
           "PluginError", "PluginDisabled", "PluginNotSelected", "PluginCallError", "InvalidArgument",
           "Unsupported", "ConfigError", "DeviceError", "LAYOUT_FP8_ROPE_368", "LAYOUT_BF16_ROPE_432", "LAYOUT_FP8_DS_MLA_656",
           "SCALE_STATIC", "SCALE_PER_TOKEN", "bf16_bits", "bf16_to_float32"]


def require(plugin, cache_format, cache_dtype="nvfp4_ds_mla", model_dir=None, extra=0, available=None):
    """Accepts the format (returns the C loader's acceptance line) or raises PluginError with the
    C loader's words: plugin path, both ABI versions and each missing capability. A non-NVFP4 dtype
    needs nothing of the plugin."""
    cfg = cache_format.open(plugin, cache_dtype, model_dir)
    try:
        if cache_format.writer_policy != "rtn" and not cfg.has_writer_policy:
            raise PluginError(f"plugin {plugin.path} (ABI {plugin.abi}) has no writer policies, but "
                              f'{WRITER_POLICY_ENV}="{cache_format.writer_policy}" asks for one', "missing_capability")
        if not cfg.is_nvfp4:
            return f"cache dtype {cache_dtype} does not use the plugin"
        policy = cfg.writer_policy
        asked = cache_format.dynamic_scale or bool(cache_format.scales_file) or cfg.num_layers > 0 or policy != 0
        extra |= _abi.writer_policy_cap(policy)
        return _loader.require_capabilities(plugin, cfg.layout, cfg.scale_mode, available, extra, asked)
    finally:
        cfg.close()


def bf16_bits(values):
    """float32 numpy array -> uint16 bf16 bits (round to nearest even), for CPU callers."""
    import numpy as np
    u = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return np.where((u & 0x7FFFFFFF) > 0x7F800000, 0x7FFF, rounded).astype(np.uint16)


def bf16_to_float32(bits):
    import numpy as np
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)
