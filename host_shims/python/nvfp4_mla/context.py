"""A plugin context on one device, the thin write / gather / attend / merge calls, and their prepared
forms.

One-shot calls: every array is checked (dtype, shape, strides, device) before the call, the
caller's stream is passed through, the log callback object lives as long as the context, and a
failed status raises an exception carrying the plugin's own message. Layout, scale mode and outer scale go to the plugin
exactly as the caller gave them: the plugin applies the mode rule (abi/nvfp4_mla_record.h) and
refuses in its words. An outer scale left out is the mode's default (0 per-token, 1.0 static).
prepare_write / prepare_gather / prepare_attend / prepare_merge make the same checks once and return a call that
per step updates only pointers, row counts and the stream (prepared.py says what it trusts).

The checks and the argument structs are calls.py's public builders (the PyTorch ops and the vLLM plugin
use the same ones); attend's scratch is the context's Workspace (workspace.py), the one home of its rule.
"""

import ctypes as C
import os

from . import _abi, calls
from .arrays import tensor
from .errors import check, member, show as _show
from .prepared import PreparedAttend, PreparedGather, PreparedMerge, PreparedWrite
from .workspace import Workspace


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
        self.device = calls.parse_device(device)
        self._log_fn = _abi.LOG_FN(lambda _u, level, msg: log(level, msg.decode())) if log else None
        self._host = _abi.HostDesc(struct_size=C.sizeof(_abi.HostDesc), host_name=b"nvfp4_mla.py",
                                   log=self._log_fn) if log else None
        env = snapshot(environ)  # borrowed by init for the call only
        init = _abi.InitArgs(struct_size=C.sizeof(_abi.InitArgs), device_type=self.device[0],
                             device_index=self.device[1], host=C.pointer(self._host) if self._host else None,
                             environ=C.cast(env, C.POINTER(C.c_char_p)) if env is not None else None)
        self.handle = C.c_void_p()  # the plugin's context; None once closed (read it through live())
        check(plugin, plugin.table.init(C.byref(init), C.byref(self.handle)), "init")
        info = _abi.ContextInfo(struct_size=C.sizeof(_abi.ContextInfo))
        check(plugin, plugin.table.context_info(self.handle, C.byref(info)), "context_info")
        self.capability_bits = info.capability_bits
        self.device_name = info.device_name.decode()
        self.workspace = Workspace(self)  # attend's scratch: kept per stream, needs per shape (workspace.py)
        self._kept = {}  # owner -> what a caller keeps for this context's life (kept_for)

    def close(self):
        """Releases the plugin context; again (or on a context whose init failed) it does nothing."""
        if getattr(self, "handle", None):
            self.plugin.table.shutdown(self.handle)
            self.handle = None

    def live(self, call):
        """The context's handle for `call`, or ValueError naming it once the context is closed (the
        plugin would be handed NULL)."""
        if not getattr(self, "handle", None):
            raise ValueError(f"{call}: this nvfp4_mla.Context is closed")
        return self.handle

    def kept_for(self, owner):
        """A dict that `owner` (a module's name) keeps for this context's life and that goes with it:
        the PyTorch ops keep their checked argument structs there, one per call signature."""
        kept = self._kept.get(owner)
        if kept is None:
            kept = self._kept[owner] = {}
        return kept

    __del__ = close

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

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
        args = calls.write_args(self.device, kv_c, k_pe, slot_mapping, cache, layout=layout, scale_mode=scale_mode,
                                outer_scale=outer_scale, capture_max_abs=capture_max_abs,
                                nonfinite_count=nonfinite_count, stream=stream, writer_policy=writer_policy,
                                out_of_range_count=out_of_range_count)
        check(self.plugin, member(self.plugin, "write")(self.live("write"), C.byref(args)), "write")

    def gather(self, cache, slots, out, *, layout, scale_mode, outer_scale=None, stream=None):
        """Dequantise the records at slots [N] (int32, -1 = zeros) into out [N,576] bf16."""
        args = calls.gather_args(self.device, cache, slots, out, layout=layout, scale_mode=scale_mode,
                                 outer_scale=outer_scale, stream=stream)
        check(self.plugin, member(self.plugin, "gather")(self.live("gather"), C.byref(args)), "gather")

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
        args = calls.attend_args(self.device, q, slots, cache, out, layout=layout, scale_mode=scale_mode,
                                 sm_scale=sm_scale, outer_scale=outer_scale, valid_len=valid_len, lse=lse,
                                 stream=stream)
        if workspace is None:
            workspace = self.workspace.take(args.stream, self.workspace.need(args), q)
        args.workspace, _ = tensor(workspace, "workspace", (_abi.DTYPE_U8,), 1, self.device, written=True)
        check(self.plugin, member(self.plugin, "attend")(self.live("attend"), C.byref(args)), "attend")

    def merge(self, partial_out, partial_lse, out, *, lse=None, stream=None):
        """Merge P partial attentions into one (ABI 1.1, capability op.merge_partials): partial_out
        [P,n_q,h,512] bf16 or f32 and partial_lse [P,n_q,h] f32 (natural log; -inf: the part held no
        valid entry, its out is not read) into out [n_q,h,512] bf16 and the optional lse [n_q,h] f32,
        as one softmax over the union of the parts. Decode context parallelism: each rank attends over
        the records it holds, all-gathers out and lse (torch.distributed.all_gather_into_tensor gives
        [P*n_q,h,512]: pass it viewed as [P,n_q,h,512]) and merges. Raises Unsupported where the
        plugin's table predates merge (ABI 1.0)."""
        args = calls.merge_args(self.device, partial_out, partial_lse, out, lse=lse, stream=stream)
        check(self.plugin, member(self.plugin, "merge")(self.live("merge"), C.byref(args)), "merge")

    # ---- The prepared path (prepared.py): checked once at bind, then per call only what changes. ----

    def prepare_write(self, kv_c, k_pe, slot_mapping, cache, *, layout, scale_mode, outer_scale=None,
                      capture_max_abs=None, nonfinite_count=None, stream=None, writer_policy=None,
                      out_of_range_count=None):
        """A PreparedWrite bound to these arrays and writer policy (checked now, as write checks them)."""
        args = calls.write_args(self.device, kv_c, k_pe, slot_mapping, cache, layout=layout, scale_mode=scale_mode,
                                outer_scale=outer_scale, capture_max_abs=capture_max_abs,
                                nonfinite_count=nonfinite_count, stream=stream, writer_policy=writer_policy,
                                out_of_range_count=out_of_range_count)
        return PreparedWrite(self, args,
                             (kv_c, k_pe, slot_mapping, cache, capture_max_abs, nonfinite_count, out_of_range_count))

    def prepare_gather(self, cache, slots, out, *, layout, scale_mode, outer_scale=None, stream=None):
        """A PreparedGather bound to these arrays (checked now, as gather checks them)."""
        args = calls.gather_args(self.device, cache, slots, out, layout=layout, scale_mode=scale_mode,
                                 outer_scale=outer_scale, stream=stream)
        return PreparedGather(self, args, (cache, slots, out))

    def prepare_attend(self, q, slots, cache, out, *, layout, scale_mode, sm_scale, outer_scale=None, valid_len=None,
                       lse=None, workspace=None, stream=None):
        """A PreparedAttend bound to these arrays (checked now, as attend checks them), holding a
        workspace for every row count up to q's for as long as it lives."""
        args = calls.attend_args(self.device, q, slots, cache, out, layout=layout, scale_mode=scale_mode,
                                 sm_scale=sm_scale, outer_scale=outer_scale, valid_len=valid_len, lse=lse,
                                 stream=stream)
        return PreparedAttend(self, args, (q, slots, cache, out, valid_len, lse), workspace)

    def prepare_merge(self, partial_out, partial_lse, out, *, lse=None, stream=None):
        """A PreparedMerge bound to these arrays (checked now, as merge checks them)."""
        member(self.plugin, "merge")  # Unsupported now, not at the first run, on a 1.0 table
        args = calls.merge_args(self.device, partial_out, partial_lse, out, lse=lse, stream=stream)
        return PreparedMerge(self, args, (partial_out, partial_lse, out, lse))

    def attend_workspace_bytes(self, args):
        """Scratch bytes attend needs for these argument structs (shapes only)."""
        need = C.c_uint64(0)
        check(self.plugin, member(self.plugin, "attend_workspace_bytes")(self.live("attend_workspace_bytes"),
                                                                          C.byref(args), C.byref(need)),
              "attend_workspace_bytes")
        return need.value
