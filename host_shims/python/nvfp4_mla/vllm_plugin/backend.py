"""NVFP4_MLA_SPARSE: vLLM 0.33's and 0.34's sparse MLA attention backend over this plugin's records
(imports vLLM; registered by nvfp4_mla.vllm_plugin.register(), chosen by the cache dtype, or named with
--attention-backend).

Three classes, on vLLM's own sparse MLA bases (vllm/model_executor/layers/attention/
sparse_mla_attention.py), so the indexer, the top-k buffer, the logical-to-physical top-k conversion
and the decode/prefill split stay vLLM's:

  NvFp4MlaSparseBackend          names, sizes (customize_spec: 368 or 432 bytes a token, 64-token
                                 pages) and refusals (supports_combination, in the plugin's words)
  NvFp4MlaSparseMetadataBuilder  vLLM's sparse metadata, and the step's attend planned in build()
                                 (outside any CUDA-graph capture); UNIFORM_BATCH graphs, as the
                                 in-tree sparse backends
  NvFp4MlaSparseImpl             _forward_mqa_kernel: attend for decode, MTP and prefill rows alike;
                                 do_kv_cache_update: the plugin's writer. No dense-MHA prefill
                                 (supports_dense_mha_prefill = False): that path gathers the cache
                                 with vLLM's own kernels, which do not know these records.

The bodies are kernels.py's plain functions; the decisions are serving.py's (a Plan a dtype and
model: layout, scale mode, scales, refusal).

vLLM 0.34's changes, each handled or declared: ShardQ (token-sharded TP prefill, opt-in per Impl with
supports_shardq, reading the top-k from metadata.topk_start) is declared unsupported here (not tried
with the plugin's attend; vLLM then keeps every token on its rank); the extensible KV cache (reserved,
committed after graph capture) needs nothing of the backend: the plugin binds no cache address ahead
of a call (hooks.layer_of_cache looks the layer up by the tensor it is handed), and the captured writer
and attend launches take the same tensors as vLLM's own kernels; the default block size 64 is this
backend's only one; KVQuantMode.is_custom_mode, removed, was never used (the dtypes are NVFP4_DS_MLA);
0.34's DCP refusal of "nvfp4_ds_mla" names upstream's record, and this backend refuses DCP itself
(supports_dcp = False).
"""

from dataclasses import dataclass, replace
from typing import ClassVar

import torch

from vllm.config import get_current_vllm_config_or_none
from vllm.model_executor.layers.attention.sparse_mla_attention import (
    SparseMLACommonImpl,
    SparseMLACommonMetadata,
    SparseMLACommonMetadataBuilder,
)
from vllm.model_executor.models.utils import extract_layer_index
from vllm.v1.attention.backend import AttentionBackend, AttentionCGSupport

from .. import _abi
from . import hooks, kernels, serving


def _bound(plan, device):
    """The plan's torch ops on `device` (kernels.bound_ops: a context a device and process), its
    context logging to vLLM's log and reading the attention settings from the decision's snapshot
    (the values checked at start-up)."""
    return kernels.bound_ops(plan.plugin, device, plan.layout, plan.scale_mode, plan.writer_policy,
                             log=serving.emit, environ=plan.decision.environ)


def _plan(dtype, vllm_config):
    """This process's plan for `dtype` and the model `vllm_config` serves, else ValueError with the
    refusal."""
    plan = serving.current().plan(dtype, hooks.model_of(vllm_config))
    reason = plan.refusal()
    if reason:
        raise ValueError(reason)
    return plan


