"""The one boundary for what a run left (tests/harness/observe/boundary.py, issue 72): over
drawn folders of regular files, folders, links (inside and out), FIFOs and large files, a
read returns the bytes of a regular file beneath the run's folder reached with no link, and
refuses everything else, without blocking, without following, without reading past its cap;
with openat2 and with the component-at-a-time walk alike."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.harness.observe import boundary
from tests.harness.observe.boundary import Missing, Refused, RunFolder, loads, nesting, one_line

SECRET = b"root-only canary 7f3c"
KINDS = ("file", "dir", "link_out", "link_in", "link_dir_out", "fifo", "big", "hardlink_out")
NAMES = st.sampled_from(["a", "b", "metrics", "rank-0.jsonl", "summary.json"])
# a tree: each entry a path of one or two names and its kind
TREES = st.lists(st.tuples(st.lists(NAMES, min_size=1, max_size=2), st.sampled_from(KINDS)),
                 min_size=1, max_size=6)


@pytest.fixture(params=["openat2", "walk"])
def way(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Both ways of opening beneath: the kernel's openat2, and the O_NOFOLLOW walk that
    stands in where the kernel lacks it."""
    if request.param == "walk":
        monkeypatch.setattr(boundary, "_has_openat2", False)
    else:
        monkeypatch.setattr(boundary, "_has_openat2", None)
    yield request.param


def _build(root: Path, outside: Path, tree: list[tuple[list[str], str]]) -> dict[str, str]:
    """Lay `tree` out under root/run; returns what the boundary must find at each path
    ("file:<content>", "refused" or "missing")."""
    run = root / "run"
    run.mkdir()
    expected: dict[str, str] = {}
    for parts, kind in tree:
        path = run.joinpath(*parts)
        if any(run.joinpath(*parts[:i]).is_symlink() or run.joinpath(*parts[:i]).is_file()
               or (run.joinpath(*parts[:i]).exists() and not run.joinpath(*parts[:i]).is_dir())
               for i in range(1, len(parts))) or os.path.lexists(path):
            continue  # an entry above is not a real folder, or the name is taken
        path.parent.mkdir(parents=True, exist_ok=True)
        rel = "/".join(parts)
        if kind == "file":
            path.write_bytes(rel.encode())
            expected[rel] = f"file:{rel}"
        elif kind == "dir":
            path.mkdir()
            expected[rel] = "refused"  # a folder is not a file
        elif kind == "link_out":
            path.symlink_to(outside / "secret")
            expected[rel] = "refused"
        elif kind == "link_in":
            (run / "target").write_bytes(b"inside")
            path.symlink_to(run / "target")
            expected[rel] = "refused"  # a link is never followed, even to inside
        elif kind == "link_dir_out":
            path.symlink_to(outside)
            expected[rel] = "refused"
            expected[f"{rel}/secret"] = "refused"
        elif kind == "fifo":
            os.mkfifo(path)
            expected[rel] = "refused"
        elif kind == "big":
            with open(path, "wb") as f:
                f.truncate(2**20 + 1)  # sparse: over the cap below
            expected[rel] = "refused"
        elif kind == "hardlink_out":
            os.link(outside / "secret", path)
            # another user's file, linked in: refused (here the owner test stands in:
            # the run's uid is said to be one the file does not have)
            expected[rel] = "refused"
    return expected


# (`way` sets one module flag for the whole test: the same for every example)
@settings(max_examples=25, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tree=TREES)
@example(tree=[(["metrics", "rank-0.jsonl"], "link_out")])
@example(tree=[(["metrics"], "link_dir_out")])
@example(tree=[(["summary.json"], "fifo")])
@example(tree=[(["summary.json"], "big")])
def test_a_read_returns_a_regular_files_bytes_beneath_and_refuses_all_else(way, tree):
    with tempfile.TemporaryDirectory() as tmp:
        root, outside = Path(tmp) / "root", Path(tmp) / "outside"
        root.mkdir()
        outside.mkdir()
        (outside / "secret").write_bytes(SECRET)
        os.chown(outside / "secret", 4242, 4242)
        expected = _build(root, outside, tree)
        folder = RunFolder(root / "run", owner=4343)
        for rel, want in expected.items():
            try:
                got = folder.read(rel, 2**20)
            except Missing:
                assert want == "missing", rel
                continue
            except Refused as e:
                assert want == "refused", (rel, str(e))
                assert str(e).startswith(rel.split("/")[0]) and "\n" not in str(e)
                continue
            assert want == f"file:{got.decode()}", rel
            assert SECRET not in got
        for rel in ("nothing", "a/nothing"):
            if rel not in expected and not os.path.lexists(root / "run" / rel):
                kind = folder.kind(rel)
                assert kind in ("missing", "link"), (rel, kind)


@pytest.mark.parametrize("rel", ["/etc/passwd", "../outside/secret", "a/../../x", "", "."])
def test_a_name_outside_the_folder_is_refused_before_anything_is_opened(way, tmp_path, rel):
    (tmp_path / "run").mkdir()
    with pytest.raises(Refused, match="outside the run's folder"):
        RunFolder(tmp_path / "run").read(rel, 100)


def test_a_links_refusal_tells_the_student_what_to_do(way, tmp_path):
    (tmp_path / "run" / "out" / "metrics").mkdir(parents=True)
    (tmp_path / "run" / "out" / "metrics" / "rank-0.jsonl").symlink_to("/etc/passwd")
    with pytest.raises(Refused) as e:
        RunFolder(tmp_path / "run").read("out/metrics/rank-0.jsonl", 100)
    assert str(e.value) == ("out/metrics/rank-0.jsonl is a link: write your files, do not "
                            "link them")


def test_a_read_from_an_offset_is_capped_by_what_is_left(way, tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "t.jsonl").write_bytes(b"x" * 100)
    folder = RunFolder(tmp_path / "run")
    assert folder.read("t.jsonl", 40, offset=60) == b"x" * 40
    with pytest.raises(Refused, match="more than"):
        folder.read("t.jsonl", 39, offset=60)
    assert folder.tail("t.jsonl", 10) == b"x" * 10


@given(st.integers(0, 3000))
@example(100_000)
def test_json_deeper_than_the_bound_is_refused_never_a_recursion_error(depth):
    text = "[" * depth + "]" * depth
    if 0 < depth <= boundary.DEPTH:
        assert nesting(loads(text)) == depth
    elif depth == 0:
        with pytest.raises(ValueError, match="invalid JSON"):
            loads(text)
    else:
        with pytest.raises(ValueError, match="deeper than"):
            loads(text)


@given(st.text())
@example("rank 0\ntimeline of the base run: /root/secret (open")
def test_a_run_chosen_text_becomes_one_bounded_line(text):
    line = one_line(text, 50)
    assert len(line) <= 50 and line.isprintable()


def test_the_suites_own_file_replaces_a_link_the_run_left_and_never_writes_through_it(tmp_path):
    canary = tmp_path / "canary"
    canary.write_bytes(SECRET)
    run = tmp_path / "run"
    run.mkdir()
    (run / "timeline.json").symlink_to(canary)
    boundary.replace_own(run / "timeline.json", b"{}")
    assert canary.read_bytes() == SECRET
    assert not (run / "timeline.json").is_symlink() and (run / "timeline.json").read_bytes() \
        == b"{}"
    (run / "outcome.json").mkdir()
    (run / "outcome.json" / "inside").symlink_to(canary)
    boundary.replace_own(run / "outcome.json", b"[]")
    assert canary.read_bytes() == SECRET and (run / "outcome.json").read_bytes() == b"[]"
    shutil.rmtree(run)
