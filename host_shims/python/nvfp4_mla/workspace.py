"""Attend's scratch (split-K partials on CUDA): the one home of its rule, one Workspace a context.

The rule, for every way attend is called (Context.attend, prepared attends, the PyTorch ops, the
vLLM plugin's plan_step):
- the plugin says the bytes a call's shapes need (attend_workspace_bytes, shapes only, about 3 us: asked
  per call); a prepared call needs the largest over every row count it may run (the need is not
  monotonic: fewer queries split the top-k more), and a step planner asks per step: those two are
  asked once per shape and remembered here;
- the context keeps one scratch a stream (calls on one stream are ordered, so they may share it) and
  grows it when a call needs more; a grown one replaces the kept one, and calls that hold the old one
  (prepared attends, captured graphs) keep it alive, still large enough for them;
- under CUDA-graph capture a call takes a temporary instead, which the graph owns: a kept one replaced
  later would leave the graph reading freed memory, and torch.compile's CUDA graphs warm up with every
  allocation routed to the graph's pool, which would reclaim a kept one under the context;
- callers that must not allocate kept memory (the PyTorch ops on CUDA) use the kept one only when it
  already holds enough, else a temporary; growing happens outside capture only (plan_step, one-shot
  and prepared calls).
"""

import ctypes as C
import weakref

from . import _abi
from .arrays import empty_bytes_like
from .errors import check, member

_MAX_SHAPES = 256  # remembered needs a context; past it they are dropped and asked again


class Workspace:
    """A context's attend scratch: kept arrays by stream and the needs asked of the plugin by shape."""

    def __init__(self, ctx):
        self._ctx = weakref.ref(ctx)  # the context owns this object: no cycle, so it closes when dropped
        self._kept = {}  # stream handle -> the kept array (numpy, CuPy or PyTorch, like the call's q)
        self._needs = {}  # (row counts scanned, the struct without pointers) -> bytes

    def _context(self):
        ctx = self._ctx()
        if ctx is None:
            raise ValueError("attend_workspace_bytes: this workspace's nvfp4_mla.Context is gone")
        return ctx

    def need(self, args, fields=()):
        """The bytes attend needs for the shapes of `args` (an AttendArgs), asked of the plugin (a refusal
        raises in its words). `fields`: prepared fields (prepared.py) whose row counts go together: the
        largest need over every row count 1..their bound one, scanned once per shape."""
        if not fields:
            return self._context().attend_workspace_bytes(args)
        probe = _abi.AttendArgs.from_buffer_copy(args)
        for name in ("q", "slots", "valid_len", "cache", "out", "lse", "workspace"):
            getattr(probe, name).data = None
        probe.stream = None
        rows = fields[0].bound_rows
        key = (rows, bytes(probe))
        have = self._needs.get(key)
        if have is not None:
            return have
        ctx = self._context()
        fn, need, best = member(ctx.plugin, "attend_workspace_bytes"), C.c_uint64(0), 0
        handle = ctx.live("attend_workspace_bytes")
        try:
            for n in range(1, rows + 1):
                for f in fields:
                    f.rows.value = n
                check(ctx.plugin, fn(handle, C.byref(args), C.byref(need)), "attend_workspace_bytes")
                best = max(best, need.value)
        finally:
            for f in fields:
                f.rows.value = rows
        return self._remember(key, best)

    def _remember(self, key, need):
        if len(self._needs) >= _MAX_SHAPES:
            self._needs.clear()
        self._needs[key] = need
        return need

    def need_by(self, key, build):
        """need(build()) remembered under the caller's `key` (a tuple naming the shapes), so that a caller
        that asks per step (plan_step) builds and checks the struct only for a shape it has not asked."""
        have = self._needs.get(key)
        return self._remember(key, self.need(build())) if have is None else have

    @property
    def shapes_asked(self):
        """How many shapes' needs are remembered (scans and need_by; every layer of a model binds the
        same shapes)."""
        return len(self._needs)

    @property
    def kept_streams(self):
        """The streams that have a kept scratch (handles; None: the legacy default stream)."""
        return tuple(self._kept)

    def kept(self, stream):
        """The kept scratch of `stream` (a handle; None: the legacy default stream), or None."""
        return self._kept.get(stream)

    def take(self, stream, need, like, *, capturing=False, grow=True):
        """Scratch of at least `need` bytes for a call on `stream` (None when 0): a temporary while a
        CUDA graph is captured; else the kept one, grown first when it holds less (grow=False: a
        temporary instead). New arrays are made like `like` (its library and device)."""
        if need == 0:
            return None
        if capturing:
            return empty_bytes_like(like, need)
        have = self._kept.get(stream)
        if have is not None and have.shape[0] >= need:
            return have
        if not grow:
            return empty_bytes_like(like, need)
        have = self._kept[stream] = empty_bytes_like(like, need)
        return have

    def reserve(self, stream, need, like, *, capturing=False):
        """Grow the kept scratch of `stream` to `need` bytes ahead of the calls (outside capture only:
        during one, nothing is allocated and the captured calls take temporaries)."""
        if need and not capturing:
            self.take(stream, need, like)
