"""What registers the backend in vLLM 0.33 and 0.34, and what vLLM offers no hook for (imports vLLM and PyTorch).

register()            the vllm.general_plugins entry point's body: the cache dtype names (a handler
                      each: uint8 storage, KVQuantMode.NVFP4_DS_MLA), the NVFP4_MLA_SPARSE backend,
                      the plugin's VLLM_ variables (known to vLLM's environment check), the
                      selection of the backend by the dtype, the offload namespace, and vLLM's
                      logger as the plugin's; idempotent, as vLLM asks (it may run more than once a
                      process).
backend selection     vLLM's priority lists never name an out-of-tree backend, so without
                      --attention-backend a layer of these dtypes found no backend ("No valid
                      attention backend", listing only in-tree ones): the selector's cached lookup
                      is wrapped to pick NVFP4_MLA_SPARSE for them when none was named.
fused_norm_rope       DeepSeek-V3.2's attention writes the MLA cache inside a fused Triton kernel
                      (vllm.models.deepseek_v32.attention.fused_norm_rope) that knows only vLLM's
                      layouts: given mla_kv_cache=None it skips the write and still returns the normed
                      latent and the roped k_pe (the route vLLM's HiSparse path takes). The wrapper
                      does that for this plugin's dtypes and writes the records with the plugin
                      (the op nvfp4_mla_vllm::kv_cache_update, opaque to torch.compile, so a captured
                      graph records the writer's launch). Installed only after the wrapped function's
                      signature is the one 0.33 and 0.34 have (the kernel file is byte-identical in
                      both): another vLLM is refused, by version, before any cache is written.
offload namespace     vLLM's file tier (vllm/v1/kv_offload/file_mapper.py) names a persistent cache
                      folder by a hash of its fields, the cache dtype among them but nothing that
                      tells calibrations apart; for this plugin's dtypes the plugin's cache identity
                      (layout, scale mode, sha256 of the scales) joins the hashed fields.

Why KVQuantMode.NVFP4_DS_MLA and not CUSTOM: in 0.33 and 0.34 CUSTOM has the value 12, which makes it an alias
of OCTAVE_K3V4 (an IntEnum member with a taken value is that member), so a cache declared CUSTOM reads
as Octave everywhere vLLM asks `is_octave` (KVQuantMode(12).name is "OCTAVE_K3V4"). NVFP4_DS_MLA is
0.33's mode for "opaque-bytes NVFP4 DS-MLA layouts": quantized, no generic kernel path, exactly what
these records are.
"""

import inspect
import os
import sys

import torch

from vllm.logger import init_logger

from . import serving

logger = init_logger("vllm.plugins.nvfp4_mla")

# ---- register() ----


class CacheDtypeHandler:
    """vLLM's KVCacheDTypeHandler for one of the names (the subclasses carry `name`)."""
    name = ""

    def torch_dtype(self):
        return torch.uint8

    def quant_mode(self):
        from vllm.v1.kv_cache_interface import KVQuantMode
        return KVQuantMode.NVFP4_DS_MLA


def register():
    from vllm.config.cache import get_kv_cache_dtype_handler, register_kv_cache_dtype
    from vllm.v1.attention.backends.registry import AttentionBackendEnum, register_backend

    serving.set_log(logger)  # the plugin's lines (config_create's host log included) reach vLLM's log
    decision = serving.current()  # the environment, read once for this process
    for name in serving.DTYPES:
        if not isinstance(get_kv_cache_dtype_handler(name), CacheDtypeHandler):
            register_kv_cache_dtype(name)(type(f"Handler_{name}", (CacheDtypeHandler,), {"name": name}))
    if serving.BACKEND_NAME in AttentionBackendEnum.__members__:
        register_backend(AttentionBackendEnum[serving.BACKEND_NAME], serving.BACKEND_PATH)
    else:
        register_backend(serving.BACKEND_NAME, serving.BACKEND_PATH)
    register_environment()
    for install, what in ((install_backend_selection, "the backend is not chosen by the dtype alone: serve with "
                                                      f"--attention-backend {serving.BACKEND_NAME}"),
                          (install_offload_namespace, "do not offload " + " / ".join(serving.DTYPES)
                                                      + " caches to persistent storage")):
        try:
            install()
        except (ImportError, AttributeError, KeyError) as exc:  # optional: never a reason to stop vLLM
            logger.warning("nvfp4-mla: %s was not installed (%s): %s", install.__name__, exc, what)
    if "vllm.models.deepseek_v32.attention" in sys.modules:
        wrap_fused_norm_rope()  # else the Impl wraps it when a layer is built (the module is loaded then)
    for level, line in decision.notes:
        serving.emit(level, line)
    if decision.error:
        state = f"the backend refuses to serve: {decision.error}"
    else:
        state = (f"plugin {decision.plugin_path} (ABI {decision.plugin.abi}), "
                 f"CUDA code for {', '.join(map(serving.sm_name, decision.archs)) or 'none'}")
    logger.info("nvfp4-mla: registered --kv-cache-dtype %s (attention backend %s, chosen by the dtype); %s",
                " / ".join(serving.DTYPES), serving.BACKEND_NAME, state)


