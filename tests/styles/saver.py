"""The style corpus's checkpoint writer (lesson.train's): each rank's shard into the step's
temporary directory, the manifest, and rank 0's rename of the directory after a barrier.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import threading
from pathlib import Path

import apis
import torch


class Saver:
    """A checkpoint in two halves: `begin` writes this rank's shard under a temporary
    directory (on a background thread, in the `thread_save` style, as asynchronous
    checkpointing does), `publish` waits for every rank's shard, writes the manifest and
    renames the directory: a `step-*` exists only complete. Collectives stay on the loop's
    thread."""

    def __init__(self, out: Path, rank: int, n: int, P: int, threaded: bool,
                 renamed: bool = False) -> None:
        self.out, self.rank, self.n, self.P, self.threaded = out, rank, n, P, threaded
        self.renamed = renamed
        self.pending: tuple[int, Path] | None = None
        self.writer: threading.Thread | None = None

    def begin(self, step: int, shard: dict[str, object]) -> None:
        self.publish()
        tmp = self.out / "checkpoints" / f".step-{step:06d}"
        if self.rank == 0:
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
        apis.coll.barrier()
        self.pending = (step, tmp)
        if self.threaded:
            self.writer = threading.Thread(target=torch.save,
                                           args=(shard, tmp / f"rank-{self.rank}.pt"))
            self.writer.start()
        elif self.renamed:  # written whole beside the directory, then renamed into it
            part = self.out / "checkpoints" / f".rank-{self.rank}-step-{step:06d}.partial"
            torch.save(shard, part)
            os.replace(part, tmp / f"rank-{self.rank}.pt")
        else:
            torch.save(shard, tmp / f"rank-{self.rank}.pt")

    def publish(self) -> None:
        if self.pending is None:
            return
        if self.writer is not None:
            self.writer.join()
            self.writer = None
        (step, tmp), self.pending = self.pending, None
        apis.coll.barrier()
        if self.rank == 0:
            shards = [{"rank": r, "file": f"rank-{r}.pt",
                       "sha256": hashlib.sha256((tmp / f"rank-{r}.pt").read_bytes())
                       .hexdigest(), "bytes": (tmp / f"rank-{r}.pt").stat().st_size}
                      for r in range(self.n)]
            (tmp / "manifest.json").write_text(json.dumps(
                {"contract": 1, "step": step, "world_size": self.n, "n_params": self.P,
                 "shards": shards}))
            tmp.rename(self.out / "checkpoints" / f"step-{step:06d}")
        apis.coll.barrier()
