"""KV cache formats of the quality experiment (issue 59): each stores one layer's kv_c / k_pe and
attends with the model's 576-value queries over the batch's slot table (slots.py).

- `Reference`: the bf16 cache, a float32 attention in PyTorch over the bf16 latents (what every
  format is compared with; TF32 off). It also picks the top-k entries when the table asks for them:
  per query token and layer the `topk` earlier tokens with the largest attention weight summed over
  the heads in the bf16 cache (an oracle indexer: DeepSeek-V3.2's lightning indexer is a model of its
  own; here every format attends over the same entries, so only the cache differs).
- `PluginCache`: records written and read by the plugin's REAL calls (torch ops: write, attend) on
  the tensors' device, the CPU backend here and CUDA on the GPU machine. 656-byte records are written
  by FlashMLA's quantiser (bench/attend_reference.py; the plugin only reads them); an emulated writer
  policy (writers.py) writes the bytes in PyTorch and the plugin reads them. `rotate`: the latent goes
  through the Hadamard rotation (writers.hadamard) before it is written, the query's latent part too,
  and the output is rotated back.
- `DecodedCache`: the plugin's records (written by the plugin) read by PyTorch instead: decoded by
  their definition (bench/attend_reference.py) and attended in float32 like the reference. Against
  the PluginCache of the same records it isolates the kernel's own rounding (CUDA attend computes
  with bf16 operands) from the format's.
- `Capture`: the reference, plus a plugin write per layer with capture_max_abs (the capture hook a
  server's calibration run uses), for `nvfp4-mla calibrate`.
"""
import torch

import attend_reference as ref
import writers
from nvfp4_mla import _abi

LATENT = 512


class Slots:
    """The batch's slot table: B sequences of T tokens at slots b*T + t; dense (causal: every earlier
    token and itself) or top-k (per layer, picked by the Reference and kept here for the others)."""

    def __init__(self, B, T, device, topk=None):
        self.B, self.T, self.topk, self.device = B, T, topk, device
        t = torch.arange(T, device=device)
        self.causal = t[None, :] <= t[:, None]  # [T, T] query row, key column
        self.picked = {}  # layer -> [B*T, topk] int32 slots

    def table(self, layer):
        """[B*T, K] int32 global slots (-1 unused) and valid_len [B*T] int32 (None for top-k)."""
        if self.topk is not None:
            return self.picked[layer], None
        B, T = self.B, self.T
        local = torch.arange(T, device=self.device)[None, :].expand(T, T)
        local = torch.where(self.causal, local, torch.full_like(local, -1))
        base = (torch.arange(B, device=self.device) * T)[:, None, None]
        slots = torch.where(local[None] >= 0, local[None] + base, local[None]).reshape(B * T, T)
        valid = (torch.arange(T, device=self.device) + 1).repeat(B)
        return slots.to(torch.int32).contiguous(), valid.to(torch.int32)

    def mask(self, layer):
        """[B, T, T] bool: which keys each query attends over."""
        if self.topk is None:
            return self.causal[None].expand(self.B, self.T, self.T)
        B, T = self.B, self.T
        local = self.picked[layer].view(B, T, -1).long()
        local = torch.where(local >= 0, local - (torch.arange(B, device=self.device) * T)[:, None, None],
                            torch.full_like(local, T))
        m = torch.zeros(B, T, T + 1, dtype=torch.bool, device=self.device)
        m.scatter_(2, local, True)
        return m[..., :T]


def torch_attend(q, kv, mask, sm_scale):
    """float32 attention: q [B, T, h, 576], kv [B, T, 576] -> out [B, T, h, 512], weights [B, h, T, T]."""
    s = torch.einsum("bqhd,bkd->bhqk", q.float(), kv.float()) * sm_scale
    s = s.masked_fill(~mask[:, None], float("-inf"))
    p = torch.softmax(s, dim=-1)
    return torch.einsum("bhqk,bkd->bqhd", p, kv[..., :LATENT].float()), p


