"""One exact ledger of points: every figure a grading shows is a whole number of units.

A point is UNIT units (ten-thousandths, the precision results.json has always shown). Points
are split with the largest-remainder method, so that the parts of a whole add up to it
exactly: the modules' points to the grading's total, a module's tests' `max_score`s to the
module, and the tests' scores to the module's score and to the total. Floats appear only
where a figure is written out (`points`), as the decimal a student reads; summing those
decimals (`decimal_sum`) gives the total to the last digit. Without it, seven checks of a
20-point invariant each showed 2.8571 and added up to 19.9997.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from decimal import Decimal

UNIT = 10_000  # units per point: a figure is exact to 1e-4 points


def units(figure: float) -> int:
    """The units of a figure read from a results file (or a weight): its nearest whole."""
    return round(Decimal(repr(float(figure))) * UNIT)


def points(amount: int) -> float:
    """A number of units as the figure a results file shows (2.8571: its shortest repr is
    the exact decimal)."""
    return amount / UNIT


def text(amount: int) -> str:
    """A number of units as a person reads it: every digit it has, none it lacks
    ("20", "2.8571", "97.5")."""
    whole, frac = divmod(abs(amount), UNIT)
    sign = "-" if amount < 0 else ""
    return f"{sign}{whole}" + (f".{frac:04d}".rstrip("0") if frac else "")


def split(total: int, weights: Sequence[float]) -> list[int]:
    """`total` units split in proportion to `weights` (all equal where they sum to 0), each
    part whole and the parts summing to `total` exactly: each gets the floor of its share,
    and the units left over go one each to the largest remainders (the earlier first on a
    tie, so that a split is the same every time)."""
    if not weights:
        if total:
            raise ValueError(f"cannot split {total} units among no parts")
        return []
    exact = [Decimal(repr(float(w))) for w in weights]
    whole = sum(exact)
    if whole <= 0:
        exact, whole = [Decimal(1)] * len(weights), Decimal(len(weights))
    shares = [Decimal(total) * w / whole for w in exact]
    parts = [int(s) for s in shares]  # floors: the shares are >= 0
    left = total - sum(parts)
    order = sorted(range(len(parts)), key=lambda i: (-(shares[i] - parts[i]), i))
    for i in order[:left]:
        parts[i] += 1
    return parts


def scaled(total: float, weights: dict[str, float]) -> dict[str, int]:
    """`total` points shared among `weights`'s keys in proportion to their weights, in
    units: the graded modules' points where some modules did not run (their weights are
    given back to the others so that the grading is still out of `total`)."""
    names = list(weights)
    return dict(zip(names, split(units(total), [weights[n] for n in names]), strict=True))


def earned(worth: int, share: float) -> int:
    """What a part worth `worth` units earns at `share` (0 to 1) of it, in whole units."""
    return round(Decimal(worth) * Decimal(repr(float(share))))


def earned_each(caps: Sequence[int], shares: Sequence[float]) -> list[int]:
    """What parts worth `caps` units earn at their `shares`: their exact sum rounded once,
    then split in proportion to what each earned, so that parts that all earn the same
    share earn together exactly what their whole would (`earned(sum(caps), share)`)."""
    exact = [Decimal(c) * Decimal(repr(float(s))) for c, s in zip(caps, shares, strict=True)]
    return split(round(sum(exact, Decimal(0))), [float(e) for e in exact])


def decimal_sum(figures: Iterable[float]) -> Decimal:
    """The exact sum of figures as written (their decimals, not their binary floats): what
    a student gets adding up their rows."""
    return sum((Decimal(repr(float(f))) for f in figures), Decimal(0))
