"""PyTorch operators of the plugin's calls (issue 39): what torch.compile traces and CUDA graphs capture.

Importing this module imports torch and registers, in the `nvfp4_mla` namespace, (`import nvfp4_mla`
alone never imports torch):

    write(kv_c, k_pe, slot_mapping, cache!, context, layout, scale_mode, outer_scale, writer_policy=0,
          capture_max_abs!?=None, nonfinite_count!?=None) -> ()
    gather(cache, slots, context, layout, scale_mode, outer_scale) -> out [N, 576] bf16
    gather_out(cache, slots, out!, context, layout, scale_mode, outer_scale) -> ()
    attend(q, slots, cache, context, layout, scale_mode, outer_scale, sm_scale, valid_len?=None)
          -> (out [n_q, h, 512] bf16, lse [n_q, h] f32)
    attend_out(q, slots, cache, out!, lse!?, context, layout, scale_mode, outer_scale, sm_scale,
               valid_len?=None) -> ()
    merge(partial_out, partial_lse, context) -> (out [n_q, h, 512] bf16, lse [n_q, h] f32)
    merge_out(partial_out, partial_lse, out!, lse!?, context) -> ()

(`!`: mutated, declared in the schema; `?`: optional). Each takes the same arrays as the Context call of
its name and is checked by the same code (calls.py's argument builders), so a wrong dtype or shape is
refused with the shim's words: by the fake implementation while torch.compile traces, by the real one
in eager calls. The fake implementations give the outputs' shapes and dtypes without touching data;
attend's also asks the plugin's shape-only entry (attend_workspace_bytes, on placeholder addresses) so
that what only the plugin checks (h in 1..128, unit strides, alignment on CUDA) is refused while
tracing too. The real ones call the plugin on PyTorch's current stream of the context's device.

`context` is an integer naming a Context (`context_id(ctx)`, held weakly: closing the context makes
the ops refuse it). An engine holds one Context per device and the cache format decided at start-up;
`bind(ctx, config)` keeps both and calls the ops with them:

    ops = nvfp4_mla.torch_ops.bind(ctx, cfg)       # cfg: CacheFormat.open(plugin) (layout, mode, policy)
    ops.write(kv_c, k_pe, slot_mapping, cache)     # inside torch.compile(fullgraph=True): no graph break
    out, lse = ops.attend(q, topk, cache, sm_scale=...)

Per call: the shim's checks run once per signature of a call (its scalars and each tensor's dtype, shape,
strides, device and writability) and the struct they built is kept on the context; later calls of that signature
write only data pointers, the stream and the workspace into it (as a prepared call does, prepared.py).
Like its context, a context's ops are called by one thread at a time. The ops are registered with
torch.library.define + impl (Python kernels on the CPU and CUDA keys) rather than custom_op, whose
autograd and mutation wrappers cost about 10 us more per call (BENCHMARKS.md; bench/hot_path.py
measures the ops).

Attend's workspace (the rule's one home is workspace.py): on CUDA the context's kept workspace for the
stream when it already holds enough (the one its one-shot and prepared attends and plan_step grow),
else a temporary from PyTorch's caching allocator (itself per stream), freed when the op returns. Ops
never grow the context's workspace on CUDA and never use it while a CUDA graph is captured (a graph owns
its scratch; workspace.py says why). A temporary made during capture is the graph's, like every
PyTorch op's scratch.
"""

import ctypes as C
import itertools
import weakref

try:
    import torch
except ImportError as exc:  # the rest of the package works without it
    raise ImportError("nvfp4_mla.torch_ops needs PyTorch (pip install torch); the rest of nvfp4_mla does not") from exc

from . import _abi, calls
from .arrays import tensor
from .errors import member, number
from .prepared import PreparedCall

NAMESPACE = "nvfp4_mla"
_LATENT, _ROW = _abi.LATENT_DIM, _abi.ROW_DIM

# ---- Contexts by integer (an operator's schema takes ints, not Python objects). ----

_ids = itertools.count(1)
_contexts = {}  # id -> weakref to the Context
_context_ids = weakref.WeakKeyDictionary()  # Context -> id


