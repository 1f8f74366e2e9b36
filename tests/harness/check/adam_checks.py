"""A yardstick of Adam outside the program: the update each sampled element took, fitted
by Adam's own rule.

The one-rank run makes every mistake the N-rank run makes, so a wrong Adam in both passes
parity. The observer samples, every step, the gradient on its way to its reduction and the
shard on its way to its gather, at 16 positions of each rank's shard (`trail`,
tests/observer/_observer_calls.py). From those the suite knows, per position, the reduced
gradients g_1..g_s and the update θ_s - θ_(s-1), and fits

    θ_s - θ_(s-1) = -lr · m̂_s / (sqrt(v̂_s) + eps)      (torch.optim.Adam, Kingma & Ba)

over the betas (one learning rate for every step; the fitted lr absorbs the gradient's
scale, so a mean and a sum reduce alike). It tells a mistake only on its signature: the
updates fit Adam exactly with β1 > β2 and no Adam with β1 <= β2 (the betas swapped), or
fit m / sqrt(v) without the bias correction and no Adam with it. Where no rule fits (a
learning-rate schedule, clipping, weight decay, a layout the samples do not follow) it
infers nothing.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from tests.harness.check.checks import Run
from tests.harness.observe.traces import ProcessTrace
from tests.harness.observe.violations import Violation

INVARIANT = "single_process_parity"  # the trajectory's check: its update is graded with it
FITS = 1e-3  # a rule fits the updates: relative residual at most (the reference's: ~1e-6)
MISFIT = 1e-2  # the contract's Adam does not fit: its best residual at least
MIN_STEPS = 4  # updates to fit, at least
EPS = 1e-8  # torch's default; a program's own eps moves only elements whose moments are ~eps

# How the betas are searched: x = -log10(1 - β), so 0.9 is 1 and 0.999 is 3
_X = np.round(np.arange(0.3, 4.51, 0.1), 6)
_LOWEST = 1e-3  # the pattern search's last step in x


@dataclass(frozen=True)
class Trail:
    """The sampled elements of a run, steps x shards x positions: the reduced gradient (the
    ranks' mean of what they put into the reduction) and the shard after each step's
    update."""

    grads: np.ndarray
    params: np.ndarray


@dataclass(frozen=True)
class Fit:
    """The rule that fits the updates best within a region of the betas."""

    residual: float  # ||update + lr·direction|| / ||update||
    beta1: float
    beta2: float
    lr: float
    corrected: bool

    def betas(self) -> str:
        return f"({self.beta1:.5g}, {self.beta2:.5g})"


def _segments(p: ProcessTrace) -> dict[int, list[dict[str, object]]]:
    """step -> the sampled calls from its first backward to the next step's, in order."""
    starts: dict[int, int] = {}
    for t, s in zip(p.backwards, p.backward_steps, strict=False):
        starts.setdefault(s, t)
    steps = sorted(starts)
    calls = sorted((c for c in p.calls if c.trail), key=lambda c: c.t0)
    out = {}
    for i, s in enumerate(steps):
        end = starts[steps[i + 1]] if i + 1 < len(steps) else math.inf
        out[s] = [c.trail for c in calls if starts[s] <= c.t0 < end and c.trail]
    return out


def trail_of(run: Run) -> Trail | None:
    """The sampled gradients and shards of every step, where each rank's step holds one
    reduction then one gather of a gradient's size (ZeRO-1 as the contract lays it out);
    None where the run shows anything else (no observer, one rank, a DDP without gathers,
    rings by hand, micro-batches, a rollback)."""
    if run.observed is None or run.world_size < 2:
        return None
    ranks = run.observed.trainers()
    n = run.world_size
    if sorted(ranks) != list(range(n)):
        return None
    segments = {r: _segments(p) for r, p in ranks.items()}
    steps = list(range(1, run.steps + 1))
    if len(steps) <= MIN_STEPS:
        return None
    grads, params = [], []
    for s in steps:
        seen = [segments[r].get(s, []) for r in range(n)]
        if any(len(calls) != 2 or "x" not in calls[0] for calls in seen):
            return None
        try:
            x = np.array([calls[0]["x"] for calls in seen], dtype=np.float64).reshape(n, n, -1)
            own = [np.asarray(seen[k][1]["p"] if "p" in seen[k][1] else
                              np.asarray(seen[k][1]["x"]).reshape(n, -1)[k], dtype=np.float64)
                   for k in range(n)]
            shards = np.stack(own)
        except (ValueError, TypeError, KeyError):
            return None
        if shards.shape != x.shape[1:]:
            return None
        grads.append(x.mean(axis=0))
        params.append(shards)
    return Trail(np.stack(grads), np.stack(params))


def _moments(grads: np.ndarray, betas: np.ndarray, power: int, corrected: bool
             ) -> np.ndarray:
    """For each beta: the moving average of grads**power at every step, divided by
    (1 - beta^t) where `corrected` (betas x steps x ...)."""
    b = betas.reshape(-1, *([1] * (grads.ndim - 1)))
    avg, out = np.zeros((len(betas), *grads.shape[1:])), []
    for t, g in enumerate(grads, 1):
        avg = b * avg + (1 - b) * g ** power
        out.append(avg / (1 - b ** t) if corrected else avg)
    return np.stack(out, axis=1)


def residuals(trail: Trail, beta1: np.ndarray, beta2: np.ndarray, corrected: bool
              ) -> tuple[np.ndarray, np.ndarray]:
    """How far the updates of steps 2..S are from -lr·m̂/(sqrt(v̂) + eps) at the best single
    lr, for every pair of beta1 x beta2: (relative residuals, lrs), each len(beta1) x
    len(beta2). (Step 1's update needs the parameters before it, which the samples do not
    hold.) m / (sqrt(v) + eps), the raw moments, where not `corrected`."""
    d = np.diff(trail.params, axis=0).reshape(len(trail.params) - 1, -1)
    flat = trail.grads.reshape(len(trail.grads), -1)
    m = _moments(flat, np.asarray(beta1, dtype=np.float64), 1, corrected)[:, None, 1:]
    v = _moments(flat, np.asarray(beta2, dtype=np.float64), 2, corrected)[None, :, 1:]
    u = m / (np.sqrt(v) + EPS)
    du, uu = (u * d).sum(axis=(2, 3)), (u * u).sum(axis=(2, 3))
    size = float((d * d).sum())
    with np.errstate(divide="ignore", invalid="ignore"):
        lr = np.where(uu > 0, -du / uu, 0.0)
        left = np.maximum(size - du * du / np.where(uu > 0, uu, np.inf), 0.0)
        r = np.where(size > 0, np.sqrt(left / size), np.inf)
    return r, lr


def residual(trail: Trail, beta1: float, beta2: float, corrected: bool) -> tuple[float, float]:
    """`residuals` of one pair of betas: (relative residual, lr)."""
    r, lr = residuals(trail, np.array([beta1]), np.array([beta2]), corrected)
    return float(r[0, 0]), float(lr[0, 0])


def _beta(x: float) -> float:
    return float(1 - 10 ** -x)


def best_fit(trail: Trail, corrected: bool,
             allowed: Callable[[float, float], bool] = lambda x1, x2: True) -> Fit:
    """The betas whose rule fits the updates best, among those `allowed` (given as x = -log10
    (1 - β); β1 = 0, momentum off, is x1 = 0): a grid, then a pattern search from its best
    point."""
    x1s = np.concatenate([[0.0], _X])
    grid, _ = residuals(trail, 1 - 10 ** -x1s, 1 - 10 ** -_X, corrected)
    mask = np.array([[allowed(a, b) for b in _X] for a in x1s])
    grid = np.where(mask, grid, np.inf)
    i, j = np.unravel_index(int(np.argmin(grid)), grid.shape)
    r, x1, x2 = float(grid[i, j]), float(x1s[i]), float(_X[j])
    step = 0.05
    while step >= _LOWEST:
        moves = [(x1 + a, x2 + b) for a, b in ((step, 0), (-step, 0), (0, step), (0, -step))
                 if 0 <= x1 + a <= _X[-1] and _X[0] <= x2 + b <= _X[-1]
                 and allowed(x1 + a, x2 + b)]
        better = min(((residual(trail, _beta(a), _beta(b), corrected)[0], a, b)
                      for a, b in moves), default=(math.inf, x1, x2), key=lambda t: t[0])
        if better[0] < r:
            r, x1, x2 = better
        else:
            step /= 2
    b1 = _beta(x1)
    return Fit(r, b1, _beta(x2), residual(trail, b1, _beta(x2), corrected)[1], corrected)


# What the feedback says of each signature (diagnosis reads the start of the message)
BETAS_SWAPPED = "Adam's betas are swapped"
UNCORRECTED = "Adam's bias correction is missing"


def rounding(trail: Trail) -> float:
    """The relative residual float32's rounding alone can leave: each update is the
    difference of two parameters stored in float32, each within an ulp of its value."""
    ulp = np.spacing(np.abs(trail.params[1:]).astype(np.float32)).astype(np.float64)
    size = float(np.linalg.norm(np.diff(trail.params, axis=0)))
    return float(np.linalg.norm(ulp)) / size if size > 0 else math.inf


def adam_verdicts(trail: Trail) -> list[Violation]:
    """The mistake the updates single out, if any: see the module's docstring. A rule fits
    within FITS, or within twice what float32's rounding leaves where that is more (small
    updates of large parameters); the contract's Adam misfits beyond ten times that."""
    fits = max(FITS, 2 * rounding(trail))
    adam = best_fit(trail, True, lambda x1, x2: x1 <= x2)
    if adam.residual <= max(MISFIT, 10 * fits):
        return []
    expected = (f"Adam's update with β1 <= β2 (best fit: {adam.betas()}, residual "
                f"{adam.residual:.2g})")
    found = [(fit, rule, why, kind) for fit, rule, why, kind in (
        (best_fit(trail, True), "Adam's update", f"{BETAS_SWAPPED}: every sampled update is "
         "Adam's with β1 = {b1:.5g} > β2 = {b2:.5g}", "adam_betas_swapped"),
        (best_fit(trail, False), "m / (sqrt(v) + eps)", f"{UNCORRECTED}: every sampled update "
         "is the raw moments' ratio m / (sqrt(v) + eps), without dividing m by (1 - β1^t) and "
         "v by (1 - β2^t)", "adam_uncorrected")) if fit.residual <= fits][:1]
    return [Violation(INVARIANT, None, None, expected,
                      f"{rule} with betas {fit.betas()} (residual {fit.residual:.1g})",
                      why.format(b1=fit.beta1, b2=fit.beta2), kind=kind)
            for fit, rule, why, kind in found]


def check_adam(run: Run) -> list[Violation]:
    """The N-rank run's updates, fitted by Adam outside the program (nothing where the
    samples do not follow ZeRO-1's layout)."""
    trail = trail_of(run)
    return adam_verdicts(trail) if trail is not None else []
