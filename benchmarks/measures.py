"""What each benchmark result measures, so a result older than its code is caught.

Every file in benchmarks/results/*.json names the commit it ran at (`commit`, from
`benchmarks._report.commit`; a `+dirty` suffix is dropped, so a run on uncommitted changes counts
as measured at the commit below them and the commit that later lands those changes makes it
stale). `tests/test_benchmark_results.py` lists the commits after that one that touch the paths
below (`git log RESULT_COMMIT..HEAD -- PATHS`) and fails for each result that has any, unless the
commit is listed in that result's `known` with a one-line reason it cannot change the figures
(a docs-only or test-only change inside a measured folder, say). The fix for a stale result is
to rerun its benchmark (`.venv/bin/python -m benchmarks NAME`) and commit the new result; listing
a commit is for the rare change that truly cannot move the numbers, and narrowing `paths` is
better than listing. A new result file needs an entry here, or the test fails.

`paths` are what is on the measured path: the benchmark module itself, the toolkit modules its
timed code runs (and, for a command timed as a fresh process, the modules it imports), and the
inputs it reads or generates (the simulator, tests/data). They are chosen by reading each
benchmark, not all of toolkit/: a module a benchmark only imports outside its timings is left
out. `benchmarks/_report.py` only formats and stores figures, so no result lists it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal


@dataclass(frozen=True)
class Measures:
    benchmark: str  # the module that writes it: `.venv/bin/python -m benchmarks BENCHMARK`
    code: tuple[str, ...]  # files and folders (ending "/") under the repo root
    known: Mapping[str, str] = field(default_factory=dict)  # commit -> why it cannot matter

    @property
    def paths(self) -> tuple[str, ...]:
        return (f"benchmarks/{self.benchmark}.py", *self.code)


STORAGE = ("toolkit/storage.py",)
# run() and compile_plan (graph, gates, cluster connection and its version check, progress) and
# the plan and task types it schedules; storage only names errors there. Not interrupt.py: only
# the command line (toolkit.console) installs it.
ENGINE = (
    "toolkit/engine/__init__.py",
    "toolkit/engine/cluster.py",
    "toolkit/engine/graph.py",
    "toolkit/engine/listing.py",
    "toolkit/engine/malloc.py",
    "toolkit/engine/progress.py",
    "toolkit/engine/run.py",
    "toolkit/engine/runner.py",
    "toolkit/engine/ship.py",
    "toolkit/engine/stream.py",
    "toolkit/engine/versions.py",
    "toolkit/plan.py",
    "toolkit/tasks.py",
)
# build() of a plain Zarr store: plan from the listing, read + decode level 0, the kernels,
# encode + write, level and root metadata, through the engine (repo sources go to repo.py).
PYRAMID_BUILD = (
    "toolkit/pyramid/api.py",
    "toolkit/pyramid/store_build.py",
    "toolkit/pyramid/failure.py",
    "toolkit/pyramid/home.py",
    "toolkit/pyramid/levels.py",
    "toolkit/pyramid/metadata.py",
    "toolkit/pyramid/geometry.py",
    "toolkit/pyramid/shardkeys.py",
    "toolkit/pyramid/records.py",
    "toolkit/pyramid/settings.py",
    "toolkit/pyramid/shards.py",
    "toolkit/pyramid/source.py",
    "toolkit/pyramid/zarr_home.py",
    "toolkit/cf.py",
    "toolkit/kernels.py",
    "toolkit/engine/codecs.py",
    *STORAGE,
    *ENGINE,
)
# What `import toolkit.cli` loads (timed by pyramid_build's command-line rows and its
# "imports (toolkit.cli)" row), beyond the build itself.
CLI_IMPORTS = (
    "toolkit/launch.py",  # the console script's first step (one re-execution)
    "toolkit/__init__.py",
    "toolkit/cli.py",
    "toolkit/console.py",
    "toolkit/engine/interrupt.py",
    "toolkit/pyramid/__init__.py",
    "toolkit/pyramid/cli.py",
    "toolkit/pyramid/read.py",
    "toolkit/pyramid/verify.py",
    "toolkit/archive/__init__.py",
    "toolkit/archive/cli.py",
    "toolkit/virtual/__init__.py",
    "toolkit/virtual/cli.py",
    "toolkit/virtual/clock.py",
    "toolkit/virtual/grib/__init__.py",
    "toolkit/virtual/grib/cli.py",
)
GRIB = (
    "toolkit/virtual/grib/decode.py",
    "toolkit/virtual/grib/errors.py",
    "toolkit/virtual/grib/fetch.py",
    "toolkit/virtual/grib/index.py",
    "toolkit/virtual/grib/kinds.py",
    "toolkit/virtual/grib/message.py",
    "toolkit/virtual/sources/noaa.py",
)
# The write loop (`toolkit.virtual.write.run`): discovery, .idx + header check, catalog match,
# refs, the template and its layout, the Icechunk session and commit, the collector's setting.
VIRTUAL_WRITE = (
    "toolkit/engine/heap.py",
    "toolkit/icechunk/",
    "toolkit/transaction.py",
    "toolkit/plan.py",
    "toolkit/tasks.py",
    "toolkit/virtual/grib_params.py",
    "toolkit/virtual/dataset.py",
    "toolkit/virtual/builtin/common.py",
    "toolkit/virtual/filetable.py",
    "toolkit/virtual/layout.py",
    "toolkit/virtual/source_io.py",
    "toolkit/virtual/refs.py",
    "toolkit/virtual/gribsource.py",
    "toolkit/virtual/template.py",
    "toolkit/virtual/write.py",
    *GRIB,
    *STORAGE,
)
BACKFILL = (
    "toolkit/virtual/backfill.py",
    "toolkit/virtual/inflight.py",
    "toolkit/virtual/lease.py",
    *ENGINE,
)
UPDATE = (
    "toolkit/virtual/update.py",
    "toolkit/virtual/clock.py",
    "toolkit/virtual/inflight.py",
    "toolkit/virtual/lease.py",
    "toolkit/virtual/skips.py",
    "toolkit/virtual/status.py",
)
# The simulator's GRIB2 archive and the sim-gfs dataset: the benchmarks' input.
SIMULATOR = ("toolkit/examples/datasets.py", "toolkit/examples/simulate.py")


def _u(*groups: Sequence[str]) -> tuple[str, ...]:
    """The groups' paths, each once, in order."""
    return tuple(dict.fromkeys(p for g in groups for p in g))


