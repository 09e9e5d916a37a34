"""Branch transactions: every commit the jobs make to an Icechunk repo goes through here.

Two shapes, one set of rules (replicas before the primary, which defines "committed"):

- **The single commit** (`commit_on`): a change applied to each repo's branch and committed
  there in turn. `update`'s whole-file commits, the template and the metadata refresh use it.
- **The branch transaction** (`stages`): a plan fragment. `setup` puts a branch and a marker
  of main's head on every repo and commits the job's setup change on the branch; then rounds of
  forked work, each followed by a merge-commit stage whose nodes commit a group of forks once
  (a retried node finds its group's token on the branch and does not commit again), or each
  committing itself where its forks were folded (`SettleRound`: no fork reaches the client); then
  `finalize` moves main to the branch only where main is still at the marker, replicas first.
  `abort` drops a branch and its marker; main is never touched.

What is job-specific comes in as values: the branch name, the setup change, the work stage,
how a group's commit is described and how the commit stage's outputs fold. This module
imports no job.

Each step of a commit's life is announced as the audit event `AUDIT_EVENT` with the step's
name (one of `STEPS`): crash tests hook it to kill the process there; with no audit hook
installed it costs nothing.
"""

from __future__ import annotations

import hashlib
import pickle
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from toolkit import icechunk as R
from toolkit.engine.malloc import roomy
from toolkit.plan import Gate, Stage
from toolkit.tasks import Named, StableTasks, stable

__all__ = [
    "AUDIT_EVENT",
    "MARKER_SUFFIX",
    "STEPS",
    "Change",
    "Committed",
    "Forked",
    "Group",
    "Packed",
    "Round",
    "SettleRound",
    "Setup",
    "SetupChange",
    "Txn",
    "Unwritten",
    "abort",
    "advance_marker",
    "branches_of",
    "commit_on",
    "committed",
    "finalize",
    "fork_of",
    "gather",
    "marker",
    "open_branch",
    "stages",
    "step",
]

MARKER_SUFFIX = "-main-at-setup"
AUDIT_EVENT = "toolkit.transaction.step"
# The steps announced, in order of a commit's life:
#   before_set_refs         a whole-file commit: the append dim is grown, no ref set yet
#   after_set_refs          a whole-file commit: every ref of the batch set, nothing committed
#   after_replica_commit    each replica committed, the primary not yet (both shapes)
#   finalize_after_replica  finalize: replicas moved, the primary not yet
#   worker_forked           forked work: written into its fork, not yet returned
#   committed               the primary committed a batch (second argument: its file keys)
#   round_committed         a round that commits itself (`SettleRound`): every repo committed
#                           it, the next round not started (second argument: the round)
STEPS = (
    "before_set_refs",
    "after_set_refs",
    "after_replica_commit",
    "finalize_after_replica",
    "worker_forked",
    "committed",
    "round_committed",
)


def step(name: str, *details: Any) -> None:
    """Announce a step of a commit's life (see the module docstring)."""
    sys.audit(AUDIT_EVENT, name, *details)


def marker(branch: str) -> str:
    """The branch that keeps main's snapshot as `branch`'s setup found it."""
    return f"{branch}{MARKER_SUFFIX}"


def branches_of(repo: Any, prefix: str, names: Iterable[str] | None = None) -> list[str]:
    """The transaction branches named `prefix...` among `names` (default: the repo's),
    markers excluded."""
    names = R.branches(repo) if names is None else names
    return sorted(b for b in names if b.startswith(prefix) and not b.endswith(MARKER_SUFFIX))


@dataclass(frozen=True)
class Txn:
    """Which repos a transaction writes (replicas first, the primary last), on which branch,
    and the branch it starts from and lands on (`base`: main, or a branch of a transaction
    around this one, so that main moves once for both)."""

    refs: tuple[R.RepoRef, ...]
    branch: str
    base: str = "main"

    @property
    def primary(self) -> R.RepoRef:
        return self.refs[-1]


