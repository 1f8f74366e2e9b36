"""Where the optimizer state lives: the observer's locator on real tensors in this process,
and the check on synthetic records, for every way a correct program may lay out its state
and the ways a wrong one keeps a moment whole."""

from __future__ import annotations

import sys
from pathlib import Path
from types import ModuleType

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.harness.check.state_checks import WHOLE_HINT, check_state_location
from tests.harness.diagnose.diagnosis import diagnose
from tests.test_harness_observe import observed_run, rank_trace
from tests.test_harness_observer import observer_module

OBSERVER = Path(__file__).resolve().parent / "observer" / "_observer_state.py"


def _locator() -> ModuleType:
    return observer_module("_observer_state")  # with its sibling _observer_buffers


def _elements(found: dict, name: str, saved: bool = False) -> list[int]:
    return [h["elements"] for h in found[name]["holders"] if h["saved"] == saved]


def test_the_locator_finds_each_layout_by_its_values_and_not_its_temporaries():
    locate = _locator()
    P, n = 30_080, 7_520
    g = torch.Generator().manual_seed(1)
    sharded = {k: torch.randn(n, generator=g) for k in ("master", "exp_avg", "exp_avg_sq")}
    m_hat = sharded["exp_avg"] / 0.65  # a loop temporary: other values, the same size
    whole_v = torch.zeros(P)
    whole_v[n:2 * n] = torch.rand(n, generator=g)
    flat = torch.randn(3 * n, generator=g)
    saved = {"master": sharded["master"].clone(), "exp_avg": sharded["exp_avg"].clone(),
             "exp_avg_sq": whole_v[n:2 * n].clone(), "step": 10}
    found = locate.locate(locate.saved_state(saved))
    assert _elements(found, "exp_avg") == [n] and _elements(found, "exp_avg", True) == [n]
    assert _elements(found, "exp_avg_sq") == [P]  # allocated whole, one slice used
    in_one = {"master": flat[:n], "exp_avg": flat[n:2 * n], "exp_avg_sq": flat[2 * n:]}
    found = locate.locate(locate.saved_state(in_one))
    assert all(_elements(found, k, True) == [3 * n] for k in in_one)  # one storage, saved
    assert locate.saved_state({"weights": torch.ones(n)}) == {}  # not a shard: no search
    blank = {"master": torch.zeros(n), "exp_avg": torch.ones(n), "exp_avg_sq": torch.zeros(n)}
    assert all(f == {"numel": n, "pieces": 0, "holders": []}  # no piece tells anything apart
               for f in locate.locate(locate.saved_state(blank)).values())
    del m_hat


def test_the_locator_finds_state_that_python_holds_outside_torch():
    """Moments kept whole in numpy arrays, the rank stepping torch.from_numpy views of its
    slice; another in a bytearray; a shard in an array.array: each found with the size of
    the object that owns the memory, the tensor view inside it not counted again."""
    import array

    import numpy as np

    locate = _locator()
    P, n = 30_080, 7_520
    rng = np.random.default_rng(3)
    # held as a program holds its optimizer state: in an object's attributes (a buffer that
    # only a running function's local variable holds is not seen: docs/contract.md)
    kept = type("Opt", (), {})()
    kept.whole_m = np.zeros(P, dtype=np.float32)
    kept.whole_m[n:2 * n] = rng.standard_normal(n)
    view = torch.from_numpy(kept.whole_m[n:2 * n])  # what the rank's Adam steps
    kept.raw = bytearray(4 * P)
    as_floats = np.frombuffer(kept.raw, dtype=np.float32)  # a view: the bytearray owns it
    as_floats[n:2 * n] = rng.random(n)
    kept.shard = array.array("f", rng.standard_normal(n).astype(np.float32).tolist())
    shard = kept.shard
    saved = {"master": torch.tensor(np.asarray(shard)), "exp_avg": view.clone(),
             "exp_avg_sq": torch.from_numpy(as_floats[n:2 * n].copy()), "step": 10}
    found = locate.locate(locate.saved_state(saved))
    assert _elements(found, "exp_avg") == [P]  # the numpy array, not also its view
    assert _elements(found, "exp_avg_sq") == [P]  # the bytearray's
    assert n in _elements(found, "master")  # the array.array's
    del view, as_floats