# Commits on ENGINE that no timed code runs: `ship.payload` is called only by --ship.
SHIP_ONLY = {"b1aa640": "the distribution name in --ship's zip metadata; no benchmark ships"}
# `pyramid build --output`: build() gains one `if output is not None` before what it ran before,
# and the CLI one option; no benchmark builds with --output
BUILD_OUTPUT = "build(output=...) adds a branch no benchmark takes (output is None there)"

# cff67ff: storage.explain/readable change only how an error is rendered, options.parse_size
# only what a command line's size spells, and build()/plan.py only a build whose level 0 grew
# (an append) or a store rebuilt without --variable beside other arrays; no timed path of these
# benchmarks errs, parses a size, appends or has other arrays (pyramid_append does: rerun)
REVIEW_FIXES = {
    "cff67ff": "error rendering, size parsing and the append path only (none timed here)",
    # the level-contents check gains a branch for existing level groups with no record
    "f4afbb1": "a branch for existing level groups with no readable record (no timed build has one)",
}

MEASURES: dict[str, Measures] = {
    "archive_bench": Measures(
        "archive_bench",
        # Trie + lookup/lookup_many, partition(), and partition_store (read_arrays' listing,
        # propose, diff, the manifest write) on a memory store.
        (
            "toolkit/archive/diff.py",
            "toolkit/archive/hierarchy.py",
            "toolkit/archive/ids.py",
            "toolkit/archive/keys.py",
            "toolkit/archive/manifests.py",
            "toolkit/archive/model.py",
            "toolkit/archive/partition.py",
            "toolkit/archive/resolve.py",
            "toolkit/archive/service.py",
            *STORAGE,
        ),
    ),
    "engine_overhead": Measures("engine_overhead", ENGINE, SHIP_ONLY),
    # gated no-op plans vs client.map through the engine; plan_pyramid over a generated listing
    "engine_scale": Measures(
        "engine_scale",
        _u(ENGINE, ("toolkit/pyramid/geometry.py", "toolkit/pyramid/shardkeys.py")),
    ),
    "grib_bench": Measures(
        "grib_bench",
        # scan/parse_index, the GFS catalog match, header checks, locate(), decode; the real
        # inventories and GRIB2 files it reads.
        _u(GRIB, STORAGE, ("tests/data/idx/", "tests/data/grib/")),
    ),
    "pyramid_build": Measures(
        "pyramid_build",
        _u(PYRAMID_BUILD, CLI_IMPORTS, ("toolkit/examples/synthetic.py",)),
        {
            "03bf8e5": "toolkit/cli.py only names `serve` in BY_NAME: its module is imported when "
            "`serve` is run or listed, never by `toolkit pyramid build` or `import toolkit.cli`",
            "9382b37": "toolkit/cli.py's docstring, and interrupt.py's `ending_says` (a line for "
            "`serve` to print on Ctrl-C): nothing a pyramid build runs",
            "63e2076": "toolkit/__init__.py gains `serve`, a function that imports nothing until "
            "called; toolkit/cli.py renames the module `serve` is loaded from by name",
            "9e028b6": BUILD_OUTPUT,
        },
    ),
    "pyramid_cf": Measures("pyramid_cf", PYRAMID_BUILD, {"9e028b6": BUILD_OUTPUT}),
    # a built daily store, one xarray append, then the incremental build and --rebuild-from 2x
    "pyramid_append": Measures(
        "pyramid_append", PYRAMID_BUILD, {"f4afbb1": REVIEW_FIXES["f4afbb1"]}
    ),
    # both builds of one store: --output (references, then the repo pyramid) and in place
    "pyramid_output": Measures(
        "pyramid_output",
        _u(PYRAMID_BUILD, ("toolkit/pyramid/output.py", "toolkit/pyramid/repo.py")),
    ),
    "pyramid_scale": Measures(
        "pyramid_scale",
        _u(PYRAMID_BUILD, ("toolkit/pyramid/read.py",)),
        {"9e028b6": BUILD_OUTPUT},
    ),
    "pyramid_kernels": Measures("pyramid_kernels", ("toolkit/kernels.py",)),
    "virtual_backfill_contention": Measures(
        "virtual_backfill", _u(VIRTUAL_WRITE, BACKFILL, SIMULATOR), SHIP_ONLY
    ),
    "virtual_backfill_refs": Measures(
        "virtual_backfill", _u(VIRTUAL_WRITE, BACKFILL, SIMULATOR), SHIP_ONLY
    ),
    "virtual_plan": Measures(
        "virtual_plan",
        # The HRRR template, the columnar file table, its digest and stripes; the per-file
        # objects peer (file_tasks + stable).
        (
            "toolkit/tasks.py",
            "toolkit/virtual/grib_params.py",
            "toolkit/virtual/dataset.py",
            "toolkit/virtual/builtin/common.py",
            "toolkit/virtual/builtin/hrrr.py",
            "toolkit/virtual/filetable.py",
            "toolkit/virtual/grib/errors.py",
            "toolkit/virtual/grib/index.py",  # the catalog's Windows
            "toolkit/virtual/refs.py",
            "toolkit/virtual/gribsource.py",
            "toolkit/virtual/sources/noaa.py",
            "toolkit/virtual/template.py",
        ),
    ),
    "virtual_pyramid": Measures(
        "virtual_pyramid",
        # update() with the in-fire level build, backfill, grib_forecast over GFS-Wave, and
        # build() of a repo source.
        _u(
            VIRTUAL_WRITE,
            BACKFILL,
            UPDATE,
            SIMULATOR,
            ("toolkit/virtual/define.py", "toolkit/pyramid/repo.py"),
            PYRAMID_BUILD,
            ("tests/data/grib/",),
        ),
        {"9e028b6": BUILD_OUTPUT},
    ),
    "virtual_resplit": Measures(
        "virtual_resplit",
        ("toolkit/icechunk/", "toolkit/virtual/split_sizing.py", *STORAGE),
    ),
    "virtual_throughput": Measures(
        "virtual_throughput",
        # the padded archive appends the real GFS f007 inventory's records to each index
        _u(
            VIRTUAL_WRITE,
            BACKFILL,
            SIMULATOR,
            ("tests/data/idx/gfs.t00z.pgrb2.0p25.f007.idx",),
        ),
        {
            **SHIP_ONLY,
            # measured at 22ebbbb+dirty, which held all of bf31542's backfill.py but this
            "bf31542": "backfill() gains check_containers: one repo open and config read per "
            "command, before the plan (milliseconds beside 45 s runs)",
        },
    ),
    "virtual_tick": Measures("virtual_tick", _u(VIRTUAL_WRITE, UPDATE, SIMULATOR)),
    # `toolkit virtual backfill` timed as a fresh process (its peak RSS includes what the command
    # line imports) over a module:NAME dataset; virtual_throughput's retime makes its archives
    # and its proxy adds the S3 rows' latency.
    "grib_sources": Measures(
        "grib_sources",
        # a file's refs through fetch + refs_from with each kind, the .index parse, the files
        _u(
            GRIB,
            (
                "toolkit/virtual/grib/ecmwf_index.py",
                "toolkit/virtual/grib/identity.py",
                "toolkit/virtual/grib_params.py",
                "toolkit/virtual/source_io.py",
                "toolkit/virtual/sources/ecmwf.py",
                "tests/virtual/ecmwf_files.py",
                "benchmarks/virtual_throughput.py",
            ),
            STORAGE,
        ),
    ),
    "virtual_scale": Measures(
        "virtual_scale",
        _u(
            VIRTUAL_WRITE,
            BACKFILL,
            CLI_IMPORTS,
            SIMULATOR,
            ("toolkit/virtual/builtin/__init__.py", "benchmarks/virtual_throughput.py"),
        ),
    ),
    "serve_tiles": Measures(
        "serve_tiles",
        # The served tiles: the app, its levels, styles and PNGs, read through toolkit's xarray
        # engine (a pyramid's levels, a repo's snapshot); the builds, refs and simulator behind
        # the stores it serves (their times are reported, and they make what is read).
        _u(
            (
                "toolkit/__init__.py",  # `toolkit.serve(...)` starts the server
                "toolkit/webmap/",
                "toolkit/xarray_backend.py",
                "toolkit/pyramid/read.py",
                "toolkit/pyramid/repo.py",
                "toolkit/virtual/reader.py",
                "toolkit/stac.py",
                "toolkit/examples/synthetic.py",
            ),
            PYRAMID_BUILD,
            VIRTUAL_WRITE,
            BACKFILL,
            SIMULATOR,
        ),
        SHIP_ONLY,
    ),
}
for _name in MEASURES.keys() - {"pyramid_append"}:  # see REVIEW_FIXES
    MEASURES[_name] = replace(MEASURES[_name], known={**MEASURES[_name].known, **REVIEW_FIXES})


