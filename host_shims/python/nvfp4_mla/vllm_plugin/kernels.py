"""The NVFP4_MLA_SPARSE Impl's bodies as plain functions over vLLM-shaped tensors: PyTorch and
nvfp4_mla.torch_ops only, no vLLM, so they are tested where vLLM cannot be installed (the GPU
machine: host_shims/python/tests/test_vllm_kernels.py) and timed there (bench/vllm_decode_step.py).

What vLLM 0.33's sparse MLA layer hands an Impl (vllm/model_executor/layers/attention/
sparse_mla_attention.py, vllm/models/deepseek_v32/attention.py):

  kv_c_normed   [T, 512] bf16         the normed latent of the step's tokens
  k_pe          [T, 1, 64] or [T, 64] their RoPE keys, after RoPE
  slot_mapping  [T'] int64            block * block_size + offset, T' <= T (the first T' tokens are
                                      written), -1 for padding (skipped)
  kv_cache      [num_blocks, block_size, record] uint8 (or those bytes viewed as float8_e4m3fn, as
                                      MLAAttention.forward_impl views quantized caches); the block
                                      stride may exceed a page (other layers' pages in between)
  q             (q_nope [n, h, 512], q_pe [n, h, 64]) bf16, or q [n, h, 576]
  topk          [n, K] int32          physical rows: block * block_stride_rows + offset, as
                                      flat_kv_row_view numbers them; -1 unused
  valid_counts  [n] int32             the valid entries of each row, which vLLM's top-k conversion
                                      leaves in front (its FA3 and trtllm-gen kernels read only them)
  returns       out [n, h, 512] bf16, lse [n, h] f32 (natural log; -inf and zeros for a row with no
                                      valid entry)

The writer takes the cache as vLLM lays it out (the plugin honours the block stride); attend takes
the same bytes as flat rows, [rows, 1, record], so that vLLM's physical top-k rows are the plugin's
slots unchanged and the plugin reads records at row * record (its contiguous-cache path).
"""

import torch

from .. import _abi, calls
from .. import torch_ops
from ..context import Context
from ..loader import require_capabilities as require

LATENT, ROPE, ROW = _abi.LATENT_DIM, _abi.ROPE_DIM, _abi.ROW_DIM


def as_bytes(kv_cache):
    """The cache's bytes as uint8 (a view; vLLM views quantized caches as float8_e4m3fn)."""
    if kv_cache.dtype == torch.uint8:
        return kv_cache
    if kv_cache.element_size() != 1:
        raise ValueError(f"kv_cache: {kv_cache.dtype} is not a byte cache; the records are uint8 "
                         "[num_blocks, block_size, record]")
    return kv_cache.view(torch.uint8)


def flat_rows(kv_cache):
    """The cache as the plugin's readers take vLLM's physical rows: [rows, 1, record] over the same
    bytes, row = block * block_stride_rows + offset (vLLM's flat_kv_row_view)."""
    cache = as_bytes(kv_cache)
    if cache.dim() != 3:
        raise ValueError(f"kv_cache: shape {tuple(cache.shape)}, expected [num_blocks, block_size, record]")
    num_blocks, block_size, record = cache.shape
    if cache.stride(2) != 1 or cache.stride(1) != record or cache.stride(0) % record:
        raise ValueError(f"kv_cache: strides {cache.stride()} are not whole records (record {record} bytes): "
                         "vLLM's physical rows would not address records")
    stride_rows = cache.stride(0) // record
    rows = (num_blocks - 1) * stride_rows + block_size if num_blocks else 0
    return cache.as_strided((rows, 1, record), (record, record, 1))


def _expect(name, t, width, what):
    """A query part: a tensor [n, h, width], else ValueError naming it and the shape expected."""
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"{name}: a {type(t).__name__}, expected a tensor {what}")
    if t.dim() != 3 or t.shape[-1] != width:
        raise ValueError(f"{name}: shape {tuple(t.shape)}, expected {what}")
    return t