def register_environment():
    """The plugin's VLLM_-prefixed variables, made known to vLLM's environment check
    (Platform.validate_environ: "Unknown vLLM environment variable detected", which
    --fail-on-environ-validation makes fatal). vLLM loads general plugins before it checks. A
    misspelt one stays unknown to vLLM, and the plugin warns about it too (serving._unknown_variables)."""
    from vllm import envs

    for name in serving.VLLM_PREFIXED:
        envs.environment_variables.setdefault(name, lambda name=name: os.getenv(name))


def install_backend_selection():
    """vLLM's attention selection (vllm.v1.attention.selector._cached_get_attn_backend, which every
    layer's get_attn_backend calls) with the backend chosen by the dtype: an MLA layer whose cache is
    one of this plugin's dtypes gets NVFP4_MLA_SPARSE when no backend was named (vLLM's own priority
    lists never name an out-of-tree backend, and no in-tree one reads these records). A backend that
    was named is kept (another one is refused by vLLM with its reasons)."""
    import vllm.v1.attention.selector as selector
    from vllm.v1.attention.backends.registry import AttentionBackendEnum

    current = selector._cached_get_attn_backend
    if getattr(current, "nvfp4_mla_original", None) is not None:
        return
    ours = AttentionBackendEnum[serving.BACKEND_NAME]

    def _cached_get_attn_backend(backend, attn_selector_config, *args, **kwargs):
        if backend is None and attn_selector_config.kv_cache_dtype in serving.DTYPES and attn_selector_config.use_mla:
            backend = ours
        return current(backend, attn_selector_config, *args, **kwargs)

    _cached_get_attn_backend.nvfp4_mla_original = current
    selector._cached_get_attn_backend = _cached_get_attn_backend


def model_of(vllm_config):
    """The serving.Model of a vLLM configuration (None without a model): its checkpoint folder, name,
    attention layers and draft/MTP layers (the target model's: a drafter is built under the same
    configuration)."""
    model_config = getattr(vllm_config, "model_config", None)
    if model_config is None:
        return None
    text = getattr(model_config, "hf_text_config", None) or getattr(model_config, "hf_config", None)
    return serving.Model(folder=local_model_dir(vllm_config), name=str(getattr(model_config, "model", "") or ""),
                         layers=int(getattr(text, "num_hidden_layers", 0) or 0),
                         draft_layers=int(getattr(text, "num_nextn_predict_layers", 0) or 0))


def current_model():
    """model_of the configuration vLLM is building under now (None: none)."""
    from vllm.config import get_current_vllm_config_or_none
    return model_of(get_current_vllm_config_or_none())


# ---- Where a layer is found at run time (vLLM hands the cache update no layer). ----

def attention_layers():
    """name -> layer of the running model: the forward context's, else the current config's."""
    from vllm.config import get_current_vllm_config_or_none
    from vllm.forward_context import get_forward_context, is_forward_context_available

    if is_forward_context_available():
        return get_forward_context().no_compile_layers
    config = get_current_vllm_config_or_none()
    return config.compilation_config.static_forward_context if config is not None else {}


def layer_name_of(impl):
    """The name of the layer holding `impl` (its layer index gives it its calibrated scale)."""
    for name, layer in attention_layers().items():
        if getattr(layer, "impl", None) is impl:
            return name
    raise LookupError(f"{serving.BACKEND_NAME}: no attention layer holds this Impl; its outer scale is a layer's")


_layers_by_cache = {}  # cache data pointer -> layer


def layer_of_cache(kv_cache):
    ptr = kv_cache.data_ptr()
    layer = _layers_by_cache.get(ptr)
    if layer is None or getattr(layer, "kv_cache", None) is None or layer.kv_cache.data_ptr() != ptr:
        layer = next((lay for lay in attention_layers().values()
                      if isinstance(getattr(lay, "kv_cache", None), torch.Tensor)
                      and lay.kv_cache.numel() and lay.kv_cache.data_ptr() == ptr), None)
        if layer is None:
            raise LookupError(f"{serving.BACKEND_NAME}: no attention layer holds the cache at 0x{ptr:x}")
        _layers_by_cache[ptr] = layer
    return layer


