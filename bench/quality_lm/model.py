"""The small language model of the quality experiment (issue 59): DeepSeek-V3.2's attention shape at
toy scale, so that its KV cache is the plugin's record: per token and layer one 512-value latent
`kv_c` (after the kv_a RMSNorm, shared by every head) and one 64-value RoPE key `k_pe` (shared too);
queries carry a 64-value RoPE part and a no-RoPE part that is absorbed into the latent space
(q_lat = W_UK^T q_nope, 512 values a head), values are the latent itself (o_lat = sum p kv_c) and each
head's output is W_UV o_lat, as DeepSeek's absorbed decode computes it. Bytes are the tokens (vocabulary
256): no tokenizer to ship.

Training (`forward`) runs the same arithmetic in the unabsorbed form (per-head keys [W_UK kv_c, k_pe],
values W_UV kv_c) with PyTorch's fused attention; evaluation (`forward_cached`) runs the absorbed form
and hands each layer's kv_c, k_pe and 576-value queries to a cache (caches.py), which stores them in a
format and attends: the only place where formats differ.
"""
import math

import torch
import torch.nn.functional as F
from torch import nn

LATENT, ROPE = 512, 64

# The toy sizes the CPU test trains in seconds, and the device run's.
CONFIGS = {
    "toy": dict(d_model=64, n_layers=2, n_heads=2, nope=32, v_dim=32, ffn=128, seq=128),
    "small": dict(d_model=512, n_layers=8, n_heads=8, nope=64, v_dim=64, ffn=1536, seq=1024),
}


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        x32 = x.float()
        return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight.float()).to(x.dtype)


def rope_tables(seq, device, base=10000.0):
    """cos, sin [seq, 64] for rotate-half RoPE on the 64 RoPE values."""
    inv = 1.0 / (base ** (torch.arange(0, ROPE, 2, device=device, dtype=torch.float32) / ROPE))
    ang = torch.arange(seq, device=device, dtype=torch.float32)[:, None] * inv[None, :]
    ang = torch.cat([ang, ang], dim=-1)
    return ang.cos(), ang.sin()


