"""`toolkit virtual backfill|update|inspect` exit codes and output on a simulated archive."""

from __future__ import annotations

from datetime import datetime, timedelta
from urllib.parse import unquote, urlparse

from typer.testing import CliRunner

from toolkit import storage
from toolkit.cli import app
from toolkit.examples.simulate import make_archive

runner = CliRunner()


def four_cycles(tmp_path):
    """A simulated GFS archive at `tmp_path`/src: 4 cycles x leads 0, 3, 6, none published."""
    return make_archive(
        storage.open_store(str(tmp_path / "src")),
        kind="gfs",
        leads=[0, 3, 6],
        publish=False,
        inits=[datetime(2025, 8, 1) + timedelta(hours=6 * i) for i in range(4)],
    )


def test_backfill_update_inspect(tmp_path):
    archive = four_cycles(tmp_path)
    archive.publish(archive.files()[:6])
    common = ["--repo", str(tmp_path / "repo"), "--source", str(tmp_path / "src")]
    res = runner.invoke(
        app,
        [
            "virtual",
            "backfill",
            "sim-gfs",
            *common,
            "--start",
            "2025-08-01T00",
            "--executor",
            "sync",
            "--workers",
            "2",
        ],
    )
    assert res.exit_code == 0, res.output
    assert "ingest" in res.output and "6/6" in res.output
    res = runner.invoke(
        app,
        [
            "virtual",
            "backfill",
            "sim-gfs",
            *common,
            "--start",
            "2025-08-01T00",
            "--end",
            "2025-08-02T00",
            "--executor",
            "sync",
        ],
    )
    assert res.exit_code == 2 and "--allow-empty-positions" in res.output
    res = runner.invoke(
        app,
        [
            "virtual",
            "update",
            "sim-gfs",
            *common,
            "--fire-time",
            "2025-08-01T18",
            "--deadline",
            "2",
        ],
    )
    assert res.exit_code == 0, res.output
    assert "roll to the next fire" in res.output
    # anchored to the (simulated, long past) scheduled fire: one sweep, said so
    assert "has passed: one sweep only" in res.output
    res = runner.invoke(app, ["virtual", "inspect", str(tmp_path / "repo")])
    assert res.exit_code == 0, res.output
    assert "rebases" in res.output and "temperature_2m" in res.output
    assert all(len(line) <= 80 for line in res.output.splitlines())  # CliRunner's 80 columns
    res = runner.invoke(app, ["virtual", "backfill", "nope", *common, "--start", "2025-08-01"])
    assert res.exit_code == 2 and "unknown dataset 'nope'" in res.output
    assert "gefs, gfs, hrrr, hrrr-analysis, sim-gfs, sim-hrrr-analysis" in res.output
    res = runner.invoke(
        app,
        [
            "virtual",
            "backfill",
            "sim-gfs",
            "--repo",
            str(tmp_path / "repo"),
            "--start",
            "2025-08-01",
        ],
    )
    assert res.exit_code == 2 and "no bucket of its own" in res.output and "--source" in res.output


def test_datasets_lists_the_registry_a_row_each():
    from toolkit.virtual.builtin import DATASETS

    res = runner.invoke(app, ["virtual", "datasets"])
    assert res.exit_code == 0, res.output
    rows, yours = res.output.strip().split("\nyour own: ")
    lines = [line for line in rows.splitlines() if not line.startswith(" ")]  # not wrapped ones
    assert [line.split()[0] for line in lines] == sorted(DATASETS)
    assert "module:NAME" in yours and "docs/how-to/own-dataset.md" in yours
    by_name = {line.split()[0]: line for line in lines}
    assert "s3://noaa-hrrr-bdp-pds" in by_name["hrrr"] and "HRRR" in by_name["hrrr"]
    assert "s3://noaa-gfs-bdp-pds" in by_name["gfs"]
    assert "s3://noaa-gefs-pds" in by_name["gefs"]
    assert "pass --source" in by_name["sim-gfs"] and "pass --source" in by_name["sim-hrrr-analysis"]
    assert (
        "s3://noaa-hrrr-bdp-pds" in by_name["hrrr-analysis"]
        and "analysis" in by_name["hrrr-analysis"]
    )


