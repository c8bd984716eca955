"""A plugin context on one device, the thin write / gather / attend / merge calls, and their prepared
forms.

One-shot calls: every array is checked (dtype, shape, strides, device) before the call, the
caller's stream is passed through, the log callback object lives as long as the context, and a
failed status raises an exception carrying the plugin's own message. Layout, scale mode and outer scale go to the plugin
exactly as the caller gave them: the plugin applies the mode rule (abi/nvfp4_mla_record.h) and
refuses in its words. An outer scale left out is the mode's default (0 per-token, 1.0 static).
prepare_write / prepare_gather / prepare_attend / prepare_merge make the same checks once and return a call that
per step updates only pointers, row counts and the stream (prepared.py says what it trusts).
"""

import ctypes as C
import os

from . import _abi
from .arrays import empty_bytes_like, stream_handle, tensor
from .errors import check, integer, member, number, show as _show
from .prepared import PreparedAttend, PreparedGather, PreparedMerge, PreparedWrite

_LATENT, _ROPE, _ROW = _abi.LATENT_DIM, _abi.ROPE_DIM, _abi.ROW_DIM


# ---- Scalar arguments: checked by name before they reach a ctypes field, which would wrap an integer
# (layout=2**32+1 wrote layout 1) or take a bool as 1. Types are refused with TypeError, values out of
# a field's range with ValueError, each naming the argument (issue 48). ----

_UINT32_MAX, _INT32_MAX = 2**32 - 1, 2**31 - 1


def _code(name, value, hint):
    """An id of a uint32 field (layout, scale mode, writer policy): the plugin checks which ids it knows."""
    return integer(name, value, 0, _UINT32_MAX, hint)


def _policy(writer_policy):
    """A writer policy's id from its id or name ("rtn", "mse"); None is rtn. Unknown ids within the
    field go to the plugin as given (it refuses them in its words)."""
    if writer_policy is None:
        return _abi.WRITER_POLICY_RTN
    if isinstance(writer_policy, str):  # any ASCII case, as NVFP4_MLA_WRITER_POLICY (the settings rule)
        name = writer_policy.lower() if writer_policy.isascii() else writer_policy
        if name not in _abi.WRITER_POLICIES:
            raise ValueError(f"writer_policy {writer_policy!r}: expected one of {', '.join(_abi.WRITER_POLICIES)} "
                             "(any case)")
        return _abi.WRITER_POLICIES[name]
    return _code("writer_policy", writer_policy, "a policy name (\"rtn\", \"mse\") or nvfp4_mla._abi.WRITER_POLICY_*")


def _outer(scale_mode, outer_scale):
    """The caller's outer scale, or the mode's default when it gave none."""
    return _abi.default_outer_scale(scale_mode) if outer_scale is None else number("outer_scale", outer_scale)


def _mode(layout, scale_mode):
    return (_code("layout", layout, "one of nvfp4_mla.LAYOUT_*"),
            _code("scale_mode", scale_mode, "nvfp4_mla.SCALE_STATIC or nvfp4_mla.SCALE_PER_TOKEN"))


def _device(device):
    """(type, index) of "cpu", "cuda" or "cuda:N" (N decimal, below 2^31), else ValueError naming the value."""
    text = str(device)
    if text == "cpu":
        return _abi.DEVICE_CPU, 0
    kind, colon, index = text.partition(":")
    if kind == "cuda" and (not colon or (index.isascii() and index.isdigit())):
        if int(index or 0) > _INT32_MAX:  # the int32 device_index would wrap ("cuda:4294967296" opened 0)
            raise ValueError(f"device {device!r}: the index must be below 2^31")
        return _abi.DEVICE_CUDA, int(index or 0)
    raise ValueError(f"device {device!r}: expected 'cpu', 'cuda' or 'cuda:N' with N a device index (0, 1, ...)")


