"""The catalogue of bad inputs (docs/errors.md): every row is run here.

Each case runs the real command line on a copy of one prepared world (stores, a virtual repo
and its source, partitioned archive manifests) and asserts the row: its exit code; stderr is
exactly one line, starting `error:`, naming the object and the fix (the row's fragments); no
traceback; and nothing that existed before changed (every file byte-identical, none gone), nor
did a path the case names as absent appear.

The table in docs/errors.md is rendered from CASES; `python -m tests.test_errors` rewrites it.
"""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
import zarr
from typer.testing import CliRunner

from tests.archive import zarrgen
from tests.conftest import DATA
from toolkit import storage
from toolkit.cli import app
from toolkit.examples import synthetic

DOC = Path(__file__).resolve().parents[1] / "docs" / "errors.md"
GRIB = "hrrr.t06z.wrfsfcf01-TMP.grib2"
IDX = "gfswave.t18z.atlocn.0p16.f001.grib2.idx"


@dataclass(frozen=True)
class Case:
    input: str  # the table's first column: what the user did
    argv: tuple[str, ...]  # run in a copy of the world; {s3} is the S3 server's endpoint
    code: int
    says: tuple[str, ...]  # the one line holds each, in order: the object, the cause, the fix
    setup: Callable[[Path], None] | None = None
    absent: tuple[str, ...] = ()  # paths that must still not exist afterwards
    env: dict[str, str | None] = field(default_factory=dict)  # None unsets
    stdin: bytes | None = None  # what is piped in (keys, events), as bytes

    @property
    def id(self) -> str:
        return "-".join(self.argv[:2]) + ":" + self.input[:40]


def _write(rel: str, text: str) -> Callable[[Path], None]:
    def go(w: Path) -> None:
        (w / rel).parent.mkdir(parents=True, exist_ok=True)
        (w / rel).write_text(text)

    return go


def _copy(src: str, dst: str) -> Callable[[Path], None]:
    return lambda w: shutil.copyfile(w / src, w / dst)


def _newer_format(path: Path) -> None:
    """Stamp a repo file with a format version from the future (byte 36 of its header)."""
    head = bytearray(path.read_bytes())
    assert head[:4] == b"ICE\xf0" and head[36] == 2, "the header layout moved: update this fixture"
    head[36] = 9
    path.write_bytes(bytes(head))


def _repo_levels(w: Path, levels: str) -> None:
    """One level of temperature_2m inside the virtual repo, on main."""
    res = CliRunner().invoke(
        app,
        ["pyramid", "build", str(w / "repo"), "-v", "temperature_2m", "--levels", levels, *SYNC],
    )
    assert res.exit_code == 0, res.output


def _built_then_changed(w: Path) -> None:
    """Build good.zarr's pyramid, then write new values into one level-0 chunk."""
    res = CliRunner().invoke(app, ["pyramid", "build", str(w / "good.zarr"), "--executor", "sync"])
    assert res.exit_code == 0, res.output
    field = zarr.open_array(str(w / "good.zarr"), path="field", mode="r+")
    field[:4, :4] = 7.0


