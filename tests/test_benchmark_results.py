"""Benchmark results stay true: none is older than the code it measures (issue 33, item 6).

Each benchmarks/results/*.json names the commit it ran at; the commits after it that touch what
it measures (benchmarks/measures.py) make it stale, unless listed there with a reason.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from benchmarks.measures import (
    MEASURES,
    Commit,
    is_listed,
    measured_at,
    recorded_commit,
    stale,
)

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
RESULT_NAMES = sorted(p.stem for p in RESULTS.glob("*.json"))


def git(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)


def _git_or_skip() -> None:
    if shutil.which("git") is None:
        pytest.skip("git is not installed: cannot tell which commits a result predates")
    top = git("rev-parse", "--show-toplevel").stdout.strip()
    if not top or Path(top).resolve() != ROOT:  # none, or an outer repo this copy sits in
        pytest.skip(f"{ROOT} is not a git work tree: cannot tell which commits a result predates")


def _shallow() -> bool:
    return git("rev-parse", "--is-shallow-repository").stdout.strip() == "true"


def git_log(base: str, paths: Sequence[str]) -> list[Commit] | None:
    """The commits in base..HEAD touching `paths`, newest first, each with the paths it touched;
    None when `base` is not a commit of this history."""
    if git("rev-parse", "--verify", "--quiet", f"{base}^{{commit}}").returncode != 0:
        return None
    done = git(
        "log", "--format=%x1e%h%x1f%s", "--name-only", "--no-merges", f"{base}..HEAD", "--", *paths
    )
    assert done.returncode == 0, done.stderr
    out = []
    for entry in done.stdout.split("\x1e")[1:]:
        head, _, files = entry.partition("\n")
        sha, _, subject = head.partition("\x1f")
        out.append((sha, subject, tuple(f for f in files.split("\n") if f)))
    return out


def _short(subject: str, width: int = 110) -> str:
    return subject if len(subject) <= width else subject[: width - 1] + "…"


def test_every_result_has_its_measures() -> None:
    missing = [n for n in RESULT_NAMES if n not in MEASURES]
    gone = [n for n in MEASURES if n not in RESULT_NAMES]
    assert not missing, (
        f"benchmarks/results/{{{','.join(missing)}}}.json have no entry in benchmarks/measures.py "
        "MEASURES: add one naming the benchmark and the code it measures"
    )
    assert not gone, f"benchmarks/measures.py names results that do not exist: {gone}"


def test_measured_paths_exist() -> None:
    """A renamed or moved module would silently measure nothing: every path is still there."""
    missing = [
        f"{name}: {p}"
        for name, m in MEASURES.items()
        for p in m.paths
        if not (ROOT / p).exists() or (p.endswith("/") != (ROOT / p).is_dir())
    ]
    assert not missing, "benchmarks/measures.py names paths the repo lacks:\n" + "\n".join(missing)


def test_listed_commits_are_commits_with_reasons() -> None:
    for name, m in MEASURES.items():
        for sha, why in m.known.items():
            assert measured_at(sha) == sha.lower(), f"{name}: {sha!r} is not a commit id"
            assert why.strip() and "\n" not in why.strip(), f"{name}: {sha} needs a one-line reason"
    _git_or_skip()
    if _shallow():
        pytest.skip("a shallow clone: listed commits may lie beyond its history")
    unknown = [
        f"{name}: {sha}"
        for name, m in MEASURES.items()
        for sha in m.known
        if git("rev-parse", "--verify", "--quiet", f"{sha}^{{commit}}").returncode != 0
    ]
    assert not unknown, f"benchmarks/measures.py lists commits not in the history: {unknown}"


@pytest.mark.parametrize("name", RESULT_NAMES)
def test_result_is_not_older_than_the_code_it_measures(name: str) -> None:
    if name not in MEASURES:
        pytest.skip("no entry in benchmarks/measures.py (test_every_result_has_its_measures)")
    m = MEASURES[name]
    path = RESULTS / f"{name}.json"
    md = path.with_suffix(".md")
    recorded = recorded_commit(json.loads(path.read_text()), md.read_text() if md.exists() else "")
    rerun = f".venv/bin/python -m benchmarks {m.benchmark}"
    if measured_at(recorded) is None:
        pytest.fail(
            f"benchmarks/results/{name}.json records no commit it ran at ({recorded!r}): rerun "
            f"`{rerun}` in a git checkout"
        )
    _git_or_skip()
    verdict = stale(recorded, m.paths, m.known, git_log)
    if verdict.state == "unknown":
        if _shallow():
            pytest.skip(
                f"benchmarks/results/{name}.json ran at {verdict.base}, which this shallow "
                "clone's history does not reach (fetch more history to check it)"
            )
        pytest.fail(
            f"benchmarks/results/{name}.json ran at {verdict.base}, which is not a commit of this "
            f"history (rebased or amended away?): rerun `{rerun}` and commit the result"
        )
    if verdict.state == "stale":
        lines = [
            f"  {sha} {_short(subject)}\n      touches {', '.join(files)}"
            for sha, subject, files in verdict.commits
        ]
        pytest.fail(
            f"benchmarks/results/{name}.json ran at {recorded}; {len(lines)} later commit(s) "
            f"touch the code it measures:\n"
            + "\n".join(lines)
            + f"\nRerun `{rerun}` and commit the result, or, for a commit that cannot change "
            f'its figures, list it under "{name}" (known) in benchmarks/measures.py with a '
            "one-line reason.",
            pytrace=False,
        )


# ---------------------------------------------------------------- the decision, without git


def fake_log(history: list[Commit]):
    """A linear history, oldest first, as `git log base..HEAD -- paths` would see it."""

    def log(base: str, paths: Sequence[str]) -> list[Commit] | None:
        shas = [c[0] for c in history]
        if base not in shas:
            return None
        after = history[shas.index(base) + 1 :]
        touched = [
            (sha, s, tuple(f for f in files if any(f == p or f.startswith(p) for p in paths)))
            for sha, s, files in after
        ]
        return [c for c in reversed(touched) if c[2]]

    return log


HISTORY: list[Commit] = [
    ("aaaaaaa", "base", ("toolkit/kernels.py",)),
    ("bbbbbbb", "docs", ("docs/x.md",)),
    ("ccccccc", "kernels faster", ("toolkit/kernels.py",)),
    ("ddddddd", "a test in a measured folder", ("toolkit/engine/test_notes.txt",)),
]


def test_a_later_commit_on_the_paths_makes_it_stale_and_others_do_not() -> None:
    log = fake_log(HISTORY)
    v = stale("aaaaaaa", ("toolkit/kernels.py",), {}, log)
    assert v.state == "stale" and [c[0] for c in v.commits] == ["ccccccc"]
    assert stale("ccccccc", ("toolkit/kernels.py",), {}, log).state == "fresh"
    assert stale("bbbbbbb", ("docs/",), {}, log).state == "fresh"


def test_dirty_counts_as_the_commit_below_it() -> None:
    """A run on uncommitted changes is stale once a commit lands them, not exempt or unknown."""
    v = stale("aaaaaaa+dirty", ("toolkit/kernels.py",), {}, fake_log(HISTORY))
    assert v.base == "aaaaaaa"
    assert v.state == "stale" and [c[0] for c in v.commits] == ["ccccccc"]
    assert stale("ccccccc+dirty", ("toolkit/kernels.py",), {}, fake_log(HISTORY)).state == "fresh"


def test_a_listed_commit_does_not_count_in_any_abbreviation() -> None:
    paths = ("toolkit/",)
    log = fake_log(HISTORY)
    assert [c[0] for c in stale("aaaaaaa", paths, {}, log).commits] == ["ddddddd", "ccccccc"]
    v = stale("aaaaaaa", paths, {"ddddddd": "test-only"}, log)
    assert v.state == "stale" and [c[0] for c in v.commits] == ["ccccccc"]
    longer = {"ccccccc0123": "x", "DDDDDDD": "y"}  # a longer id of the same commit, any case
    assert stale("aaaaaaa", paths, longer, log).state == "fresh"
    assert is_listed("ddddddd12", {"DDDDDDD": "a shorter id, upper case"})
    assert not is_listed("ccccccc", {"cccccce": "another commit"})


def test_an_unknown_or_unrecorded_commit_is_never_fresh() -> None:
    log = fake_log(HISTORY)
    assert stale("eeeeeee", ("toolkit/",), {}, log) == stale("eeeeeee", (), {}, log)
    assert stale("eeeeeee", ("toolkit/",), {}, log).state == "unknown"
    for recorded in ("unknown", "", None, "unknown+dirty", 1234567, "abc"):
        assert stale(recorded, ("toolkit/",), {}, log).state == "unrecorded"


def test_the_recorded_commit_is_the_jsons_or_else_the_markdown_headers() -> None:
    assert recorded_commit({"commit": "5126274+dirty"}, "at commit 1111111") == "5126274+dirty"
    md = "# archive benchmarks\n\n2026-12-04T21:32:19+00:00 at commit bf13958: `python -m ...`"
    assert recorded_commit({"rows": []}, md) == "bf13958"
    assert recorded_commit({"rows": []}, "no commit here") is None
    assert recorded_commit({"commit": None}, md) is None


@given(
    st.lists(st.booleans(), min_size=1, max_size=12),
    st.data(),
)
def test_stale_is_the_later_commits_on_the_paths_less_the_listed(
    touches: list[bool], data: st.DataObject
) -> None:
    history: list[Commit] = [
        (f"{i:07x}", f"c{i}", ("toolkit/a.py",) if t else ("docs/a.md",))
        for i, t in enumerate(touches)
    ]
    base = data.draw(st.integers(0, len(history) - 1))
    listed = data.draw(st.sets(st.integers(0, len(history) - 1)))
    dirty = data.draw(st.booleans())
    known = {history[i][0]: "why" for i in listed}
    v = stale(
        history[base][0] + ("+dirty" if dirty else ""), ("toolkit/",), known, fake_log(history)
    )
    want = [
        c[0]
        for i, c in reversed(list(enumerate(history)))
        if i > base and touches[i] and i not in listed
    ]
    assert [c[0] for c in v.commits] == want
    assert v.state == ("stale" if want else "fresh")
