"""The suite's observer, loaded into every Python process of a run under test.

The runner puts this directory first on the run's PYTHONPATH and names a directory of its own
in CAPSTONE_OBSERVE_DIR; Python imports `sitecustomize` at start-up, so every interpreter the
run starts (its main process, mp.spawn and torchrun children) loads this file, and forked
children inherit it. It never needs the submission's cooperation and writes only to that
directory, one JSON-lines file per process, each line written with one `os.write` on an
O_APPEND descriptor: what was written survives `os._exit`, SIGKILL and a hang.

What it records, and from where:
- `hello`: the process exists (pid, parent, argv);
- `init`: it joined a process group (rank, size, backend), after `init_process_group`;
- `call` / `end`: every `torch.distributed` collective and point-to-point call (op, group
  ranks, dtypes, element counts, the submission's call site), before and after it runs;
- `fr`: torch's own Flight Recorder at exit and at `destroy_process_group` (the only record
  of collectives that no Python function issues, such as DDP's gradient all-reduce);
- `bw`: each backward pass, `torch.autograd.backward` or `torch.autograd.grad` (one per
  micro-batch: the training steps' clock; one per call of a `torch.func` transform's
  function, `_observer_func.py`),
  with the work it is the backward of: the tokens that entered the model and the targets
  its loss covers, read from the autograd graph (the index tensors of embedding lookups,
  the loss's target), whatever modules or functions built it;
- `mem`: the tensor storages alive at two backward calls, and what the rank held from one
  to the other (alive at both, or replaced by a storage of the same size);
- `state`: at the first checkpoint shard the process saves (`torch.save` of the contract's
  `master` / `exp_avg` / `exp_avg_sq`), the storages that hold those values and their sizes
  (`_observer_state.py`): where the optimizer state lives;
- on SIGUSR1 (sent by the runner to a hung run) `faulthandler` dumps every thread's stack.

What a call carries is read by `_observer_calls.py`, what a backward computes on by
`_observer_backward.py`, the buffers Python can reach by `_observer_buffers.py`; where a
rank can end with an exception is hooked by `_observer_crash.py`.

It must not change what a run computes: it reads tensors' sizes and storages, and the bytes
of data a rank sends by hand (all-to-all, sends) to fingerprint them (a piece forwarded or sent
to many peers is counted once); it never writes a tensor and keeps none alive (storages and
receive buffers are held by weak reference only).
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # typing is not imported at run time: this file loads in every process
    from collections.abc import Callable, Iterator
    from typing import Any

_DIR = os.environ.get("CAPSTONE_OBSERVE_DIR")
_HERE = os.path.dirname(__file__)  # the observer's modules: no call site of the program's

# Collective and point-to-point functions of torch.distributed that the observer wraps.
_OPS = ("all_reduce", "reduce", "broadcast", "all_gather", "all_gather_into_tensor",
        "all_gather_single", "all_gather_object", "reduce_scatter", "reduce_scatter_tensor",
        "reduce_scatter_single", "all_to_all", "all_to_all_single", "barrier",
        "monitored_barrier", "send", "recv", "isend", "irecv", "gather", "scatter",
        "broadcast_object_list", "gather_object", "scatter_object_list", "batch_isend_irecv")
# The observer's own modules beside this file, imported by `_install` (only a process that is
# observed loads them): what a call carries, what a backward computes on, where a rank can
# end with an exception.
_calls: Any = None
_backward: Any = None
_crash: Any = None
_func: Any = None
_FR_KEYS = ("profiling_name", "input_sizes", "output_sizes", "input_dtypes",
            "collective_seq_id", "pg_id", "is_p2p", "time_created_ns", "state")


class _Awaited:
    """A torch Work as the program receives it from an asynchronous call: `wait()` is
    recorded (Observer.waiting), everything else is the Work's own."""

    __slots__ = ("_observer", "_what", "_work")

    def __init__(self, work: Any, observer: Any, what: dict[str, Any]) -> None:
        self._work, self._observer, self._what = work, observer, what

    def wait(self, *args: Any, **kwargs: Any) -> Any:
        return self._observer.waiting(self._work, self._what, args, kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._work, name)