def _known(names: Sequence[str], reason: str, *commits: str) -> None:
    """List `commits` as known, for `reason`, on each named result."""
    for name in names:
        m = MEASURES[name]
        MEASURES[name] = replace(m, known={**m.known, **dict.fromkeys(commits, reason)})


# 012b89f gives the branch transaction a base branch (`Txn.base`, `finalize_branch(base=)`,
# `build_repo(base=)`), main by default: what these benchmarks run reads and moves main exactly
# as before. (pyramid_output, whose --output build now lands through its own branch, reran.)
BASE_BRANCH = "a `base` branch parameter, main by default: the benchmark's code paths unchanged"
# 2798c48 adds `icechunk.stale_ref` (called only by an --output build's refresh) and a reader
# identity on the test S3 server; 7c518e6 turns Icechunk's AccessDenied at repo creation into
# one line and renames an --output build's level-0 refusal: error paths only, nothing timed runs
# them. (pyramid_output, whose --output refresh changed, reran.)
OUTPUT_ERRORS = "--output refresh and error paths only: no timed code of this benchmark runs them"
_UNTOUCHED = (
    "pyramid_build", "pyramid_cf", "pyramid_scale", "serve_tiles", "virtual_backfill_contention",
    "virtual_backfill_refs", "virtual_pyramid", "virtual_resplit", "virtual_throughput",
    "virtual_tick",
)  # fmt: skip
_known(_UNTOUCHED, BASE_BRANCH, "012b89f")
_known(_UNTOUCHED, OUTPUT_ERRORS, "2798c48", "7c518e6")

