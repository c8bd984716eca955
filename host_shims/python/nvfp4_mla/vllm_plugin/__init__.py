"""nvfp4_mla.vllm_plugin: serve DeepSeek-V3.2 and GLM-5 with vLLM 0.33 or 0.34 on this plugin's 368-
and 432-byte records, without a fork (docs/integration.md, "Serving with vLLM").

    pip install 'host_shims/python[vllm]'     # the extra allows vllm 0.33 and 0.34; the package needs nothing
    NVFP4_MLA_PLUGIN=$(pkg-config --variable=plugindir nvfp4-mla) vllm serve deepseek-ai/DeepSeek-V3.2 \\
        --tensor-parallel-size 8 --kv-cache-dtype nvfp4_mla368_ds_mla

The dtype name chooses the backend, the record and the pages; with no calibration, the 368-byte
record serves per-token scales (serving.py says the rules).

vLLM calls register() (entry point group `vllm.general_plugins`) in each of its processes. The
modules, by what they import:

    serving.py   standard library + nvfp4_mla   names, sizes, the one decision a process makes
    kernels.py   + PyTorch                      the Impl's bodies over vLLM-shaped tensors
    backend.py   + vLLM                         the backend, metadata builder and Impl
    hooks.py     + vLLM                         register(), the fused_norm_rope wrapper, the
                                                offload namespace

Importing this package imports neither vLLM nor PyTorch.
"""


def register():
    """The `vllm.general_plugins` entry point (idempotent: vLLM may call it more than once)."""
    from .hooks import register as _register
    _register()