def context_id(ctx):
    """The integer the ops take for `ctx` (one per context, for its life; the ops hold it weakly)."""
    cid = _context_ids.get(ctx)
    if cid is None:
        cid = _context_ids[ctx] = next(_ids)
        _contexts[cid] = weakref.ref(ctx, lambda _ref, cid=cid: _contexts.pop(cid, None))
    return cid


def _context(cid, op):
    ref = _contexts.get(cid)
    ctx = ref() if ref is not None else None
    if ctx is None or getattr(ctx, "handle", None) is None:
        raise ValueError(f"{NAMESPACE}.{op}: context {cid} is not an open nvfp4_mla.Context "
                         "(take the id from nvfp4_mla.torch_ops.context_id(ctx) or bind(ctx, ...), and keep ctx open)")
    return ctx


def current_stream(ctx):
    """PyTorch's current stream on the context's device as a handle (None on a CPU context, and for
    the legacy default stream)."""
    if ctx.device[0] == _abi.DEVICE_CPU:
        return None
    return torch._C._cuda_getCurrentRawStream(ctx.device[1]) or None


def capturing(ctx):
    """Whether PyTorch is capturing a CUDA graph on the current stream of the context's device."""
    return ctx.device[0] == _abi.DEVICE_CUDA and torch.cuda.is_current_stream_capturing()


def _workspace(ctx, stream, need, like):
    """Attend's scratch by workspace.py's rule: on CUDA the kept one when it holds enough and no graph is
    captured, else a temporary; CPU contexts use their kept one, grown as needed."""
    cpu = ctx.device[0] == _abi.DEVICE_CPU
    return ctx.workspace.take(stream, need, like, capturing=capturing(ctx), grow=cpu)


# ---- Fake (meta) tensors seen by the shim's checks: metadata only, sizes at their hints. ----

def _hints(values):
    """Concrete sizes: a symbolic size at its hint (the example value it was traced with), None when
    it has none (a data-dependent size: the real call checks it)."""
    out = []
    for v in values:
        if isinstance(v, torch.SymInt):
            node = v.node
            v = node.hint if node.has_hint() else None
            if v is None:
                return None
        out.append(int(v))
    return tuple(out)


def _described(*tensors):
    """The tensors as placeholders of their hinted sizes and strides (None stays None), each at its own
    placeholder address, or None when a size is data-dependent."""
    out = []
    for role, t in enumerate(tensors):
        if t is None:
            out.append(None)
            continue
        shape, strides = _hints(t.shape), _hints(t.stride())
        if shape is None or strides is None:
            return None
        out.append(calls.Placeholder(t.dtype, t.device, shape, role, strides))
    return out


# ---- The operators. ----

_lib = torch.library.Library(NAMESPACE, "FRAGMENT")
_TAGS = (torch.Tag.needs_fixed_stride_order,)  # the plugin reads the strides it is given; keep the caller's
_SCHEMAS = {
    "write": "(Tensor kv_c, Tensor k_pe, Tensor slot_mapping, Tensor(a!) cache, int context, int layout, "
             "int scale_mode, float outer_scale, int writer_policy=0, Tensor(b!)? capture_max_abs=None, "
             "Tensor(c!)? nonfinite_count=None) -> ()",
    "gather": "(Tensor cache, Tensor slots, int context, int layout, int scale_mode, float outer_scale) -> Tensor",
    "gather_out": "(Tensor cache, Tensor slots, Tensor(a!) out, int context, int layout, int scale_mode, "
                  "float outer_scale) -> ()",
    "attend": "(Tensor q, Tensor slots, Tensor cache, int context, int layout, int scale_mode, float outer_scale, "
              "float sm_scale, Tensor? valid_len=None) -> (Tensor, Tensor)",
    "attend_out": "(Tensor q, Tensor slots, Tensor cache, Tensor(a!) out, Tensor(b!)? lse, int context, int layout, "
                  "int scale_mode, float outer_scale, float sm_scale, Tensor? valid_len=None) -> ()",
    "merge": "(Tensor partial_out, Tensor partial_lse, int context) -> (Tensor, Tensor)",
    "merge_out": "(Tensor partial_out, Tensor partial_lse, Tensor(a!) out, Tensor(b!)? lse, int context) -> ()",
}