# adf8972 probes a scheduler address once (a TCP connect, about a millisecond, beside seconds of
# run) before the Client connects, and caps the Client's timeout by Dask's: only a connection
# by address pays it, once per run. (engine_overhead, which times exactly that, reran.)
PROBE = "one TCP connect before a Client connects by address: a millisecond per run at most"
_known(
    ("pyramid_build", "pyramid_cf", "pyramid_output", "pyramid_scale", "serve_tiles",
     "virtual_backfill_contention", "virtual_backfill_refs", "virtual_pyramid",
     "virtual_throughput"),
    PROBE,
    "adf8972",
)  # fmt: skip

# c75d6e3: a repo pyramid's setup keeps its recorded level-0 snapshot when it changes nothing
# else (one has_changes check; a first build, which these time, takes the old path), and two
# error paths (Icechunk's AccessDenied at repo creation, an --output build's level-0 refusal).
NOOP_SETUP = "a no-op rebuild's setup and two error paths: nothing these benchmarks time"
_known(
    ("pyramid_build", "pyramid_cf", "pyramid_scale", "serve_tiles",
     "virtual_backfill_contention", "virtual_backfill_refs", "virtual_resplit"),
    NOOP_SETUP,
    "c75d6e3",
)  # fmt: skip

# 0da9f59 restores which refusal a file gets when its index has both a sub-message field and
# missing fields (the sub-message, met first); the benchmarks' inventories have no sub-message,
# so a match pays one boolean test per matched field. (Every result after virtual_throughput's
# ran with it in the working tree: their headers say 052e613+dirty.) b356e3f says in
# virtual_throughput's docstring how long its run took.
MATCH_ORDER = "an error path's precedence: one boolean test per matched field on these inventories"
_known(
    ("grib_bench", "serve_tiles", "virtual_backfill_contention", "virtual_backfill_refs",
     "virtual_plan", "virtual_pyramid", "virtual_throughput", "virtual_tick"),
    MATCH_ORDER,
    "0da9f59",
)  # fmt: skip
_known(("virtual_throughput",), "its docstring only: the run's duration", "b356e3f")