def apply_rope(x, cos, sin):
    """x [..., T, 64] (T matching cos' rows)."""
    x1, x2 = x[..., : ROPE // 2], x[..., ROPE // 2:]
    rot = torch.cat([-x2, x1], dim=-1)
    return (x.float() * cos + rot.float() * sin).to(x.dtype)


class MLA(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.h, self.nope, self.v_dim = c["n_heads"], c["nope"], c["v_dim"]
        self.wq = nn.Linear(c["d_model"], self.h * (self.nope + ROPE), bias=False)
        self.wkv_a = nn.Linear(c["d_model"], LATENT + ROPE, bias=False)
        self.kv_norm = RMSNorm(LATENT)  # kv_c is this norm's output: what the cache stores
        self.wkv_b = nn.Linear(LATENT, self.h * (self.nope + self.v_dim), bias=False)
        self.wo = nn.Linear(self.h * self.v_dim, c["d_model"], bias=False)
        self.sm_scale = (self.nope + ROPE) ** -0.5

    def project(self, x, cos, sin):
        """q_nope [B,T,h,nope], q_pe [B,T,h,64], kv_c [B,T,512], k_pe [B,T,64] (RoPE applied)."""
        B, T, _ = x.shape
        q = self.wq(x).view(B, T, self.h, self.nope + ROPE)
        q_nope, q_pe = q[..., : self.nope], q[..., self.nope:]
        q_pe = apply_rope(q_pe.transpose(1, 2), cos[:T], sin[:T]).transpose(1, 2)
        kv = self.wkv_a(x)
        kv_c = self.kv_norm(kv[..., :LATENT])
        k_pe = apply_rope(kv[..., LATENT:], cos[:T], sin[:T])
        return q_nope, q_pe, kv_c, k_pe

    def w_uk_uv(self):
        w = self.wkv_b.weight.view(self.h, self.nope + self.v_dim, LATENT)
        return w[:, : self.nope], w[:, self.nope:]  # [h, nope, 512], [h, v, 512]

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        q_nope, q_pe, kv_c, k_pe = self.project(x, cos, sin)
        kvb = self.wkv_b(kv_c).view(B, T, self.h, self.nope + self.v_dim)
        k = torch.cat([kvb[..., : self.nope], k_pe[:, :, None, :].expand(B, T, self.h, ROPE)], dim=-1)
        q = torch.cat([q_nope, q_pe], dim=-1)
        v = kvb[..., self.nope:]
        o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True,
                                           scale=self.sm_scale)
        return self.wo(o.transpose(1, 2).reshape(B, T, self.h * self.v_dim))

    def forward_cached(self, x, cos, sin, cache, layer):
        """The absorbed form: queries [B*T, h, 576] against the cache's stored kv_c / k_pe."""
        B, T, _ = x.shape
        q_nope, q_pe, kv_c, k_pe = self.project(x, cos, sin)
        w_uk, w_uv = self.w_uk_uv()
        q_lat = torch.einsum("bthn,hnl->bthl", q_nope.float(), w_uk.float())
        q576 = torch.cat([q_lat, q_pe.float()], dim=-1).reshape(B * T, self.h, LATENT + ROPE)
        o_lat = cache.attend(layer, q576, kv_c.reshape(B * T, LATENT), k_pe.reshape(B * T, ROPE), self.sm_scale)
        o = torch.einsum("nhl,hvl->nhv", o_lat.float(), w_uv.float()).to(x.dtype)
        return self.wo(o.reshape(B, T, self.h * self.v_dim))


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.attn_norm, self.attn = RMSNorm(c["d_model"]), MLA(c)
        self.ffn_norm = RMSNorm(c["d_model"])
        self.w1 = nn.Linear(c["d_model"], c["ffn"], bias=False)
        self.w3 = nn.Linear(c["d_model"], c["ffn"], bias=False)
        self.w2 = nn.Linear(c["ffn"], c["d_model"], bias=False)

    def ffn(self, x):
        h = self.ffn_norm(x)
        return self.w2(F.silu(self.w1(h)) * self.w3(h))

    def forward(self, x, cos, sin, cache=None, layer=None):
        h = self.attn_norm(x)
        a = self.attn(h, cos, sin) if cache is None else self.attn.forward_cached(h, cos, sin, cache, layer)
        x = x + a
        return x + self.ffn(x)


class ByteMLA(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.config = dict(c)
        self.embed = nn.Embedding(256, c["d_model"])
        self.blocks = nn.ModuleList(Block(c) for _ in range(c["n_layers"]))
        self.norm = RMSNorm(c["d_model"])
        self.register_buffer("cos", torch.empty(0), persistent=False)
        self.register_buffer("sin", torch.empty(0), persistent=False)
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, std=0.02)
            elif isinstance(m, nn.Embedding):
                nn.init.normal_(m.weight, std=0.02)
        for b in self.blocks:  # residual projections scaled down with depth (GPT-2's rule)
            nn.init.normal_(b.attn.wo.weight, std=0.02 / math.sqrt(2 * c["n_layers"]))
            nn.init.normal_(b.w2.weight, std=0.02 / math.sqrt(2 * c["n_layers"]))

    def tables(self, T, device):
        if self.cos.shape[0] < T or self.cos.device != device:
            self.cos, self.sin = rope_tables(max(T, self.config["seq"]), device)
        return self.cos, self.sin

    def forward(self, tokens, cache=None):
        """tokens [B, T] int64 -> logits [B, T, 256] (f32). cache None: training's fused attention."""
        cos, sin = self.tables(tokens.shape[1], tokens.device)
        x = self.embed(tokens)
        for i, b in enumerate(self.blocks):
            x = b(x, cos, sin, cache, i)
        x = self.norm(x)
        return (x @ self.embed.weight.t()).float()