class _Observer:
    def __init__(self, directory: str) -> None:
        self.dir = directory
        self.pid = -1
        self.fd = -1
        self.calls = 0
        self.backwards = 0
        self.steps = 0  # training steps: backwards that follow a collective (or the first)
        self.calls_since_backward = 0
        self.rank: int | None = None
        self.first_snapshot: dict[int, tuple[Any, int]] | None = None
        self.step_data: set[int] = set()  # fingerprints sent or received since the backward
        self.pending: list[Any] = []  # weak references to receive buffers not read yet
        self.buffers_seen: set[tuple[int, int]] = set()  # Python buffers of the last walk
        import json
        import threading

        self.local = threading.local()
        # json.dumps(record, default=str) makes this encoder again at each of a rank's
        # ~150 records
        self.encode = json.JSONEncoder(default=str).encode
        self._settings()
        self._open()
        os.register_at_fork(after_in_child=self._open)  # a forked rank gets its own file

    def _settings(self) -> None:
        """What the run asks of the observer: its fault, whether to check that an announced
        NaN reached the gradients, where to walk memory."""
        self.plan = os.environ.get("CAPSTONE_NEMESIS_SOCK") or None  # where faults are asked
        # A run told to inject a NaN (`--inject nan@S`): are its gradients really non-finite?
        argv = " ".join(getattr(sys, "orig_argv", sys.argv))
        self.check_grads = "--inject nan@" in argv or "--inject=nan@" in argv
        # The training steps at whose first backward pass memory is walked (a program that
        # runs micro-batches has several passes a step, and its optimizer state may be born
        # only at its first step's end). A process that made no collective before its first
        # backward (one rank that skips them) has no step clock: there each backward pass is
        # a step. Empty: no walk and no state search (a run that no memory check reads:
        # ~0.1-0.3 s of each rank's time saved).
        points = os.environ.get("CAPSTONE_OBSERVE_MEM", "3,6")
        self.mem_at = tuple(int(x) for x in points.split(",")) if points else ()

    def retarget(self) -> None:
        """A warm start (tests/harness/run/warm.py): this process, forked from the fork server
        that loaded the observer, is now the run's; it records into the run's directory under
        the run's settings (its environment and sys.orig_argv are the run's by now)."""
        self.dir = os.environ["CAPSTONE_OBSERVE_DIR"]
        self._settings()
        self._open()

    # -- output -------------------------------------------------------------------------------
    def _open(self) -> None:
        """A file of this process's own (called again in a forked child)."""
        import time

        self.pid = os.getpid()
        self.fd = os.open(os.path.join(self.dir, f"p{self.pid}-{time.time_ns()}.jsonl"),
                          os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.calls = self.backwards = self.steps = self.calls_since_backward = 0
        self.rank, self.first_snapshot = None, None
        self.step_data, self.pending = set(), []
        self.nested_leaves: Any = _backward.NestedLeaves() if _backward is not None else None
        self.communicates = False  # a collective came before the first backward pass
        self.emit({"ev": "hello", "pid": self.pid, "ppid": os.getppid(),
                   "argv": list(getattr(sys, "orig_argv", sys.argv))[:8],
                   "t": time.time_ns()})
        try:
            import faulthandler
            import signal

            stacks = os.open(os.path.join(self.dir, f"stack-{self.pid}.txt"),
                             os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            faulthandler.register(signal.SIGUSR1, file=stacks, all_threads=True, chain=False)
        except (ImportError, OSError, RuntimeError, ValueError):
            pass

    def emit(self, record: dict[str, Any]) -> None:
        with contextlib.suppress(OSError):
            os.write(self.fd, (self.encode(record) + "\n").encode())

    # -- torch.distributed ----------------------------------------------------------------------
    def patch_c10d(self, mod: Any) -> None:
        for name in _OPS:
            fn = getattr(mod, name, None)
            if callable(fn):
                setattr(mod, name, self._collective(name, fn))
        for name, wrap in (("init_process_group", self._init),
                           ("destroy_process_group", self._destroy)):
            fn = getattr(mod, name, None)
            if callable(fn):
                setattr(mod, name, wrap(fn))

    def outer(self) -> bool:
        """Not inside a call the observer records (torch calling itself)."""
        return getattr(self.local, "depth", 0) == 0

    def _collective(self, op: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        import functools

        signature: list[Any] = []  # inspect.signature(fn), computed at the first call

        @functools.wraps(fn)
        def observed(*args: Any, **kwargs: Any) -> Any:
            if not self.outer():
                return fn(*args, **kwargs)  # torch calling itself (e.g. a deprecated alias)
            try:
                if not signature:
                    import inspect

                    signature.append(inspect.signature(fn))
                bound = signature[0].bind_partial(*args, **kwargs).arguments
            except Exception as e:  # never let the observer break the call
                bound, error = None, {"describe_error": repr(e)[:200]}
            record: dict[str, Any] = {} if bound is not None else error
            result = self.observe_call(op, bound, lambda: fn(*args, **kwargs), record)
            if op == "recv" or op == "irecv":
                self.received([args[0] if args else kwargs.get("tensor")])
            elif op == "batch_isend_irecv":
                ops = args[0] if args else kwargs.get("p2p_op_list") or []
                self.received([o.tensor for o in ops if getattr(o.op, "__name__", "") == "irecv"])
            if (record.get("async") or op == "batch_isend_irecv") and result is not None:
                result = self._awaited(result, op, record)
            return result
        return observed

    def observe_call(self, op: str, bound: dict[str, Any] | None, run: Callable[[], Any],
                     record: dict[str, Any]) -> Any:
        """One collective or point-to-point call, whatever API made it (a torch.distributed
        function here, an operator at the dispatcher, _observer_dispatch.py): described from
        its arguments (`bound`, named as torch.distributed's function names them; None where
        they could not be read) into `record`, then `run`, its end recorded."""
        import time

        self.local.depth = 1
        try:
            self.calls += 1
            self.calls_since_backward += 1
            index = self.calls
            if bound is not None:
                try:
                    extra = dict(record)
                    record.clear()
                    record.update(_calls.describe(op, bound), **extra)
                    if self.steps <= 1:  # step 1's gradient (exercise 2), its forward's (1)
                        record.update(_calls.digest(op, bound))
                    with contextlib.suppress(Exception):  # a sample lost, never the call
                        record.update(_calls.trail(op, bound, len(record.get("group") or ())))
                    if op in _calls.BY_HAND:
                        record["fresh"] = self.fresh(op, bound)
                except Exception as e:  # never let the observer break the call
                    record.clear()
                    record.update(op=op, describe_error=repr(e)[:200])
            record.update(ev="call", op=op, i=index, site=_call_site(), t0=time.time_ns())
            self.emit(record)
            return self._ended(index, run)
        finally:
            self.local.depth = 0

    def _ended(self, index: int, run: Callable[[], Any]) -> Any:
        """`run()`, with the end of recorded call `index` (or the error it ended with)."""
        import time

        try:
            result = run()
        except BaseException as e:
            self.emit({"ev": "end", "i": index, "t1": time.time_ns(),
                       "error": type(e).__name__})
            raise
        self.emit({"ev": "end", "i": index, "t1": time.time_ns()})
        return result

    def _awaited(self, result: Any, op: str, record: dict[str, Any]) -> Any:
        """An asynchronous call's Work (or a batch's list of them), whose `wait()` is then
        recorded as a blocking call of its own (op "wait"): a rank sitting in it is blocked
        in that call, as in a blocking one (a ring of isend/irecv waits there)."""
        what = _calls.waited_on(op, record)
        if isinstance(result, list):
            return [_Awaited(w, self, what) if hasattr(w, "wait") else w for w in result]
        return _Awaited(result, self, what) if hasattr(result, "wait") else result

    def waiting(self, work: Any, what: dict[str, Any], args: Any, kwargs: Any) -> Any:
        """`work.wait()` of a wrapped function's asynchronous call."""
        return self.observe_wait(what, lambda: work.wait(*args, **kwargs))

    def observe_wait(self, what: dict[str, Any], run: Callable[[], Any]) -> Any:
        """A wait on an asynchronous call's result, recorded as a call that starts now and
        ends when it returns (op "wait")."""
        import time

        self.local.depth = 1
        try:
            self.calls += 1
            index = self.calls
            self.emit({**what, "ev": "call", "op": "wait", "i": index, "site": _call_site(),
                       "t0": time.time_ns()})
            return self._ended(index, run)
        finally:
            self.local.depth = 0

    def fresh(self, op: str, bound: dict[str, Any]) -> int:
        """Elements of data this call sends that the rank had not sent or received since its
        last backward: for an all-to-all, its chunks for the other ranks, identical ones once;
        for sends, what is not forwarded. Reductions written by hand send fresh data."""
        for ref in self.pending:  # receives completed by now (a send follows their wait)
            t = ref()
            if t is not None:
                self.step_data.add(_calls.fingerprint(t))
        self.pending = []
        if op == "all_to_all_single":
            chunks = _calls.chunks(bound.get("input"), bound.get("input_split_sizes"))
        elif op == "all_to_all":
            chunks = list(bound.get("input_tensor_list") or [])
        elif op == "batch_isend_irecv":
            chunks = [o.tensor for o in bound.get("p2p_op_list") or []
                      if getattr(o.op, "__name__", "") == "isend"]
        else:
            chunks = [bound.get("tensor")]
        own = None
        if op.startswith("all_to_all"):  # its own chunk stays: this rank's place in the group
            import torch.distributed as dist

            own = dist.get_rank(bound.get("group"))
        total = 0
        for j, t in enumerate(chunks):
            if t is None or j == own or not t.numel():
                continue
            key = _calls.fingerprint(t)
            if key not in self.step_data:
                self.step_data.add(key)
                total += t.numel()
        return total

    def received(self, buffers: list[Any]) -> None:
        """Receive buffers, read (fingerprinted) once a later send shows they are complete."""
        import weakref

        self.pending += [weakref.ref(t) for t in buffers if t is not None]

    def _init(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        import functools

        @functools.wraps(fn)
        def observed(*args: Any, **kwargs: Any) -> Any:
            self.local.depth = getattr(self.local, "depth", 0) + 1
            try:
                result = fn(*args, **kwargs)
            finally:
                self.local.depth -= 1
            try:
                import torch.distributed as dist

                self.rank = dist.get_rank()
                self.emit({"ev": "init", "rank": self.rank, "size": dist.get_world_size(),
                           "backend": str(dist.get_backend()), "site": _call_site()})
            except Exception as e:
                self.emit({"ev": "init", "error": repr(e)[:200]})
            return result
        return observed

    def _destroy(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        import functools

        @functools.wraps(fn)
        def observed(*args: Any, **kwargs: Any) -> Any:
            self.dump_flight_recorder()
            return fn(*args, **kwargs)
        return observed

    def ending(self) -> None:
        """The process ends as Python ends (exit, os._exit): its Flight Recorder, and "bye".
        A process with no bye was killed, or replaced by an exec (an interpreter the
        observer may not load into: what it ran then is unseen)."""
        if os.getpid() != self.pid:
            return
        self.dump_flight_recorder()
        import time

        self.emit({"ev": "bye", "t": time.time_ns()})

    def dump_flight_recorder(self) -> None:
        """torch's own record of this process's collectives (kept for the last dump)."""
        if os.getpid() != self.pid or self.rank is None:
            return
        try:
            import json

            import torch

            dump = getattr(torch._C._distributed_c10d, "_dump_fr_trace_json")  # noqa: B009
            raw = dump(True, False)
            entries = json.loads(raw).get("entries", [])
            self.emit({"ev": "fr", "entries": [{k: e.get(k) for k in _FR_KEYS}
                                               for e in entries]})
        except Exception as e:
            self.emit({"ev": "fr", "error": repr(e)[:200]})

    # -- training steps and memory --------------------------------------------------------------
    def patch_autograd(self, mod: Any) -> None:
        """`torch.autograd.backward` (what `loss.backward()` calls) and `torch.autograd.grad`
        (the functional way, and what `torch.func.grad` calls underneath): either is a
        backward pass, one per micro-batch."""
        for name, roots in (("backward", "tensors"), ("grad", "outputs")):
            fn = getattr(mod, name, None)
            if callable(fn):
                setattr(mod, name, self._backward(fn, roots))

    def _backward(self, fn: Callable[..., Any], roots: str) -> Callable[..., Any]:
        import functools
        import time

        name = fn.__name__

        @functools.wraps(fn)
        def observed(*args: Any, **kwargs: Any) -> Any:
            if getattr(self.local, "in_backward", False):  # one inside another (torch's own,
                self._nested(name, roots, args, kwargs)    # e.g. a reentrant checkpoint):
                return fn(*args, **kwargs)                 # part of the step's pass
            if _func.passes_through():  # a torch.func transform's, counted once
                return fn(*args, **kwargs)
            self.backwards += 1
            # A training step's first backward: the first, or one after a collective (the
            # micro-batches of one step run their backwards with none in between).
            starts = self.backwards == 1 or self.calls_since_backward > 0
            if self.backwards == 1:
                self.communicates = self.calls_since_backward > 0
            self.steps += starts
            self.calls_since_backward = 0
            self.step_data, self.pending = set(), []
            root = args[0] if args else kwargs.get(roots)
            record = {"ev": "bw", "n": self.backwards, "step": self.steps, "t": time.time_ns()}
            reached: dict[int, Any] = {}  # the leaves the pass reaches (finite_grads reads them)
            try:
                # What it differentiates with respect to: autograd.grad's inputs (or
                # backward's `inputs=`), else every leaf the pass reaches.
                inputs = (args[1] if len(args) > 1 else kwargs.get("inputs")) \
                    if name == "grad" else kwargs.get("inputs")
                if inputs is not None and not isinstance(inputs, (list, tuple)) and \
                        not hasattr(inputs, "grad_fn"):  # a generator (model.parameters()):
                    inputs = tuple(inputs)               # read once, handed on as a tuple
                    if name == "grad" and len(args) > 1:
                        args = (args[0], inputs, *args[2:])
                    else:
                        kwargs = {**kwargs, "inputs": inputs}
                record.update(_backward.work(root, inputs, first=self.backwards == 1,
                                             reached=reached))
                record.update(_backward.loss(root))
                self.nested_leaves.outer(reached)
            except Exception as e:
                record["work_error"] = repr(e)[:200]
            self.emit(record)
            nemesis = _nemesis(self.plan, "backward", self.steps, self.rank) \
                if self.plan and starts else None
            if nemesis is not None:
                self.emit({"ev": "nemesis", "kind": nemesis.kind, "step": self.steps,
                           "rank": self.rank, "backward": self.backwards,
                           "t": time.time_ns()})
                if nemesis.kind == "kill":
                    nemesis.kill()
                if nemesis.kind == "nan":
                    args, kwargs = nemesis.poison(name, root, args, kwargs)
            if (self.steps in self.mem_at and starts) if self.communicates else \
                    self.backwards in self.mem_at:
                try:
                    self._snapshot()
                except Exception as e:
                    self.emit({"ev": "mem", "error": repr(e)[:200]})
            self.local.in_backward = True  # its own flag: collectives that gradient hooks
            try:                           # issue during the pass are recorded as ever
                result = fn(*args, **kwargs)
            finally:
                self.local.in_backward = False
            if self.check_grads:
                self.emit({"ev": "grads", "n": self.backwards, "step": self.steps,
                           "finite": _backward.finite_grads(
                               result, None if "work_error" in record else reached)})
            return result
        return observed

    def _nested(self, name: str, roots: str, args: Any, kwargs: Any) -> None:
        """A backward run inside the step's: the leaves it adds to what the step
        differentiates (`leaves` records; the parser takes the most any pass reached)."""
        try:
            root = args[0] if args else kwargs.get(roots)
            inputs = (args[1] if len(args) > 1 else kwargs.get("inputs")) \
                if name == "grad" else kwargs.get("inputs")
            if inputs is not None and not isinstance(inputs, (list, tuple)) and \
                    not hasattr(inputs, "grad_fn"):
                return  # a generator: reading it would consume the program's
            grown, shown = self.nested_leaves.nested(_backward.reached_leaves(root, inputs),
                                                     first=self.backwards == 1)
            if grown is not None or shown:
                self.emit({"ev": "leaves", "n": self.backwards,
                           **({"leaf_elements": grown} if grown is not None else {}),
                           **({"slices": shown} if shown else {})})
        except Exception as e:
            self.emit({"ev": "leaves", "error": repr(e)[:200]})

    def _snapshot(self) -> None:
        """First point: every storage Python can reach, held by weak reference. Second
        point: the rank's persistent state, what it holds from one point to the other: the
        first point's storages still alive, whatever holds them now, and those that died
        replaced by a storage of the same size born since (state updated out of place,
        `m = b1 * m + (1 - b1) * g`, is a new tensor every step)."""
        import _observer_buffers as buffers

        storages = buffers.held(lambda e: self.emit(
            {"ev": "mem", "error": f"python buffers: {e!r}"[:200]}), self.buffers_seen)
        first = self.first_snapshot
        if first is None:
            self.first_snapshot = storages
            self.emit({"ev": "mem", "at": self.backwards, "storages": len(storages),
                       "live_bytes": sum(n for _, n in storages.values())})
            return
        from collections import Counter

        alive = [n for ref, n in first.values() if not ref.expired()]
        died = Counter(n for ref, n in first.values() if ref.expired())
        born = Counter(n for ptr, (_, n) in storages.items()  # a live first-point storage
                       if ptr not in first or first[ptr][0].expired())  # keeps its address
        replaced = sum(n * min(k, born[n]) for n, k in died.items())
        self.emit({"ev": "mem", "at": self.backwards, "since": self.mem_at[0],
                   "persistent_bytes": sum(alive) + replaced, "same_storage_bytes": sum(alive),
                   "persistent_storages": len(alive)})
        self.first_snapshot = None

    # -- a rank's exception, wherever a Python rank can end ------------------------------------
    def record_raise(self, exc: BaseException, via: str) -> None:
        """An exception that ends a rank (or its thread), with its time: the cause of a crash
        is read from these, not from stderr, where launchers interleave their ranks'
        tracebacks and multiprocessing prints its "Process ForkProcess-1:" headers."""
        if isinstance(exc, SystemExit) or getattr(exc, "_observer_told", False):
            return
        import time
        import traceback

        with contextlib.suppress(Exception):
            exc._observer_told = True  # type: ignore[attr-defined]  # told once
        with contextlib.suppress(Exception):
            self.emit({"ev": "raise", "rank": self.rank, "t": time.time_ns(), "via": via,
                       "text": "".join(traceback.format_exception(
                           type(exc), exc, exc.__traceback__))[-6000:]})

    # -- where the optimizer state lives --------------------------------------------------------
    def patch_save(self, torch: Any) -> None:
        """`torch.save` (and `torch.serialization.save`, the same function): after the first
        checkpoint shard this process saves, locate its state tensors in memory."""
        import functools

        real = torch.serialization.save
        done: set[int] = set()  # processes that located their state (a forked rank too)

        @functools.wraps(real)
        def observed(obj: Any, *args: Any, **kwargs: Any) -> Any:
            nemesis = _nemesis(self.plan, "save", obj["step"], self.rank) if self.plan and \
                isinstance(obj, dict) and isinstance(obj.get("step"), int) else None
            if nemesis is not None and nemesis.kind == "killsave":
                import time

                self.emit({"ev": "nemesis", "kind": "killsave", "step": obj["step"],
                           "rank": self.rank, "file": str(args[0] if args else "")[:300],
                           "t": time.time_ns()})
                nemesis.torn_save(real, obj, *args, **kwargs)
            result = real(obj, *args, **kwargs)
            if self.mem_at and os.getpid() not in done:
                try:
                    import _observer_state as state

                    saved = state.saved_state(obj)
                    if saved:
                        import time

                        done.add(os.getpid())
                        t0 = time.perf_counter()
                        found = state.locate(saved)
                        self.emit({"ev": "state", "at": self.backwards, "tensors": found,
                                   "ms": round(1000 * (time.perf_counter() - t0), 1)})
                except Exception as e:  # never let the observer break the save
                    done.add(os.getpid())
                    self.emit({"ev": "state", "error": repr(e)[:200]})
            return result
        torch.save = torch.serialization.save = observed


def _nemesis(where: str, when: str, step: int, rank: int | None) -> Any:
    """The suite's fault for this moment, asked of the runner's plan (tests/harness/run/
    plan.py) as it comes: at a training step's first backward (`when` "backward") or a
    checkpoint's save ("save") of `step` on `rank`. The plan answers only where its fault
    fires, once: no process learns the kind, step or rank of a fault before it meets it."""
    import socket

    got = b""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(5.0)
            s.connect(where)
            s.sendall(f"{when} {step} {rank or 0}\n".encode())
            while chunk := s.recv(4096):
                got += chunk
    except OSError:  # no plan (the run is over, or none was made)
        return None
    if not got:
        return None
    try:
        from _observer_nemesis import Nemesis
    except ImportError:  # never let the observer break the run
        return None
    return Nemesis.parse(got.decode(errors="replace"))


def _call_site() -> str:
    """The innermost frame outside torch and this file: where the submission made the call."""
    frame: Any = sys._getframe(1)
    while frame is not None:
        path = frame.f_code.co_filename
        if not (f"{os.sep}torch{os.sep}" in path or os.path.dirname(path) == _HERE
                or path.startswith("<frozen") or f"{os.sep}typing_extensions" in path):
            parts = path.split(os.sep)
            return f"{os.sep.join(parts[-2:])}:{frame.f_lineno}"
        frame = frame.f_back
    return "?"


def _imported_torch(torch: Any) -> None:
    """torch's own objects (~165,000 once imported) move to gc's permanent generation, so the
    memory snapshot walks only what the program made since; walking all of them wrote to
    every page a forked rank shares with its parent (copy-on-write), ~0.15 s per rank. The
    collector no longer scans them either: module-level objects that live as long as the
    process, whose storages are not the program's state."""
    import gc

    import _observer_buffers

    gc.freeze()
    _observer_buffers.watch_freeze(torch)  # what the program freezes itself is still walked
    _OBSERVER.patch_save(torch)
    try:  # every collective, whatever API makes it: at the dispatcher
        import _observer_dispatch

        _observer_dispatch.install(_OBSERVER)
    except Exception as e:
        _OBSERVER.emit({"ev": "patch", "module": "dispatcher", "error": repr(e)[:200]})


@contextlib.contextmanager
def _collector_paused(pause: bool) -> Iterator[None]:
    """torch's import allocates ~165,000 objects, and the cyclic collector runs ~360 times
    during it, rereading the ones made so far: ~0.17 s of a 1.5 s import. Those objects live
    as long as the process and are frozen right after it (`_imported_torch`), so the
    collector is paused for the import alone (unless the program paused it itself) and
    resumed before the program runs on: each process of a run that imports torch starts as
    it would without the observer, ~10% sooner. What the import left as garbage (~7,000
    objects, ~1 MB) is frozen with the rest instead of collected."""
    import gc

    paused = pause and gc.isenabled()
    if paused:
        gc.disable()
    try:
        yield
    finally:
        if paused:
            gc.enable()


class _Hook:
    """Patches a module right after it is first executed (torch.distributed.distributed_c10d
    before torch.distributed re-exports its functions; torch.autograd; torch itself, once its
    import is complete)."""

    def __init__(self, observer: _Observer) -> None:
        import functools

        self.targets = {"torch.distributed.distributed_c10d": observer.patch_c10d,
                        "torch.autograd": observer.patch_autograd,
                        "torch._functorch.eager_transforms": _func.patch,
                        "torch.multiprocessing.spawn": functools.partial(
                            _crash.patch_spawn, observer),
                        "multiprocessing.process": functools.partial(
                            _crash.patch_process, observer),
                        "torch": _imported_torch}

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        patch = self.targets.pop(name, None)
        if patch is None:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None and spec.loader is not None:
                real = spec.loader.exec_module

                def exec_module(module: Any, real: Any = real, patch: Any = patch) -> None:
                    with _collector_paused(name == "torch"):
                        real(module)
                    try:
                        patch(module)
                    except Exception as e:
                        _OBSERVER.emit({"ev": "patch", "module": name, "error": repr(e)[:200]})
                spec.loader.exec_module = exec_module  # type: ignore[method-assign]
                return spec
        return None


def _install(directory: str) -> _Observer:
    import atexit

    global _backward, _calls, _crash, _func
    import _observer_backward as _backward  # beside this file: Python found it on sys.path
    import _observer_calls as _calls
    import _observer_crash as _crash
    import _observer_func as _func

    observer = _Observer(directory)
    sys.meta_path.insert(0, _Hook(observer))
    _crash.patch_hooks(observer)
    atexit.register(observer.ending)
    real_exit = os._exit

    def _exit(code: int) -> None:  # multiprocessing's forked children end here, as may ranks
        observer.ending()
        real_exit(code)
    os._exit = _exit  # type: ignore[assignment]
    return observer


if _DIR and os.path.isdir(_DIR):
    _OBSERVER = _install(_DIR)