def query(q):
    """[n, h, 576] bf16 from vLLM's (q_nope, q_pe) pair (one concatenation) or a packed query; a part of
    another shape is refused naming it (a 448 + 128 split also concatenates to 576 columns)."""
    if isinstance(q, (tuple, list)):
        if len(q) != 2:
            raise ValueError(f"q: a {type(q).__name__} of {len(q)} parts, expected (q_nope [n, h, {LATENT}], "
                             f"q_pe [n, h, {ROPE}]) or one q [n, h, {ROW}]")
        q_nope = _expect("q_nope", q[0], LATENT, f"[n, h, {LATENT}]")
        q_pe = _expect("q_pe", q[1], ROPE, f"[n, h, {ROPE}]")
        if q_pe.shape[:2] != q_nope.shape[:2] or q_pe.dtype != q_nope.dtype:
            raise ValueError(f"q_pe: shape {tuple(q_pe.shape)} {q_pe.dtype}, expected q_nope's [n, h] = "
                             f"{list(q_nope.shape[:2])} and dtype {q_nope.dtype}")
        return torch.cat((q_nope, q_pe), dim=-1)
    q = _expect("q", q, ROW, f"[n, h, {ROW}] (or the pair q_nope [n, h, {LATENT}], q_pe [n, h, {ROPE}])")
    return q if q.stride(-1) == 1 else q.contiguous()


def rope_keys(k_pe, tokens):
    """k_pe [T, 64] from vLLM's [T, 1, 64] or [T, 64] RoPE keys (T >= tokens), else ValueError naming it:
    a [T, 2, 32] or [T, 1, 63] tensor is not RoPE keys, whatever reshape would make of it."""
    shape = tuple(k_pe.shape)
    if not (len(shape) == 2 and shape[1] == ROPE or len(shape) == 3 and shape[1:] == (1, ROPE)):
        raise ValueError(f"k_pe: shape {shape}, expected [T, {ROPE}] or [T, 1, {ROPE}]")
    if shape[0] < tokens:
        raise ValueError(f"k_pe: {shape[0]} tokens, the slot mapping has {tokens}")
    return k_pe.reshape(shape[0], ROPE)


def cache_update(ops, kv_c_normed, k_pe, kv_cache, slot_mapping, *, outer_scale=None):
    """Write the step's tokens into their slots (MLAAttentionImpl.do_kv_cache_update's body).
    `ops`: a torch_ops.BoundOps of the serving format; outer_scale: the layer's (static mode)."""
    if kv_cache.numel() == 0:  # vLLM's profiling run binds empty caches
        return
    slots = slot_mapping.reshape(-1)
    n = slots.shape[0]
    if kv_c_normed.shape[0] < n:
        raise ValueError(f"cache update: {n} slots for {kv_c_normed.shape[0]} tokens")
    pe = rope_keys(k_pe, n)
    ops.write(kv_c_normed[:n], pe[:n], slots, as_bytes(kv_cache), outer_scale=outer_scale)


def _per_row(name, t, rows, shape_text, dims):
    """topk / valid_counts by vLLM's names (the plugin's checks would call them slots / valid_len)."""
    if not isinstance(t, torch.Tensor) or t.dim() != dims or t.shape[0] != rows or t.dtype != torch.int32:
        what = f"shape {tuple(t.shape)} {t.dtype}" if isinstance(t, torch.Tensor) else f"a {type(t).__name__}"
        raise ValueError(f"{name}: {what}, expected {shape_text} torch.int32 with n = {rows} (q's rows)")
    return t


def forward_mqa(ops, q, kv_cache, topk, valid_counts, *, sm_scale, outer_scale=None):
    """Sparse MLA attention of every row, decode, MTP and prefill alike, straight from the records
    (SparseMLACommonImpl._forward_mqa_kernel's body): (out [n, h, 512] bf16, lse [n, h] f32)."""
    q = query(q)
    topk = _per_row("topk", topk, q.shape[0], "[n, K]", 2)
    if valid_counts is not None:
        valid_counts = _per_row("valid_counts", valid_counts, q.shape[0], "[n]", 1)
    return ops.attend(q, topk, flat_rows(kv_cache), sm_scale=sm_scale, outer_scale=outer_scale,
                      valid_len=valid_counts)


# ---- One context per device and process, and the format bound to it. ----

_bound = {}  # (plugin path, device, layout, scale mode, writer policy) -> BoundOps


def _device_name(device):
    """"cpu" or "cuda:N" of a device; any other type (meta, a CPU context's stand-in before) is refused."""
    device = torch.device(device)
    if device.type == "cuda":
        return f"cuda:{torch.cuda.current_device() if device.index is None else device.index}"
    if device.type == "cpu":
        return "cpu"
    raise ValueError(f"device {str(device)!r}: the plugin runs on 'cpu' or 'cuda' devices")