def _register(name, real, fake):
    torch.library.define(f"{NAMESPACE}::{name}", _SCHEMAS[name], lib=_lib, tags=_TAGS)
    torch.library.impl(f"{NAMESPACE}::{name}", ("CPU", "CUDA"), real, lib=_lib)
    torch.library.register_fake(f"{NAMESPACE}::{name}", fake, lib=_lib)


# ---- The real implementations: the shim's checks once per signature, then pointers only. ----
#
# A one-shot Context call describes and checks every array (tens of microseconds of Python). The ops
# keep, per context, the argument struct the one-shot checks built for each signature of the call
# (the scalars, and each tensor's dtype, shape, strides, device and writability: everything the
# checks read but the data pointer, _meta), and per call write only the data pointers, the stream
# and attend's workspace into it, as a prepared call does (prepared.py, whose launch they share). A
# new signature is checked in full, so every refusal is the shim's, in its words; the plugin still
# checks what it always checks (alignment of the pointers included) on every call.

_MAX_SIGNATURES = 256  # per context; past it the kept structs are dropped and rebuilt as calls come


class _Signature(PreparedCall):
    """One checked argument struct; per call, the data pointers of the tensors present at bind (tensors[i]
    goes to the struct's field names[i]; an absent optional tensor, None, is part of the signature)."""

    def __init__(self, ctx, op, args, tensors, names):
        super().__init__(ctx, op, args, None)
        base, kinds = type(args), dict(type(args)._fields_)
        self._present = tuple(i for i, t in enumerate(tensors) if t is not None)
        # A Tensor field's data pointer, or a plain pointer field (write's capture_max_abs, nonfinite_count).
        self._ptrs = tuple(C.c_void_p.from_buffer(args, getattr(base, names[i]).offset +
                                                  (_DATA if kinds[names[i]] is _abi.Tensor else 0))
                           for i in self._present)
        self.workspace_need = 0

    def run(self, tensors, stream):
        for ptr, i in zip(self._ptrs, self._present):
            ptr.value = tensors[i].data_ptr()
        self._launch(stream)


_DATA = _abi.Tensor.data.offset


def _meta(t):
    """What the shim's checks read of a tensor but its data pointer: dtype, shape, strides, device, and
    what arrays.read_only reads (an output that requires grad, or an inference tensor outside
    torch.inference_mode(), is refused), so that a call of a kept signature is one the checks passed."""
    if t is None:
        return None
    return (t.dtype, t.shape, t.stride(), t.device, t.requires_grad,
            t.is_inference() and not torch.is_inference_mode_enabled())


def _call(ctx, key, bind):
    """The context's checked struct for `key`, made by bind() (the shim's checks) at its first call."""
    kept = ctx.kept_for(NAMESPACE)  # on the context: dropped with it
    call = kept.get(key)
    if call is None:
        if len(kept) >= _MAX_SIGNATURES:
            kept.clear()
        call = kept[key] = bind()
    return call


# The struct fields the ops' tensors go to, in the order each op passes them.
_WRITE_FIELDS = ("kv_c", "k_pe", "slot_mapping", "cache", "capture_max_abs", "nonfinite_count")
_GATHER_FIELDS = ("cache", "slots", "out")
_ATTEND_FIELDS = ("q", "slots", "cache", "out", "lse", "valid_len", "workspace")
_MERGE_FIELDS = ("partial_out", "partial_lse", "out", "lse")


def _write(kv_c, k_pe, slot_mapping, cache, context, layout, scale_mode, outer_scale, writer_policy=0,
           capture_max_abs=None, nonfinite_count=None):
    ctx = _context(context, "write")
    tensors = (kv_c, k_pe, slot_mapping, cache, capture_max_abs, nonfinite_count)
    key = ("write", layout, scale_mode, outer_scale, writer_policy, *map(_meta, tensors))
    stream = current_stream(ctx)
    call = _call(ctx, key, lambda: _Signature(ctx, "write", _write_args(ctx.device, tensors, layout, scale_mode,
                                                                        outer_scale, writer_policy, stream),
                                              tensors, _WRITE_FIELDS))
    call.run(tensors, stream)