def test_real_datasets_default_to_their_bucket_anonymously(tmp_path):
    """No --source: the dataset's own NODD bucket, anonymous, us-east-1 (nothing is read
    here); --source swaps in a mirror, --anonymous reads an S3 one without credentials."""
    from toolkit.console import StorageOptions
    from toolkit.virtual.builtin.common import NOAA_REGION
    from toolkit.virtual.cli import _dataset

    for name, bucket in (
        ("hrrr", "s3://noaa-hrrr-bdp-pds"),
        ("gfs", "s3://noaa-gfs-bdp-pds"),
        ("gefs", "s3://noaa-gefs-pds"),
    ):
        ds = _dataset(name, str(tmp_path / "repo"), None, StorageOptions())
        assert ds.dataset.source.store.url == bucket
        assert ds.dataset.source.store.options == {"region": NOAA_REGION, "anonymous": True}
        assert ds.repo.url.endswith("repo")
    s3 = StorageOptions(endpoint="http://127.0.0.1:9", allow_http=True, path_style=True)
    mirror = _dataset("gfs", str(tmp_path / "repo"), "s3://mirror/gfs", s3, anonymous=True)
    assert mirror.dataset.source.store.url == "s3://mirror/gfs"
    assert mirror.dataset.source.store.options["anonymous"] is True
    assert mirror.dataset.source.store.options["endpoint"] == "http://127.0.0.1:9"


def test_demo_backfills_then_updates_while_files_publish(tmp_path):
    from toolkit.examples.virtual_demo import demo
    from toolkit.virtual import open_dataset

    run = demo(tmp_path, executor="sync")
    reports = run.reports
    assert [r.plan.split("-")[1] for r in reports] == ["backfill", "update"]
    # the snapshot the demo's "before" map reads holds the backfill only: no 18 UTC cycle yet
    before = open_dataset(str(run.repo), snapshot=run.backfilled)["temperature_2m"]
    after = open_dataset(str(run.repo))["temperature_2m"]
    assert before.sizes["init_time"] < after.sizes["init_time"]
    assert reports[0].stage("ingest").written == 6
    result = reports[1].stage("update").result
    assert len(result.ingested) == 6 and result.pending == [] and not result.skipped


def test_backfill_a_real_dataset_from_a_local_mirror(tmp_path):
    """`toolkit virtual backfill gfs --source <local copy>`: the real GFS template, the real
    inventories (sparse GRIB2 bodies), refs into the mirror's container; then validate names
    the leads the mirror lacks."""
    import numpy as np
    import xarray as xr

    from tests.virtual.datasets.test_real_datasets import lay_out
    from toolkit import icechunk as R
    from toolkit.virtual.builtin import gfs

    src = storage.open_store(str(tmp_path / "bucket"))
    ds = gfs(src)
    init = datetime(2025, 8, 1)
    for lead in (0, 7):
        key = ds.source.catalog.data_key(init, timedelta(hours=lead), "pgrb2")
        lay_out(src, key, f"gfs.t00z.pgrb2.0p25.f{lead:03d}.idx")
    common = ["--repo", str(tmp_path / "repo"), "--source", str(tmp_path / "bucket")]
    window = ["--start", "2025-08-01T00", "--end", "2025-08-01T01"]
    res = runner.invoke(app, ["virtual", "backfill", "gfs", *common, *window, "--executor", "sync"])
    assert res.exit_code == 0, res.output
    assert "2/2" in res.output  # the ingest gate: both published files probed present
    session = R.readonly(R.open_repo(storage.open_store(str(tmp_path / "repo")), fresh=True))
    x = xr.open_zarr(session.store, consolidated=False)
    assert x["init_time"].values[-1] == np.datetime64(init, "ns")  # ends at the backfilled cycle
    res = runner.invoke(app, ["virtual", "validate", "gfs", *common, *window, "--sample", "0"])
    assert res.exit_code == 1  # gfs's tiers (0.0, 1.0) need two positions: one is refused
    assert "fewer than the 2 completeness tiers (0.0, 1.0)" in res.output.replace("\n", "")
    validate = ["virtual", "validate", "gfs", *common, *window, "--min-present", "1.0"]
    res = runner.invoke(app, [*validate, "--sample", "0"])
    assert res.exit_code == 1  # 207 leads of the cycle are not in the mirror
    assert "init_time=2025-08-01T00:00:00: 2/209 files have refs (need 100%)" in res.output
    gaps = "\n".join(ln for ln in res.output.splitlines() if not ln.startswith("FAIL decode"))
    assert "lead_time=1h" in gaps and "lead_time=7h" not in gaps
    # the mirror's bodies are zeros after each header: named, never handed to the decoder
    assert "lead_time=7h (its source byte range): bad section 0 of length 0" in res.output