def bound_ops(plugin, device, layout, scale_mode, writer_policy=_abi.WRITER_POLICY_RTN, log=None, environ=None):
    """The torch ops of this serving format on `device`: one plugin context a device and process,
    made at the first call (outside any CUDA-graph capture: init probes the device) and refused,
    in the C loader's words, when the device's runtime capabilities cannot serve the format. `log`
    and `environ` go to the context (Context: the host's log callback, the settings snapshot)."""
    name = _device_name(device)
    key = (plugin.path, name, layout, scale_mode, writer_policy)
    ops = _bound.get(key)
    if ops is None:
        ctx = next((o.context for k, o in _bound.items() if k[:2] == key[:2]), None) \
            or Context(plugin, name, log=log, environ=environ)
        backend = "backend.cuda" if name.startswith("cuda") else "backend.cpu"
        require(plugin, layout, scale_mode, available=ctx.capability_bits,
                extra=_abi.CAP["op.write"] | _abi.CAP["op.attend"] | _abi.CAP[backend]
                | _abi.writer_policy_cap(writer_policy))
        ops = _bound[key] = torch_ops.bind(ctx, layout=layout, scale_mode=scale_mode, writer_policy=writer_policy)
    return ops


def plan_step(ops, rows, heads, topk, record, *, outer_scale=None):
    """A step's attend, planned before the forward (the metadata builder's build(), outside any
    capture): the plugin checks the shapes (a refusal raises here, in its words, not inside a
    captured forward) and says the scratch they need, which the context's kept workspace for the
    current stream is grown to, so that eager steps allocate none (nvfp4_mla.workspace's rule). The
    plugin reads shapes only: the tensors are placeholders. Returns the bytes (0: none)."""
    if rows == 0:
        return 0
    ctx = ops.context
    device = torch.device("cpu") if ctx.device[0] == _abi.DEVICE_CPU else torch.device("cuda", ctx.device[1])
    shapes = ((torch.bfloat16, (rows, heads, ROW)), (torch.int32, (rows, topk)), (torch.uint8, (1, 1, record)),
              (torch.bfloat16, (rows, heads, LATENT)), (torch.float32, (rows, heads)), (torch.int32, (rows,)))
    q, slots, cache, out, lse, valid_len = (calls.Placeholder(dtype, device, shape, role)
                                            for role, (dtype, shape) in enumerate(shapes))

    def build():
        return calls.attend_args(ctx.device, q, slots, cache, out, layout=ops.layout, scale_mode=ops.scale_mode,
                                 sm_scale=1.0, outer_scale=outer_scale, valid_len=valid_len, lse=lse)
    key = ("plan_step", ops.layout, ops.scale_mode, outer_scale, rows, heads, topk, record)
    need = ctx.workspace.need_by(key, build)  # the struct built and asked of the plugin once per shape
    # q stands for the device: a placeholder holds no memory, so a grown workspace pins nothing of it
    ctx.workspace.reserve(torch_ops.current_stream(ctx), need, q, capturing=torch_ops.capturing(ctx))
    return need


# ---- What attend computes, in float32 from the records the plugin's gather gives back. ----

def reference_mqa(ops, q, kv_cache, topk, valid_counts, *, sm_scale, outer_scale=None, chunk=16):
    """The attention forward_mqa computes, in float32 over the records dequantised by the plugin's
    gather (bf16, upcast): entries past a row's valid count or -1 have no weight; a row without any
    gives zeros and lse -inf. For tests and the benchmark's checks (memory: chunk x K x 576 floats)."""
    qf, rows = query(q).float(), flat_rows(kv_cache)
    n, heads, k = qf.shape[0], qf.shape[1], topk.shape[1]
    idx = topk.to(torch.int32).clone()
    if valid_counts is not None:
        past = torch.arange(k, device=idx.device)[None, :] >= valid_counts.to(idx.device)[:, None].long()
        idx[past] = -1
    out = torch.zeros(n, heads, LATENT, dtype=torch.float32, device=qf.device)
    lse = torch.full((n, heads), float("-inf"), dtype=torch.float32, device=qf.device)
    for s in range(0, n, chunk):
        e = min(n, s + chunk)
        part = idx[s:e].reshape(-1).contiguous()
        keys = ops.gather(rows, part, outer_scale=outer_scale).float().view(e - s, k, ROW)
        scores = torch.einsum("nhd,nkd->nhk", qf[s:e], keys) * sm_scale
        scores = scores.masked_fill((idx[s:e] < 0)[:, None, :], float("-inf"))
        row_lse = torch.logsumexp(scores, dim=-1)
        weights = torch.exp(scores - row_lse[..., None]).nan_to_num(0.0)
        out[s:e] = torch.einsum("nhk,nkd->nhd", weights, keys[..., :LATENT])
        lse[s:e] = row_lse
    return out, lse
