"""The suite's nemesis, loaded by the observer in runs the suite breaks on purpose.

`CAPSTONE_NEMESIS=nan@S:R` makes rank R's gradients of training step S non-finite without the
program asking (no `--inject` flag): that step's first backward pass is seeded with NaN
(`grad_tensors` of `torch.autograd.backward`, `grad_outputs` of `torch.autograd.grad`), so
the NaN reaches the gradients however the program collects them (`.grad`, hooks, flat
buffers, `autograd.grad`), while the loss the program computed stays finite. It fires once
per process, the first time that step runs, never on a replay.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# The argument that seeds each function's backward, by name and position.
_SEED = {"backward": ("grad_tensors", 1), "grad": ("grad_outputs", 2)}


@dataclass
class Nemesis:
    kind: str
    step: int
    rank: int
    fired: bool = False

    @classmethod
    def parse(cls, spec: str) -> Nemesis | None:
        """`nan@S:R`; None (and nothing done) for anything else."""
        try:
            kind, rest = spec.split("@", 1)
            step, rank = rest.split(":", 1)
            return cls(kind, int(step), int(rank)) if kind == "nan" else None
        except ValueError:
            return None

    def due(self, step: int, rank: int | None) -> bool:
        return not self.fired and step == self.step and (rank or 0) == self.rank

    def poison(self, name: str, roots: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
               ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The call's arguments with its backward seeded by NaN instead of ones."""
        import torch

        self.fired = True
        tensors = [roots] if isinstance(roots, torch.Tensor) else list(roots or [])
        seeds = tuple(torch.full_like(t, float("nan")) for t in tensors)
        key, position = _SEED[name]
        if len(args) > position:
            args = (*args[:position], seeds, *args[position + 1:])
        else:
            kwargs = {**kwargs, key: seeds}
        return args, kwargs