def _found_by_bytes(locate: ModuleType, saved: dict) -> dict:
    """The locator's answer the slow way: every usable piece's bytes looked for at each
    4-byte-aligned place of every buffer the same walk reaches (bytes.find)."""
    storages, params = locate._storages(torch)
    own = {t.untyped_storage().data_ptr() for t in saved.values()}
    out = {}
    for name, tensor in locate.saved_state(saved).items():
        bits = tensor.detach().reshape(-1).view(torch.int32).numpy()
        whole = bits[:len(bits) // locate.CHUNK * locate.CHUNK].reshape(-1, locate.CHUNK)
        usable = [row.tobytes() for row in whole
                  if len(set(row.tolist())) >= locate.MIN_DISTINCT]
        holders = []
        for ptr, arr in storages.items():
            hay = arr.tobytes()

            def aligned(needle: bytes, hay: bytes = hay) -> bool:
                i = hay.find(needle)
                while i != -1 and i % 4:
                    i = hay.find(needle, i + 1)
                return i != -1
            held = len({p for p in usable if aligned(p)})
            if held:
                holders.append({"elements": len(arr), "pieces": held, "param": ptr in params,
                                "saved": ptr in own})
        out[name] = {"numel": tensor.numel(), "pieces": len(usable),
                     "holders": sorted(holders, key=lambda h: -h["elements"])}
    return out


@settings(max_examples=12, deadline=None)
@given(n=st.integers(32, 1_500), shift=st.integers(0, 40), whole=st.booleans(),
       runs=st.integers(0, 3), seed=st.integers(0, 2**16))
def test_the_locator_finds_what_a_byte_search_finds(n, shift, whole, runs, seed):
    """Pieces held anywhere a 4-byte step apart (shifted copies, a moment kept whole, a
    parameter), pieces that repeat a first value (runs of one value, which also make pieces
    of too few distinct values), buffers that hold a piece's first value or all but its last,
    and saved tensors of any length: the same holders as a plain byte search. Both search
    only this test's buffers (the walk that finds a rank's is tested above)."""
    g = torch.Generator().manual_seed(seed)
    m = torch.randn(n, generator=g)
    m[: runs * 40] = 0.5  # a run of one value: pieces that say nothing, or share a start
    v = torch.rand(n, generator=g)
    master = torch.nn.Parameter(torch.randn(n, generator=g))
    kept = [torch.cat([torch.randn(shift, generator=g), m, v]),  # shifted, one storage
            torch.full((n,), 0.5),  # a decoy: the first value of pieces it does not hold
            m + torch.arange(n).remainder(32).eq(31)]  # a near miss: each piece's last value
    if whole:
        kept.append(torch.cat([torch.zeros(3 * n), master.detach(), torch.zeros(n)]))
    saved = {"master": master.detach().clone(), "exp_avg": m.clone(), "exp_avg_sq": v.clone()}
    buffers = {t.untyped_storage().data_ptr(): t.untyped_storage()
               for t in (*kept, master, *saved.values())}
    locate = _locator()
    locate._storages = lambda torch: (  # type: ignore[attr-defined]
        {p: torch.empty(0, dtype=torch.int32).set_(s).numpy() for p, s in buffers.items()},
        {master.untyped_storage().data_ptr()})
    assert locate.locate(locate.saved_state(saved)) == _found_by_bytes(locate, saved)


@given(values=st.lists(st.integers(-5, 5), max_size=60))
def test_the_locators_distinct_values_are_numpys_unique(values):
    """The locator counts the pieces a storage holds with its own `_distinct` (np.unique
    imports numpy.ma in every rank on its first call): the same values, in the same order."""
    import numpy as np

    a = np.array(values, dtype=np.int64)
    assert np.array_equal(_locator()._distinct(a), np.unique(a))


def _state(numel: int, holders: list[tuple[int, bool]], pieces: int | None = None) -> dict:
    pieces = pieces or numel // 32
    return {"ev": "state", "tensors": {name: {
        "numel": numel, "pieces": pieces,
        "holders": [{"elements": e, "pieces": pieces, "param": False, "saved": s}
                    for e, s in holders]} for name in ("master", "exp_avg", "exp_avg_sq")}}


def _runs(P: int, layout: dict[int, list[tuple[int, bool]]]) -> dict:
    runs = {}
    for n, holders in layout.items():
        procs = []
        for r in range(n):
            p = rank_trace(r, n, [], P=P)
            p.state = _state(-(-P // n), holders)
            procs.append(p)
        runs[n] = observed_run(procs, n, 6, P)
    return runs


@given(P=st.integers(3_000, 3_000_000), k=st.integers(1, 4), copy=st.booleans(),
       ns=st.sampled_from([(2, 4), (2, 3, 4), (3,), (4,)]))
def test_state_that_shrinks_as_1_over_N_passes_however_it_is_packed(P, k, copy, ns):
    """Separate tensors (k = 1) or k shard-sized tensors in one flat storage, saved as they
    are or through a copy, odd P and padding (N = 3) included."""
    def holders(n: int) -> list[tuple[int, bool]]:
        shard = -(-P // n)
        return [(k * shard, False)] + ([(shard, True)] if copy else [])
    assert check_state_location(_runs(P, {n: holders(n) for n in (1, *ns)})) == []


@given(P=st.integers(3_000, 3_000_000), n=st.sampled_from([2, 3, 4, 8]), copy=st.booleans())
def test_a_moment_allocated_whole_is_named_with_its_storage(P, n, copy):
    shard = -(-P // n)
    layout = {1: [(P, False)] + ([(P, True)] if copy else []),
              n: [(P, False)] + ([(shard, True)] if copy else [])}
    found = check_state_location(_runs(P, layout))
    assert [v.message.split(" ")[0] for v in found] == ["exp_avg", "exp_avg_sq"]
    v = found[0]
    assert f"a storage of {P:,} elements on every rank (N = {n})" in v.message
    assert f"ceil(P/N) = {shard:,}" in v.message and v.message.endswith(WHOLE_HINT)
    assert diagnose("zero1_memory", found, n)[0].startswith("measured: exp_avg is held")


def test_no_verdict_where_the_state_was_not_found():
    """A state kept in pieces no storage holds whole, or no shard saved: nothing charged."""
    P = 30_080
    layout = {1: [(P, False)], 4: [(P, False)]}
    runs = _runs(P, layout)
    for p in runs[4].observed.processes:
        for rec in p.state["tensors"].values():
            for h in rec["holders"]:
                h["pieces"] = rec["pieces"] // 4  # a quarter found: no verdict
    assert check_state_location(runs) == []
    state_of_one = runs[1].observed.processes[0].state
    state_of_one["tensors"]["exp_avg"]["holders"] = []  # saved, but its values not found
    assert check_state_location(runs) == []


def test_a_run_where_no_shard_was_saved_is_not_a_pass():
    """Nothing located because nothing was saved (a crash, a program that never checkpoints
    through torch.save) fails, saying why; it never passes vacuously."""
    P = 30_080
    runs = _runs(P, {1: [(P, False)], 4: [(P // 4, False)]})
    assert check_state_location(runs) == []
    for p in runs[4].observed.processes:
        p.state = None
    runs[4].outcome.returncode = 1
    [v] = check_state_location(runs)
    assert v.found == "not located" and "failed before a rank saved" in v.message
    runs[4].outcome.returncode = 0
    [v] = check_state_location(runs)
    assert "no process saved a checkpoint shard" in v.message


def test_memory_outside_torch_is_looked_for_only_where_torch_views_it():
    """Looking for Python's buffers touches the objects a forked rank shares with its
    launcher (their pages are copied into every rank: +150 MB over zero1.py's four ranks,
    which then did not fit Gradescope's 768 MB box): a process whose tensors are all torch's
    own is not searched; one that steps a torch.from_numpy view is."""
    probe = (
        "import sys, numpy as np, torch; sys.path.insert(0, sys.argv[1]); "
        "import _observer_buffers as b; kept = {'m': np.ones(4096, dtype=np.float32)}; "
        "t = torch.zeros(8); own = lambda: any(type(o) is np.ndarray "
        "for o, _ in b.reachable(torch)[0].values()); before = own(); "
        "v = torch.from_numpy(kept['m'][:100]); print(before, own())")
    import subprocess

    out = subprocess.run([sys.executable, "-c", probe, str(OBSERVER.parent)], check=True,
                         capture_output=True, text=True).stdout.split()
    assert out == ["False", "True"], out