def checkpoint_dir(model, revision=None):
    """The checkpoint folder the plugin reads calibrated scales from (config.json's
    nvfp4_mla_outer_scales): `model` when it is a folder, else a Hugging Face id's snapshot already
    in the local cache (never a download); None when neither (the environment's scales file, if
    any, still applies)."""
    if not model:
        return None
    if os.path.isdir(model):
        return model
    try:
        from huggingface_hub import try_to_load_from_cache
        found = try_to_load_from_cache(model, "config.json", revision=revision)
    except Exception:  # not a repo id, or no hub: no checkpoint scales to read
        return None
    return os.path.dirname(found) if isinstance(found, str) else None


def local_model_dir(vllm_config):
    """checkpoint_dir of the model a vLLM configuration serves."""
    model_config = getattr(vllm_config, "model_config", None)
    return checkpoint_dir(getattr(model_config, "model", None), getattr(model_config, "revision", None))


# ---- The cache update as an operator (what the fused_norm_rope wrapper calls). ----

_lib = torch.library.Library("nvfp4_mla_vllm", "FRAGMENT")
torch.library.define("nvfp4_mla_vllm::kv_cache_update", "(Tensor kv_c_normed, Tensor k_pe, Tensor slot_mapping, "
                     "Tensor(a!) kv_cache, str kv_cache_dtype) -> ()", lib=_lib)


def _kv_cache_update(kv_c_normed, k_pe, slot_mapping, kv_cache, kv_cache_dtype):
    layer = layer_of_cache(kv_cache)
    layer.impl.do_kv_cache_update(kv_c_normed, k_pe, kv_cache, slot_mapping, kv_cache_dtype, layer._k_scale)


def _kv_cache_update_fake(kv_c_normed, k_pe, slot_mapping, kv_cache, kv_cache_dtype):
    return None


torch.library.impl("nvfp4_mla_vllm::kv_cache_update", ("CPU", "CUDA"), _kv_cache_update, lib=_lib)
torch.library.register_fake("nvfp4_mla_vllm::kv_cache_update", _kv_cache_update_fake, lib=_lib)


# ---- DeepSeek-V3.2's fused norm + RoPE: its cache write diverted to the plugin's writer. ----

