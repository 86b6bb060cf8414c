"""The block's feed-forward half: the MLP (GPT-2's GELU, SwiGLU, GeGLU, ReLU^2) and a mixture of experts
of them (MoE: a router sends each token to its top-k experts)."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from .config import GPTConfig
from .hooks import HookPoint
from .layers import Linear


class MLP(nn.Module):
    """GPT-2's MLP: W_down GELU(W_up x); or SwiGLU (LLaMA): W_down (silu(W_gate x) * W_up x); or GeGLU
    (Gemma): the same with GELU for silu; or ReLU^2 (nanochat): W_down relu(W_up x)^2."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.swiglu, self.relu2 = cfg.gated, cfg.mlp == "relu2"  # (swiglu: any gated MLP, SwiGLU or GeGLU)
        self.geglu = cfg.mlp == "geglu"
        bias = cfg.bias or cfg.mlp_bias
        self.c_fc = Linear(cfg.d_model, cfg.d_mlp, bias=bias)  # up-projection (SwiGLU: the value)
        if self.swiglu:
            self.c_gate = Linear(cfg.d_model, cfg.d_mlp, bias=bias)  # SwiGLU, GeGLU: the gate
            self.hook_gate = HookPoint()  # (B, T, dm) silu(x W_gate) (GeGLU: gelu): how far each unit opens
            self.hook_value = HookPoint()  # (B, T, dm) x W_up: what passes through the gate
        self.c_proj = Linear(cfg.d_mlp, cfg.d_model, bias=bias)  # down-projection
        self.approximate = "tanh" if cfg.gelu == "tanh" else "none"
        self.dropout = nn.Dropout(cfg.dropout)
        self.hook_pre = HookPoint()  # (B, T, dm) before the activation (SwiGLU: the gate's input)
        self.hook_post = HookPoint()  # (B, T, dm) after it (SwiGLU: gate * value)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.swiglu:
            pre = self.hook_pre(self.c_gate(x))
            gate = self.hook_gate(F.gelu(pre, approximate=self.approximate) if self.geglu else F.silu(pre))
            h = self.hook_post(gate * self.hook_value(self.c_fc(x)))
        elif self.relu2:  # nanochat: relu(x W_up)^2
            h = self.hook_post(F.relu(self.hook_pre(self.c_fc(x))).square())
        else:
            h = self.hook_pre(self.c_fc(x))
            h = self.hook_post(F.gelu(h, approximate=self.approximate))
        return self.dropout(self.c_proj(h))


class MoE(nn.Module):
    """Mixture of experts: a router scores n_expert FFNs for each token, the token goes to its
    top_k_experts, and their outputs are mixed by the router's probabilities (renormalised over the
    chosen ones). A load-balancing loss (Switch Transformer's: n_expert * sum_e f_e * P_e, f_e the
    share of assignments to expert e, P_e its mean probability) keeps the router from sending
    everything to one expert."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.k = cfg.top_k_experts
        self.router = Linear(cfg.d_model, cfg.n_expert, bias=False)
        self.experts = nn.ModuleList([MLP(cfg) for _ in range(cfg.n_expert)])
        self.hook_router_probs = HookPoint()  # (B, T, E) softmax of the router's scores
        self.hook_router_choice = HookPoint()  # (B, T, k) the chosen experts' indices
        self.aux_loss: torch.Tensor | None = None  # the last forward's load-balancing loss

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, d = x.shape
        # the router in float32 at least (bf16 training), in float64 for a float64 model
        probs = self.hook_router_probs(
            F.softmax(self.router(x).to(torch.promote_types(x.dtype, torch.float32)), dim=-1)
        )
        top = torch.topk(probs, self.k, dim=-1)
        choice = self.hook_router_choice(top.indices)  # (B, T, k)
        weights = (top.values / top.values.sum(-1, keepdim=True)).to(x.dtype)
        flat, out = x.reshape(-1, d), torch.zeros_like(x).reshape(-1, d)
        flat_choice, flat_w = choice.reshape(-1, self.k), weights.reshape(-1, self.k)
        for e, expert in enumerate(self.experts):
            rows, slot = (flat_choice == e).nonzero(as_tuple=True)
            if rows.numel():
                out.index_add_(0, rows, expert(flat[rows][None])[0] * flat_w[rows, slot, None])
        E = len(self.experts)
        share = torch.bincount(flat_choice.reshape(-1), minlength=E).float() / flat_choice.numel()
        self.aux_loss = E * (share * probs.reshape(-1, E).mean(0)).sum()
        return out.view(B, T, d)