class NvFp4MlaSparseBackend(AttentionBackend):
    supported_dtypes: ClassVar[list] = [torch.bfloat16]
    supported_kv_cache_dtypes: ClassVar[list] = list(serving.DTYPES)

    @staticmethod
    def get_supported_kernel_block_sizes(kv_cache_spec=None):
        return [serving.BLOCK_SIZE]

    @classmethod
    def customize_spec(cls, spec):
        """The page vLLM allocates: a record a token (without this vLLM sizes an unknown dtype at
        576 bytes a token), blocks a whole number of records apart (kernels.flat_rows)."""
        dtype = getattr(spec, "cache_dtype_str", None)
        record = serving.record_bytes(dtype)
        if not record:
            raise ValueError(serving.current().refusal(dtype) or f"{dtype!r} has no record size")
        return replace(spec, state_content_bytes=record, block_stride_alignment=record)

    @staticmethod
    def get_name():
        return serving.BACKEND_NAME

    @staticmethod
    def get_builder_cls():
        return NvFp4MlaSparseMetadataBuilder

    @staticmethod
    def get_impl_cls():
        return NvFp4MlaSparseImpl

    @classmethod
    def get_supported_head_sizes(cls):
        return [serving.HEAD_SIZE]

    @classmethod
    def is_mla(cls):
        return True

    @classmethod
    def is_sparse(cls):
        return True

    @classmethod
    def supports_compute_capability(cls, capability):
        # Only where the plugin loaded with a CUDA backend does `archs` say which GPUs it serves;
        # otherwise the reason is that (supports_combination), not the GPU.
        decision = serving.current()
        return not decision.cuda_known or (capability.major, capability.minor) in decision.archs

    @classmethod
    def supports_combination(cls, head_size, dtype, kv_cache_dtype, block_size, use_mla, has_sink, use_sparse,
                             use_mm_prefix, device_capability):
        """The reasons vLLM prints with "Selected backend ... is not valid": the plugin's and the
        environment's, and the page size."""
        reasons = []
        capability = (device_capability.major, device_capability.minor) if device_capability else None
        refusal = serving.current().refusal(kv_cache_dtype, capability, hooks.current_model())
        if refusal:
            reasons.append(refusal)
        if block_size is not None and block_size != serving.BLOCK_SIZE:
            reasons.append(f"{serving.BACKEND_NAME} pages hold {serving.BLOCK_SIZE} records (the plugin's tested "
                           f"geometry, and the DeepSeek-V3.2 indexer's): serve with --block-size "
                           f"{serving.BLOCK_SIZE}, not {block_size}")
        return "; ".join(reasons) or None


@dataclass(kw_only=True)
class NvFp4MlaSparseMetadata(SparseMLACommonMetadata):
    attend_workspace_bytes: int = 0  # the scratch this step's attend needs (planned in build())


class NvFp4MlaSparseMetadataBuilder(SparseMLACommonMetadataBuilder[NvFp4MlaSparseMetadata]):
    _cudagraph_support: ClassVar[AttentionCGSupport] = AttentionCGSupport.UNIFORM_BATCH
    metadata_cls = NvFp4MlaSparseMetadata

    def __init__(self, kv_cache_spec, layer_names, vllm_config, device):
        super().__init__(kv_cache_spec, layer_names, vllm_config, device)
        # Decode and MTP rows (1 + speculative tokens) form the uniform batches graphs replay; every
        # row, prefill included, goes to the one attend call.
        self._init_reorder_batch_threshold(1, supports_spec_as_decode=True)
        self.num_heads = self.model_config.get_num_attention_heads(vllm_config.parallel_config)
        dtype = getattr(kv_cache_spec, "cache_dtype_str", None) or vllm_config.cache_config.cache_dtype
        self.record_bytes = serving.record_bytes(dtype)
        # The top-k rows attend gets are the model's buffer's, which may be wider than index_topk.
        self.topk_width = getattr(kv_cache_spec, "topk_buffer_width", None) or self.topk_tokens
        self._ops = _bound(_plan(dtype, vllm_config), device)  # the device's context, made here: outside any capture

    @staticmethod
    def determine_chunked_prefill_workspace_size(vllm_config):
        # The base builder sizes a bf16 scratch for dense prefill's gathered context (up to 64K x 576
        # x 2 bytes); this backend never gathers, so one page of rows is all it keeps.
        return vllm_config.cache_config.block_size

    def build(self, common_prefix_len, common_attn_metadata, fast_build=False):
        metadata = super().build(common_prefix_len, common_attn_metadata, fast_build)
        metadata.attend_workspace_bytes = kernels.plan_step(self._ops, common_attn_metadata.num_actual_tokens,
                                                            self.num_heads, self.topk_width, self.record_bytes)
        return metadata