def _write_args(device, tensors, layout, scale_mode, outer_scale, writer_policy, stream):
    kv_c, k_pe, slot_mapping, cache, capture_max_abs, nonfinite_count = tensors
    return calls.write_args(device, kv_c, k_pe, slot_mapping, cache, layout=layout, scale_mode=scale_mode,
                            outer_scale=outer_scale, capture_max_abs=capture_max_abs, nonfinite_count=nonfinite_count,
                            stream=stream, writer_policy=writer_policy)


def _write_fake(kv_c, k_pe, slot_mapping, cache, context, layout, scale_mode, outer_scale, writer_policy=0,
                capture_max_abs=None, nonfinite_count=None):
    d = _described(kv_c, k_pe, slot_mapping, cache, capture_max_abs, nonfinite_count)
    if d is not None:
        _write_args(_context(context, "write").device, d, layout, scale_mode, outer_scale, writer_policy, None)


def _gather_args(device, tensors, layout, scale_mode, outer_scale, stream):
    cache, slots, out = tensors
    return calls.gather_args(device, cache, slots, out, layout=layout, scale_mode=scale_mode,
                             outer_scale=outer_scale, stream=stream)


def _gather_out(cache, slots, out, context, layout, scale_mode, outer_scale):
    ctx = _context(context, "gather")
    tensors = (cache, slots, out)
    key = ("gather", layout, scale_mode, outer_scale, *map(_meta, tensors))
    stream = current_stream(ctx)
    call = _call(ctx, key, lambda: _Signature(ctx, "gather", _gather_args(ctx.device, tensors, layout, scale_mode,
                                                                          outer_scale, stream),
                                              tensors, _GATHER_FIELDS))
    call.run(tensors, stream)


def _gather_out_fake(cache, slots, out, context, layout, scale_mode, outer_scale):
    d = _described(cache, slots, out)
    if d is not None:
        _gather_args(_context(context, "gather").device, d, layout, scale_mode, outer_scale, None)


def _gather(cache, slots, context, layout, scale_mode, outer_scale):
    out = slots.new_empty((slots.shape[0], _ROW), dtype=torch.bfloat16)
    _gather_out(cache, slots, out, context, layout, scale_mode, outer_scale)
    return out


def _gather_fake(cache, slots, context, layout, scale_mode, outer_scale):
    out = slots.new_empty((slots.shape[0], _ROW), dtype=torch.bfloat16)
    _gather_out_fake(cache, slots, out, context, layout, scale_mode, outer_scale)
    return out


def _attend_args(device, tensors, layout, scale_mode, outer_scale, sm_scale, stream):
    q, slots, cache, out, lse, valid_len = tensors
    return calls.attend_args(device, q, slots, cache, out, layout=layout, scale_mode=scale_mode, sm_scale=sm_scale,
                             outer_scale=outer_scale, valid_len=valid_len, lse=lse, stream=stream)


def _bind_attend(ctx, tensors, layout, scale_mode, outer_scale, sm_scale, stream):
    args = _attend_args(ctx.device, tensors, layout, scale_mode, outer_scale, sm_scale, stream)
    need = ctx.workspace.need(args)  # shapes only: the same for every call of the signature
    workspace = None
    if need:
        # Described from an empty stand-in (no memory): each call points it at a workspace of >= need bytes.
        workspace = tensors[0].new_empty(0, dtype=torch.uint8)
        args.workspace, _ = tensor(workspace, "workspace", (_abi.DTYPE_U8,), 1, ctx.device)
        args.workspace.shape[0] = need
    call = _Signature(ctx, "attend", args, (*tensors, workspace), _ATTEND_FIELDS)
    call.workspace_need = need
    return call


def _attend_out(q, slots, cache, out, lse, context, layout, scale_mode, outer_scale, sm_scale, valid_len=None):
    ctx = _context(context, "attend")
    tensors = (q, slots, cache, out, lse, valid_len)
    key = ("attend", layout, scale_mode, outer_scale, sm_scale, *map(_meta, tensors))
    stream = current_stream(ctx)
    call = _call(ctx, key, lambda: _bind_attend(ctx, tensors, layout, scale_mode, outer_scale, sm_scale, stream))
    if call.workspace_need:
        tensors += (_workspace(ctx, stream, call.workspace_need, q),)
    call.run(tensors, stream)


