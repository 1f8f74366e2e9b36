"""MiniGPT and the deterministic data of the contract."""

from __future__ import annotations

from itertools import pairwise

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from capstone.config import GPTConfig
from capstone.data import global_batch, make_corpus, rank_batch
from capstone.model import build_model, count_params


def test_model_is_the_lessons_minigpt():
    cfg = GPTConfig()
    model = build_model(cfg, seed=0)
    assert (cfg.n_layer, cfg.n_embd, cfg.n_head, cfg.vocab_size, cfg.block_size) == \
        (2, 32, 4, 64, 16)
    assert model.lm_head.weight.data_ptr() != model.wte.weight.data_ptr()  # untied
    assert count_params(model) == 30080


def test_same_seed_same_parameters_other_seed_other():
    a, b, c = (build_model(GPTConfig(), s) for s in (0, 0, 1))
    for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.equal(pa, pb)
    assert not all(torch.equal(pa, pc) for pa, pc in zip(a.parameters(), c.parameters(),
                                                          strict=True))


@settings(deadline=None, max_examples=20)
@given(t=st.integers(1, 15), seed=st.integers(0, 1000))
def test_attention_is_causal(t, seed):
    model = build_model(GPTConfig(), 0).eval()
    g = torch.Generator().manual_seed(seed)
    idx = torch.randint(0, 64, (1, 16), generator=g)
    changed = idx.clone()
    changed[0, t:] = (changed[0, t:] + 1) % 64  # change only the future of position t-1
    with torch.no_grad():
        before, _ = model(idx)
        after, _ = model(changed)
    torch.testing.assert_close(before[:, :t], after[:, :t])


def test_corpus_is_deterministic_and_learnable():
    a, b = make_corpus(3, 500), make_corpus(3, 500)
    assert torch.equal(a, b) and not torch.equal(a, make_corpus(4, 500))
    assert int(a.min()) >= 0 and int(a.max()) < 64
    successors = {(int(x), int(y)) for x, y in pairwise(a)}
    assert len(successors) <= 64 * 4  # each token has at most four successors


@given(n=st.sampled_from([1, 2, 4, 8, 16]), seed=st.integers(0, 100))
def test_rank_rows_tile_the_global_batch(n, seed):
    b = 16 // n
    batch = global_batch(seed, n * b, 17)
    xs, ys = zip(*(rank_batch(batch, r, b) for r in range(n)), strict=True)
    single_x, single_y = rank_batch(global_batch(seed, 16, 17), 0, 16)
    assert torch.equal(torch.cat(xs), single_x) and torch.equal(torch.cat(ys), single_y)
    assert torch.equal(single_x[:, 1:], single_y[:, :-1])  # targets are inputs shifted by one
