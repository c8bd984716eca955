"""A decode step (write of the step's new tokens, then attend over top-k slots that include them)
captured once in torch.cuda.graph on a side stream, replayed with new data copied into the captured
buffers: the same cache bytes, outputs and LSE as eager one-shot calls, step after step. Captured
three ways: prepared run(), prepared calls given the (same) arrays, and one-shot calls with a
workspace passed. Skips where PyTorch or a CUDA device is missing (this machine and CI)."""
import pytest

import nvfp4_mla
from nvfp4_mla import LAYOUT_FP8_ROPE_368, SCALE_PER_TOKEN

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)

BLOCKS, BLOCK, TOPK, STEPS = 64, 64, 2048, 3
HISTORY = BLOCKS * BLOCK - 128  # slots 0..HISTORY-1 hold earlier tokens; each step appends after them
KW = dict(layout=LAYOUT_FP8_ROPE_368, scale_mode=SCALE_PER_TOKEN)
SM = 576 ** -0.5


class Step:
    """The captured buffers of one decode step and a source of new data for them."""

    def __init__(self, batch, heads, seed):
        self.gen = torch.Generator(device="cuda").manual_seed(seed)
        self.batch, self.heads = batch, heads
        self.kv = torch.empty(batch, 576, dtype=torch.bfloat16, device="cuda")
        self.slot_mapping = torch.empty(batch, dtype=torch.int64, device="cuda")
        self.q = torch.empty(batch, heads, 576, dtype=torch.bfloat16, device="cuda")
        self.topk = torch.empty(batch, TOPK, dtype=torch.int32, device="cuda")
        self.out = torch.empty(batch, heads, 512, dtype=torch.bfloat16, device="cuda")
        self.lse = torch.empty(batch, heads, dtype=torch.float32, device="cuda")

    def refill(self, step):
        """New tokens at the next free slots, new queries, top-k over history plus these tokens."""
        first = HISTORY + step * self.batch
        self.kv.copy_(torch.randn(self.batch, 576, device="cuda", generator=self.gen))
        self.slot_mapping.copy_(torch.arange(first, first + self.batch, device="cuda"))
        self.q.copy_(torch.randn(self.batch, self.heads, 576, device="cuda", generator=self.gen))
        topk = torch.randint(-1, first + self.batch, (self.batch, TOPK), device="cuda", generator=self.gen)
        topk[:, :self.batch] = self.slot_mapping  # every query reads what this step wrote
        self.topk.copy_(topk.to(torch.int32))

    def capture(self, ctx, cache, form, side):
        """The step's calls as `form` captures them (what the graph records)."""
        kv_c, k_pe = self.kv[:, :512], self.kv[:, 512:]
        if form == "one-shot":
            # The graph's scratch, held by the test for the graph's life; more than these shapes need
            # (at most 17 MB; a short one would be refused by the plugin, failing the test loudly).
            ws = torch.empty(1 << 26, dtype=torch.uint8, device="cuda")
            return ws, lambda: (ctx.write(kv_c, k_pe, self.slot_mapping, cache, stream=side, **KW),
                                ctx.attend(self.q, self.topk, cache, self.out, lse=self.lse, sm_scale=SM,
                                           workspace=ws, stream=side, **KW))
        w = ctx.prepare_write(kv_c, k_pe, self.slot_mapping, cache, stream=side, **KW)
        a = ctx.prepare_attend(self.q, self.topk, cache, self.out, lse=self.lse, sm_scale=SM, stream=side, **KW)
        if form == "run":
            return (w, a), lambda: (w.run(), a.run())
        return (w, a), lambda: (w(kv_c, k_pe, self.slot_mapping), a(self.q, self.topk, self.out, lse=self.lse))


def history_cache(ctx, seed):
    cache = torch.zeros(BLOCKS, BLOCK, 368, dtype=torch.uint8, device="cuda")
    x = torch.randn(HISTORY, 576, device="cuda", generator=torch.Generator(device="cuda").manual_seed(seed))
    x = x.to(torch.bfloat16)
    ctx.write(x[:, :512], x[:, 512:], torch.arange(HISTORY, device="cuda"), cache, **KW)
    return cache


@pytest.mark.parametrize("form", ["run", "arrays", "one-shot"])
@pytest.mark.parametrize("heads, batch", [(16, 1), (16, 8), (128, 1), (128, 32)])
def test_captured_decode_step_should_replay_with_new_data_like_eager_calls(plugin, heads, batch, form):
    with nvfp4_mla.Context(plugin, "cuda:0") as ctx:
        cache = history_cache(ctx, heads + batch)
        eager_cache = cache.clone()
        step = Step(batch, heads, 7 * heads + batch)
        side = torch.cuda.Stream()
        keep, calls = step.capture(ctx, cache, form, side)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=side):
            calls()
        assert torch.equal(cache, eager_cache), "capturing must not run the calls"
        previous = None
        for s in range(STEPS):
            step.refill(s)
            torch.cuda.synchronize()
            with torch.cuda.stream(side):
                graph.replay()
            side.synchronize()
            out, lse = torch.empty_like(step.out), torch.empty_like(step.lse)
            ctx.write(step.kv[:, :512], step.kv[:, 512:], step.slot_mapping, eager_cache, **KW)
            ctx.attend(step.q, step.topk, eager_cache, out, lse=lse, sm_scale=SM, **KW)
            torch.cuda.synchronize()
            assert torch.equal(cache, eager_cache), f"step {s}: cache bytes differ"
            assert torch.equal(step.out.view(torch.int16), out.view(torch.int16)), f"step {s}: out differs"
            assert torch.equal(step.lse.view(torch.int32), lse.view(torch.int32)), f"step {s}: lse differs"
            assert previous is None or not torch.equal(previous, out), "the replay must read the new data"
            previous = out
        if form == "run" and batch == 1:
            assert keep[1].workspace is not None, "one query over 2048 entries splits: the graph holds scratch"
        del graph
        torch.cuda.synchronize()