# A job's change to one repo's writable session (committed when the session has changes).
Change = Callable[[R.RepoRef, Any], object]
# A setup change also hears main's snapshot as the setup found it.
SetupChange = Callable[[R.RepoRef, Any, str], object]


# ----------------------------------------------------------------------------- the single commit


def commit_on(
    refs: Sequence[R.RepoRef],
    branch: str,
    change: Change,
    message: str,
    metadata: Mapping[str, Any] | None = None,
    *,
    fresh: bool = False,
) -> str | None:
    """`change` applied to each repo's `branch` (replicas first) and committed there when it
    changed something. Returns the primary's new snapshot (None: nothing to commit there).

    A crash between two repos leaves a replica a commit ahead; the jobs' reruns re-apply the
    same change to both (their changes are idempotent), so they converge."""
    snap = None
    for i, ref in enumerate(refs):
        if i:
            step("after_replica_commit")
        session = R.writable(ref.open(fresh=fresh), branch)
        change(ref, session)
        snap = R.commit(session, message, metadata) if R.has_changes(session) else None
    return snap


# ----------------------------------------------------------------------------- setup


@dataclass(frozen=True)
class Setup:
    """The branch and its marker at main's head on every repo, then the job's setup change
    committed on the branch.

    `replaces`: other branches with this prefix are dropped first (a newer build supersedes
    them). `restart`: a branch whose marker is no longer main's head starts again from it."""

    txn: Txn
    change: SetupChange
    message: str
    metadata: Mapping[str, Any]
    prepare: Callable[[], object] | None = None  # once, before any branch (create the repos)
    replaces: str | None = None
    restart: bool = False

    def __call__(self, _step: Named) -> str:
        if self.prepare is not None:
            self.prepare()
        branch = self.txn.branch
        for ref in self.txn.refs:
            repo = ref.open(fresh=True)
            main = R.snapshot_of(repo, self.txn.base)
            names = R.branches(repo)
            if self.replaces is not None:
                for other in branches_of(repo, self.replaces, names):
                    if other != branch:
                        abort(repo, other)
            if self.restart and branch in names and _at_setup(repo, branch) != main:
                abort(repo, branch)  # set up from a head main has left: start again
            names = R.branches(repo)
            if branch not in names:
                if marker(branch) in names:
                    R.delete_branch(repo, marker(branch))
                R.create_branch(repo, marker(branch), main)
                R.create_branch(repo, branch, main)
            session = R.writable(repo, branch)
            self.change(ref, session, main)
            if R.has_changes(session):
                R.commit(session, self.message, {**self.metadata, "main_at_setup": main})
        return branch


def _at_setup(repo: Any, branch: str) -> str | None:
    return R.snapshot_of(repo, marker(branch)) if marker(branch) in R.branches(repo) else None


@dataclass(frozen=True)
class OnBranch:
    """The setup gate: the branch exists on every repo."""

    txn: Txn

    def __call__(self) -> frozenset[str]:
        for ref in self.txn.refs:
            if self.txn.branch not in R.branches(ref.open(fresh=True)):
                return frozenset()
        return frozenset({"setup"})


# ----------------------------------------------------------------------------- forked work


@dataclass(frozen=True)
class Forked:
    """What a work node hands on: its forks by repo url (nothing committed), the keys of what
    it wrote (they name its group's commit) and the job's own report."""

    forks: tuple[tuple[str, Any], ...] = ()
    done: tuple[str, ...] = ()
    report: Any = None
    tasks: int | None = None  # the tasks it wrote, when `done` names objects, not tasks

    @property
    def written(self) -> int:
        """The tasks the node wrote, for the engine's count (one that yielded nothing is not)."""
        return len(self.done) if self.tasks is None else self.tasks

    def __reduce__(self) -> tuple[Any, ...]:
        """Forks travel packed (`Packed`): a worker's forks go to the client and, in the commit
        stage's graph, through the scheduler to the commit node, which alone opens them."""
        forks = tuple((url, f if isinstance(f, Packed) else Packed.of(f)) for url, f in self.forks)
        return (Forked, (forks, self.done, self.report, self.tasks))