# c75a6e9 runs a stage's work nodes side by side in the in-process executor, for plans whose
# services release the GIL (pyramid builds, exports, archive scans). A virtual backfill's plan
# holds it, so in process its nodes run one at a time as before, and engine_overhead runs on a
# cluster, whose path this does not touch. (The pyramid results, which take the new path, reran.)
SYNC_THREADS = "in-process nodes side by side only for plans that release the GIL: not these"
_known(
    ("engine_overhead", "virtual_backfill_contention", "virtual_backfill_refs",
     "virtual_throughput"),
    SYNC_THREADS,
    "c75a6e9",
)  # fmt: skip

# 12cd569 rewords the in-process executor's docstring and a comment: no code changed.
_known(
    ("engine_overhead", "pyramid_build", "pyramid_cf", "pyramid_output", "pyramid_scale",
     "serve_tiles", "virtual_backfill_contention", "virtual_backfill_refs", "virtual_pyramid",
     "virtual_throughput"),
    "a docstring and a comment only",
    "12cd569",
)  # fmt: skip

# ------------------------------------------------------------------ the decision (no git here)

Commit = tuple[str, str, tuple[str, ...]]  # sha, subject, the measured paths it touched
# (base commit, paths) -> the commits after base on those paths, newest first; None when base
# is not in the history.
Log = Callable[[str, Sequence[str]], Sequence[Commit] | None]