class Reference:
    name = "bf16"

    def __init__(self, slots):
        self.slots = slots

    def attend(self, layer, q576, kv_c, k_pe, sm_scale):
        S = self.slots
        B, T = S.B, S.T
        q = q576.to(torch.bfloat16).view(B, T, -1, 576)
        kv = torch.cat([kv_c, k_pe], dim=-1).to(torch.bfloat16).view(B, T, 576)
        if S.topk is not None and layer not in S.picked:
            _, p = torch_attend(q, kv, S.causal[None].expand(B, T, T), sm_scale)
            score = p.sum(1).masked_fill(~S.causal[None], -1.0)  # [B, T, T]; never a future token
            k = min(S.topk, T)
            top = score.topk(k, dim=-1)
            local = torch.where(top.values >= 0, top.indices, torch.full_like(top.indices, -1))
            base = (torch.arange(B, device=q.device) * T)[:, None, None]
            S.picked[layer] = torch.where(local >= 0, local + base, local).reshape(B * T, k).to(torch.int32)
        out, _ = torch_attend(q, kv, S.mask(layer), sm_scale)
        return out.reshape(B * T, -1, LATENT)


class PluginCache:
    def __init__(self, name, ops, slots, layout, *, outer=None, emulate=None, rotate=False):
        """ops: torch_ops.bind(ctx, layout=..., scale_mode=..., writer_policy=...); outer: per-layer
        static scales (None: the mode's default, 0 per-token, 1.0 static); emulate: a writers.POLICIES
        name whose bytes PyTorch writes (per-token 368 only)."""
        self.name, self.ops, self.slots, self.layout = name, ops, slots, layout
        self.outer, self.emulate, self.rotate = outer, emulate, rotate
        self.record_bytes = _abi.record_bytes(layout)

    def _outer(self, layer):
        return None if self.outer is None else float(self.outer[layer])

    def store(self, layer, kv_c, k_pe):
        """The layer's cache [blocks, 64, record_bytes] holding the batch's tokens at slots 0..N-1."""
        n = kv_c.shape[0]
        cache = torch.zeros((n + 63) // 64, 64, self.record_bytes, dtype=torch.uint8, device=kv_c.device)
        flat = cache.view(-1, self.record_bytes)
        x, pe = kv_c.to(torch.bfloat16).contiguous(), k_pe.to(torch.bfloat16).contiguous()
        if self.layout == _abi.LAYOUT_FP8_DS_MLA_656:
            flat[:n] = ref.fp8_ds_mla_records(torch.cat([x, pe], dim=1))
        elif self.emulate:
            flat[:n] = writers.encode_368(x, pe, self.emulate)
        else:
            slots = torch.arange(n, dtype=torch.int64, device=x.device)
            self.ops.write(x, pe, slots, cache, outer_scale=self._outer(layer))
        return cache

    def attend(self, layer, q576, kv_c, k_pe, sm_scale):
        if self.rotate:
            h = writers.hadamard(LATENT, q576.device)
            kv_c = kv_c.float() @ h
            q576 = torch.cat([q576[..., :LATENT].float() @ h, q576[..., LATENT:].float()], dim=-1)
        cache = self.store(layer, kv_c, k_pe)
        slots, valid = self.slots.table(layer)
        out, _ = self.ops.attend(q576.to(torch.bfloat16).contiguous(), slots, cache, sm_scale=sm_scale,
                                 outer_scale=self._outer(layer), valid_len=valid)
        out = out.float()
        return out @ writers.hadamard(LATENT, out.device) if self.rotate else out


class Capture(Reference):
    """The reference attention, and per layer max |kv_c| through the plugin's write capture_max_abs."""

    def __init__(self, slots, ops, n_layers, device):
        super().__init__(slots)
        self.ops = ops
        self.max_abs = torch.zeros(n_layers, dtype=torch.float32, device=device)

    def attend(self, layer, q576, kv_c, k_pe, sm_scale):
        n = kv_c.shape[0]
        cache = torch.zeros((n + 63) // 64, 64, 368, dtype=torch.uint8, device=kv_c.device)
        cap = self.max_abs[layer:layer + 1]
        self.ops.write(kv_c.to(torch.bfloat16).contiguous(), k_pe.to(torch.bfloat16).contiguous(),
                       torch.arange(n, dtype=torch.int64, device=kv_c.device), cache, capture_max_abs=cap)
        return super().attend(layer, q576, kv_c, k_pe, sm_scale)


class DecodedCache(PluginCache):
    """368-byte records written by the plugin, attended in float32 by PyTorch over their exact values."""

    def attend(self, layer, q576, kv_c, k_pe, sm_scale):
        S = self.slots
        n = kv_c.shape[0]
        rec = self.store(layer, kv_c, k_pe).view(-1, self.record_bytes)[:n]
        keys = ref.decode_368(rec, self._outer(layer)).view(S.B, S.T, 576)
        q = q576.to(torch.bfloat16).view(S.B, S.T, -1, 576)
        out, _ = torch_attend(q, keys, S.mask(layer), sm_scale)
        return out.reshape(n, -1, LATENT)
