"""The yardstick of Adam outside the program (tests/harness/check/adam_checks.py), on updates
made here by torch.optim.Adam: at any betas with β1 <= β2 and any learning rate they are
never charged; with the betas swapped, and as the raw moments' ratio without the bias
correction, they are told by name; under a learning-rate schedule or gradient clipping (not
Adam at one learning rate, and no mistake the suite can name) nothing is charged."""

from __future__ import annotations

import math
import re

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tests.harness.check.adam_checks import (
    BETAS_SWAPPED,
    UNCORRECTED,
    Trail,
    adam_verdicts,
    best_fit,
    trail_of,
)
from tests.harness.run.runs import BASE

STEPS, RANKS, SPOTS = 20, 4, 16
# Betas as programs set them: torch's default, nanoGPT's, and others a course meets
ORDERED = [(0.9, 0.999), (0.9, 0.95), (0.9, 0.99), (0.8, 0.999), (0.85, 0.98), (0.0, 0.99),
           (0.95, 0.999), (0.5, 0.9), (0.9, 0.9)]
RATES = st.sampled_from([1e-4, 1e-3, 1e-2, 3e-2])
# Rates whose updates float32 holds to the precision a name needs (at 1e-4, updates of
# parameters near 0.5 are ~1e3 ulps: the yardstick then names nothing, and charges nothing)
NAMED_AT = st.sampled_from([1e-3, 1e-2, 3e-2])
FEW = settings(max_examples=8)  # a fit is ~0.1 s: the default tier's time


def updates(betas: tuple[float, float], lr: float, seed: int, rule: str = "adam") -> Trail:
    """The samples the observer would take of a run whose optimizer is `rule`: the gradient
    of each step (elements of scales 1e-4..1, every seventh never reached, a drift and
    noise, as a model's) and the parameters after each update, in float32."""
    gen = torch.Generator().manual_seed(seed)
    n = RANKS * SPOTS
    scale = 10 ** torch.empty(n).uniform_(-4, 0, generator=gen)
    scale[::7] = 0
    drift = torch.randn(n, generator=gen)
    param = torch.nn.Parameter(torch.randn(n, generator=gen) * 0.5)
    opt = torch.optim.Adam([param], lr=lr, betas=betas)
    warmup = torch.optim.lr_scheduler.LambdaLR(opt, lambda t: min(1.0, (t + 1) / 10))
    m, v = torch.zeros(n), torch.zeros(n)
    grads, params = [], []
    for _ in range(STEPS):
        g = scale * (drift + 0.5 * torch.randn(n, generator=gen))
        if rule == "clipped":  # clip_grad_norm_ at 1e-2: every step's gradient rescaled
            g = g * min(1.0, 1e-2 / float(g.norm()))
        grads.append(g.clone())
        with torch.no_grad():
            if rule == "raw":  # Adam's moments without the bias correction
                m.mul_(betas[0]).add_(g, alpha=1 - betas[0])
                v.mul_(betas[1]).addcmul_(g, g, value=1 - betas[1])
                param.addcdiv_(m, v.sqrt().add_(1e-8), value=-lr)
            else:
                param.grad = g
                opt.step()
                if rule == "warmup":
                    warmup.step()
        params.append(param.detach().clone())
    shape = (STEPS, RANKS, SPOTS)
    return Trail(torch.stack(grads).double().reshape(shape).numpy(),
                 torch.stack(params).double().reshape(shape).numpy())


@FEW
@given(st.sampled_from(ORDERED), RATES, st.integers(0, 2**16))
@example((0.9, 0.999), 1e-2, 0)  # the reference's
@example((0.9, 0.9), 1e-4, 1)  # β1 = β2: allowed
def test_adam_at_any_ordered_betas_and_rate_is_never_charged(betas, lr, seed):
    assert adam_verdicts(updates(betas, lr, seed)) == []


@FEW
@given(st.sampled_from([b for b in ORDERED if b[1] - b[0] >= 0.05 and b[0] >= 0.5]), NAMED_AT,
       st.integers(0, 2**16))
@example((0.9, 0.999), 1e-2, 0)  # tests/holdout/betas_swapped.py's
def test_adam_with_its_betas_swapped_is_told_so(betas, lr, seed):
    [v] = adam_verdicts(updates((betas[1], betas[0]), lr, seed))
    assert v.message.startswith(BETAS_SWAPPED), v
    said = re.search(r"β1 = ([\d.]+) > β2 = ([\d.]+)", v.message)
    assert said, v.message
    # the betas measured, to a tenth of a decade of 1 - β (a β1 near 1 barely moves the
    # updates of 20 steps)
    assert all(abs(math.log10((1 - float(m)) / (1 - b))) < 0.1
               for m, b in zip(said.groups(), (betas[1], betas[0]), strict=True)), v.message


@FEW
@given(st.sampled_from([b for b in ORDERED if b[1] >= 0.99 and b[0] >= 0.8]), NAMED_AT,
       st.integers(0, 2**16))
@example((0.9, 0.999), 1e-2, 0)  # tests/holdout/no_bias_correction.py's
def test_adam_without_its_bias_correction_is_told_so(betas, lr, seed):
    [v] = adam_verdicts(updates(betas, lr, seed, "raw"))
    assert v.message.startswith(UNCORRECTED), v


@FEW
@given(st.sampled_from(ORDERED), RATES, st.integers(0, 2**16),
       st.sampled_from(["warmup", "clipped"]))
def test_updates_no_named_mistake_fits_are_never_charged(betas, lr, seed, rule):
    """A warmup or clipping is not Adam at one learning rate, and no mistake the suite names:
    whatever fits, nothing is told (the parity check judges the trajectory)."""
    assert adam_verdicts(updates(betas, lr, seed, rule)) == []


@pytest.mark.reads(BASE)
def test_the_reference_is_measured_as_the_adam_it_runs(reference_only, run):
    """No verdict must not mean not measured: the observer's samples of the reference's N-rank
    run follow ZeRO-1's layout, and the rule that fits them best is the reference's own Adam
    (its betas and learning rate, read from its config), to float32's precision."""
    from capstone.config import TrainConfig

    trail = trail_of(run(BASE))
    assert trail is not None, "the reference's steps were not sampled as reduce, then gather"
    fit, cfg = best_fit(trail, True), TrainConfig
    assert fit.residual < 1e-4, fit
    assert abs(fit.beta1 - cfg.betas[0]) < 1e-3 and abs(fit.lr / cfg.lr - 1) < 1e-4, fit
    assert adam_verdicts(trail) == []