_SHA = re.compile(r"[0-9a-f]{7,40}")


@dataclass(frozen=True)
class Verdict:
    state: Literal["fresh", "stale", "unknown", "unrecorded"]
    base: str | None  # the commit measured at (`+dirty` dropped); None when none is recorded
    commits: tuple[Commit, ...] = ()  # the later commits on the paths, not listed


def measured_at(recorded: object) -> str | None:
    """The commit a recorded `commit` value stands for: `+dirty` dropped (the run counts as at
    the commit under the changes); None for anything that is not a commit id ("unknown")."""
    if not isinstance(recorded, str):
        return None
    sha = recorded.strip().lower().removesuffix("+dirty")
    return sha if _SHA.fullmatch(sha) else None


def recorded_commit(doc: Mapping[str, Any], markdown: str = "") -> str | None:
    """The `commit` a result's JSON records, or else the one its markdown table's header names
    (archive_bench writes it only there)."""
    if "commit" in doc:
        return doc["commit"] if isinstance(doc["commit"], str) else None
    found = re.search(r"\bcommit ([0-9a-f]{7,40}(?:\+dirty)?)\b", markdown)
    return found.group(1) if found else None


def is_listed(sha: str, known: Mapping[str, str]) -> bool:
    """Whether `sha` is one of `known`'s commits: abbreviations of different lengths of the
    same commit match (one is a prefix of the other)."""
    sha = sha.lower()
    return any(sha.startswith(k.lower()) or k.lower().startswith(sha) for k in known)


def stale(
    result_commit: object, paths: Sequence[str], known: Mapping[str, str], log: Log
) -> Verdict:
    """Whether a result recorded at `result_commit` is older than the code at `paths`."""
    base = measured_at(result_commit)
    if base is None:
        return Verdict("unrecorded", None)
    later = log(base, paths)
    if later is None:
        return Verdict("unknown", base)
    left = tuple(c for c in later if not is_listed(c[0], known))
    return Verdict("stale" if left else "fresh", base, left)


# 61bfaa5: a cancelled window fold (the scheduler lost mid-stage) is named as a lost scheduler
# instead of raising distributed's FutureCancelledError: an error path no benchmark runs.
_known(
    [n for n, m in MEASURES.items() if "toolkit/engine/stream.py" in m.paths],
    "the lost-scheduler error path only: no timed code of this benchmark runs it",
    "61bfaa5",
)


# 8bc3838: a node whose result was lost with its worker (status "lost") is waited for instead of
# failing the stage: the worker-loss path only, which no benchmark takes.
_known(
    [n for n, m in MEASURES.items() if "toolkit/engine/stream.py" in m.paths],
    "the worker-loss path only: no benchmark loses a worker",
    "8bc3838",
)