def _parameters(fn):
    """fn's parameters as (name, kind, default), in order."""
    return tuple((p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values())


def check_fused_norm_rope(fn):
    """Raises RuntimeError, naming the vLLM version and the first difference, unless `fn` has the
    parameters 0.33's and 0.34's fused_norm_rope has."""
    import vllm

    got = _parameters(fn)
    if got == FUSED_NORM_ROPE_PARAMETERS:
        return
    diff = next(((i, g, w) for i, (g, w) in enumerate(zip(got, FUSED_NORM_ROPE_PARAMETERS)) if g != w),
                (min(len(got), len(FUSED_NORM_ROPE_PARAMETERS)), None, None))
    where = (f"parameter {diff[0]} is {diff[1][0]!r} (default {diff[1][2]!r}) where 0.33/0.34 have {diff[2][0]!r} "
             f"(default {diff[2][2]!r})" if diff[1] else
             f"it has {len(got)} parameters where 0.33/0.34 have {len(FUSED_NORM_ROPE_PARAMETERS)}")
    raise RuntimeError(f"nvfp4_mla.vllm_plugin: vLLM {vllm.__version__}'s vllm.models.deepseek_v32.attention."
                       f"fused_norm_rope is not the one this plugin diverts ({where}); the plugin serves vllm 0.33 "
                       "and 0.34, "
                       f"whose fused kernel would otherwise write its own rows into {serving.BACKEND_NAME}'s cache")


def make_fused_norm_rope(original):
    """fused_norm_rope with the MLA cache write of this plugin's dtypes taken out of the fused kernel
    (mla_kv_cache=None: it then writes only the indexer's keys) and done by the plugin's writer on
    the kernel's normed latent and roped k_pe; every other dtype passes through untouched."""

    def fused_norm_rope(positions, q_c, q_rms_norm_w, q_rms_eps, kv_c, kv_rms_norm_w, kv_rms_eps, k_pe,
                        k_rope_cos_sin_cache, index_k, index_k_layer_norm_w, index_k_layer_norm_bias,
                        index_k_layer_norm_eps, index_k_rope_cos_sin_cache, topk_indices_buffer, slot_mapping=None,
                        indexer_slot_mapping=None, indexer_k_cache=None, indexer_cache_shuffled=False,
                        mla_kv_cache=None, mla_kv_cache_dtype="auto", mla_k_scale=None, has_indexer=True,
                        index_rope_interleave=False, q_c_out=None, kv_c_out=None, k_pe_out=None, index_k_out=None,
                        skip_scale=False):
        ours = mla_kv_cache is not None and mla_kv_cache_dtype in serving.DTYPES
        if ours:
            kv_c_out = torch.empty_like(kv_c) if kv_c_out is None else kv_c_out
            k_pe_out = torch.empty_like(k_pe) if k_pe_out is None else k_pe_out
        q = original(positions, q_c, q_rms_norm_w, q_rms_eps, kv_c, kv_rms_norm_w, kv_rms_eps, k_pe,
                     k_rope_cos_sin_cache, index_k, index_k_layer_norm_w, index_k_layer_norm_bias,
                     index_k_layer_norm_eps, index_k_rope_cos_sin_cache, topk_indices_buffer,
                     slot_mapping=slot_mapping, indexer_slot_mapping=indexer_slot_mapping,
                     indexer_k_cache=indexer_k_cache, indexer_cache_shuffled=indexer_cache_shuffled,
                     mla_kv_cache=None if ours else mla_kv_cache,
                     mla_kv_cache_dtype="auto" if ours else mla_kv_cache_dtype, mla_k_scale=mla_k_scale,
                     has_indexer=has_indexer, index_rope_interleave=index_rope_interleave, q_c_out=q_c_out,
                     kv_c_out=kv_c_out, k_pe_out=k_pe_out, index_k_out=index_k_out, skip_scale=skip_scale)
        if ours and slot_mapping is not None:
            torch.ops.nvfp4_mla_vllm.kv_cache_update(kv_c_out, k_pe_out, slot_mapping, mla_kv_cache,
                                                     mla_kv_cache_dtype)
        return q

    fused_norm_rope.nvfp4_mla_original = original
    return fused_norm_rope


# vllm 0.33.0's and 0.34.0's vllm/models/deepseek_v32/common/kernels.py: fused_norm_rope(...) -> q_c_out, parameter by
# parameter (name, kind, default): the wrapper's own, since it passes every one through by name.
FUSED_NORM_ROPE_PARAMETERS = _parameters(make_fused_norm_rope(None))


def wrap_fused_norm_rope():
    """Install the wrapper where DeepSeek-V3.2's attention calls it (idempotent); RuntimeError on a
    vLLM whose fused_norm_rope differs from 0.33's and 0.34's."""
    import vllm.models.deepseek_v32.attention as attention

    current = attention.fused_norm_rope
    if getattr(current, "nvfp4_mla_original", None) is not None:
        return current
    check_fused_norm_rope(current)
    attention.fused_norm_rope = make_fused_norm_rope(current)
    return attention.fused_norm_rope


# ---- The persistent offload tier's namespace. ----

IDENTITY_FIELD = "nvfp4_mla_cache_identity"


def cache_identity(dtype, model_name):
    """The plugin's identity of the records this process writes in `dtype` for a checkpoint (its
    calibrated scales, when config.json has them); RuntimeError when the process cannot serve them."""
    model = current_model()
    if model is None or model.name != model_name:
        model = serving.Model(folder=checkpoint_dir(model_name), name=model_name or "")
    plan = serving.current().plan(dtype, model)
    if plan.error:
        raise RuntimeError(f"{serving.BACKEND_NAME}: no cache identity for an offload namespace: {plan.error}")
    return plan.identity


def install_offload_namespace():
    """For this plugin's dtypes, vLLM's file tier hashes the cache identity with its other fields
    (and writes it into the namespace's config.json); every other dtype keeps its folder."""
    from vllm.v1.kv_offload.file_mapper import FileMapper

    current = FileMapper.__dict__["_compute_base_path"].__func__
    if getattr(current, "nvfp4_mla_original", None) is not None:
        return

    def _compute_base_path(root_dir, fields):
        if fields.get("dtype") in serving.DTYPES and IDENTITY_FIELD not in fields:
            fields[IDENTITY_FIELD] = cache_identity(fields["dtype"], fields.get("model_name"))
        return current(root_dir, fields)

    _compute_base_path.nvfp4_mla_original = current
    FileMapper._compute_base_path = staticmethod(_compute_base_path)
