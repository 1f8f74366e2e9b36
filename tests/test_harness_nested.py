"""What the observer infers where a program's work hides from its first look: a backward
run inside the step's (a reentrant activation checkpoint's, per block) reaches the blocks'
parameters that the outer pass does not, and a numpy array that only a running function's
local variable holds is still memory the rank keeps."""

from __future__ import annotations

import os
import subprocess
import sys
import zlib

import numpy as np
import pytest
import torch

from tests.harness.observe.traces import OBSERVER_DIR, load_observation
from tests.test_harness_observer import observer_module

CHECKPOINTED = """
import torch
from torch.utils.checkpoint import checkpoint
torch.manual_seed(0)
emb, head = torch.nn.Embedding(8, 4), torch.nn.Linear(4, 8)      # the outer pass's leaves
blocks = [torch.nn.Linear(4, 4) for _ in range(2)]                # only nested passes'
plain = {{"w": torch.randn(4, 4, requires_grad=True)}}               # a functional weight
idx = torch.tensor([[1, 2, 3], [4, 5, 6]])
for step in range(3):
    x = emb(idx)
    for b in blocks:
        x = checkpoint(b, x, use_reentrant={reentrant})
    x = checkpoint(lambda h: h @ plain["w"], x, use_reentrant={reentrant})
    head(x).sum().backward()
"""
# emb 32 + head 40 + blocks 2 x 20 + the plain weight 16 (the detached inputs, 2 x 3 x 4
# elements per checkpoint and step, are not the model's)
P = 32 + 40 + 2 * 20 + 16


@pytest.mark.parametrize("reentrant", [True, False])
def test_a_checkpointed_models_p_counts_every_block_once(tmp_path, reentrant):
    (tmp_path / "obs").mkdir()
    env = dict(os.environ, PYTHONPATH=str(OBSERVER_DIR), CAPSTONE_OBSERVE_DIR=str(tmp_path / "obs"),
               CAPSTONE_OBSERVE_MEM="")
    done = subprocess.run([sys.executable, "-c", CHECKPOINTED.format(reentrant=reentrant)],
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-800:]
    [p] = load_observation(tmp_path / "obs").processes
    assert len(p.backwards) == 3  # the nested passes are part of each step's, not steps
    assert p.model_elements() == P, p.leaf_elements
    # The initial 2-D weights, each once, as the tensor-parallel check reads them (a draw
    # found reentrant blocks missing: "rank 0 holds every head of the attention"): the
    # embedding, the head, the blocks (nested passes' Parameters) and the plain weight (told
    # at step 2, once kept; read at step 1, before the update)
    assert sorted(tuple(leaf["shape"]) for leaf in p.leaves) == [(4, 4)] * 3 + [(8, 4)] * 2
    torch.manual_seed(0)
    emb, head = torch.nn.Embedding(8, 4).weight, torch.nn.Linear(4, 8).weight
    blocks = [torch.nn.Linear(4, 4).weight for _ in range(2)]
    initial = [emb, head, *blocks, torch.randn(4, 4)]  # as the program makes them
    rows = sorted([zlib.crc32(r.detach().numpy().tobytes()) for r in w] for w in initial)
    assert sorted(leaf["rows"] for leaf in p.leaves) == rows


def _holding_whole_arrays(buffers: object) -> list[object]:
    """A worker function's frame: the arrays are its locals and nothing else's."""
    whole = np.zeros(10_000, dtype=np.float32)
    view = whole[:100]  # noqa: F841 (a view owns nothing)
    return buffers.python_buffers([])  # type: ignore[attr-defined]


def test_an_array_only_a_running_functions_local_holds_is_found():
    """Before 3.13 a running frame shows the collector no locals, so they are read from
    f_locals, whose snapshot is emptied at once (it would keep the program's old values
    alive): the function's own locals() still reads them afterwards."""
    buffers = observer_module("_observer_buffers")
    found = _holding_whole_arrays(buffers)
    assert any(isinstance(b, np.ndarray) and b.size == 10_000 for b in found), \
        [getattr(b, "shape", type(b)) for b in found]

    def after_the_walk() -> dict[str, object]:
        kept = np.ones(3)
        buffers.python_buffers([])
        return locals()
    assert set(after_the_walk()) == {"kept", "buffers"}  # locals() whole again


MICRO_BATCHED = """
import torch, torch.distributed as dist
dist.init_process_group("gloo", init_method="file://{rdv}", rank=0, world_size=1)
w = torch.randn(64, requires_grad=True)
dist.broadcast(w.detach(), src=0)  # a rank that communicates: it has a step clock
state = None
for step in range(4):
    for micro in range(4):  # four backward passes make one step
        (w * torch.randn(64)).sum().backward()
    dist.all_reduce(w.grad)
    if state is None:
        state = torch.zeros(5000)  # the optimizer's state, born at the first step's end
    w.grad = None
"""


def test_memory_is_walked_at_steps_not_at_micro_batches(tmp_path):
    """CAPSTONE_OBSERVE_MEM names training steps: with four backward passes a step, the
    walks at steps 2 and 3 both see the state born at step 1's end (walks at passes 2 and
    3, inside step 1, saw none of it: a correct micro-batching program lost zero1_memory)."""
    (tmp_path / "obs").mkdir()
    env = dict(os.environ, PYTHONPATH=str(OBSERVER_DIR), CAPSTONE_OBSERVE_DIR=str(tmp_path / "obs"),
               CAPSTONE_OBSERVE_MEM="2,3")
    done = subprocess.run([sys.executable, "-c", MICRO_BATCHED.format(rdv=tmp_path / "rdv")],
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-800:]
    [p] = load_observation(tmp_path / "obs").processes
    assert len(p.backwards) == 16
    assert (p.persistent_bytes() or 0) >= 5000 * 4, p.memory