# 2cc8398 and 41ef3e7 (issue 53): the backfill in rounds that commit themselves. What reaches
# these benchmarks' timed code: `Stage.settle` and its node, and whole-window submission, taken
# only by a stage that has a settle (the backfill's rounds); `Runner.capacity`, called only by
# backfill(); a commit counting its rebases (its jittered wait only after a lost race, which
# these single-writer runs never have); finalize's catch-up, run only when a job gives one; in
# process, a certified stage's node values dropped once read (nothing later reads them); a
# lost scheduler named (an error path). Their stages are a node per task, so the stripe nodes'
# block (now the stable list's slice, not a list copy) is not theirs either.
ROUNDS = "the backfill's rounds (settle, capacity, catch-up): paths these stages never take"
_known(
    ("pyramid_build", "pyramid_cf", "pyramid_append", "pyramid_output", "pyramid_scale"),
    ROUNDS,
    "2cc8398",
    "41ef3e7",
)
# virtual_plan times the file table and its stripes: 2cc8398 adds `withheld`'s edge rule and
# `at_lead_zero` to dataset.py, which planning never calls.
_known(("virtual_plan",), "dataset.py's withholding rule: planning never calls it", "2cc8398")
# virtual_resplit times a manifest rewrite: toolkit/icechunk gains commit_counted (commit() is
# it, with a wait only after a lost race) and the reads a backfill's catch-up makes.
_known(
    ("virtual_resplit",),
    "icechunk: a commit counting its rebases, and a catch-up's reads: not on a resplit",
    "2cc8398",
)
# virtual_tick times update fires with no backfill in flight: the fire's check lists the
# in-flight backfills as before (none: the same branch listing), and a forecast's withholding
# returns at once (write.Edge); a backfill's batches in parts only in backfill mode.
_known(
    ("virtual_tick",),
    "an update with no backfill in flight: the same branch listing, no withholding",
    "2cc8398",
    "41ef3e7",
)
# engine_overhead and engine_scale time no-op stages on a cluster: no settle, and their stripe
# nodes' block is now the stable list's slice, a tuple of the same tasks where it was a list
# of them (the same pickle but for one opcode; the service still gets a list of what remains).
_known(
    ("engine_overhead", "engine_scale"),
    "no settled stage; a stripe's block a tuple of the same tasks instead of a list of them",
    "2cc8398",
    "41ef3e7",
)
# serve_tiles and virtual_pyramid make their repos with a small backfill in process: one round
# there (its forks merged and committed once, as the commit stage did), the same refs; what
# they time reads those refs, or fires updates with no backfill in flight.
_known(
    ("serve_tiles", "virtual_pyramid"),
    "the repos they read made by a one-round backfill: the same refs, one commit",
    "2cc8398",
    "41ef3e7",
)

# 5a55091 adds the `index=` kinds and ECMWF's sources beside NOAA's: a NOAA file's sidecar key
# is one function call (`kinds.sidecar_key`), its parse the same `scan_index`, a NOAA template's
# attributes take two more keyword arguments once per variable when a dataset is built. These
# time tiles served, a plan's file table, or a fire's pyramid levels over refs made that way:
# microseconds per file beside their milliseconds. (The write-loop and command-line results,
# virtual_throughput, virtual_scale, virtual_backfill_*, virtual_tick, grib_bench and
# pyramid_build, reran.)
INDEX_KINDS = "a NOAA file's sidecar named by one call, its template built with two more kwargs"
_known(("serve_tiles", "virtual_plan", "virtual_pyramid"), INDEX_KINDS, "5a55091")

# cfe1618 adds sources that cannot be listed: `https://` stores (storage builds an HTTPStore for
# that scheme only; a local store is built before it, an S3/GCS store with the same arguments
# as before), an HTTP virtual chunk container beside the others, and `discovery="probe"`, taken
# only when a dataset asks or its source is a web server (the listing path runs the same calls).
# virtual_scale ran with it in the working tree for all but its first rows (e6d1d6b+dirty).
HTTP_PROBE = "https:// stores and probing, taken only for such sources: the paths timed unchanged"
_known(
    ("archive_bench", "grib_bench", "pyramid_append", "pyramid_cf", "pyramid_output",
     "pyramid_scale", "serve_tiles", "virtual_backfill_contention", "virtual_backfill_refs",
     "virtual_plan", "virtual_pyramid", "virtual_resplit", "virtual_scale", "virtual_tick"),
    HTTP_PROBE,
    "cfe1618",
)  # fmt: skip
# 5a55091 on a NOAA file's refs: its sidecar key by one call, the same parse, one more length
# comparison; virtual_throughput, which times exactly that loop against its floor, reran at
# cfe1618 (the write loop's ratio to the floor is what moved, if anything).
_known(
    ("grib_bench", "virtual_backfill_contention", "virtual_backfill_refs", "virtual_tick"),
    "a NOAA file's sidecar named by one call and one more comparison per file (see"
    " virtual_throughput's rerun)",
    "5a55091",
)  # fmt: skip

