"""A broken invariant, located: which check, which rank, which step, what was expected."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Violation:
    invariant: str
    rank: int | None
    step: int | None
    expected: Any
    found: Any
    message: str = ""
    # What the finding is, for the diagnosis to read (never its words): "" where no
    # diagnosis reads it
    kind: str = ""

    def where(self) -> str:
        parts = []
        if self.rank is not None:
            parts.append(f"rank {self.rank}")
        if self.step is not None:
            parts.append(f"step {self.step}")
        return " ".join(parts) or "run"

    def __str__(self) -> str:
        text = f"{self.where()}: expected {self.expected}, found {self.found}"
        return f"{text} ({self.message})" if self.message else text


def summarize(violations: list[Violation], limit: int = 5) -> str:
    """A readable assertion message: the first few violations, then a count."""
    lines = [f"  {v}" for v in violations[:limit]]
    if len(violations) > limit:
        lines.append(f"  ... and {len(violations) - limit} more")
    return "\n".join(lines)