class NvFp4MlaSparseImpl(SparseMLACommonImpl[NvFp4MlaSparseMetadata]):
    can_return_lse_for_decode: bool = True
    lse_base_on_e: bool = True  # attend's lse is a natural log
    supports_dense_mha_prefill: bool = False
    supports_pcp: bool = False  # not tried: refused by vLLM's validation rather than run untested
    supports_dcp: bool = False
    supports_shardq: bool = False  # vLLM 0.34's token-sharded prefill: not tried with attend (see above)

    def __init__(self, num_heads, head_size, scale, num_kv_heads, alibi_slopes, sliding_window, kv_cache_dtype,
                 logits_soft_cap, attn_type, kv_sharing_target_layer_name, **mla_args):
        if alibi_slopes is not None or sliding_window is not None or logits_soft_cap is not None:
            raise NotImplementedError(f"{serving.BACKEND_NAME} has no alibi, sliding window or logits soft cap")
        vllm_config = get_current_vllm_config_or_none()
        plan = _plan(kv_cache_dtype, vllm_config)
        if vllm_config is not None and vllm_config.attention_config.hisparse_config is not None:
            raise NotImplementedError(f"{serving.BACKEND_NAME} does not serve HiSparse: its host tier stages "
                                      "656-byte fp8_ds_mla rows")
        hooks.wrap_fused_norm_rope()  # DeepSeek-V3.2's fused cache write, diverted; refuses another vLLM
        super().__init__(num_heads, head_size, scale, num_kv_heads, alibi_slopes, sliding_window, kv_cache_dtype,
                         logits_soft_cap, attn_type, kv_sharing_target_layer_name, **mla_args)
        self.supports_quant_query_input = False
        self._plan = plan  # the checkpoint's scales were read by the plan: refused then, not mid-step
        self._scale = None
        self._scale_known = plan.scale_mode == _abi.SCALE_PER_TOKEN  # per token: no layer scale
        self._ops_of = {}  # torch.device -> BoundOps (_bound)

    def _ops(self, device):
        """The ops of the cache's device, looked up once a device (every layer's step calls this twice)."""
        ops = self._ops_of.get(device)
        if ops is None:
            ops = self._ops_of[device] = _bound(self._plan, device)
        return ops

    def _outer_scale(self, layer=None):
        """This layer's calibrated outer scale (static mode; None per token), found once by its layer
        index: from `layer` when vLLM passes it (forward_mqa), else by finding the layer that holds
        this Impl (the cache update, which vLLM calls without the layer)."""
        if not self._scale_known:
            name = getattr(layer, "layer_name", None) or hooks.layer_name_of(self)
            self._scale = self._plan.layer_scale(extract_layer_index(name))
            self._scale_known = True
        return self._scale

    def _forward_mqa_kernel(self, q, kv_cache, topk_indices, valid_counts, *, layer, block_size, is_decode):
        return kernels.forward_mqa(self._ops(kv_cache.device), q, kv_cache, topk_indices, valid_counts,
                                   sm_scale=self.scale, outer_scale=self._outer_scale(layer))

    def do_kv_cache_update(self, kv_c_normed, k_pe, kv_cache, slot_mapping, kv_cache_dtype, k_scale,
                           skip_scale=False):
        kernels.cache_update(self._ops(kv_cache.device), kv_c_normed, k_pe, kv_cache, slot_mapping,
                             outer_scale=self._outer_scale())
