"""MiniGPT: a 2-block causal transformer with a separate (untied) LM head.

Written in the order the data flows, nanoGPT style. Attention uses the explicit masked
path (not a fused kernel) so every step is visible and deterministic on CPU.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from capstone.config import GPTConfig


def causal_attention(qkv: torch.Tensor, n_head: int, mask: torch.Tensor) -> torch.Tensor:
    """Masked multi-head attention of packed q, k, v (B, T, 3*C) -> (B, T, C), the heads
    re-assembled. Shared by the full module and tensor parallelism's slice of its heads."""
    B, T, C3 = qkv.size()
    C = C3 // 3
    hs = C // n_head
    q, k, v = qkv.split(C, dim=2)
    q = q.view(B, T, n_head, hs).transpose(1, 2)  # (B, nh, T, hs)
    k = k.view(B, T, n_head, hs).transpose(1, 2)  # (B, nh, T, hs)
    v = v.view(B, T, n_head, hs).transpose(1, 2)  # (B, nh, T, hs)
    att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))  # (B, nh, T, T)
    att = att.masked_fill(~mask[:, :, :T, :T], float("-inf"))
    att = F.softmax(att, dim=-1)
    y = att @ v  # (B, nh, T, hs)
    return y.transpose(1, 2).contiguous().view(B, T, C)  # re-assemble all head outputs


class CausalSelfAttention(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.n_head = config.n_head
        self.n_embd = config.n_embd
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd)  # q, k, v for all heads
        self.c_proj = nn.Linear(config.n_embd, config.n_embd)
        self.mask: torch.Tensor
        mask = torch.tril(torch.ones(config.block_size, config.block_size, dtype=torch.bool))
        # A buffer, not a parameter: it is never trained, synced or checkpointed.
        self.register_buffer("mask", mask.view(1, 1, config.block_size, config.block_size),
                             persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(causal_attention(self.c_attn(x), self.n_head, self.mask))


class MLP(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(self.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd)
        self.mlp = MLP(config)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class MiniGPT(nn.Module):
    """Token + position embedding, `n_layer` blocks, final LayerNorm, separate LM head."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.wpe = nn.Embedding(config.block_size, config.n_embd)
        self.blocks = nn.ModuleList([Block(config) for _ in range(config.n_layer)])
        self.ln_f = nn.LayerNorm(config.n_embd)
        # Untied on purpose (the lesson's choice): its gradient shape differs from wte's.
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Return logits (B, T, vocab) and, given targets (B, T), the mean cross-entropy."""
        T = idx.size(1)
        if T > self.config.block_size:
            raise ValueError(f"sequence of {T} tokens exceeds block_size {self.config.block_size}")
        pos = torch.arange(T, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)  # (B, T, C)
        for block in self.blocks:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))  # (B, T, vocab)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))
        return logits, loss


def build_model(config: GPTConfig, seed: int) -> MiniGPT:
    """Build MiniGPT with parameters drawn from `seed` (the same seed gives the same bytes)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return MiniGPT(config)


def count_params(model: nn.Module) -> int:
    """P: the number of trainable scalars, the unit of the 12P/N memory formula."""
    return sum(p.numel() for p in model.parameters())
