"""Command line: `python -m capstone` runs the demo; `python -m capstone --out DIR ...` is
one training run under run contract v1 (see docs/contract.md)."""

from __future__ import annotations

import argparse
import functools
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

# Only torch-free imports here: a bad flag or --help answers at once, without importing torch.
from capstone.config import GPTConfig, TrainConfig, parse_fault, under_torchrun

EXIT_USAGE = 2
EXIT_FAILED = 1


class UsageError(Exception):
    """A flag or value the run cannot accept; exits 2 with one line on stderr."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, as the contract asks
        raise UsageError(f"{message} (see --help)")


def _positive_int(name: str, minimum: int) -> functools.partial[int]:
    return functools.partial(_int_at_least, name=name, minimum=minimum)


def _int_at_least(text: str, name: str, minimum: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{name} takes a whole number, got {text!r}") from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f"{name} must be >= {minimum}, got {value}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return value


def _fault(text: str) -> object:
    try:
        return parse_fault(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m capstone",
                description="MiniGPT trained by N gloo ranks with ZeRO-1 and sharded "
                            "checkpoints (run contract v1). Without flags: the demo.")
    p.add_argument("--out", type=Path, required=True, help="run directory (created if missing)")
    p.add_argument("--world-size", type=_positive_int("--world-size", 1), default=None,
                   help="data-parallel ranks (default 4; under torchrun: its WORLD_SIZE)")
    p.add_argument("--steps", type=_positive_int("--steps", 1), default=20)
    p.add_argument("--seed", type=_positive_int("--seed", 0), default=0)
    p.add_argument("--batch-size", type=_positive_int("--batch-size", 1), default=4,
                   help="sequences per rank per step")
    p.add_argument("--checkpoint-every", type=_positive_int("--checkpoint-every", 0), default=10,
                   help="checkpoint after every step divisible by this (0: never)")
    p.add_argument("--checkpoint-every-seconds", type=_positive_float, default=None,
                   help="also checkpoint when this much wall-clock time has passed")
    p.add_argument("--resume", type=Path, default=None, help="checkpoint directory to resume")
    p.add_argument("--inject", type=_fault, default=None, help="one-shot fault KIND@STEP")
    p.add_argument("--lr", type=float, default=1e-2, help="Adam learning rate")
    p.add_argument("--micro-batches", type=_positive_int("--micro-batches", 1), default=1,
                   help="split each rank's batch into M micro-batches, one reduction per step")
    p.add_argument("--tensor-parallel", type=_positive_int("--tensor-parallel", 1), default=1,
                   help="split each block's attention heads over this many ranks (exercise 1; "
                        "ranks = tp x dp, ZeRO-1 over dp)")
    p.add_argument("--backend", choices=["gloo", "nccl"], default="gloo",
                   help="collective backend (nccl needs --device cuda; launch it with torchrun)")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                   help="where each rank trains (cuda: the rank's own GPU)")
    p.add_argument("--n-embd", type=_positive_int("--n-embd", 4), default=32,
                   help="embedding width (a multiple of the 4 heads; the contract's is 32)")
    p.add_argument("--pg-timeout", type=_positive_float, default=30.0,
                   help="seconds before a collective that cannot complete fails (default 30)")
    return p


def config_from_args(argv: Sequence[str]) -> TrainConfig:
    """Parse and validate contract flags; UsageError says what to pass instead."""
    a = build_parser().parse_args(list(argv))
    world_size = a.world_size or 4
    if under_torchrun():
        env_size = int(os.environ["WORLD_SIZE"])
        if a.world_size not in (None, env_size):
            raise UsageError(f"--world-size {a.world_size} but torchrun started {env_size} ranks; "
                             "drop --world-size or make them agree")
        world_size = env_size
    if a.checkpoint_every > a.steps:
        raise UsageError(f"--checkpoint-every {a.checkpoint_every} is after the last step "
                         f"(--steps {a.steps}): pass a value <= {a.steps}, or 0 for none")
    if a.inject is not None and a.inject.step > a.steps:
        raise UsageError(f"--inject {a.inject.kind}@{a.inject.step} would never fire: "
                         f"pass a step <= --steps {a.steps}")
    if a.inject is not None and a.inject.kind == "killsave" and (
            not a.checkpoint_every or a.inject.step % a.checkpoint_every):
        raise UsageError(f"--inject killsave@{a.inject.step} needs a checkpoint at step "
                         f"{a.inject.step}: pass --checkpoint-every dividing it")
    if a.batch_size % a.micro_batches:
        raise UsageError(f"--batch-size {a.batch_size} does not split into --micro-batches "
                         f"{a.micro_batches}: pass a divisor of {a.batch_size}")
    tp = a.tensor_parallel
    if tp > 1 and (world_size % tp or GPTConfig.n_head % tp):
        raise UsageError(f"--tensor-parallel {tp} must divide --world-size {world_size} and the "
                         f"{GPTConfig.n_head} heads: pass 1, 2 or 4")
    if a.backend == "nccl" and a.device != "cuda":
        raise UsageError("--backend nccl moves CUDA tensors only: add --device cuda "
                         "(or keep the default gloo on CPU)")
    if a.n_embd % GPTConfig.n_head:
        raise UsageError(f"--n-embd {a.n_embd} is not a multiple of {GPTConfig.n_head} heads: "
                         f"pass e.g. {a.n_embd - a.n_embd % GPTConfig.n_head or 32}")
    if not a.lr > 0:
        raise UsageError(f"--lr must be positive, got {a.lr}")
    return TrainConfig(out=a.out, world_size=world_size, steps=a.steps, seed=a.seed,
                       batch_size=a.batch_size, checkpoint_every=a.checkpoint_every,
                       checkpoint_every_seconds=a.checkpoint_every_seconds or 0.0,
                       resume=a.resume, inject=a.inject, lr=a.lr, pg_timeout_s=a.pg_timeout,
                       micro_batches=a.micro_batches, tensor_parallel=tp,
                       backend=a.backend, device=a.device,
                       model=GPTConfig(n_embd=a.n_embd))


def preflight(cfg: TrainConfig) -> None:
    """Refuse, before any file is written, what would fail or overwrite data later."""
    import torch

    from capstone.checkpoint import load_checkpoint
    from capstone.model import MiniGPT, count_params

    if cfg.device == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda but this torch sees no CUDA device: drop --device "
                         "(CPU and gloo are the default)")
    if cfg.resume is not None:
        loaded = load_checkpoint(cfg.resume)  # CheckpointError names the bad file
        # On one thread: a computation on more starts torch's thread pool, and a launcher
        # with threads must start its ranks through a fork server that imports torch
        # again (~1.5 s); single-threaded, it forks them at once. (The meta device would
        # draw no values but imports torch._dynamo for its reference kernels, ~1.7 s.)
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            n_params = count_params(MiniGPT(cfg.model))
        finally:
            torch.set_num_threads(threads)
        if loaded.n_params != n_params:
            raise UsageError(f"{cfg.resume} holds {loaded.n_params} parameters but this model "
                             f"({cfg.model}) has {n_params}: resume with the shape it was "
                             "written with")
        if loaded.step >= cfg.steps:
            raise UsageError(f"{cfg.resume} is at step {loaded.step}, nothing is left to run "
                             f"with --steps {cfg.steps}: pass --steps > {loaded.step}")
        mesh = loaded.mesh["tp"] if loaded.mesh else 1
        if mesh != cfg.tensor_parallel or (mesh > 1 and loaded.world_size != cfg.world_size):
            raise UsageError(f"{cfg.resume} was written by {loaded.world_size} ranks with "
                             f"--tensor-parallel {mesh}: resume with the same "
                             f"--world-size {loaded.world_size} and --tensor-parallel {mesh}")
        if loaded.world_size != cfg.world_size:
            print(f"capstone: resharding step {loaded.step} from {loaded.world_size} to "
                  f"{cfg.world_size} ranks", file=sys.stderr)
    elif cfg.out.exists() and any(cfg.out.iterdir()) and not under_torchrun():
        raise UsageError(f"--out {cfg.out} is not empty: pass a fresh directory "
                         "(or --resume a checkpoint to continue a run)")


def import_torch() -> None:
    """Import torch with Python's cyclic collector paused, then freeze what it made, as
    Python's gc docs advise a process that forks workers: torch's ~165,000 objects live as
    long as the process, yet the collector would reread them ~360 times during the import
    and at each full collection after it, in the launcher and in every forked rank (where
    each read also copies a page the rank shares with the launcher): ~0.15 s of the demo's
    2.3 s. What the ranks make is collected as usual. A process that had torch already (a
    test runner calling `main`) is left as it is."""
    if "torch" in sys.modules:
        return
    import gc

    collecting = gc.isenabled()
    gc.disable()
    try:
        import torch  # noqa: F401
    finally:
        if collecting:
            gc.enable()
    gc.freeze()


def run(cfg: TrainConfig) -> None:
    """One training run under the contract; raises on any failure."""
    from capstone.launch import run_ranks
    from capstone.trainer import train

    preflight(cfg)
    cfg.out.mkdir(parents=True, exist_ok=True)
    run_ranks(functools.partial(train, cfg), cfg.world_size, cfg.out, cfg.pg_timeout_s,
              cfg.backend, cfg.device)


def reimported_by_a_rank() -> bool:
    """True while a rank that multiprocessing starts by forkserver or spawn re-imports the
    script that launched it (as `__mp_main__`, before the rank's own code runs), the flag
    Python's own check reads. The launcher starts its ranks by forkserver once it has
    threads, so a script that calls `exit_now(main(...))` at its top level, without
    `if __name__ == "__main__":`, runs again in every rank: it must then do nothing."""
    import multiprocessing

    return bool(getattr(multiprocessing.current_process(), "_inheriting", False))


def main(argv: Sequence[str] | None = None) -> int:
    if reimported_by_a_rank():
        return 0
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] == "demo":
        import_torch()
        from capstone.demo import main as demo_main
        return demo_main(argv[1:])
    try:
        cfg = config_from_args(argv)
    except UsageError as e:
        print(f"capstone: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    import_torch()
    from capstone.checkpoint import CheckpointError
    from capstone.guard import DivergenceError
    from capstone.launch import LaunchError

    try:
        run(cfg)
    except UsageError as e:
        print(f"capstone: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except (LaunchError, CheckpointError, DivergenceError) as e:
        print(f"capstone: error: {e}", file=sys.stderr)
        return EXIT_FAILED
    if not under_torchrun() or int(os.environ["RANK"]) == 0:
        print(f"capstone: {cfg.world_size} ranks finished step {cfg.steps}; run directory "
              f"{cfg.out}")
    return 0


def exit_now(code: int) -> None:
    """Flush stdout/stderr and leave at once, without the interpreter's teardown.

    Call it only once every rank is joined and every file this process wrote is closed:
    the teardown then has nothing left to save, yet after `import torch` it would still
    garbage-collect each object torch created, about 0.6 s here (as long as the 20
    training steps). In a rank re-importing the script (`reimported_by_a_rank`) it returns:
    the rank's own code runs next.
    """
    if reimported_by_a_rank():
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def console_main() -> None:
    """`python -m capstone` and the `capstone` script: `main`, then `exit_now`. An exception
    from `main` still ends the normal way, with its traceback."""
    exit_now(main())


__all__ = ["GPTConfig", "TrainConfig", "build_parser", "config_from_args", "console_main",
           "exit_now", "import_torch", "main", "run"]