@dataclass(frozen=True)
class Packed:
    """A fork as it travels: its pickle, zstd-compressed. A fork's change set is mostly the
    same location strings over and over: the forks of 159,294 virtual refs (20,016 GRIB files)
    pickle to 18.6 MB and pack to 0.42 MB in 7 ms."""

    data: bytes

    @classmethod
    def of(cls, fork: Any) -> Packed:
        from numcodecs import Zstd

        return cls(bytes(Zstd(level=1).encode(pickle.dumps(fork, protocol=5))))

    def open(self) -> Any:
        from numcodecs import Zstd

        return pickle.loads(Zstd().decode(self.data))


def opened(fork: Any) -> Any:
    """The fork itself, whether it travelled (packed) or stayed in this process."""
    return fork.open() if isinstance(fork, Packed) else fork


def fork_of(ref: R.RepoRef, branch: str) -> Any:
    """A fork of `branch` to write a work node's share into (merged by the commit stage)."""
    return R.fork(R.writable(ref.open(), branch))


def gather(parts: list[Any]) -> tuple[Any, ...]:
    """A work stage's fold: the nodes' outputs side by side (associative, no I/O)."""
    out: list[Any] = []
    for p in parts:
        if p is None:
            continue
        out.extend(p if isinstance(p, tuple) else (p,))
    return tuple(out)


