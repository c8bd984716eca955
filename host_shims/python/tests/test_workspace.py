"""nvfp4_mla.workspace: attend's scratch rule in its one home (kept per stream, the largest need over
row counts, a temporary under capture, grown only outside it), with numpy arrays on the CPU backend.
The CPU backend asks for no scratch, so the plugin's answer is stood in for where a need is wanted
(the CUDA backend's case); the exact CPU answer, 0, is asserted as such."""
import numpy as np
import pytest

import nvfp4_mla
from nvfp4_mla import LAYOUT_FP8_ROPE_368, SCALE_PER_TOKEN, calls
from nvfp4_mla.workspace import Workspace

KW = dict(layout=LAYOUT_FP8_ROPE_368, scale_mode=SCALE_PER_TOKEN, sm_scale=0.1)


def attend_arrays(n, heads=16, topk=64):
    return (np.zeros((n, heads, 576), np.uint16), np.full((n, topk), -1, np.int32), np.zeros((1, 64, 368), np.uint8),
            np.zeros((n, heads, 512), np.uint16))


def test_take_should_keep_one_scratch_a_stream_and_grow_it(ctx):
    ws, like = ctx.workspace, np.zeros(1, np.uint8)
    assert ws.take(None, 0, like) is None and ws.kept_streams == ()  # no need, nothing made
    first = ws.take(None, 1024, like)
    assert first.dtype == np.uint8 and first.shape == (1024,) and ws.kept(None) is first
    assert ws.take(None, 512, like) is first  # enough: the kept one
    grown = ws.take(None, 4096, like)
    assert grown.shape == (4096,) and ws.kept(None) is grown and first.shape == (1024,)  # old one left to its holders
    assert ws.take(7, 16, like) is not grown and ws.kept_streams == (None, 7)  # one a stream


def test_take_should_hand_out_temporaries_under_capture_and_when_told_not_to_grow(ctx):
    ws, like = ctx.workspace, np.zeros(1, np.uint8)
    kept = ws.take(None, 1024, like)
    captured = ws.take(None, 512, like, capturing=True)
    assert captured is not kept and captured.shape == (512,) and ws.kept(None) is kept  # the graph owns its own
    assert ws.take(None, 1024, like, grow=False) is kept  # enough: used
    bigger = ws.take(None, 2048, like, grow=False)
    assert bigger.shape == (2048,) and ws.kept(None) is kept  # not grown
    ws.reserve(None, 8192, like, capturing=True)
    assert ws.kept(None) is kept  # nothing allocated during a capture
    ws.reserve(None, 8192, like)
    assert ws.kept(None).shape == (8192,)


def test_need_should_be_the_plugins_answer(ctx):
    # The CPU backend needs no scratch for any shape (kernels/attend/attend_cpu.c): exactly 0.
    args = calls.attend_args(ctx.device, *attend_arrays(4), **KW)
    assert ctx.workspace.need(args) == 0
    asked = []
    ctx.attend_workspace_bytes = lambda a: asked.append(a.q.shape[0]) or 100 * a.q.shape[0]
    ws = Workspace(ctx)
    assert ws.need(args) == 400 and ws.need(args) == 400 and asked == [4, 4]  # a one-shot call asks (3 us)
    assert ws.need(calls.attend_args(ctx.device, *attend_arrays(2), **KW)) == 200 and asked == [4, 4, 2]
    assert ws.shapes_asked == 0
    # A step planner's need is remembered under its own key: built and asked once.
    assert ws.need_by(("mine", 3), lambda: calls.attend_args(ctx.device, *attend_arrays(3), **KW)) == 300
    assert ws.need_by(("mine", 3), lambda: pytest.fail("asked again")) == 300
    assert asked == [4, 4, 2, 3] and ws.shapes_asked == 1


def test_a_prepared_attend_should_hold_the_largest_need_over_its_row_counts(ctx, monkeypatch):
    """The need is not monotonic in the row count (fewer queries split the top-k more): a prepared call
    holds the largest over 1..its rows, asked of the plugin's entry directly (the hot struct)."""
    answers = {1: 64, 2: 4096, 3: 128}

    def scan(handle, args, need):
        rows = args._obj.q.shape[0]
        need._obj.value = answers[rows]
        return 0
    monkeypatch.setattr(nvfp4_mla.workspace, "member", lambda plugin, name: scan)
    q, slots, cache, out = attend_arrays(3)
    call = ctx.prepare_attend(q, slots, cache, out, **KW)
    assert call.workspace.shape == (4096,) and ctx.workspace.kept(None) is call.workspace
    call.run(1)  # the bound struct's row counts were put back after the scan


def test_a_closed_context_should_refuse_to_be_asked(plugin):
    ctx = nvfp4_mla.Context(plugin)
    args = calls.attend_args(ctx.device, *attend_arrays(1), **KW)
    ws = ctx.workspace
    ctx.close()
    with pytest.raises(ValueError, match="attend_workspace_bytes: this nvfp4_mla.Context is closed"):
        ws.need(args)