def _spoil(rel: str, how: str = "garbage") -> Callable[[Path], None]:
    """Replace a stored object's bytes by garbage, or cut it to half its length."""

    def go(w: Path) -> None:
        body = (w / rel).read_bytes()
        cut = body[: len(body) // 2]
        (w / rel).write_bytes(b"\x8b garbage \x00" * 30 if how == "garbage" else cut)

    return go


def _built_then_spoiled(w: Path) -> None:
    """Build good.zarr's pyramid, then cut one level-0 shard to half its bytes."""
    res = CliRunner().invoke(app, ["pyramid", "build", str(w / "good.zarr"), "--executor", "sync"])
    assert res.exit_code == 0, res.output
    _spoil("good.zarr/field/c/1/1", "truncate")(w)


def _built_then_emptied(w: Path, record: str) -> None:
    """Build good.zarr's pyramid, then empty one of its records."""
    res = CliRunner().invoke(app, ["pyramid", "build", str(w / "good.zarr"), "--executor", "sync"])
    assert res.exit_code == 0, res.output
    (w / "good.zarr" / record).write_bytes(b"")


def _spoiled_head(w: Path) -> None:
    """Junk in place of the snapshot the virtual repo's main points at."""
    from toolkit import icechunk as R

    head = R.snapshot_of(R.open_repo(storage.open_store(str(w / "repo")), fresh=True), "main")
    (w / "repo" / "snapshots" / head).write_bytes(b"not a snapshot\n" * 20)


AUG1 = ("--start", "2025-08-01T00")


def _looped(rel: str) -> Callable[[Path], None]:
    """`rel` replaced by a symbolic link to itself."""

    def go(w: Path) -> None:
        shutil.rmtree(w / rel)
        (w / rel).symlink_to(Path(rel).name)

    return go


def _latin1(rel: str) -> Callable[[Path], None]:
    """A copy of good.zarr at `rel`, a path with a Latin-1 byte (kept by Python as \\udcNN)."""
    return lambda w: shutil.copytree(w / "good.zarr", w / rel, symlinks=True)


def _deleted_head(w: Path) -> None:
    """The snapshot the virtual repo's main points at, deleted."""
    from toolkit import icechunk as R

    head = R.snapshot_of(R.open_repo(storage.open_store(str(w / "repo")), fresh=True), "main")
    (w / "repo" / "snapshots" / head).unlink()


def _odd_copy(
    src: str, dst: str, spoil: str | None, idx: str | None = None
) -> Callable[[Path], None]:
    """A copy of `src` at `dst` (a folder with a space and letters URLs encode); then `spoil`
    inside it cut to half, or `idx` written beside it as its .idx."""

    def go(w: Path) -> None:
        (w / dst).parent.mkdir(parents=True, exist_ok=True)
        if (w / src).is_dir():
            shutil.copytree(w / src, w / dst)
        else:
            shutil.copyfile(w / src, w / dst)
        if spoil is not None:
            _spoil(f"{dst}/{spoil}", "truncate")(w)
        if idx is not None:
            (w / f"{dst}.idx").write_text(idx)

    return go


def _pin(w: Path, prefix: str) -> None:
    """A pin on `prefix` of the partitioned cordex/a.zarr, placed before the case runs."""
    argv = ["archive", "pin", "add", "cordex/a.zarr", prefix, *PIN, "--manifests", str(w / "m")]
    res = CliRunner().invoke(app, argv)
    assert res.exit_code == 0, res.output


PIN = ("--who", "ana", "--why", "paper")
SYNC = ("--executor", "sync")
S3 = ("--endpoint", "{s3}", "--region", "us-east-1", "--allow-http", "--path-style")
SW = ("--endpoint", "{sw}", "--region", "us-east-1", "--allow-http", "--path-style")
NO_CREDS = {"AWS_ACCESS_KEY_ID": None, "AWS_SECRET_ACCESS_KEY": None, "AWS_SESSION_TOKEN": None}
BF = ("virtual", "backfill", "sim-gfs", "--repo", "new-repo", "--source", "src", *SYNC)

CASES: tuple[Case, ...] = (
    # ---------------------------------------------------------------- pyramid
    Case(
        "a store path that does not exist",
        ("pyramid", "build", "typo.zarr", *SYNC),
        2,
        ("typo.zarr", "does not exist", "want a zarr v3 store"),
        absent=("typo.zarr",),
    ),
    Case(
        "a store path that is a file",
        ("pyramid", "plan", "notes.txt"),
        2,
        ("notes.txt", "is not a directory"),
    ),
    Case(
        "a URL scheme toolkit cannot open",
        ("pyramid", "plan", "ftp://host/x.zarr"),
        2,
        ("ftp://host/x.zarr", "unsupported store URL", "use a path, file://"),
    ),
    Case("a Zarr v2 store", ("pyramid", "plan", "v2.zarr"), 2, ("v2.zarr", "a zarr v2 store")),
    Case(
        "an array of strings",
        ("pyramid", "build", "odd.zarr", "--variable", "text", *SYNC),
        2,
        ("'text'", "str", "--variable"),
    ),
    Case(
        "an array of complex numbers",
        ("pyramid", "build", "odd.zarr", "--variable", "wave", *SYNC),
        2,
        ("'wave'", "complex64", "--variable"),
    ),
    Case(
        "an `--endpoint` whose port is not a number",
        ("pyramid", "plan", "s3://b/x", "--endpoint", "http://127.0.0.1:notaport", "--allow-http"),
        2,
        ("malformed endpoint", "s3://b/x", "notaport", "want http[s]://host[:port]"),
    ),
    Case(
        "an `--endpoint` that is not a URL",
        ("archive", "resolve", "--manifests", "s3://b/m", "x/y", "--endpoint", "not a url"),
        2,
        ("malformed endpoint", "s3://b/m", "'not a url'", "want http[s]://host[:port]"),
    ),
    Case(
        "a CF `_FillValue` that is neither a number nor base64",
        ("pyramid", "build", "odd.zarr", "--variable", "fill_text", *SYNC),
        2,
        ("'fill_text'", "_FillValue 'minus nine'", "write it as a number"),
    ),
    Case(
        "a CF `_FillValue` the array's dtype cannot hold",
        ("pyramid", "build", "odd.zarr", "--variable", "fill_wide", *SYNC),
        2,
        ("'fill_wide'", "_FillValue 300", "does not fit uint8", "a value the array can hold"),
    ),
    Case(
        "a CF `valid_range` that is not two numbers",
        ("pyramid", "plan", "odd.zarr", "--variable", "range_one"),
        2,
        ("'range_one'", "valid_range [0.0]", "not [min, max]", "two numbers"),
    ),
    Case(
        "a CF valid range whose minimum is above its maximum",
        ("pyramid", "build", "odd.zarr", "--variable", "range_empty", *SYNC),
        2,
        ("'range_empty'", "valid range 5..1 is empty", "fix valid_range/valid_min/valid_max"),
    ),
    Case(
        "a CF `scale_factor` of 0",
        ("pyramid", "build", "odd.zarr", "--variable", "scale_zero", *SYNC),
        2,
        ("'scale_zero'", "scale_factor 0", "fix the attribute"),
    ),
    Case(
        "`--select` without `=VALUE` on a virtual dataset's repo",
        ("pyramid", "build", "repo", "--select", "init_time", *SYNC),
        2,
        ("--select 'init_time'", "want DIM=VALUE"),
    ),
    Case(
        "`--select` a position the repo's dataset does not have",
        ("pyramid", "build", "repo", "--select", "init_time=1999-01-01", *SYNC),
        2,
        ("--select init_time=1999-01-01", "no such init_time", "it has"),
    ),
    Case(
        "`--select` a spatial dim",
        ("pyramid", "build", "repo", "--select", "latitude=50", *SYNC),
        2,
        ("--select latitude", "not a leading dim", "they have"),
    ),
    Case(
        "`--latest` on a Zarr store",
        ("pyramid", "build", "good.zarr", "--latest", *SYNC),
        2,
        ("--latest", "good.zarr", "only in an Icechunk repo"),
    ),
    Case(
        "`--rebuild-from` on a repo's pyramid",
        ("pyramid", "build", "repo", "--rebuild-from", "2x", *SYNC),
        2,
        ("--rebuild-from", "repo", "Icechunk repo", "drop the level groups"),
    ),
    Case(
        "a repo's levels built again with other settings",
        ("pyramid", "build", "repo", "-v", "temperature_2m", "--levels", "2", *SYNC),
        2,
        ("repo", "main's levels were built with levels=1", "not levels=2", "same settings"),
        setup=lambda w: _repo_levels(w, "1"),
    ),
    Case(
        "an integer array with no CF flags and no --method",
        ("pyramid", "build", "odd.zarr", "--variable", "counts", *SYNC),
        2,
        ("'counts'", "int16", "choose --method mode for classes, or mean|min|max|sum"),
    ),
    Case(
        "`--method mean` on a class map (CF flag_values)",
        ("pyramid", "build", "classes.zarr", "--method", "mean", *SYNC),
        2,
        ("'field'", "flag", "--force-method"),
    ),
    Case(
        "a class map holding a value its flag_values do not declare",
        ("pyramid", "build", "stray.zarr", *SYNC),
        1,
        ("'field'", "hold 9", "declared classes", "y=21, x=33", "add 9 to its flag_values"),
    ),
    Case(
        "`--method mode` on a float field",
        ("pyramid", "build", "good.zarr", "--method", "mode", *SYNC),
        2,
        ("'field'", "mode is for categorical integers", "float32"),
    ),
    Case(
        "an operator toolkit does not offer",
        ("pyramid", "build", "good.zarr", "--method", "median", *SYNC),
        2,
        ("'median'", "choose one of mean, mode, min, max, sum"),
    ),
    Case(
        "`--levels` past the one-pixel depth",
        ("pyramid", "build", "good.zarr", "--levels", "40", *SYNC),
        2,
        ("--levels 40", "one pixel at level 6", "use --levels 6 or fewer"),
    ),
    Case(
        "`--levels 30 --method mode` on a class map",
        ("pyramid", "build", "classes.zarr", "--levels", "30", "--method", "mode", *SYNC),
        2,
        ("--levels 30", "one pixel at level", "or fewer"),
    ),
    Case(
        "`--levels 0`",
        ("pyramid", "build", "good.zarr", "--levels", "0", *SYNC),
        2,
        ("--levels", "want a count of levels from 1", "'0'"),
    ),
    Case(
        "a variable the store does not have",
        ("pyramid", "build", "good.zarr", "--variable", "nope", *SYNC),
        2,
        ("variable 'nope'", "no such array"),
    ),
    Case(
        "a band dimension the array does not have",
        ("pyramid", "build", "good.zarr", "--band-dim", "band", *SYNC),
        2,
        ("--band-dim 'band'", "not one of its leading dims"),
    ),
    Case(
        "an array with no coordinate arrays",
        ("pyramid", "plan", "nocoords.zarr"),
        2,
        ("'v'", "no 1-D coordinate array for 'y', 'x'"),
    ),
    Case(
        "a zero-size array",
        ("pyramid", "plan", "zero.zarr"),
        2,
        ("'v'", "is empty (shape (0, 32))", "write data first"),
    ),
    Case(
        "a corrupt `.pyramid/plan.json`",
        ("pyramid", "build", "good.zarr", *SYNC),
        1,
        ("plan.json", "Expecting property name", "not a pyramid plan record", "--rebuild-from 2x"),
        setup=_write("good.zarr/.pyramid/plan.json", "{not json"),
    ),
    Case(
        "a foreign `.pyramid/plan.json`",
        ("pyramid", "build", "good.zarr", *SYNC),
        1,
        ("good.zarr/.pyramid/plan.json", "lacks digest", "not a pyramid plan", "--rebuild-from 2x"),
        setup=_write("good.zarr/.pyramid/plan.json", '{"tool": "someone else"}'),
    ),
    Case(
        "a store whose level 0 changed after its pyramid was built",
        ("pyramid", "build", "good.zarr", *SYNC),
        2,
        ("good.zarr", "level 0 changed since the last build", "--rebuild-from 2x"),
        setup=_built_then_changed,
    ),
    Case(
        "`pyramid verify --sample 0`",
        ("pyramid", "verify", "good.zarr", "--sample", "0", *SYNC),
        2,
        ("--sample", "want a whole number from 1", "'0'"),
    ),
    Case(
        "S3 options on a local path",
        ("pyramid", "build", "good.zarr", "--endpoint", "http://127.0.0.1:1", *SYNC),
        2,
        ("S3 options only apply to s3://",),
    ),
    Case(
        "a plain-http endpoint without `--allow-http`",
        ("pyramid", "plan", "s3://bkt/x.zarr", "--endpoint", "http://127.0.0.1:1"),
        2,
        ("http://127.0.0.1:1", "add --allow-http"),
    ),
    # ---------------------------------------------------------------- virtual
    Case(
        "`virtual inspect` on a path that does not exist",
        ("virtual", "inspect", "missing-repo"),
        2,
        ("missing-repo", "does not exist", "check it"),
        absent=("missing-repo",),
    ),
    Case(
        "`virtual validate` on a folder that is not an Icechunk repo",
        ("virtual", "validate", "sim-gfs", "--repo", "good.zarr"),
        2,
        ("good.zarr", "nothing there is an Icechunk repository", "check the path"),
    ),
    Case(
        "`virtual backfill` into a folder holding other data",
        (
            "virtual",
            "backfill",
            "sim-gfs",
            "--repo",
            "good.zarr",
            "--source",
            "src",
            "--start",
            "2025-08-01",
            *SYNC,
        ),
        2,
        ("good.zarr", "holds objects", "pass an empty or new location"),
    ),
    Case(
        "`--workers -3`",
        (*BF, "--start", "2025-08-01", "--workers", "-3"),
        2,
        ("'--workers'", "want a whole number from 1", "got '-3'", "--help"),
        absent=("new-repo",),
    ),
    Case(
        "`--start yesterday`",
        (*BF, "--start", "yesterday"),
        2,
        ("--start", "'yesterday'", "ISO 8601"),
        absent=("new-repo",),
    ),
    Case(
        "`--start` after the template's span",
        (*BF, "--start", "2030-01-01"),
        2,
        ("--start 2030-01-01T00:00", "template spans init_time", "start inside it"),
        absent=("new-repo",),
    ),
    Case(
        "`--end` before `--start`",
        (*BF, "--start", "2025-08-01T12", "--end", "2025-08-01"),
        2,
        ("--end 2025-08-01T00:00", "is not after --start"),
        absent=("new-repo",),
    ),
    Case(
        "`--end` past the last published position",
        (*BF, "--start", "2025-08-01", "--end", "2025-08-02"),
        2,
        ("--allow-empty-positions",),
        absent=("new-repo",),
    ),
    Case(
        "a dataset name toolkit does not know",
        ("virtual", "backfill", "nope", "--repo", "new-repo", "--start", "2025-08-01"),
        2,
        ("unknown dataset 'nope'", "sim-gfs"),
        absent=("new-repo",),
    ),
    Case(
        "a dataset module file that does not exist",
        ("virtual", "backfill", "mine.py:DS", "--repo", "new-repo", "--start", "2025-08-01"),
        2,
        ("mine.py", "no such file", "check the path"),
        absent=("new-repo",),
    ),
    Case(
        "a simulated dataset with no `--source`",
        ("virtual", "backfill", "sim-gfs", "--repo", "new-repo", "--start", "2025-08-01"),
        2,
        ("no bucket of its own", "--source"),
        absent=("new-repo",),
    ),
    Case(
        "`--source` that does not exist",
        (
            "virtual",
            "update",
            "sim-gfs",
            "--repo",
            "repo",
            "--source",
            "nosrc",
            "--fire-time",
            "2025-08-01T18",
        ),
        2,
        ("--source", "nosrc", "no such directory"),
        absent=("nosrc",),
    ),
    Case(
        "an Icechunk repo written in a newer format",
        ("virtual", "inspect", "repo"),
        2,
        ("repo", "format version 9", "upgrade icechunk", "on every worker"),
        setup=lambda w: _newer_format(w / "repo" / "repo"),
    ),
    Case(
        "`virtual update` on an Icechunk repo of a newer format",
        (
            "virtual",
            "update",
            "sim-gfs",
            "--repo",
            "repo",
            "--source",
            "src",
            "--fire-time",
            "2025-08-01T18",
        ),
        2,
        ("repo", "format version 9", "upgrade icechunk"),
        setup=lambda w: _newer_format(w / "repo" / "repo"),
    ),
    Case(
        "`virtual abort` of a branch that is not in flight",
        ("virtual", "abort", "repo", "--branch", "backfill-0123456789"),
        2,
        ("backfill-0123456789", "in flight: none"),
    ),
    # ---------------------------------------------------------------- the map (toolkit serve)
    Case(
        "serve a path that does not exist",
        ("serve", "missing.zarr"),
        2,
        ("missing.zarr", "does not exist", "check the path"),
    ),
    Case(
        "serve a folder that is neither a store nor a repo",
        ("serve", "src"),
        2,
        ("src", "holds no zarr.json", "no Icechunk repo", "toolkit pyramid build"),
    ),
    Case(
        "serve a variable the data does not have",
        ("serve", "repo", "--variable", "salinity"),
        2,
        ("repo", "no variable 'salinity'", "temperature_2m"),
    ),
    Case(
        "serve with a colormap matplotlib does not know",
        ("serve", "repo", "--colormap", "rainbowz"),
        2,
        ("unknown colormap 'rainbowz'", "viridis"),
    ),
    Case(
        "serve with a colour range upside down",
        ("serve", "repo", "--range", "300,250"),
        2,
        ("--range", "'300,250'", "MIN,MAX", "with MIN < MAX"),
    ),
    # ---------------------------------------------------------------- GRIB
    Case(
        "a file that is not GRIB2",
        ("grib", "scan", "good.zarr/zarr.json"),
        1,
        ("invalid GRIB message", "zarr.json", "no GRIB message starts at offset 0"),
    ),
    Case(
        "a truncated GRIB2 file",
        ("grib", "scan", "cut.grib2"),
        1,
        ("truncated GRIB message", "cut.grib2", "declares", "the file ends after"),
    ),
    Case(
        "an index of another file",
        ("grib", "scan", GRIB, "--index", IDX),
        1,
        ("stale index", GRIB, "does not point at a message"),
    ),
    Case(
        "a GRIB file that does not exist",
        ("grib", "scan", "none.grib2"),
        2,
        ("cannot read input", "none.grib2", "no such file", "check the path"),
        absent=("none.grib2",),
    ),
    # ---------------------------------------------------------------- archive
    Case(
        "a data root that does not exist",
        ("archive", "partition", "--data", "nodata", "--manifests", "m"),
        2,
        ("nodata", "does not exist"),
        absent=("nodata",),
    ),
    Case(
        "a data root with no Zarr stores",
        ("archive", "partition", "--data", "src", "--manifests", "m-new"),
        2,
        ("no Zarr stores", "src"),
        absent=("m-new",),
    ),
    Case(
        "`--manifests` where none are",
        ("archive", "resolve", "--manifests", "empty", "cordex/a.zarr/tas/c/0/0/0"),
        2,
        ("no manifests under", "empty", "partition first, or check --manifests"),
        absent=("empty",),
    ),
    Case(
        "one corrupt manifest among several",
        ("archive", "resolve", "--manifests", "m", "cordex/a.zarr/tas/c/0/0/0"),
        1,
        (
            "scope 'cordex/a.zarr'",
            "not an archive manifest",
            "delete it and partition the scope again",
        ),
        setup=_write("m/cordex/a.zarr/manifest.json", "{"),
    ),
    Case(
        "an events file that does not exist",
        ("archive", "report", "--data", "data", "--manifests", "m", "--events", "nope.json"),
        2,
        ("'--events'", "nope.json", "does not exist", "--help"),
    ),
    Case(
        "a size that does not parse",
        ("archive", "partition", "--data", "data", "--manifests", "m", "--t-max", "5XB"),
        2,
        ("'5XB'", "use a number with B, KB, MB"),
    ),
    Case(
        "`--t-min` above `--t-max`",
        (
            "archive",
            "partition",
            "--data",
            "data",
            "--manifests",
            "m",
            "--t-max",
            "1000",
            "--t-min",
            "2000",
        ),
        2,
        ("--t-min", "2000 exceeds t_max 1000"),
    ),
    Case(
        "removing a pin that is not there",
        ("archive", "pin", "remove", "cordex/a.zarr", "cordex/a.zarr/nope", "--manifests", "m"),
        2,
        ("scope 'cordex/a.zarr'", "no pin on 'cordex/a.zarr/nope'"),
    ),
    Case(
        "a key with a `..` segment",
        ("archive", "resolve", "--manifests", "m", "cordex/a.zarr/../b.zarr/tas/c/0/0/0"),
        2,
        ("'cordex/a.zarr/../b.zarr/tas/c/0/0/0'", "'..' segment", "without '.' or '..'"),
    ),
    Case(
        "an empty key",
        ("archive", "resolve", "--manifests", "m", "cordex/a.zarr/tas/c/0/0/0", ""),
        2,
        ("key ''", "is empty", "name a key relative to the data root"),
    ),
    Case(
        "a key with an empty segment (`//`)",
        ("archive", "resolve", "--manifests", "m", "cordex//a.zarr/tas/c/0/0/0"),
        2,
        ("'cordex//a.zarr/tas/c/0/0/0'", "empty segment", "drop the extra '/'"),
    ),
    Case(
        "a pin prefix with a `.` segment",
        ("archive", "pin", "add", "cordex/a.zarr", "cordex/a.zarr/./tas", *PIN, "--manifests", "m"),
        2,
        ("prefix 'cordex/a.zarr/./tas'", "'.' segment", "without '.' or '..'"),
    ),
    Case(
        "a scope with a `..` segment",
        ("archive", "show", "../m/cordex/a.zarr", "--manifests", "m"),
        2,
        ("scope '../m/cordex/a.zarr'", "'..' segment", "without '.' or '..'"),
    ),
    Case(
        "a pin inside a pinned prefix",
        (
            "archive",
            "pin",
            "add",
            "cordex/a.zarr",
            "cordex/a.zarr/tas/c/1",
            *PIN,
            "--manifests",
            "m",
        ),
        1,
        (
            "'cordex/a.zarr/tas/c/1'",
            "inside the pin on 'cordex/a.zarr/tas'",
            "remove that pin",
            "--force",
        ),
        setup=lambda w: _pin(w, "cordex/a.zarr/tas"),
    ),
    Case(
        "a pin until a past date",
        (
            "archive",
            "pin",
            "add",
            "cordex/a.zarr",
            "cordex/a.zarr/pr",
            *PIN,
            "--until",
            "2001-01-01",
            "--manifests",
            "m",
        ),
        2,
        ("'cordex/a.zarr/pr'", "--until 2001-01-01 is past", "a later date, or --force"),
    ),
    Case(
        "`archive show` of a scope with no manifest",
        ("archive", "show", "cordex/none.zarr", "--manifests", "m"),
        1,
        ("no manifest for scope 'cordex/none.zarr'", "/w/m: check the scope"),
    ),
    Case(
        "an executor that does not exist",
        ("archive", "scan", "--data", "data", "--manifests", "m", "--executor", "nope"),
        2,
        ("--executor", "'nope' is not one of", "'dask', 'sync'"),
    ),
    Case(
        "`archive watch` with an events file that does not exist",
        (
            "archive",
            "watch",
            "--data",
            "data",
            "--manifests",
            "m",
            "--events",
            "nope.jsonl",
            "--once",
        ),
        2,
        ("--events", "nope.jsonl", "no such file"),
    ),
    Case(
        "`archive watch` fed a line that is not a notification",
        (
            "archive",
            "watch",
            "--data",
            "data",
            "--manifests",
            "m",
            "--events",
            "bad.jsonl",
            "--once",
            *SYNC,
        ),
        2,
        ("line 2", "not an S3, MinIO or GCS Pub/Sub notification"),
        setup=_write("bad.jsonl", '{"Event": "s3:TestEvent"}\n{"hello": 1}\n'),
    ),
    Case(
        "`archive mark` of a blob the scope does not have",
        ("archive", "mark", "cordex/a.zarr", "b_zz_1", "archived", "--manifests", "m"),
        2,
        ("'b_zz_1'", "not a blob of scope 'cordex/a.zarr'", "`toolkit archive report`"),
    ),
    Case(
        "`archive mark` of a scope that has no manifest",
        ("archive", "mark", "cordex/none.zarr", "w_x", "archived", "--manifests", "m"),
        2,
        ("no manifest", "scope 'cordex/none.zarr'", "partition it first"),
    ),
    Case(
        "`archive mark` of a bucket beyond its array",
        ("archive", "mark", "cordex/a.zarr", "b_tas_99", "writing", "--manifests", "m"),
        2,
        ("'b_tas_99'", "has buckets 0-3 when cut", "--data checks it now"),
    ),
    Case(
        "`archive mark` of a stale blob as archived without writing it again",
        ("archive", "mark", "cordex/a.zarr", "b_tas_1", "archived", "--manifests", "m"),
        1,
        ("b_tas_1", "is stale: it can go to writing", "--force"),
        setup=lambda w: _stale(w, "b_tas_1"),
    ),
    Case(
        "`archive mark` with a state that does not exist",
        ("archive", "mark", "cordex/a.zarr", "b_tas_1", "frozen", "--manifests", "m"),
        2,
        ("'frozen'", "choose one of hot, writing"),
    ),
    Case(
        "`archive mark` of a transition tape does not make",
        ("archive", "mark", "cordex/a.zarr", "b_tas_1", "recalled", "--manifests", "m"),
        1,
        ("b_tas_1", "is hot: it can go to writing", "--force"),
    ),
    Case(
        "`archive plan-read` of a variable the store does not have",
        (
            "archive",
            "plan-read",
            "cordex/a.zarr",
            "--data",
            "data",
            "--manifests",
            "m",
            "--var",
            "nope",
        ),
        2,
        ("variable 'nope'", "no such array in cordex/a.zarr", "it has lat, orog"),
    ),
    Case(
        "`archive plan-read` of a dim the variables do not have",
        (
            "archive",
            "plan-read",
            "cordex/a.zarr",
            "--data",
            "data",
            "--manifests",
            "m",
            "--var",
            "pr",
            "--isel",
            "lon=0",
        ),
        2,
        ("--isel lon", "(pr) have no dim 'lon'", "they have time, lat"),
    ),
    Case(
        "`archive plan-read --isel` without `=START:STOP`",
        (
            "archive",
            "plan-read",
            "cordex/a.zarr",
            "--data",
            "data",
            "--manifests",
            "m",
            "--isel",
            "time",
        ),
        2,
        ("--isel 'time'", "want DIM=START:STOP or DIM=INDEX"),
    ),
    Case(
        "`archive plan-read --isel` past a dim's end",
        (
            "archive",
            "plan-read",
            "cordex/a.zarr",
            "--data",
            "data",
            "--manifests",
            "m",
            "--isel",
            "time=40",
        ),
        2,
        ("--isel time=40", "out of range", "40 positions"),
    ),
    Case(
        "`archive plan-read --sel` on a dim with no coordinate array",
        (
            "archive",
            "plan-read",
            "cordex/a.zarr",
            "--data",
            "data",
            "--manifests",
            "m",
            "--sel",
            "lon=3",
        ),
        2,
        ("--sel lon", "no coordinate array 'lon'", "use --isel"),
    ),
    # ---------------------------------------------------------------- object stores
    Case(
        "an endpoint nothing listens on",
        (
            "archive",
            "resolve",
            "--manifests",
            "s3://bkt/m",
            "x",
            "--endpoint",
            "http://127.0.0.1:9",
            "--allow-http",
            "--path-style",
            "--retry-seconds",
            "2",
        ),
        2,
        (
            "unreachable",
            "s3://bkt/m",
            "127.0.0.1:9 did not answer within the 2 s",
            "--retry-seconds",
        ),
    ),
    Case(
        "no credentials for a private bucket",
        ("archive", "resolve", "--manifests", "s3://{bucket}/m", "x", *S3),
        2,
        ("access denied", "check credentials", "s3://"),
        env=NO_CREDS,
    ),
    Case(
        "a bucket these credentials may not read (real S3 server)",
        ("archive", "resolve", "--manifests", "s3://{swbucket}/m", "x", *SW),
        2,
        ("access denied", "check credentials", "s3://"),
        env={"AWS_ACCESS_KEY_ID": "READER", "AWS_SECRET_ACCESS_KEY": "reader-secret"},
    ),
    Case(
        "a wrong secret key (real S3 server)",
        ("pyramid", "plan", "s3://{swbucket}/x.zarr", *SW),
        2,
        ("s3://", "x.zarr"),
        env={"AWS_SECRET_ACCESS_KEY": "not-the-secret"},
    ),
    Case(
        "a bucket that does not exist",
        ("pyramid", "plan", "s3://no-such-bucket-here/x.zarr", *S3),
        2,
        ("no-such-bucket-here",),
    ),
    # ------------------------------------------ options, checked before anything is written
    Case(
        "an executor that does not exist, on a build",
        ("pyramid", "build", "good.zarr", "--executor", "bogus"),
        2,
        ("--executor", "'bogus' is not one of", "'dask', 'sync'", "--help"),
    ),
    Case(
        "`TOOLKIT_CLUSTER` that is not a scheduler address",
        ("pyramid", "build", "good.zarr"),
        2,
        ("TOOLKIT_CLUSTER 'garbage'", "not a scheduler address", "want tcp://host:port"),
        env={"TOOLKIT_CLUSTER": "garbage"},
    ),
    Case(
        "`--cluster` naming a port nothing listens on",
        ("pyramid", "build", "good.zarr", "--cluster", "tcp://127.0.0.1:9"),
        2,
        ("tcp://127.0.0.1:9", "nothing listens on port 9", "connection refused", "--cluster"),
    ),
    Case(
        "`--cluster` with a port that is not a number",
        ("virtual", "validate", "sim-gfs", "--repo", "repo", "--cluster", "tcp://h:port"),
        2,
        ("'tcp://h:port'", "not a scheduler address", "want tcp://host:port"),
    ),
    Case(
        "a performance report in a folder that does not exist",
        ("pyramid", "build", "good.zarr", "--performance-report", "nowhere/r.html"),
        2,
        ("--performance-report nowhere/r.html", "does not exist", "writable file path"),
        absent=("nowhere",),
    ),
    Case(
        "a performance report of a run in this process",
        ("pyramid", "verify", "good.zarr", "--performance-report", "r.html", *SYNC),
        2,
        ("--performance-report r.html", "needs a cluster", "--executor sync", "drop one"),
        absent=("r.html",),
    ),
    Case(
        "a negative update deadline",
        ("virtual", "update", "sim-gfs", "--repo", "repo", "--deadline", "-5"),
        2,
        ("--deadline", "want seconds from 1", "'-5'"),
    ),
    Case(
        "`virtual update` told to wait for the lease longer than its deadline leaves",
        (
            "virtual",
            "update",
            "sim-gfs",
            "--repo",
            "repo",
            "--source",
            "src",
            "--fire-time",
            "2025-08-01T18",
            "--scheduled-at",
            "now",
            "--deadline",
            "20",
            "--lease-wait",
            "90",
        ),
        2,
        ("--lease-wait 90 s", "does not fit", "longer --deadline"),
    ),
    Case(
        "`virtual expire` with a duration it cannot read",
        ("virtual", "expire", "repo", "--older-than", "3x"),
        2,
        ("--older-than", "'3x' is not a duration", "s m h d or w"),
    ),
    Case(
        "`virtual update --expire-older-than` with a duration it cannot read",
        ("virtual", "update", "sim-gfs", "--repo", "repo", "--expire-older-than", "soon"),
        2,
        ("--expire-older-than", "'soon' is not a duration", "30d"),
    ),
    Case(
        "a negative tape mount time",
        ("archive", "report", "--manifests", "m", "--mount", "-1"),
        2,
        ("--mount", "want seconds from 0", "'-1'"),
    ),
    Case(
        "`--latest` and `--select` together",
        ("pyramid", "build", "repo", "--latest", "--select", "init_time=2025-08-01", *SYNC),
        2,
        ("--latest and --select", "give one of them"),
    ),
    Case(
        "a variable both included and excluded",
        (
            "virtual",
            "validate",
            "sim-gfs",
            "--repo",
            "repo",
            "--source",
            "src",
            "--include-var",
            "temperature_2m",
            "--exclude-var",
            "temperature_2m",
        ),
        2,
        ("--include-var and --exclude-var", "temperature_2m", "drop one"),
    ),
    # ---------------------------------------------------------------- corrupt objects
    Case(
        "a level-0 chunk (shard) of garbage bytes",
        ("pyramid", "build", "good.zarr", *SYNC),
        1,
        ("good.zarr/field/c/1/1", "not a valid zarr chunk", "restore the object, or rerun"),
        setup=_spoil("good.zarr/field/c/1/1"),
    ),
    Case(
        "a coordinate chunk of garbage bytes",
        ("pyramid", "plan", "good.zarr"),
        1,
        ("good.zarr/lat/c/0", "Zstd", "not a valid zarr chunk", "restore the object"),
        setup=_spoil("good.zarr/lat/c/0"),
    ),
    Case(
        "a level-0 chunk truncated after its pyramid was built",
        ("pyramid", "verify", "good.zarr", *SYNC),
        1,
        ("good.zarr/field/c/1/1", "not a valid zarr chunk", "restore the object, or rerun"),
        setup=_built_then_spoiled,
    ),
    Case(
        "an array's `zarr.json` that is not JSON",
        ("pyramid", "build", "good.zarr", *SYNC),
        1,
        ("good.zarr/field/zarr.json", "Expecting value", "not JSON", "restore the object"),
        setup=_write("good.zarr/field/zarr.json", "not json{"),
    ),
    Case(
        "a root `zarr.json` that is not JSON",
        ("pyramid", "plan", "good.zarr"),
        1,
        ("good.zarr/zarr.json", "not JSON", "restore the object"),
        setup=_write("good.zarr/zarr.json", "\x00\x01 junk"),
    ),
    Case(
        "a `zarr.json` in the archive's data that is not JSON",
        ("archive", "scan", "--data", "data", "--manifests", "m", *SYNC),
        1,
        ("data/cordex/a.zarr/tas/zarr.json", "not JSON", "restore the object, or rerun"),
        setup=_write("data/cordex/a.zarr/tas/zarr.json", "junk"),
    ),
    Case(
        "an Icechunk repo whose newest snapshot is junk (`virtual validate`)",
        ("virtual", "validate", "sim-gfs", "--repo", "repo", "--source", "src"),
        1,
        ("repo/snapshots/", "not an Icechunk snapshot", "restore the object, or rerun"),
        setup=_spoiled_head,
    ),
    Case(
        "an Icechunk repo whose newest snapshot is junk (`pyramid build`)",
        ("pyramid", "build", "repo", "-v", "temperature_2m", "--levels", "1", *SYNC),
        1,
        ("repo/snapshots/", "not an Icechunk snapshot", "restore the object, or rerun"),
        setup=_spoiled_head,
    ),
    Case(
        "an Icechunk repo file of junk",
        ("virtual", "inspect", "repo"),
        1,
        ("repo/repo", "header size", "not an Icechunk repo file", "restore the object"),
        setup=_write("repo/repo", "junk"),
    ),
    # ---- round 3 (issue 49): the option layer
    Case(
        "a duration past a century (`--older-than 99999999999w`)",
        ("virtual", "expire", "repo", "--older-than", "99999999999w"),
        2,
        ("--older-than", "'99999999999w' is longer than a century", "36500d"),
    ),
    Case(
        "a split count past a 32-bit integer",
        ("virtual", "split", "apply", "repo", "--split", "4294967296"),
        2,
        ("--split", "want a whole number from 1 to 2147483647", "'4294967296'"),
    ),
    Case(
        "a size past 8 EiB (`--t-max 1e400`)",
        ("archive", "scan", "--data", "data", "--manifests", "m", "--t-max", "1e400", *SYNC),
        2,
        ("--t-max", "size '1e400' is out of range", "at most 8 EiB"),
    ),
    Case(
        "a rate past 8 EiB/s (`--rate 1e400MB/s`)",
        ("archive", "report", "--data", "data", "--manifests", "m", "--rate", "1e400MB/s"),
        2,
        ("--rate", "'1e400MB/s'", "bytes per second above 0"),
    ),
    Case(
        "an infinite mount time (`--mount inf --json`)",
        ("archive", "report", "--data", "data", "--manifests", "m", "--mount", "inf", "--json"),
        2,
        ("--mount", "want seconds from 0 to 31536000", "'inf'"),
    ),
    Case(
        "a NaN number of seconds",
        ("virtual", "update", "sim-gfs", "--repo", "repo", "--deadline", "nan"),
        2,
        ("--deadline", "want seconds from 1 to 31536000", "'nan'"),
    ),
    Case(
        "a label a datetime64[ns] cannot hold (`--start 9999-01-01`)",
        ("virtual", "validate", "sim-gfs", "--repo", "repo", "--start", "9999-01-01"),
        2,
        ("--start", "'9999-01-01' is outside 1678-01-01..2262-01-01"),
    ),
    Case(
        "a colour range with an infinity (`serve --range 0,inf`)",
        ("serve", "store.zarr", "--range", "0,inf"),
        2,
        ("--range", "'0,inf'", "two finite numbers with MIN < MAX"),
    ),
    # ---- round 3 (issue 49): one storage-error voice, paths as typed
    Case(
        "an `--output` that is a file",
        ("pyramid", "build", "good.zarr", "--output", "notes.txt", *SYNC),
        2,
        ("not a directory", "notes.txt", "pass a folder"),
    ),
    Case(
        "a `--repo` below a file",
        ("virtual", "backfill", "sim-gfs", "--repo", "notes.txt/repo", "--source", "src", *AUG1),
        2,
        ("not a directory", "notes.txt", "pass a folder"),
    ),
    Case(
        "a store path that is a symlink loop",
        ("pyramid", "build", "loop.zarr", *SYNC),
        2,
        ("symlink loop", "loop.zarr", "repair or remove the link"),
        setup=lambda w: (w / "loop.zarr").symlink_to("loop.zarr"),
    ),
    Case(
        "an array folder that is a symlink loop",
        ("pyramid", "plan", "good.zarr"),
        2,
        ("symlink loop", "good.zarr/field", "repair or remove the link"),
        setup=_looped("good.zarr/field"),
    ),
    Case(
        "a folder named in Latin-1 (bytes that are not UTF-8)",
        ("pyramid", "build", "caf\udce9/s.zarr", *SYNC),
        2,
        ("file name is not UTF-8", "caf\\xe9/s.zarr", "rename it to UTF-8"),
        setup=_latin1("caf\udce9/s.zarr"),
    ),
    Case(
        "an `--output` named in Latin-1 (it would land in another folder)",
        ("pyramid", "build", "good.zarr", "--output", "caf\udce9/out", *SYNC),
        2,
        ("file name is not UTF-8", "caf\\xe9/out", "rename it to UTF-8"),
        absent=("caf\ufffd",),
    ),
    Case(
        "an Icechunk repo whose head snapshot was deleted (`pyramid build`)",
        ("pyramid", "build", "repo", "-v", "temperature_2m", "--levels", "1", *SYNC),
        1,
        ("missing", "repo/snapshots/", "restore it from a copy"),
        setup=_deleted_head,
    ),
    Case(
        "an Icechunk repo whose head snapshot was deleted (`virtual inspect`)",
        ("virtual", "inspect", "repo"),
        1,
        ("missing", "repo/snapshots/", "restore it from a copy"),
        setup=_deleted_head,
    ),
    Case(
        "an Icechunk repo whose manifests were deleted",
        ("virtual", "validate", "sim-gfs", "--repo", "repo", "--source", "src", *AUG1),
        1,
        ("missing", "repo/manifests/", "restore it from a copy"),
        setup=lambda w: [p.unlink() for p in (w / "repo" / "manifests").iterdir()],
    ),
    Case(
        "a corrupt chunk of `dir ü é/my store.zarr` (named as typed, not percent-encoded)",
        ("pyramid", "build", "dir ü é/my store.zarr", *SYNC),
        1,
        ("dir ü é/my store.zarr/field/c/1/1", "not a valid zarr chunk", "restore the object"),
        setup=_odd_copy("good.zarr", "dir ü é/my store.zarr", "field/c/1/1"),
    ),
    Case(
        "`grib scan` of a bad `.idx` in `dir ü é` (named as typed, not percent-encoded)",
        ("grib", "scan", f"dir ü é/{GRIB}", "--index", f"dir ü é/{GRIB}.idx"),
        1,
        ("invalid index", f"dir ü é/{GRIB}.idx", "not a wgrib2 inventory line"),
        setup=_odd_copy(GRIB, f"dir ü é/{GRIB}", None, idx="garbage\n"),
    ),
    # ---- round 3 (issue 49): checks before writes, user data never overwritten
    Case(
        "a store's own root array named like a pyramid level (`4x`)",
        ("pyramid", "build", "good.zarr", "--levels", "2", *SYNC),
        2,
        ("good.zarr/4x", "array '4x'", "did not write", "rename or move it", "--levels 1"),
        setup=lambda w: zarr.open_group(str(w / "good.zarr"), mode="a").create_array(
            "4x", shape=(3,), dtype="int32", dimension_names=["n"]
        ),
        absent=("good.zarr/2x", "good.zarr/.pyramid"),
    ),
    Case(
        "a store's own group named like a pyramid level (`2x`)",
        ("pyramid", "build", "good.zarr", *SYNC),
        2,
        ("good.zarr/2x", "group '2x'", "did not write", "rename or move it"),
        setup=lambda w: zarr.open_group(str(w / "good.zarr"), mode="a").create_group("2x"),
        absent=("good.zarr/.pyramid", "good.zarr/4x"),
    ),
    Case(
        "a store's own group named `.pyramid` (where the pyramid keeps its records)",
        ("pyramid", "build", "good.zarr", *SYNC),
        2,
        ("good.zarr/.pyramid", "group '.pyramid'", "keeps its records", "rename or move it"),
        setup=lambda w: zarr.open_group(str(w / "good.zarr"), mode="a").create_group(".pyramid"),
        absent=("good.zarr/2x",),
    ),
    Case(
        "a NaN in a spatial coordinate",
        ("pyramid", "build", "good.zarr", *SYNC),
        2,
        ("good.zarr/lat", "coordinate array 'lat'", "nan at index 3", "write the cell centres"),
        setup=lambda w: zarr.open_array(str(w / "good.zarr"), path="lat", mode="r+").__setitem__(
            3, np.nan
        ),
        absent=("good.zarr/2x", "good.zarr/.pyramid"),
    ),
    Case(
        "an array whose (numcodecs) codec is not installed",
        ("pyramid", "build", "good.zarr", *SYNC),
        2,
        ("good.zarr/field", "codec 'zfpy' is not available", "install the package", "--variable"),
        setup=lambda w: (w / "good.zarr/field/zarr.json").write_text(
            (w / "good.zarr/field/zarr.json")
            .read_text()
            .replace('"name": "bytes"', '"name": "numcodecs.zfpy"', 1)
        ),
        absent=("good.zarr/2x", "good.zarr/.pyramid"),
    ),
    Case(
        "an invalid Dask setting in the environment",
        ("pyramid", "build", "good.zarr", "--executor", "dask"),
        2,
        (
            "DASK_DISTRIBUTED__WORKER__MEMORY__TARGET='banana'",
            "distributed.worker.memory.target",
            "number > 0 and <= 1",
            "unset it",
        ),
        env={"DASK_DISTRIBUTED__WORKER__MEMORY__TARGET": "banana"},
        absent=("good.zarr/2x", "good.zarr/.pyramid"),
    ),
    Case(
        "`virtual update --pyramid` of a variable the dataset lacks",
        (
            "virtual",
            "update",
            "sim-gfs",
            "--repo",
            "repo",
            "--source",
            "src",
            "--fire-time",
            "2025-08-01T18",
            "--pyramid",
            "nosuch",
        ),
        2,
        ("--pyramid 'nosuch'", "no such variable", "temperature_2m", "name one of them"),
    ),
    # ---- round 3 (issue 49): records that can be corrupt
    Case(
        "an update lease emptied (young: a live holder may still rewrite it)",
        ("virtual", "expire", "repo", "--older-than", "30d"),
        1,
        ("repo/toolkit-update.lease", "empty", "not a lease", "rerun in", "takes it over"),
        setup=_write("repo/toolkit-update.lease", ""),
    ),
    Case(
        "the last fire's record cut short",
        ("virtual", "status", "repo"),
        1,
        (
            "repo/toolkit-update.last-fire.json",
            "not a fire record",
            "the next `toolkit virtual update` fire rewrites it",
        ),
        setup=_write("repo/toolkit-update.last-fire.json", '{"fire": "2025-08-'),
    ),
    Case(
        "an archive manifest holding another document",
        (
            "archive",
            "partition",
            "--data",
            "data",
            "--manifests",
            "m",
            "--t-max",
            "5000",
            "--t-hot",
            "100",
            "--t-min",
            "3000",
        ),
        1,
        (
            "m/cordex/a.zarr/manifest.json",
            "not an archive manifest",
            "restore its previous version",
            "`toolkit archive partition`",
        ),
        setup=_write("m/cordex/a.zarr/manifest.json", '{"zarr_format": 3, "node_type": "group"}'),
    ),
    Case(
        "tier state of binary junk",
        ("archive", "report", "--data", "data", "--manifests", "m"),
        1,
        (
            "m/cordex/a.zarr/tiers.json",
            "not tier state",
            "restore its previous version",
            "toolkit archive mark cordex/a.zarr",
        ),
        setup=_write("m/cordex/a.zarr/tiers.json", "\x00\x01 junk"),
    ),
    Case(
        "a pyramid's backup of level-0 metadata emptied",
        ("pyramid", "verify", "good.zarr"),
        1,
        (
            "good.zarr/.pyramid/backup/c/0",
            "empty",
            "not a pyramid backup record",
            "toolkit pyramid build",
            "--rebuild-from 2x",
        ),
        setup=lambda w: _built_then_emptied(w, ".pyramid/backup/c/0"),
    ),
    # ---- round 3 (issue 49): input encodings and switches, an adversary's battery
    Case(
        "`grib scan` of a folder",
        ("grib", "scan", "src"),
        2,
        ("cannot read input", "src", "is a folder", "name one GRIB2 file in it"),
    ),
    Case(
        "`pyramid verify` of a store with no pyramid",
        ("pyramid", "verify", "good.zarr"),
        1,
        ("good.zarr", "no recorded pyramid plan", "build the pyramid first"),
        absent=("good.zarr/.pyramid", "good.zarr/2x"),
    ),
    Case(
        "keys piped in a code page that is not UTF-8 (a BOM, UTF-16 and CRLF are read right)",
        ("archive", "resolve", "--manifests", "m"),
        2,
        ("the keys on stdin", "line 2 is not UTF-8", "0xe9", "save it as UTF-8"),
        stdin="cordex/a.zarr/tas/c/0/0/0\r\ncordex/a.zarr/t\xe9/c/0\r\n".encode("latin-1"),
    ),
    Case(
        "an events file line that is not UTF-8",
        ("archive", "report", "--data", "data", "--manifests", "m", "--events", "ev.jsonl"),
        2,
        ("ev.jsonl", "line 1 is not UTF-8", "save it as UTF-8"),
        setup=lambda w: (w / "ev.jsonl").write_bytes(b'{"Records": [{"s3": "\xe9"}]}\n'),
    ),
    Case(
        "`TOOLKIT_DEBUG=false` (a switch spelled off)",
        ("pyramid", "plan", "notes.txt"),
        2,
        ("notes.txt", "is not a directory"),
        env={"TOOLKIT_DEBUG": "false"},
    ),
    Case(
        "`--cluster` a dask-gateway address (its credentials come only with the cluster object)",
        ("pyramid", "build", "good.zarr", "--cluster", "gateway://gw.example.org:8000/c1"),
        2,
        ("'gateway://gw.example.org:8000/c1'", "dask-gateway address", "from Python"),
        absent=("good.zarr/2x",),
    ),
    Case(
        "`--cluster` the dashboard's web address",
        ("pyramid", "build", "good.zarr", "--cluster", "http://127.0.0.1:8787/status"),
        2,
        ("'http://127.0.0.1:8787/status'", "unknown scheme 'http'", "'Scheduler at:'"),
        absent=("good.zarr/2x",),
    ),
    Case(
        "`TOOLKIT_CLUSTER` a tls:// address with no certificates configured",
        ("pyramid", "build", "good.zarr"),
        2,
        ("'tls://127.0.0.1:8786'", "needs certificates", "distributed.comm.tls.ca-file"),
        env={"TOOLKIT_CLUSTER": "tls://127.0.0.1:8786"},
        absent=("good.zarr/2x",),
    ),
    Case(
        "a user dataset with an `index=` kind that does not exist",
        ("virtual", "backfill", "kinds.py:DS", "--repo", "new-repo", "--start", "2025-08-01"),
        2,
        ("index='idx'", "is not a kind of index", "'wgrib2', 'ecmwf', 'scan', 'whole'"),
        setup=_write(
            "kinds.py",
            "from datetime import datetime\n"
            "from toolkit.virtual.define import grib_forecast, variable\n"
            "DS = grib_forecast('k', source='.', key='{init:%Y%m%d%H}/{lead}.grib2',\n"
            "    variables=[variable('t2m', 'TMP', '2 m above ground')],\n"
            "    grid={'latitude': [1.0, 0.0], 'longitude': [0.0, 1.0]},\n"
            "    first_init=datetime(2025, 8, 1), end=datetime(2025, 8, 2), every_hours=6,\n"
            "    leads_hours=[0], index='idx')\n",
        ),
        absent=("new-repo",),
    ),
    Case(
        "`demo --report` naming a folder",
        ("demo", "--report", "pages"),
        2,
        ("pages", "is a folder", "--report FILE"),
        setup=_write("pages/notes.txt", "mine\n"),
        absent=("pages/report.html", "toolkit-demo-report.html"),
    ),
)


# ------------------------------------------------------------------------------- the world


def _odd_store(path: Path) -> None:
    """Coordinates lat/lon, and arrays of kinds a pyramid refuses."""
    synthetic.write_store(storage.open_store(str(path)), shape=(32, 32), shards=(16, 16))
    root = zarr.open_group(str(path), mode="a")
    dims = ["lat", "lon"]
    for name, dtype in (("text", "str"), ("wave", "complex64"), ("counts", "int16")):
        a = root.create_array(name, shape=(32, 32), dtype=dtype, chunks=(16, 16),
                              dimension_names=dims)  # fmt: skip
        a[...] = np.ones((32, 32), dtype=object if dtype == "str" else dtype)
    for name, dtype, attrs in CF_BAD:  # CF attributes no reader can use
        a = root.create_array(name, shape=(32, 32), dtype=dtype, chunks=(16, 16),
                              dimension_names=dims, attributes=attrs)  # fmt: skip
        a[...] = np.ones((32, 32), dtype=dtype)


CF_BAD = (
    ("fill_text", "float32", {"_FillValue": "minus nine"}),
    ("fill_wide", "uint8", {"_FillValue": 300}),
    ("range_one", "float32", {"valid_range": [0.0]}),
    ("range_empty", "float32", {"valid_min": 5.0, "valid_max": 1.0}),
    ("scale_zero", "int16", {"scale_factor": 0.0}),
)


def _stale(w: Path, blob: str) -> None:
    """The blob went to tape, then a write made its copy stale."""
    from toolkit.archive.tierstore import TierStore

    tiers = TierStore(storage.open_store(str(w / "m")))
    for state in ("writing", "archived", "stale"):
        tiers.update("cordex/a.zarr", lambda s, state=state: s.mark(blob, state, "2026-12-04"))


def _build_world(w: Path) -> None:
    synthetic.write_store(storage.open_store(str(w / "good.zarr")), shape=(40, 60), shards=(16, 16))
    synthetic.write_store(
        storage.open_store(str(w / "classes.zarr")), shape=(40, 60), shards=(16, 16),
        kind="categorical",
    )  # fmt: skip
    synthetic.write_store(
        storage.open_store(str(w / "stray.zarr")), shape=(40, 60), shards=(16, 16),
        kind="categorical",
    )  # fmt: skip
    zarr.open_array(str(w / "stray.zarr"), path="field", mode="r+")[21, 33] = 9
    _odd_store(w / "odd.zarr")
    g = zarr.open_group(str(w / "nocoords.zarr"), mode="w")
    g.create_array("v", shape=(32, 32), dtype="f4", chunks=(16, 16), dimension_names=["y", "x"])
    g = zarr.open_group(str(w / "zero.zarr"), mode="w")
    for dim, n in (("lat", 0), ("lon", 32)):
        g.create_array(dim, shape=(n,), dtype="f8", chunks=(max(n, 1),), dimension_names=[dim])
    g.create_array("v", shape=(0, 32), dtype="f4", chunks=(16, 16), dimension_names=["lat", "lon"])
    g2 = zarr.open_group(str(w / "v2.zarr"), mode="w", zarr_format=2)
    g2.create_array("v", shape=(8, 8), dtype="f4")
    (w / "notes.txt").write_text("not a store")
    # GRIB
    shutil.copyfile(DATA / "grib" / GRIB, w / GRIB)
    shutil.copyfile(DATA / "grib" / IDX, w / IDX)
    whole = (DATA / "grib" / GRIB).read_bytes()
    (w / "cut.grib2").write_bytes(whole[: len(whole) // 2])
    # virtual: a simulated GFS archive, 9 files published, backfilled into `repo`
    from toolkit.examples.simulate import make_archive

    archive = make_archive(
        storage.open_store(str(w / "src")), kind="gfs", leads=[0, 3, 6], publish=False,
        inits=[datetime(2025, 8, 1) + timedelta(hours=6 * i) for i in range(4)],
    )  # fmt: skip
    archive.publish(archive.files()[:9])
    res = CliRunner().invoke(app, ["virtual", "backfill", "sim-gfs", "--repo", str(w / "repo"),
                                   "--source", str(w / "src"), "--start", "2025-08-01T00",
                                   *SYNC])  # fmt: skip
    assert res.exit_code == 0, res.output
    # archive: a partitioned store
    zarrgen.cordex_v3(storage.open_store(str(w / "data")))
    res = CliRunner().invoke(app, ["archive", "partition", "--data", str(w / "data"),
                                   "--manifests", str(w / "m"), "--t-max", "5000",
                                   "--t-hot", "100", "--t-min", "3000"])  # fmt: skip
    assert res.exit_code == 0, res.output


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Path:
    w = tmp_path_factory.mktemp("world")
    _build_world(w)
    return w


def _files(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in root.rglob("*")
        if p.is_file()
    }


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_each_bad_input_is_one_line_and_loses_nothing(
    case: Case, world: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request
) -> None:
    w = tmp_path / "w"
    shutil.copytree(world, w, symlinks=True)
    if case.setup:
        case.setup(w)
    fill = {}
    from tests.conftest import make_bucket

    if any("{s3}" in a or "{bucket}" in a for a in case.argv):
        fill["s3"] = request.getfixturevalue("s3_endpoint")
        fill["bucket"] = make_bucket(fill["s3"])
    if any("{sw}" in a for a in case.argv):
        fill["sw"] = request.getfixturevalue("seaweed_endpoint")
        fill["swbucket"] = make_bucket(fill["sw"])
    argv = [a.format(**fill) for a in case.argv]
    for name, value in case.env.items():
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.chdir(w)
    before = _files(w)
    res = CliRunner().invoke(app, argv, input=case.stdin)
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert res.exit_code == case.code, (res.exit_code, res.stderr, res.stdout)
    assert "Traceback" not in res.output and "Traceback" not in res.stderr
    assert len(lines) == 1 and lines[0].startswith("error: "), res.stderr
    at = 0
    for fragment in case.says:
        found = lines[0].find(fragment, at)
        assert found >= 0, f"{fragment!r} not in (after col {at}): {lines[0]}"
        at = found
    after = _files(w)
    assert {k: v for k, v in after.items() if k in before} == before  # nothing changed or gone
    for rel in case.absent:
        assert not (w / rel).exists(), f"{rel} was created"


# ------------------------------------------------------------------------------- the doc


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def render() -> str:
    rows = [
        f"| {_cell(c.input)} | {c.code} | {_cell(' … '.join(f'`{s}`' for s in c.says))} |"
        for c in CASES
    ]
    head = (
        "# Bad inputs and what toolkit says\n\n"
        "Every row is a test (`tests/test_errors.py`) that runs the command on a prepared\n"
        "world and asserts the exit code; that stderr is one line, `error: ...`, holding the\n"
        "fragments shown (the object, the cause, the fix) in that order; that no traceback is\n"
        "printed (`--debug` prints one); and that nothing that existed before changed.\n"
        "Exit 2: the input must change. Exit 1: a check failed or a state refuses the change.\n"
        "With `--json`, the same line also goes to stdout as the one JSON object the command\n"
        'promises: `{"error": LINE, "exit": CODE}` (`tests/test_json_errors.py`).\n'
        "This table is rendered from the tests: `python -m tests.test_errors` rewrites it.\n\n"
        "| input | exit code | message |\n|---|---|---|\n"
    )
    return head + "\n".join(rows) + "\n"


def test_the_catalogue_is_the_tests() -> None:
    assert len(CASES) >= 40
    assert DOC.read_text() == render(), "run: python -m tests.test_errors"


if __name__ == "__main__":
    DOC.write_text(render())
    print(f"{DOC}: {len(CASES)} rows")
