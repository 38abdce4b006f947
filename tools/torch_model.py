"""reference.model.Model in PyTorch, for tools/train.py: the same weight names and layouts
(y = x @ W with W of shape (in, out)), the same arithmetic, batched over sequences.
tests/reference/test_parity.py checks that both give the same logits."""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from reference.model import Config, Model, rope_tables


def _key(name: str) -> str:
    return name.replace(".", "__")  # ParameterDict keys may not contain dots


class TorchModel(torch.nn.Module):
    """reference.model.Model in PyTorch, batched: tokens (B, T) -> logits (B, T, V)."""

    def __init__(self, config: Config, weights: dict[str, np.ndarray]):
        super().__init__()
        self.config = config
        self.params = torch.nn.ParameterDict(
            {_key(n): torch.nn.Parameter(torch.tensor(np.asarray(w, dtype=np.float32))) for n, w in weights.items()}
        )
        cos, sin = rope_tables(np.arange(config.max_seq_len), config.head_dim, config.rope_theta)
        self.register_buffer("cos", torch.from_numpy(cos), persistent=False)  # (max_seq_len, Dh/2)
        self.register_buffer("sin", torch.from_numpy(sin), persistent=False)

    @classmethod
    def from_reference(cls, model: Model) -> "TorchModel":
        return cls(model.config, model.weights)

    def to_reference(self) -> Model:
        return Model(self.config, {n: self.w(n).detach().numpy().copy() for n in self.config.weight_shapes()})

    def w(self, name: str) -> torch.Tensor:
        return self.params[_key(name)]

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.run(tokens)[0]

    def run(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Logits (B, T, V) and the mean load-balancing loss of the MoE layers (0 if dense)."""
        c = self.config
        B, T = tokens.shape
        x = self.w("tok_emb")[tokens]  # (B, T, D)
        balance = x.new_zeros(())
        for i in range(c.n_layers):
            p = f"layers.{i}."
            x = x + self.attention(p, rms_norm(x, self.w(p + "attn_norm"), c.norm_eps))
            h = rms_norm(x, self.w(p + "mlp_norm"), c.norm_eps).reshape(B * T, c.d_model)
            if c.is_moe:
                out, layer_balance = self.moe(p, h)
                balance = balance + layer_balance / c.n_layers
            else:
                out = swiglu(h, self.w(p + "w_gate"), self.w(p + "w_up"), self.w(p + "w_down"))
            x = x + out.reshape(B, T, c.d_model)
        return rms_norm(x, self.w("norm"), c.norm_eps) @ self.w("out"), balance

    def attention(self, p: str, h: torch.Tensor) -> torch.Tensor:
        """Causal grouped-query attention with rotary positions 0..T-1: (B, T, D) -> (B, T, D)."""
        c = self.config
        B, T, _ = h.shape
        q = (h @ self.w(p + "wq")).reshape(B, T, c.n_heads, c.head_dim).transpose(1, 2)  # (B, H, T, Dh)
        k = (h @ self.w(p + "wk")).reshape(B, T, c.n_kv_heads, c.head_dim).transpose(1, 2)  # (B, Hkv, T, Dh)
        v = (h @ self.w(p + "wv")).reshape(B, T, c.n_kv_heads, c.head_dim).transpose(1, 2)
        cos, sin = self.cos[:T], self.sin[:T]
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        group = c.n_heads // c.n_kv_heads  # query head j reads kv head j // group
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, H, T, Dh)
        return out.transpose(1, 2).reshape(B, T, c.n_heads * c.head_dim) @ self.w(p + "wo")

    def moe(self, p: str, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Softmax router over all experts, top-k, renormalized gates, no capacity
        limit: h (N, D) -> (N, D), and the Switch load-balancing loss."""
        c = self.config
        probs = torch.softmax(h @ self.w(p + "router"), dim=-1)  # (N, E)
        top_p, top_i = probs.topk(c.top_k, dim=-1)  # (N, K)
        gates = top_p / top_p.sum(dim=-1, keepdim=True)
        out = torch.zeros_like(h)
        w_gate, w_up, w_down = self.w(p + "w_gate"), self.w(p + "w_up"), self.w(p + "w_down")
        for e in range(c.n_experts):
            rows, slot = torch.nonzero(top_i == e, as_tuple=True)
            if rows.numel() == 0:
                continue
            y = swiglu(h[rows], w_gate[e], w_up[e], w_down[e])
            out = out.index_add(0, rows, gates[rows, slot, None] * y)
        share = F.one_hot(top_i, c.n_experts).float().mean(dim=(0, 1))  # (E,) fraction of routed slots
        balance = c.n_experts * torch.sum(share * probs.mean(dim=0))
        return out, balance


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return x / torch.sqrt(torch.mean(x * x, dim=-1, keepdim=True) + eps) * weight


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate x (..., T, Dh), pairing dimension i with i + Dh/2, as reference.model.apply_rope."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def swiglu(h: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor, w_down: torch.Tensor) -> torch.Tensor:
    return (F.silu(h @ w_gate) * (h @ w_up)) @ w_down


def init_model(config: Config, seed: int) -> TorchModel:
    """Model.random's weights, with the residual-branch outputs (wo, w_down)
    scaled by 1/sqrt(2 n_layers) so the residual stream starts near the embedding."""
    weights = dict(Model.random(config, seed).weights)
    for name in weights:
        if name.endswith((".wo", ".w_down")):
            weights[name] = weights[name] / np.float32(math.sqrt(2 * config.n_layers))
    return TorchModel(config, weights)
