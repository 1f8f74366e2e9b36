"""The likely causes the suite can name, in the lesson's terms: the words of each hint (the
diagnosis chooses among them: diagnosis.py, hypotheses.py)."""

from __future__ import annotations

from tests.harness.check.adam_checks import BETAS_SWAPPED, UNCORRECTED

BROADCAST = ("the initial broadcast is missing: the ranks start from different parameters "
             "(broadcast rank 0's parameters before step 1)")
ALLGATHER = ("the updated shards are not all-gathered: after the update each rank holds new "
             "values only in its own slice (all-gather every shard into every rank's model)")
ROWS = ("the ranks train on the wrong rows: rank r must take rows [r*B, (r+1)*B) of the "
        "global batch")
SUMMED = "gradients summed, not averaged: divide the reduced gradient by N (the world size)"
ONE_SHARD_NORM = ("the gradient norm is computed from one rank's shard only: sum the squared "
                  "shard norms over the ranks before the square root")
LOSS_SUMMED = ("the logged loss is the sum over the ranks, not their mean: it is {n}x the one-rank "
               "run's at step 1 (divide the all-reduced loss by N)")
LOSS_ONLY = ("step 1's loss differs from the one-rank run's while its gradient norm agrees: the "
             "data and the parameters are right, the logged loss is not (log the mean over "
             "ranks of each rank's mean loss)")
TWICE = ("the gradient is divided by N twice: rank 0's gradient norm is 1/{n} of the one-rank "
         "run's at every step (the loss divided by N before the backward, and the reduced "
         "gradient again): average once")
GRAD_SEEN = ("rank 0's gradient norm at step 1 is {r:.3g}x the one-rank run's while step 1's "
             "loss agrees, and the loss {parts}: the gradient it steps with or logs is not the "
             "global batch's mean; consistent with {causes}")
# The causes GRAD_SEEN lists, each dropped where the evidence rules it out (hypotheses.py)
NOT_REDUCED_CLAUSE = "a gradient not reduced across ranks"
SHARD_NORM_CLAUSE = "a norm computed from one rank's shard only"
PART_REDUCED_CLAUSE = "a reduction of part of the gradient"
NOT_REDUCED = ("gradients are not reduced across ranks: each owner updates its slice with "
               "its own local gradient (reduce-scatter with the mean)")
INIT = ("the ranks start from the same parameters, but not the ones the one-rank run draws: "
        "step 0's parameter norm is equal on every rank and differs from the one-rank run's "
        "(every rank must start from rank 0's draw, the one a run of one rank makes from "
        "--seed: broadcast rank 0's parameters, not another rank's)")
# Where no cause is confirmed: what differs, where, and what the evidence rules out
DIFFERS = "{n} ranks and 1 rank differ from step {step}'s {quantity} ({found} against {want})"
BASE_MANIFEST = ("the base run, with no fault, writes checkpoints whose shards do not match "
                 "their manifests ({where}): write the manifest after every shard")
UPDATE = ("step 1's loss agrees and later ones drift: the update is wrong, not the data "
          "(gradient averaging, Adam's inputs or hyper-parameters)")
# Adam's update measured outside the program (adam_checks.py): told on its signature only
ADAM_BETAS = (f"{BETAS_SWAPPED}: the updates the suite sampled are exactly Adam's with β1 > β2; "
              "pass betas=(β1, β2) with the first moment's the smaller (torch's default "
              "(0.9, 0.999))")
ADAM_RAW = (f"{UNCORRECTED}: the updates the suite sampled are exactly m / (sqrt(v) + eps) of "
            "the raw moments; divide exp_avg by (1 - β1^t) and exp_avg_sq by (1 - β2^t), t the "
            "step counted from 1, as torch.optim.Adam does")
LOCAL_LOSS = "each rank logs its own batch's loss: log the all-reduced mean over ranks"
LOSS_RISES = ("the loss rises: a wrong update (learning rate, gradient averaging) or a rank "
              "whose parameters went stale")