@dataclass(frozen=True)
class Group:
    """A bounded group of work outputs, merged and committed by one node."""

    round: str
    index: int
    outs: tuple[Forked, ...]

    @property
    def key(self) -> str:
        return f"{self.round}/{self.index:04d}"

    @property
    def token(self) -> str:
        """Names this group's commit: a retried node finds it on the branch and skips it."""
        done = sorted(k for o in self.outs for k in o.done)
        return hashlib.sha256("\0".join(done).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Groups:
    """The commit stage's tasks, from the work stage's certified result: `size` outputs a
    group."""

    round: str
    size: int

    def __call__(self, outs: tuple[Forked, ...] | None) -> StableTasks[Group]:
        outs = tuple(o for o in outs or () if isinstance(o, Forked))
        n = max(1, self.size)
        return stable(
            Group(self.round, i, outs[j : j + n]) for i, j in enumerate(range(0, len(outs), n))
        )


@dataclass(frozen=True)
class Committed:
    """A commit node's result: its group's outputs, their forks dropped (spent once merged:
    they would only travel back to the client), and the primary's snapshot (None: nothing to
    commit)."""

    outs: tuple[Forked, ...]
    snapshot: str | None
    rebases: int = 0  # times the commit lost its branch's head to another and rebased


def spent(outs: tuple[Forked, ...]) -> tuple[Forked, ...]:
    """The outputs without their forks (what a commit node hands on)."""
    return tuple(replace(o, forks=()) for o in outs)


def committed(repo: Any, branch: str, token: str) -> str | None:
    """The snapshot on `branch` (since its setup) that committed group `token`, if any."""
    at_setup = _at_setup(repo, branch)
    for c in R.history(repo, branch):
        if c.id == at_setup:
            return None
        if c.metadata.get("group") == token:
            return c.id
    return None


@dataclass(frozen=True)
class MergeCommit:
    """Merge a group's forks and commit them on the branch, replicas first; idempotent: a repo
    whose branch already holds the group's commit is not committed to again."""

    txn: Txn
    describe: Callable[[Group], tuple[str, Mapping[str, Any]]]

    def __call__(self, group: Group) -> Committed:
        if not any(o.forks for o in group.outs):
            return Committed(spent(group.outs), None)
        message, metadata = self.describe(group)
        snap, rebases = None, 0
        for i, ref in enumerate(self.txn.refs):
            if i:
                step("after_replica_commit")
            repo = ref.open()
            snap = committed(repo, self.txn.branch, group.token)
            if snap is not None:
                continue
            with roomy():  # a commit writes manifests: glibc's own thresholds on a worker
                session = R.writable(repo, self.txn.branch)
                R.merge(
                    session,
                    [opened(f) for o in group.outs for url, f in o.forks if url == ref.url],
                )
                if R.has_changes(session):
                    meta = {**metadata, "group": group.token}
                    snap, n = R.commit_counted(session, message, meta)
                    rebases += n
        return Committed(spent(group.outs), snap, rebases)


@dataclass(frozen=True)
class SettleRound:
    """A round of forked work that commits itself (`Stage.settle`): the forks of the round's
    window merged and committed once per repo where they were folded, next to the workers, as
    `MergeCommit` does a group (a retry finds its commit by the group's token). Only
    `fold([Committed])`, the job's report of the round, travels on to the client: never a
    fork."""

    txn: Txn
    round: str
    describe: Callable[[Group], tuple[str, Mapping[str, Any]]]
    fold: Callable[[list[Any]], Any]

    def __call__(self, outs: Any) -> Any:
        forked = tuple(o for o in gather([outs]) if isinstance(o, Forked))
        done = MergeCommit(self.txn, self.describe)(Group(self.round, 0, forked))
        step("round_committed", self.round)
        return self.fold([done])


@dataclass(frozen=True)
class Unwritten:
    """Why a wanted key is not on the branch after the round's commits, when a work node said
    it wrote it: a commit gate that fails names the group's commit that should hold it. It
    explains; the gate's observation decides, and excuses nothing."""

    def __call__(self, combined: Any) -> dict[str, str]:
        reasons = {}
        for c in gather([combined]):
            if isinstance(c, Committed):
                into = f"committed as {c.snapshot}" if c.snapshot else "never committed"
                for o in c.outs:
                    for k in o.done:
                        reasons[k] = f"written into a fork {into}, yet not on the branch"
        return reasons


@dataclass(frozen=True)
class Round:
    """One round of forked work and its merge-commit stage.

    `work` is the job's stage; its service returns `Forked` values (or tuples of them) and its
    fold should be `gather`. The commit stage `commit` merges `group_size` outputs per node,
    describes each commit with `describe(group)` (message, metadata), checks `gate` (what must
    exist on the branch) and folds its `Committed` values with `fold` (default: side by side).
    A gate that explains nothing itself is given `Unwritten`."""

    work: Stage
    commit: str
    gate: Gate
    describe: Callable[[Group], tuple[str, Mapping[str, Any]]]
    fold: Callable[[list[Any]], Any] | None = None
    group_size: int = 1 << 30  # one node merges every fork: one commit, no race


# ----------------------------------------------------------------------------- finalize


def finalize(txn: Txn, moved: Callable[[str], str]) -> str:
    """main := the branch on every repo (replicas first) where main is still at the marker;
    the branch and marker are dropped. Returns the primary's head. Replayable: a repo already
    finalized has no branch left and answers its main's head. Main moved: `BranchMoved` with
    `moved(url)`, the branch kept."""
    head = ""
    for i, ref in enumerate(txn.refs):
        if i:
            step("finalize_after_replica")
        repo = ref.open(fresh=True)
        names = R.branches(repo)
        if (  # not a replay (that moved base first): the branch was deleted under the job
            txn.branch not in names
            and marker(txn.branch) in names
            and R.snapshot_of(repo, txn.base) == R.snapshot_of(repo, marker(txn.branch))
        ):
            raise LookupError(f"{ref.url}: branch {txn.branch!r} not found at finalize")
        try:
            head = R.finalize_branch(repo, txn.branch, marker(txn.branch), txn.base)
        except R.BranchMoved as err:
            raise R.BranchMoved(moved(ref.url)) from err
    return head


CATCH_UP_TRIES = 5  # finalize's catch-up and move, when main keeps moving between the two


@dataclass(frozen=True)
class Finalize:
    txn: Txn
    moved: Callable[[str], str]
    catch_up: Callable[[], object] | None = None

    def __call__(self, _step: Named) -> str:
        attempt = 0
        while True:
            attempt += 1
            if self.catch_up is not None:
                self.catch_up()
            try:
                return finalize(self.txn, self.moved)
            except R.BranchMoved:  # main moved again since the catch-up (an update fired)
                if self.catch_up is None or attempt == CATCH_UP_TRIES:
                    raise


@dataclass(frozen=True)
class Finalized:
    """The finalize gate: the branch is gone from every repo."""

    txn: Txn

    def __call__(self) -> frozenset[str]:
        for ref in self.txn.refs:
            if self.txn.branch in R.branches(ref.open(fresh=True)):
                return frozenset()
        return frozenset({"finalize"})


def open_branch(txn: Txn) -> str:
    """The transaction's branch and its marker at base's head on every repo, for work that is
    not a plan's setup (a change committed with `commit_on`, then a nested transaction based
    on it); a branch whose marker base has left starts again. Returns the primary's marker."""
    at = ""
    for ref in txn.refs:
        repo = ref.open(fresh=True)
        head = R.snapshot_of(repo, txn.base)
        names = R.branches(repo)
        if txn.branch in names and _at_setup(repo, txn.branch) != head:
            abort(repo, txn.branch)
            names = R.branches(repo)
        if txn.branch not in names:
            if marker(txn.branch) in names:
                R.delete_branch(repo, marker(txn.branch))
            R.create_branch(repo, marker(txn.branch), head)
            R.create_branch(repo, txn.branch, head)
        at = head
    return at


def abort(repo: Any, branch: str) -> list[str]:
    """Drop `branch` and its marker; main is never touched. Returns the branches deleted."""
    names = R.branches(repo)
    deleted = [b for b in (branch, marker(branch)) if b in names]
    for b in deleted:
        R.delete_branch(repo, b)
    return deleted


def advance_marker(repo: Any, branch: str, to: str, expected: str) -> None:
    """Point `branch`'s marker at `to` (base's head), only if it is still at `expected`: the
    branch holds base's commits since `expected` (a job replayed them), so finalize may move
    base. A marker moved meanwhile is `BranchMoved`."""
    R.reset_branch(repo, marker(branch), to, expected=expected)


# ----------------------------------------------------------------------------- the fragment


def stages(
    txn: Txn,
    setup: Setup,
    rounds: Sequence[Round | Stage],
    moved: Callable[[str], str],
    setup_gate: Callable[[], Iterable[str]] | None = None,
    catch_up: Callable[[], object] | None = None,
) -> tuple[Stage, ...]:
    """setup -> (work, merge-commit) per round -> finalize, as the engine's stages. A round
    given as a `Stage` commits its own work (`settle=SettleRound(...)`) and is run as is.
    `catch_up`: run by finalize first (a job bringing main's new commits onto its branch)."""
    out = [
        Stage(
            "setup",
            stable([Named("setup")]),
            setup,
            Gate(setup_gate or OnBranch(txn), want=("setup",)),
            resume=False,
        )
    ]
    for r in rounds:
        if isinstance(r, Stage):
            out.append(r)
            continue
        gate = r.gate if r.gate.explain else replace(r.gate, explain=Unwritten(), excuse=False)
        out.append(r.work)
        out.append(
            Stage(
                r.commit,
                stable([]),
                MergeCommit(txn, r.describe),
                gate,
                resume=False,
                combine=r.fold or gather,
                tasks_from=Groups(r.commit, r.group_size),
            )
        )
    out.append(
        Stage(
            "finalize",
            stable([Named("finalize")]),
            Finalize(txn, moved, catch_up),
            Gate(Finalized(txn), want=("finalize",)),
            resume=False,
        )
    )
    return tuple(out)