def _attend_out_fake(q, slots, cache, out, lse, context, layout, scale_mode, outer_scale, sm_scale, valid_len=None):
    """The shim's checks, then the plugin's own on the shapes: its shape-only entry reads placeholders
    (no memory), so a call it would refuse is refused while tracing, in its words."""
    d = _described(q, slots, cache, out, lse, valid_len)
    if d is not None:
        ctx = _context(context, "attend")
        ctx.workspace.need(_attend_args(ctx.device, d, layout, scale_mode, outer_scale, sm_scale, None))


def _attend_outputs(q):
    rows, heads = q.shape[0], q.shape[1] if q.dim() > 1 else 0
    return (q.new_empty((rows, heads, _LATENT), dtype=torch.bfloat16),
            q.new_empty((rows, heads), dtype=torch.float32))


def _attend(q, slots, cache, context, layout, scale_mode, outer_scale, sm_scale, valid_len=None):
    out, lse = _attend_outputs(q)
    _attend_out(q, slots, cache, out, lse, context, layout, scale_mode, outer_scale, sm_scale, valid_len)
    return out, lse


def _attend_fake(q, slots, cache, context, layout, scale_mode, outer_scale, sm_scale, valid_len=None):
    out, lse = _attend_outputs(q)
    _attend_out_fake(q, slots, cache, out, lse, context, layout, scale_mode, outer_scale, sm_scale, valid_len)
    return out, lse


def _merge_args(device, tensors, stream):
    partial_out, partial_lse, out, lse = tensors
    return calls.merge_args(device, partial_out, partial_lse, out, lse=lse, stream=stream)


def _merge_out(partial_out, partial_lse, out, lse, context):
    ctx = _context(context, "merge")
    tensors = (partial_out, partial_lse, out, lse)
    key = ("merge", *map(_meta, tensors))
    stream = current_stream(ctx)
    call = _call(ctx, key, lambda: _Signature(ctx, "merge", _merge_args(ctx.device, tensors, stream), tensors,
                                              _MERGE_FIELDS))
    call.run(tensors, stream)


def _merge_out_fake(partial_out, partial_lse, out, lse, context):
    d = _described(partial_out, partial_lse, out, lse)
    if d is not None:
        ctx = _context(context, "merge")
        member(ctx.plugin, "merge")  # Unsupported while tracing, as prepare_merge, on a 1.0 table
        _merge_args(ctx.device, d, None)


def _merge_outputs(partial_out):
    shape = tuple(partial_out.shape[1:3]) if partial_out.dim() > 2 else (0, 0)
    return (partial_out.new_empty(shape + (_LATENT,), dtype=torch.bfloat16),
            partial_out.new_empty(shape, dtype=torch.float32))


def _merge(partial_out, partial_lse, context):
    out, lse = _merge_outputs(partial_out)
    _merge_out(partial_out, partial_lse, out, lse, context)
    return out, lse


def _merge_fake(partial_out, partial_lse, context):
    out, lse = _merge_outputs(partial_out)
    _merge_out_fake(partial_out, partial_lse, out, lse, context)
    return out, lse


for _name, _real, _fake in (("write", _write, _write_fake), ("gather", _gather, _gather_fake),
                            ("gather_out", _gather_out, _gather_out_fake), ("attend", _attend, _attend_fake),
                            ("attend_out", _attend_out, _attend_out_fake), ("merge", _merge, _merge_fake),
                            ("merge_out", _merge_out, _merge_out_fake)):
    _register(_name, _real, _fake)

ops = getattr(torch.ops, NAMESPACE)  # torch.ops.nvfp4_mla


# ---- An engine's view: one context and the start-up cache format, bound once. ----

