"""The suite's nemesis, loaded by the observer in runs the suite breaks on purpose.

`KIND@S:R` (served by tests/harness/run/plan.py only to the question that names its moment,
never in the run's environment), with no `--inject` flag, at a time the program does not
know:
- `nan@S:R`: rank R's gradients of training step S are non-finite: that step's first
  backward pass is seeded with NaN (`grad_tensors` of `torch.autograd.backward`,
  `grad_outputs` of `torch.autograd.grad`), so the NaN reaches the gradients however the
  program collects them (`.grad`, hooks, flat buffers, `autograd.grad`), while the loss the
  program computed stays finite;
- `kill@S:R`: rank R is SIGKILLed as its step S's first backward pass starts;
- `killsave@C:R`: rank R is SIGKILLed while it writes its shard of checkpoint C (the shard a
  `torch.save` of the contract's dict with `step` C): half of the shard's bytes reach the
  file the program named, then the process dies.
Each fires once per run, the first time its step runs, never on a replay.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

KINDS = ("nan", "kill", "killsave")
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
            return cls(kind, int(step), int(rank)) if kind in KINDS else None
        except ValueError:
            return None

    def kill(self) -> None:
        import os
        import signal

        self.fired = True
        os.kill(os.getpid(), signal.SIGKILL)

    def torn_save(self, real_save: Any, obj: Any, f: Any, *args: Any, **kwargs: Any) -> None:
        """Half of what `torch.save(obj, f)` would write reaches `f`; then the rank dies."""
        import io
        import os

        buffer = io.BytesIO()
        real_save(obj, buffer, *args, **kwargs)
        half = buffer.getvalue()[:len(buffer.getvalue()) // 2]
        if isinstance(f, (str, os.PathLike)):
            with open(f, "wb") as out:
                out.write(half)
        else:
            f.write(half)
            f.flush()
        self.kill()

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
