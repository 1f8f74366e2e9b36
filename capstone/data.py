"""Deterministic next-token data: the corpus and the fixed rank-local batches of the contract."""

from __future__ import annotations

import torch


def make_corpus(seed: int, total_tokens: int, vocab_size: int = 64) -> torch.Tensor:
    """`total_tokens` int64 tokens from a seeded sparse Markov chain (learnable, not noise).

    Each token has four likely successors, so a model can drive the loss well below
    log(vocab); the same (seed, total_tokens, vocab_size) always gives the same tokens.
    """
    if total_tokens <= 0:
        raise ValueError(f"total_tokens must be positive, got {total_tokens}")
    g = torch.Generator().manual_seed(seed)
    successors = torch.randint(0, vocab_size, (vocab_size, 4), generator=g)
    choice = torch.randint(0, 4, (total_tokens,), generator=g)
    tokens = torch.empty(total_tokens, dtype=torch.long)
    tokens[0] = int(torch.randint(0, vocab_size, (1,), generator=g))
    for i in range(1, total_tokens):
        tokens[i] = successors[tokens[i - 1], choice[i]]
    return tokens


def global_batch(seed: int, rows: int, seq_len: int, vocab_size: int = 64) -> torch.Tensor:
    """The contract's global batch: `rows` = N*B sequences of `seq_len` tokens, (N*B, seq_len).

    A function of (seed, N*B) alone, so N=1, B=16 sees the same data as N=4, B=4.
    """
    return make_corpus(seed, rows * seq_len, vocab_size).view(rows, seq_len)


def rank_batch(batch: torch.Tensor, rank: int,
               batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Rank r's rows [r*B, (r+1)*B) split into inputs and one-token-shifted targets."""
    rows = batch[rank * batch_size:(rank + 1) * batch_size]
    return rows[:, :-1], rows[:, 1:]