class BoundOps:
    """The ops called with one context and one cache format (layout, scale mode, writer policy), as an
    engine holds them; plain Python that torch.compile traces through (its fields become constants of
    the graph). outer_scale left out is the mode's default; a static-mode layer passes its own
    (PluginConfig.layer_scale(layer)), and must when bound to a calibrated configuration (issue 48:
    copying a snippet that left it out ran every layer at 1.0, 13.9% latent error against 9.4%)."""

    def __init__(self, ctx, layout, scale_mode, writer_policy=_abi.WRITER_POLICY_RTN, calibrated_layers=0):
        """calibrated_layers: the static calibration's layer count (bind passes the config's): then every
        call must name its layer's outer_scale, since left out it would be 1.0 on every layer."""
        self.context = ctx  # held: the ops hold it only weakly
        self.context_id = context_id(ctx)
        self.calibrated_layers = calibrated_layers
        self.layout, self.scale_mode = calls.mode(layout, scale_mode)  # by name: int() took 1.9 as 1
        self.writer_policy = calls.policy_id(writer_policy)
        self.default_outer_scale = float(_abi.default_outer_scale(self.scale_mode))

    def _outer(self, outer_scale, op):
        if outer_scale is None and self.calibrated_layers:
            raise ValueError(f"{op}: the bound configuration is calibrated ({self.calibrated_layers} layers of static "
                             "scales): pass outer_scale=cfg.layer_scale(layer); left out it is 1.0 on every layer")
        # number(): a str or a bool is refused by name, as Context's calls refuse it (float("0.5") and
        # float(True) would have passed, bad-inputs-4 N11)
        return self.default_outer_scale if outer_scale is None else number("outer_scale", outer_scale)

    def write(self, kv_c, k_pe, slot_mapping, cache, *, outer_scale=None, capture_max_abs=None,
              nonfinite_count=None):
        """Context.write as an op: the cache (and the optional capture/counter arrays) mutated in place."""
        ops.write(kv_c, k_pe, slot_mapping, cache, self.context_id, self.layout, self.scale_mode,
                  self._outer(outer_scale, "write"), self.writer_policy, capture_max_abs, nonfinite_count)

    def gather(self, cache, slots, *, outer_scale=None, out=None):
        """Context.gather as an op: a new [N, 576] bf16 tensor, or `out` filled in place."""
        if out is None:
            return ops.gather(cache, slots, self.context_id, self.layout, self.scale_mode,
                              self._outer(outer_scale, "gather"))
        ops.gather_out(cache, slots, out, self.context_id, self.layout, self.scale_mode,
                       self._outer(outer_scale, "gather"))
        return out

    def attend(self, q, slots, cache, *, sm_scale, outer_scale=None, valid_len=None, out=None, lse=None):
        """Context.attend as an op: new (out, lse), or `out` (and `lse`, optional) filled in place and
        returned as (out, lse)."""
        if out is None:
            if lse is not None:
                raise ValueError("attend: lse= needs out= (without out, the op returns new out and lse)")
            return ops.attend(q, slots, cache, self.context_id, self.layout, self.scale_mode,
                              self._outer(outer_scale, "attend"), number("sm_scale", sm_scale), valid_len)
        ops.attend_out(q, slots, cache, out, lse, self.context_id, self.layout, self.scale_mode,
                       self._outer(outer_scale, "attend"), number("sm_scale", sm_scale), valid_len)
        return out, lse

    def merge(self, partial_out, partial_lse, *, out=None, lse=None):
        """Context.merge as an op: new (out, lse), or `out` (and `lse`, optional) filled in place."""
        if out is None:
            if lse is not None:
                raise ValueError("merge: lse= needs out= (without out, the op returns new out and lse)")
            return ops.merge(partial_out, partial_lse, self.context_id)
        ops.merge_out(partial_out, partial_lse, out, lse, self.context_id)
        return out, lse


def bind(ctx, config=None, *, layout=None, scale_mode=None, writer_policy=None):
    """BoundOps for `ctx` and the start-up format: a PluginConfig (CacheFormat.open: its layout, scale
    mode and writer policy), or those given by name (a keyword overrides the config's)."""
    if config is not None:
        layout = config.layout if layout is None else layout
        scale_mode = config.scale_mode if scale_mode is None else scale_mode
        writer_policy = config.writer_policy if writer_policy is None else writer_policy
    if layout is None or scale_mode is None:
        raise ValueError("bind: give a PluginConfig or both layout= and scale_mode=")
    calibrated = config.num_layers if config is not None and config.scale_mode == _abi.SCALE_STATIC else 0
    return BoundOps(ctx, layout, scale_mode, writer_policy, calibrated)  # BoundOps checks the policy by name