def path_bytes(name, value):
    """A path argument (str, bytes or os.PathLike) as the bytes a char* field takes; None stays None."""
    if value is None:
        return None
    if not isinstance(value, (str, bytes, os.PathLike)):
        raise TypeError(f"{name}={_show(value)}: expected a path (str or os.PathLike) or None")
    raw = os.fsencode(value)
    if b"\0" in raw:
        raise ValueError(f"{name}={_show(value)}: holds a NUL byte, which would cut the path there")
    return raw


def snapshot(environ):
    """A mapping (name -> value) as the NULL-terminated "NAME=VALUE" array the ABI's snapshots are
    (init's environ, config_create's); None for None (the process environment). Names and values are
    strings (or bytes), as os.environ's."""
    if environ is None:
        return None
    pairs = []
    for key, value in environ.items():
        for what, text in (("name", key), ("value", value)):
            if not isinstance(text, (str, bytes)):
                raise TypeError(f"environ[{_show(key)}]: its {what} {_show(text)} is not a string (as in os.environ)")
        raw_key, raw_value = os.fsencode(key), os.fsencode(value)
        if b"=" in raw_key or b"\0" in raw_key + raw_value or not raw_key:
            raise ValueError(f"environ[{_show(key)}]: a name holds no '=' and neither holds a NUL byte")
        pairs.append(raw_key + b"=" + raw_value)
    return (C.c_char_p * (len(pairs) + 1))(*pairs, None)