# a3c8b56 gives an HTTP container Icechunk's no-auth credential and rewords a docstring of
# fetch.py; d9579fa reformats that line of containers.py: neither runs for the stores these use.
_known(
    ("grib_bench", "serve_tiles", "virtual_backfill_contention", "virtual_backfill_refs", "virtual_pyramid", "virtual_resplit", "virtual_scale", "virtual_throughput", "virtual_tick", ),
    "an HTTP container's credential, a docstring and a line's formatting",
    "a3c8b56",
    "d9579fa",
)  # fmt: skip

# 6b5a12e: a command's --json is noted as its options are parsed (one flag set), and a failure
# under --json also prints its line as one JSON object: only the error path writes more.
_known(
    ("pyramid_build", "virtual_scale"),
    "--json noted at parsing (one flag) and a JSON line on the error path only",
    "6b5a12e",
)  # fmt: skip

# 2c2614b: a docstring of toolkit.virtual.define puts `(init, lead[, member][, file type])` in
# backticks (the API reference rendered it as a link). No code changed.
_known(("virtual_pyramid",), "a docstring's backticks only", "2c2614b")
# 54d1ab4: two module docstrings name the own-dataset guide. No code changed.
_known(("virtual_pyramid", "virtual_scale"), "module docstrings only", "54d1ab4")

# 298bd47 (issue 55): the CLI's conventions (--quiet/--verbose added to every command as it
# is parsed, tables that wrap at COLUMNS, one-line --json texts) are option parsing and the
# final printing of a report, once per command: no stage, task or commit runs differently.
# The tile server reads levels through toolkit.webmap alone, not through the xarray engine or
# toolkit.virtual.reader, whose default chunking (preferred_chunks) this commit set.
_known(
    ("pyramid_build", "virtual_scale"),
    "CLI option parsing and report printing only (once per command)",
    "298bd47",
)  # fmt: skip
_known(
    ("serve_tiles",),
    "the xarray engine's and virtual reader's chunking; the tile server reads through neither",
    "298bd47",
)  # fmt: skip

# 2b0bcd0: a line refused while it is parsed also prints its JSON object when asked for
# (the usage-error path only). 64bbe5c: `toolkit.pyramid.open_level` without `chunks` reads
# whole shards; no build, verify, plan or tile path calls it (they open levels themselves, or
# through the engine, which passes chunks=None), and read.py's import is as before.
_known(
    ("pyramid_build", "virtual_scale"),
    "the usage-error path under --json only",
    "2b0bcd0",
)  # fmt: skip
# 222b548: `archive show` and `virtual inspect` print their tables differently, and an archive
# error's hint names another command: printing, once per command.
_known(("pyramid_build", "virtual_scale"), "two commands' printing only", "222b548", "edb4659")
_known(
    ("pyramid_build", "pyramid_scale", "serve_tiles", "virtual_scale"),
    "open_level's default chunks: a reader's call, on none of the measured paths",
    "64bbe5c",
)  # fmt: skip

# 413ffb4: a return annotation in toolkit/pyramid/read.py. No code changed.
_known(
    ("pyramid_build", "pyramid_scale", "serve_tiles", "virtual_scale"), "a type annotation only",
    "413ffb4",
)  # fmt: skip