FULL_STATE = ("full Adam state on every rank: each rank must keep only its 1/N shard of "
              "master, exp_avg and exp_avg_sq")
KEPT_WHOLE = ("measured: part of master/exp_avg/exp_avg_sq is allocated whole on every rank, "
              "whatever optimizer_bytes says")
NOTHING_SHARDED = ("measured: no optimizer state shrinks with N: the full state lives in every "
                   "process (or one process does the work of all ranks)")
# The checkpointed masters' norm is not the one logged at their step: which step's it is
# singles the cause out (checks._whose_norm), else the consistent causes are listed.
STALE_MASTER = ("the checkpoint holds the master copy from before the step's update: save "
                "after the update")
GATHERED_EARLY = ("the checkpointed masters are a step ahead of the parameters the model ran "
                  "with: the all-gather runs before the shard's update (gather after it)")
MASTER_NORM = ("the checkpointed masters' norm is not the parameter norm logged at their "
               "step: the checkpoint does not hold the parameters the model ran with (saved "
               "before or without the update, a shard stale or missing, or the model not "
               "gathered from the updated masters)")
# The resumed run's update differs but not its loss: its optimizer's state. Named only on its
# signature in the final shards (checks._optimizer_state), else the consistent causes listed.
STEP_COUNT = ("the resumed run's update differs but not its loss, and its checkpoint counts "
              "fewer optimizer steps: Adam's step count is not saved or not restored (`step`)")
MOMENTS = ("the resumed run's update differs but not its loss, and its exp_avg_sq is far below "
           "the original run's: Adam's moments are not saved or not restored (exp_avg, "
           "exp_avg_sq start again from zero)")
OPTIMIZER_STATE = ("the resumed run's update differs but not its loss: the optimizer does not "
                   "step after the resume as it did before; one of its moments, its step "
                   "count, the learning rate or its schedule is not restored as it was")
RESUMED_PARAMS = ("the resumed parameters differ from the checkpointed run's: the checkpoint "
                  "holds stale parameters, or loading them is incomplete")
MANIFEST = "a shard does not match its manifest: write the manifest after every shard"
DIFFERENT_CALLS = ("ranks issue different collectives: a collective called by only some "
                   "ranks (inside `if rank == ...`), or in a different order")
HUNG = ("the run hung until the bound: no rank made progress and no deadlock among "
        "collectives was seen (a rank waiting on something else: input, a lock, a sleep, a "
        "rendezvous that never completed)")
LEFT_BEHIND = "a process outlived the run: join or terminate every process you start"
LOCAL_GUARD = ("ranks rolled back differently: the guard decided on local values (decide on "
               "the all-reduced loss and gradient norm, identically on every rank)")
NO_ROLLBACK = ("the guard never fired: check the loss and gradient norm for NaN or a spike "
               "before the update is applied, and restore the last checkpoint")
NOT_RECOVERED = ("the guard rolled back but the run did not recover: state that the fault "
                 "poisoned survives the restore (a gradient buffer that is never zeroed, "
                 "optimizer state not reloaded from the checkpoint)")
ONE_PROCESS = ("one process did the work of N ranks: start N processes (mp.spawn, torchrun) "
               "that join one process group")
TOO_MUCH = "more traffic per step than ZeRO-1 needs: 2(N-1)/N*P elements (2Ψ)"
NEVER_REDUCED = ("the gradients are never reduced across ranks: reduce-scatter them (each "
                 "owner receives the average of its slice) before the update")
UNLOGGED = ("{ranks} wrote no metrics file: run contract v1 asks every rank to write its own "
            "metrics/rank-R.jsonl, a record for every step (not rank 0 alone)")
ACCUMULATE = ("gradients accumulate across steps: they are never cleared (zero the gradients "
              "before each step's backward)")
