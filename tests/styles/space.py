"""One student-like ZeRO-1 program whose way of being written is chosen by knobs:

    python space.py --style launcher=spawn,reduce=ring,remat=reentrant --out DIR ...

(or `CAPSTONE_STYLE=...` in the environment; `--style` wins). Each knob (knobs.py) picks one
way real code writes that part: how the ranks start and meet, where the optimizer state
lives, how the collectives are written (ways.py), the backward, micro-batches, the model,
clipping, the checkpoint's writer and the process group. Every allowed combination is a
correct program of run contract v1; `python space.py --knobs` prints the space as JSON.
The training itself is lesson.train's, with the knobs as its Style.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import knobs

STYLE_VAR = "CAPSTONE_STYLE"


def split_style(argv: list[str]) -> tuple[dict[str, str], list[str]]:
    """The style `argv` (or the environment) names, and the contract's flags without it."""
    text, rest, i = os.environ.get(STYLE_VAR, ""), [], 0
    while i < len(argv):
        if argv[i] == "--style" and i + 1 < len(argv):
            text, i = argv[i + 1], i + 2
        elif argv[i].startswith("--style="):
            text, i = argv[i].split("=", 1)[1], i + 1
        else:
            rest.append(argv[i])
            i += 1
    return knobs.parse(text), rest


def lesson_style(k: dict[str, str]) -> Any:
    """lesson.Style for the knobs `k`."""
    import lesson
    import states
    from optimizer_class import OwnShard

    shard = {"adam_param": lesson.AdamShard, "optimizer_class": OwnShard,
             "out_of_place": states.OutOfPlace, "numpy": states.NumpySlice,
             "module_globals": states.Globals, "generator_locals": states.GeneratorLocals,
             "worker_locals": lesson.AdamShard,  # rank_main's locals replace it
             }[k["state"]]
    if k["mistake"] == "whole_moments":
        shard = states.WholeMoments
    return lesson.Style(
        shard=shard, use_grad=k["grad"] == "autograd_grad", thread_save=k["save"] == "thread",
        ddp=k["reduce"] == "ddp_hook", reduce=k["reduce"],
        gather=k["gather"], attention=k["model"] if k["model"] != "functional" else "fused_qkv",
        functional=k["model"] == "functional",
        remat="" if k["remat"] == "none" else k["remat"], micro=int(k["micro"]),
        mean_first=k["mean"] == "before", new_group=k["group"] == "new_group",
        clip=1.0 if k["clip"] == "global" else 0.0,
        rename_save=k["save"] == "rename", strided=k["rows"] == "strided",
        loss_first=k["guard"] == "loss_first", api=k["api"],
        mistake="" if k["mistake"] == "none" else k["mistake"])


def rank_main(rank: int, argv: list[str]) -> None:
    """One rank: meet the others the style's way, then train."""
    import lesson
    import torch
    import torch.distributed as dist

    k, flags = split_style(argv)
    a = lesson.parse(flags, tensor_parallel=k["reduce"] != "ddp_hook")
    if k["rendezvous"] == "file":
        dist.init_process_group("gloo", init_method=f"file://{a.out}/.rendezvous", rank=rank,
                                world_size=a.world_size)
    elif k["rendezvous"] == "tcp":
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{os.environ['SPACE_PORT']}",
                                rank=rank, world_size=a.world_size)
    else:  # env://: MASTER_ADDR and MASTER_PORT from the launcher (torchrun's own)
        dist.init_process_group("gloo", rank=rank, world_size=a.world_size)
    style = lesson_style(k)
    if k["state"] == "worker_locals" and k["mistake"] != "whole_moments":
        # The shard and its moments as this running function's locals, the slice's size
        # (the model's P over N, padded); the shard object only refers to them weakly.
        import functools
        import math

        import states

        # this rank's own parameters (under --tensor-parallel T: 1/T of each block's q, k, v
        # and output projection weights and the q, k, v biases) over its data-parallel group
        t = a.tensor_parallel
        split = lesson.L * (3 * lesson.C * lesson.C + 3 * lesson.C + lesson.C * lesson.C)
        P = sum(p.numel() for p in lesson.MiniGPT(style.attention).parameters())
        S = math.ceil((P - split * (t - 1) // t) / (a.world_size // t))
        master_t, exp_avg, exp_avg_sq = torch.zeros(S), torch.zeros(S), torch.zeros(S)
        style.shard = functools.partial(states.WorkerLocals, master_t, exp_avg, exp_avg_sq)
    if k["mistake"] == "whole_numpy_locals":
        # The moments whole, for every rank's slice, in numpy arrays that only this running
        # function's locals hold; the shard steps torch views of this rank's slice, so every
        # tensor it logs, saves and reports is a slice's size.
        import functools
        import math

        import numpy as np
        import states

        S = math.ceil(sum(p.numel() for p in lesson.MiniGPT().parameters()) / a.world_size)
        whole_m = np.zeros(S * a.world_size, dtype=np.float32)
        whole_v = np.zeros(S * a.world_size, dtype=np.float32)
        mine = slice(rank * S, (rank + 1) * S)
        style.shard = functools.partial(states.NumpyViews, whole_m[mine], whole_v[mine])
    lesson.train(rank, a.world_size, a, style)


def launch(argv: list[str]) -> None:
    """Start the ranks the style's way; exit non-zero when one fails."""
    import subprocess

    import lesson
    from optimizer_class import free_port, processes

    k, flags = split_style(argv)
    n = lesson.parse(flags, tensor_parallel=k["reduce"] != "ddp_hook").world_size
    argv = [f"--style={','.join(f'{a}={b}' for a, b in k.items())}", *flags]
    if k["launcher"] == "torchrun":
        if "TORCHELASTIC_RUN_ID" in os.environ:  # a rank torchrun started
            rank_main(int(os.environ["RANK"]), argv)
            return
        sys.exit(subprocess.call([sys.executable, "-m", "torch.distributed.run",
                                  "--standalone", f"--nproc-per-node={n}", __file__, *argv]))
    if k["launcher"] == "subprocess" and "RANK" in os.environ:  # a rank
        rank_main(int(os.environ["RANK"]), argv)
        return
    port = free_port()
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port, SPACE_PORT=port,
                      WORLD_SIZE=str(n))
    if k["launcher"] in ("fork", "spawn"):
        import torch.multiprocessing as mp

        mp.start_processes(rank_main, args=(argv,), nprocs=n, start_method=k["launcher"])
        return
    if k["launcher"] == "subprocess":
        ranks = [subprocess.Popen([sys.executable, __file__, *argv],
                                  env={**os.environ, "RANK": str(r)}) for r in range(n)]
        codes = [p.wait() for p in ranks]
        if any(codes):
            sys.exit(f"rank exit codes {codes}")
        return
    processes(k["launcher"].removeprefix("process_"), rank_main, argv, n)


def main(argv: list[str]) -> None:
    if argv[:1] == ["--knobs"]:
        print(json.dumps({"knobs": knobs.KNOBS, "excluded": knobs.EXCLUDED,
                          "mistakes": knobs.MISTAKES}))
        return
    k, _ = split_style(argv)
    wrong = knobs.conflicts(k)
    if wrong:
        print(f"space.py: --style: {'; '.join(wrong)}", file=sys.stderr)
        sys.exit(2)
    launch(argv)


if __name__ == "__main__":
    main(sys.argv[1:])