def test_backfill_names_unpublished_and_skipped_files_and_strict_fails_on_them(tmp_path):
    archive = four_cycles(tmp_path)
    files = archive.files()
    archive.publish(files[:4] + files[5:9])  # files[4] is not listed: a hole mid-region
    archive.truncate(files[6])
    base = [
        "virtual",
        "backfill",
        "sim-gfs",
        "--repo",
        str(tmp_path / "repo"),
        "--source",
        str(tmp_path / "src"),
        "--start",
        "2025-08-01T00",
        "--executor",
        "sync",
    ]
    res = runner.invoke(app, [*base, "--strict"])
    assert res.exit_code == 1
    as_typed = [unquote(urlparse(archive.data_url(files[i])).path) for i in (4, 6)]  # paths
    assert as_typed[0] in res.output and "not published" in res.output
    assert as_typed[1] in res.output and "skipped" in res.output
    assert "file://" not in res.output
    res = runner.invoke(app, base)
    assert res.exit_code == 0, res.output
    # the strict run committed what it could and kept its branch: this one resumes from it
    assert (
        "files: 7 on the branch (0 committed by this run), 1 not published, "
        "0 published without its index, 0 withheld, 1 skipped"
    ) in res.stderr
    assert f"{archive.data_url(files[4])}: not published" in res.stderr
    assert f"{archive.data_url(files[6])}: skipped:" in res.stderr
    res = runner.invoke(app, [*base[:-2], "--workers", "-3"])
    assert res.exit_code == 2 and "Traceback" not in res.output


def test_replica_flag_writes_the_same_dataset_to_every_repo(tmp_path):
    """`--replica URL` (repeatable) on backfill and update: each replica is committed before
    the primary and ends holding the dataset the primary holds."""
    import xarray as xr

    from toolkit.virtual import open_dataset

    archive = four_cycles(tmp_path)
    files = archive.files()
    archive.publish(files[:6])
    repos = [str(tmp_path / name) for name in ("primary", "copy-a", "copy-b")]
    common = ["--repo", repos[0], "--source", str(tmp_path / "src")]
    common += ["--replica", repos[1], "--replica", repos[2]]
    res = runner.invoke(
        app,
        [
            "virtual",
            "backfill",
            "sim-gfs",
            *common,
            "--start",
            "2025-08-01T00",
            "--executor",
            "sync",
        ],
    )
    assert res.exit_code == 0, res.output
    archive.publish(files[6:])
    res = runner.invoke(
        app,
        ["virtual", "update", "sim-gfs", *common, "--fire-time", "2025-08-01T18:00"],
    )
    assert res.exit_code == 0, res.output
    primary = open_dataset(repos[0]).load()
    assert primary["init_time"].size == 4  # the update grew it to the newest cycle
    for replica in repos[1:]:
        xr.testing.assert_identical(open_dataset(replica).load(), primary)
    for bad in (["--replica", repos[0]], ["--replica", repos[1], "--replica", repos[1]]):
        res = runner.invoke(
            app,
            ["virtual", "update", "sim-gfs", "--repo", repos[0], "--source", str(tmp_path / "src"),
             *bad, "--fire-time", "2025-08-01T18:00"],
        )  # fmt: skip
        assert res.exit_code == 2 and "each replica must be another repo" in res.output
        assert "Traceback" not in res.output


def test_a_backfill_from_a_source_that_moved_is_refused_before_anything(tmp_path):
    """The repo's refs live in the containers registered at its creation: a backfill reading a
    moved --source would write refs no reader could follow. Refused in one line, before the
    guard, the temp branch or a ref is written (resume or --overwrite-chunks alike)."""
    import hashlib
    import shutil

    archive = four_cycles(tmp_path)
    archive.publish(archive.files()[:6])
    repo = str(tmp_path / "repo")
    base = ["virtual", "backfill", "sim-gfs", "--repo", repo, "--start", "2025-08-01T00",
            "--executor", "sync"]  # fmt: skip
    assert runner.invoke(app, [*base, "--source", str(tmp_path / "src")]).exit_code == 0
    shutil.move(tmp_path / "src", tmp_path / "moved src")

    def files() -> dict[str, str]:
        root = tmp_path / "repo"
        return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in root.rglob("*")
                if p.is_file()}  # fmt: skip

    before = files()
    for extra in ([], ["--overwrite-chunks"]):
        res = runner.invoke(app, [*base, "--source", str(tmp_path / "moved src"), *extra])
        lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
        assert res.exit_code == 2, res.output
        assert len(lines) == 1 and lines[0].startswith("error: "), res.stderr
        assert f"{tmp_path / 'src'}" in lines[0] and f"{tmp_path / 'moved src'}" in lines[0]
        assert "pass the --source the repo was built from" in lines[0]
        assert files() == before