class Context:
    def __init__(self, plugin, device="cpu", log=None, environ=None):
        """device: "cpu", "cuda" or "cuda:N". log: optional callable(level, message). environ: optional
        mapping (name -> value), the snapshot a CUDA context reads its attention settings from
        (NVFP4_MLA_ATTEND_*, settings.py) instead of the process environment."""
        self.plugin = plugin
        self.device = _device(device)
        self._log_fn = _abi.LOG_FN(lambda _u, level, msg: log(level, msg.decode())) if log else None
        self._host = _abi.HostDesc(struct_size=C.sizeof(_abi.HostDesc), host_name=b"nvfp4_mla.py",
                                   log=self._log_fn) if log else None
        env = snapshot(environ)  # borrowed by init for the call only
        init = _abi.InitArgs(struct_size=C.sizeof(_abi.InitArgs), device_type=self.device[0],
                             device_index=self.device[1], host=C.pointer(self._host) if self._host else None,
                             environ=C.cast(env, C.POINTER(C.c_char_p)) if env is not None else None)
        self._handle = C.c_void_p()
        check(plugin, plugin.table.init(C.byref(init), C.byref(self._handle)), "init")
        info = _abi.ContextInfo(struct_size=C.sizeof(_abi.ContextInfo))
        check(plugin, plugin.table.context_info(self._handle, C.byref(info)), "context_info")
        self.capability_bits = info.capability_bits
        self.device_name = info.device_name.decode()
        self._workspaces = {}  # stream handle -> attend scratch this context allocated (reused, grown)
        self._workspace_needs = {}  # prepared attends: shape signature -> largest workspace over row counts

    def close(self):
        """Releases the plugin context; again (or on a context whose init failed) it does nothing."""
        if getattr(self, "_handle", None):
            self.plugin.table.shutdown(self._handle)
            self._handle = None

    def _live(self, call):
        """The context's handle, or ValueError once it is closed (the plugin would be handed NULL)."""
        if not getattr(self, "_handle", None):
            raise ValueError(f"{call}: this nvfp4_mla.Context is closed")
        return self._handle

    __del__ = close

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _stream(self, stream):
        if self.device[0] == _abi.DEVICE_CPU:
            if stream is not None:
                raise ValueError("stream: must be None on a CPU context")
            return None
        return stream_handle(stream)

    def _cache(self, cache, layout, written=False):
        """The cache descriptor; its record size is checked here only for a layout the ABI knows (the
        plugin refuses any other id, naming it)."""
        rb = _abi.record_bytes(layout) or None
        t, _ = tensor(cache, "cache", (_abi.DTYPE_U8,), 3, self.device, (None, None, rb), required=True,
                      written=written)
        return t

    def write(self, kv_c, k_pe, slot_mapping, cache, *, layout, scale_mode, outer_scale=None,
              capture_max_abs=None, nonfinite_count=None, stream=None, writer_policy=None, out_of_range_count=None):
        """Quantise kv_c [T,512] and k_pe [T,64] (bf16 or f16) into cache records at slot_mapping [T]
        (int64; negative = padding, skipped). capture_max_abs: optional 1-element f32 array
        max-reduced with max |kv_c|; nonfinite_count: optional 1-element int64 array incremented by
        NaN/Inf inputs. A slot at or past the cache's capacity is a bug that loses a record: a CPU
        context raises InvalidArgument naming it before writing anything; a CUDA write, which cannot
        see the slots without a sync, drops that token and adds it to out_of_range_count (optional
        1-element int64 array on the device; read it once the stream has run the write: non-zero
        means records were lost). writer_policy: "rtn" (None, the default), "mse" or an id: the
        configuration's PluginConfig.writer_policy. Readers take none: records of every policy read
        alike."""
        args = self._write_args(kv_c, k_pe, slot_mapping, cache, layout, scale_mode, outer_scale, capture_max_abs,
                                nonfinite_count, stream, writer_policy, out_of_range_count)
        check(self.plugin, member(self.plugin, "write")(self._live("write"), C.byref(args)), "write")

    def gather(self, cache, slots, out, *, layout, scale_mode, outer_scale=None, stream=None):
        """Dequantise the records at slots [N] (int32, -1 = zeros) into out [N,576] bf16."""
        args = self._gather_args(cache, slots, out, layout, scale_mode, outer_scale, stream)
        check(self.plugin, member(self.plugin, "gather")(self._live("gather"), C.byref(args)), "gather")

    def attend(self, q, slots, cache, out, *, layout, scale_mode, sm_scale, outer_scale=None, valid_len=None,
               lse=None, workspace=None, stream=None):
        """Sparse MLA attention over the records (q [n_q,h,576] bf16, slots [n_q,topk] int32,
        out [n_q,h,512] bf16, optional lse [n_q,h] f32; layout LAYOUT_FP8_DS_MLA_656 reads the
        656-byte fp8_ds_mla baseline records in static mode at 1.0). Without `workspace` the context
        sizes one with attend_workspace_bytes and allocates it like `q` (PyTorch, CuPy or numpy),
        keeping it per stream for later calls: calls on one stream are ordered, so they may share
        it. That allocation may happen on any call whose shapes need more than the kept one, so a
        caller that captures attend in a CUDA graph passes its own workspace (which the graph keeps)
        or uses prepare_attend. Raises Unsupported while the plugin lacks op.attend."""
        args = self._attend_args(q, slots, cache, out, layout, scale_mode, sm_scale, outer_scale, valid_len, lse,
                                 stream)
        if workspace is None:
            workspace = self._workspace(args.stream, self.attend_workspace_bytes(args), q)
        args.workspace, _ = tensor(workspace, "workspace", (_abi.DTYPE_U8,), 1, self.device, written=True)
        check(self.plugin, member(self.plugin, "attend")(self._live("attend"), C.byref(args)), "attend")

    def merge(self, partial_out, partial_lse, out, *, lse=None, stream=None):
        """Merge P partial attentions into one (ABI 1.1, capability op.merge_partials): partial_out
        [P,n_q,h,512] bf16 or f32 and partial_lse [P,n_q,h] f32 (natural log; -inf: the part held no
        valid entry, its out is not read) into out [n_q,h,512] bf16 and the optional lse [n_q,h] f32,
        as one softmax over the union of the parts. Decode context parallelism: each rank attends over
        the records it holds, all-gathers out and lse (torch.distributed.all_gather_into_tensor gives
        [P*n_q,h,512]: pass it viewed as [P,n_q,h,512]) and merges. Raises Unsupported where the
        plugin's table predates merge (ABI 1.0)."""
        args = self._merge_args(partial_out, partial_lse, out, lse, stream)
        check(self.plugin, member(self.plugin, "merge")(self._live("merge"), C.byref(args)), "merge")

    # ---- The prepared path (prepared.py): checked once at bind, then per call only what changes. ----

    def prepare_write(self, kv_c, k_pe, slot_mapping, cache, *, layout, scale_mode, outer_scale=None,
                      capture_max_abs=None, nonfinite_count=None, stream=None, writer_policy=None,
                      out_of_range_count=None):
        """A PreparedWrite bound to these arrays and writer policy (checked now, as write checks them)."""
        return PreparedWrite(self, self._write_args(kv_c, k_pe, slot_mapping, cache, layout, scale_mode, outer_scale,
                                                    capture_max_abs, nonfinite_count, stream, writer_policy,
                                                    out_of_range_count),
                             (kv_c, k_pe, slot_mapping, cache, capture_max_abs, nonfinite_count, out_of_range_count))

    def prepare_gather(self, cache, slots, out, *, layout, scale_mode, outer_scale=None, stream=None):
        """A PreparedGather bound to these arrays (checked now, as gather checks them)."""
        return PreparedGather(self, self._gather_args(cache, slots, out, layout, scale_mode, outer_scale, stream),
                              (cache, slots, out))

    def prepare_attend(self, q, slots, cache, out, *, layout, scale_mode, sm_scale, outer_scale=None, valid_len=None,
                       lse=None, workspace=None, stream=None):
        """A PreparedAttend bound to these arrays (checked now, as attend checks them), holding a
        workspace for every row count up to q's for as long as it lives."""
        args = self._attend_args(q, slots, cache, out, layout, scale_mode, sm_scale, outer_scale, valid_len, lse,
                                 stream)
        return PreparedAttend(self, args, (q, slots, cache, out, valid_len, lse), workspace)

    def prepare_merge(self, partial_out, partial_lse, out, *, lse=None, stream=None):
        """A PreparedMerge bound to these arrays (checked now, as merge checks them)."""
        member(self.plugin, "merge")  # Unsupported now, not at the first run, on a 1.0 table
        return PreparedMerge(self, self._merge_args(partial_out, partial_lse, out, lse, stream),
                             (partial_out, partial_lse, out, lse))

    # ---- Argument structs: every array checked (dtype, shape, strides, device) before any call. ----

    def _write_args(self, kv_c, k_pe, slot_mapping, cache, layout, scale_mode, outer_scale, capture_max_abs,
                    nonfinite_count, stream, writer_policy=None, out_of_range_count=None):
        layout, scale_mode = _mode(layout, scale_mode)
        kv, (_, in_dtype, shape, *_rest) = tensor(kv_c, "kv_c", (_abi.DTYPE_BF16, _abi.DTYPE_F16), 2, self.device,
                                                  (None, _LATENT), required=True)
        pe, _ = tensor(k_pe, "k_pe", (in_dtype,), 2, self.device, (shape[0], _ROPE), required=True)
        sl, _ = tensor(slot_mapping, "slot_mapping", (_abi.DTYPE_I64,), 1, self.device, (shape[0],), required=True)
        cap, _ = tensor(capture_max_abs, "capture_max_abs", (_abi.DTYPE_F32,), 1, self.device, (1,), written=True)
        cnt, _ = tensor(nonfinite_count, "nonfinite_count", (_abi.DTYPE_I64,), 1, self.device, (1,), written=True)
        oor, _ = tensor(out_of_range_count, "out_of_range_count", (_abi.DTYPE_I64,), 1, self.device, (1,),
                        written=True)
        return _abi.WriteArgs(struct_size=C.sizeof(_abi.WriteArgs), layout=layout, scale_mode=scale_mode,
                              outer_scale=_outer(scale_mode, outer_scale), writer_policy=_policy(writer_policy),
                              kv_c=kv, k_pe=pe, slot_mapping=sl, cache=self._cache(cache, layout, written=True),
                              capture_max_abs=cap.data, nonfinite_count=cnt.data, stream=self._stream(stream),
                              out_of_range_count=oor.data)

    def _gather_args(self, cache, slots, out, layout, scale_mode, outer_scale, stream):
        layout, scale_mode = _mode(layout, scale_mode)
        sl, (_, _, shape, *_rest) = tensor(slots, "slots", (_abi.DTYPE_I32,), 1, self.device, required=True)
        o, _ = tensor(out, "out", (_abi.DTYPE_BF16,), 2, self.device, (shape[0], _ROW), required=True, written=True)
        return _abi.GatherArgs(struct_size=C.sizeof(_abi.GatherArgs), layout=layout, scale_mode=scale_mode,
                               outer_scale=_outer(scale_mode, outer_scale), cache=self._cache(cache, layout),
                               slots=sl, out=o, stream=self._stream(stream))

    def _attend_args(self, q, slots, cache, out, layout, scale_mode, sm_scale, outer_scale, valid_len, lse, stream):
        layout, scale_mode = _mode(layout, scale_mode)
        qt, (_, _, qshape, *_rest) = tensor(q, "q", (_abi.DTYPE_BF16,), 3, self.device, (None, None, _ROW),
                                            required=True)
        st, _ = tensor(slots, "slots", (_abi.DTYPE_I32,), 2, self.device, (qshape[0], None), required=True)
        vl, _ = tensor(valid_len, "valid_len", (_abi.DTYPE_I32,), 1, self.device, (qshape[0],))
        ot, _ = tensor(out, "out", (_abi.DTYPE_BF16,), 3, self.device, (qshape[0], qshape[1], _LATENT), required=True,
                       written=True)
        lt, _ = tensor(lse, "lse", (_abi.DTYPE_F32,), 2, self.device, (qshape[0], qshape[1]), written=True)
        return _abi.AttendArgs(struct_size=C.sizeof(_abi.AttendArgs), layout=layout, scale_mode=scale_mode,
                               outer_scale=_outer(scale_mode, outer_scale), sm_scale=number("sm_scale", sm_scale),
                               q=qt, slots=st,
                               valid_len=vl, cache=self._cache(cache, layout), out=ot, lse=lt,
                               stream=self._stream(stream))

    def _merge_args(self, partial_out, partial_lse, out, lse, stream):
        po, (_, _, pshape, *_rest) = tensor(partial_out, "partial_out", (_abi.DTYPE_BF16, _abi.DTYPE_F32), 4,
                                            self.device, (None, None, None, _LATENT), required=True)
        pl, _ = tensor(partial_lse, "partial_lse", (_abi.DTYPE_F32,), 3, self.device, pshape[:3], required=True)
        ot, _ = tensor(out, "out", (_abi.DTYPE_BF16,), 3, self.device, (pshape[1], pshape[2], _LATENT), required=True,
                       written=True)
        lt, _ = tensor(lse, "lse", (_abi.DTYPE_F32,), 2, self.device, (pshape[1], pshape[2]), written=True)
        return _abi.MergeArgs(struct_size=C.sizeof(_abi.MergeArgs), partial_out=po, partial_lse=pl, out=ot, lse=lt,
                              stream=self._stream(stream))

    def attend_workspace_bytes(self, args):
        """Scratch bytes attend needs for these argument structs (shapes only)."""
        need = C.c_uint64(0)
        check(self.plugin, member(self.plugin, "attend_workspace_bytes")(self._live("attend_workspace_bytes"),
                                                                          C.byref(args), C.byref(need)),
              "attend_workspace_bytes")
        return need.value

    def _workspace(self, stream, need, like):
        """The context's attend scratch for `stream`, grown to `need` bytes (None when 0). A grown one
        replaces the kept one: calls that hold the old one (prepared attends, captured graphs) keep
        it alive, and it is still large enough for them."""
        if need == 0:
            return None
        have = self._workspaces.get(stream)
        if have is None or have.shape[0] < need:
            have = self._workspaces[stream] = empty_bytes_like(like, need)
        return have
