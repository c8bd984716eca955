"""The shim with PyTorch CUDA tensors on a non-default stream: bytes equal to the CPU backend's.
Skips where PyTorch or a CUDA device is missing (this machine and CI); runs on the GPU machine."""
import numpy as np
import pytest

import nvfp4_mla
from nvfp4_mla import LAYOUT_FP8_ROPE_368, SCALE_PER_TOKEN, SCALE_STATIC

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)


@pytest.mark.parametrize("mode, scale", [(SCALE_PER_TOKEN, 0.0), (SCALE_STATIC, 0.003)])
def test_torch_cuda_tensors_on_a_side_stream_should_match_the_cpu_backend(plugin, mode, scale):
    T, blocks = 1000, 20
    gen = torch.Generator(device="cuda").manual_seed(3)
    x = torch.randn(T, 576, device="cuda", generator=gen).to(torch.bfloat16)
    slots = torch.randperm(blocks * 64, device="cuda", generator=gen)[:T].to(torch.int64)
    cache = torch.zeros(blocks, 64, 368, dtype=torch.uint8, device="cuda")
    rows = torch.empty(T, 576, dtype=torch.bfloat16, device="cuda")
    gslots = slots.to(torch.int32)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())  # x, slots and the zeroed cache were made on the default stream
    with nvfp4_mla.Context(plugin, "cuda:0") as gpu, nvfp4_mla.Context(plugin) as cpu:
        assert "sm_" in gpu.device_name
        with torch.cuda.stream(side):
            gpu.write(x[:, :512], x[:, 512:], slots, cache, layout=LAYOUT_FP8_ROPE_368, scale_mode=mode,
                      outer_scale=scale, stream=side)
            gpu.gather(cache, gslots, rows, layout=LAYOUT_FP8_ROPE_368, scale_mode=mode, outer_scale=scale,
                       stream=side)
        side.synchronize()
        xh = x.view(torch.int16).cpu().numpy().view(np.uint16)
        cache_h = np.zeros((blocks, 64, 368), np.uint8)
        cpu.write(xh[:, :512], xh[:, 512:], slots.cpu().numpy(), cache_h, layout=LAYOUT_FP8_ROPE_368,
                  scale_mode=mode, outer_scale=scale)
        rows_h = np.zeros((T, 576), np.uint16)
        cpu.gather(cache_h, gslots.cpu().numpy(), rows_h, layout=LAYOUT_FP8_ROPE_368, scale_mode=mode,
                   outer_scale=scale)
    assert bytes(cache.cpu().numpy()) == bytes(cache_h)
    assert bytes(rows.view(torch.int16).cpu().numpy()) == bytes(rows_h)


def test_attend_without_a_workspace_should_size_its_own_and_match_the_cpu_backend(plugin):
    """One query over 2048 entries: the plan splits the top-k, so the call needs scratch."""
    gen = torch.Generator(device="cuda").manual_seed(4)
    x = torch.randn(4096, 576, device="cuda", generator=gen).to(torch.bfloat16)
    cache = torch.zeros(64, 64, 368, dtype=torch.uint8, device="cuda")
    q = torch.randn(1, 16, 576, device="cuda", generator=gen).to(torch.bfloat16)
    topk = torch.randint(0, 4096, (1, 2048), device="cuda", generator=gen, dtype=torch.int32)
    out = torch.empty(1, 16, 512, dtype=torch.bfloat16, device="cuda")
    with nvfp4_mla.Context(plugin, "cuda:0") as gpu, nvfp4_mla.Context(plugin) as cpu:
        gpu.write(x[:, :512], x[:, 512:], torch.arange(4096, device="cuda"), cache, layout=LAYOUT_FP8_ROPE_368,
                  scale_mode=SCALE_PER_TOKEN)
        gpu.attend(q, topk, cache, out, layout=LAYOUT_FP8_ROPE_368, scale_mode=SCALE_PER_TOKEN, sm_scale=0.05)
        torch.cuda.synchronize()
        assert gpu.workspace.kept_streams, "the split plan needs a workspace the context allocated"
        out_h = np.zeros((1, 16, 512), np.uint16)
        cpu.attend(q.view(torch.int16).cpu().numpy().view(np.uint16), topk.cpu().numpy(), cache.cpu().numpy(), out_h,
                   layout=LAYOUT_FP8_ROPE_368, scale_mode=SCALE_PER_TOKEN, sm_scale=0.05)
    got = out.float().cpu().numpy()
    want = nvfp4_mla.bf16_to_float32(out_h)
    assert np.abs(got - want).max() <= 2 / 128 * np.abs(want).max() + 1e-3 * np.abs(want).max()
