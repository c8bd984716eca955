"""nvfp4_mla.vllm_plugin: serve DeepSeek-V3.2 and GLM-5 with vLLM 0.33 on this plugin's 368- and
432-byte records, without a fork (docs/integration.md, "Serving with vLLM").

    pip install 'host_shims/python[vllm]'     # the extra pins vllm==0.33.*; the package needs nothing
    KV_FP8_ROPE=1 NVFP4_MLA_PLUGIN=/path/to/libnvfp4_mla.so vllm serve deepseek-ai/DeepSeek-V3.2 \\
        --kv-cache-dtype nvfp4_mla368_ds_mla --attention-backend NVFP4_MLA_SPARSE --block-size 64

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
