"""`toolkit archive ...` end to end on a local store and on S3 (moto)."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.archive import zarrgen
from tests.conftest import make_bucket
from toolkit import storage
from toolkit.cli import app

runner = CliRunner()
POLICY = ["--t-max", "5000", "--t-hot", "100", "--t-min", "3000"]


def invoke(*args: str) -> object:
    return runner.invoke(app, ["archive", *args])


@pytest.fixture
def local(tmp_path: Path) -> tuple[str, str]:
    data, manifests = tmp_path / "data", tmp_path / "manifests"
    zarrgen.cordex_v3(storage.open_store(str(data)))
    return str(data), str(manifests)


def test_schema_needs_no_store() -> None:
    res = invoke("schema")
    assert res.exit_code == 0 and json.loads(res.stdout)["title"] == "toolkit archive manifest"


def test_partition_show_resolve_pin_report(local, tmp_path: Path) -> None:
    data, manifests = local
    base = ["--data", data, "--manifests", manifests]
    dry = invoke("partition", *base, *POLICY, "--dry-run")
    assert dry.exit_code == 0, dry.output
    assert "+ blob b_tas" in dry.stdout and "dry run" in dry.stdout
    assert not Path(manifests).exists() or not any(Path(manifests).rglob("*.json"))
    res = invoke("partition", *base, *POLICY)
    assert res.exit_code == 0 and "written" in res.stdout
    again = invoke("partition", *base, "--t-max", "1TB")
    assert "unchanged at epoch 1" in again.stdout

    shown = json.loads(invoke("show", "cordex/a.zarr", "--manifests", manifests, "--json").stdout)
    assert shown["epoch"] == 1 and {b["id"] for b in shown["blobs"]} >= {"b_tas"}

    res = invoke(
        "resolve",
        "cordex/a.zarr/tas/c/7/0/0",
        "cordex/a.zarr/zarr.json",
        "x/y",
        "--manifests",
        manifests,
        "--json",
    )
    rows = json.loads(res.stdout)
    assert [(r["kind"], r["blob"]) for r in rows] == [
        ("blob", "b_tas_1"),
        ("hot", None),
        ("unmanaged", None),
    ]
    assert rows[0]["scope"] == "cordex/a.zarr"

    res = invoke(
        "pin",
        "add",
        "cordex/a.zarr",
        "cordex/a.zarr/pr",
        "--who",
        "ana",
        "--why",
        "paper",
        "--until",
        "2099-06-30",
        "--manifests",
        manifests,
    )
    assert res.exit_code == 0 and "epoch 1 -> 2" in res.stdout
    assert (
        invoke("resolve", "cordex/a.zarr/pr/c.0.0", "--manifests", manifests).stdout.split("\t")[2]
        == "hot"
    )
    assert (
        invoke(
            "pin", "remove", "cordex/a.zarr", "cordex/a.zarr/nope", "--manifests", manifests
        ).exit_code
        == 2
    )

    forced = invoke(
        "diff", "cordex/a.zarr", *base, "--t-max", "1TB", "--t-hot", "1", "--t-min", "1", "--force"
    )
    assert "retired blob ids (never given again): b_tas" in forced.stdout

    events = tmp_path / "events.jsonl"
    rec = {
        "eventName": "s3:ObjectAccessed:Get",
        "userIdentity": {"principalId": "u"},
        "s3": {
            "bucket": {"name": "b"},
            "object": {"key": "cordex/a.zarr/tas/c/0/0/0", "sequencer": "1"},
        },
    }
    lines = [json.dumps({"Records": [rec]})] * 2  # a redelivery
    lines.append(
        json.dumps(
            {
                "Records": [
                    {
                        **rec,
                        "eventName": "ObjectCreated:Put",
                        "s3": {
                            **rec["s3"],
                            "object": {"key": "cordex/a.zarr/tas/c/12/0/0", "sequencer": "2"},
                        },
                    }
                ]
            }
        )
    )
    events.write_text("\n".join(lines))
    res = invoke(
        "report", *base, "--events", str(events), "--rate", "1MB/s", "--mount", "10", "--json"
    )
    assert res.exit_code == 0, res.output
    rep = json.loads(res.stdout)
    tas = {r["blob"]: r for r in rep["blobs"] if (r["blob"] or "").startswith("b_tas")}
    assert tas["b_tas_0"]["reads"] == 1 and tas["b_tas_2"]["writes"] == 1
    assert tas["b_tas_0"]["bytes"] == 5000 and tas["b_tas_0"]["objects"] == 5
    assert tas["b_tas_0"]["recall_s"] == pytest.approx(10 + 5000 / 1e6)
    text = invoke("report", *base).stdout
    assert "b_tas_3" in text and "recall" in text


def test_pasted_paths_and_hot_always(local) -> None:
    data, manifests = local
    base = ["--data", data, "--manifests", manifests]
    res = invoke("partition", *base, *POLICY, "--hot-always", "NOTES")
    assert res.exit_code == 0, res.output
    assert (
        "NOTES"
        in json.loads(invoke("show", "cordex/a.zarr", "--manifests", manifests, "--json").stdout)[
            "hot_always"
        ]
    )
    keys = [
        f"{data}/cordex/a.zarr/tas/c/7/0/0",
        f"file://{data}/cordex/a.zarr/tas/c/7/0/0",
        "cordex/a.zarr/tas/c/7/0/0",
        "cordex/a.zarr/pr/NOTES",
    ]
    for extra in ([], ["--data", data]):
        res = invoke("resolve", *keys, "--manifests", manifests, "--json", *extra)
        assert res.exit_code == 0, res.output
        rows = json.loads(res.stdout)
        assert [(r["kind"], r["blob"]) for r in rows] == [("blob", "b_tas_1")] * 3 + [("hot", None)]


def test_bad_input_exits_2_with_a_reason(local, tmp_path: Path) -> None:
    data, manifests = local
    res = invoke("partition", "--data", data, "--manifests", manifests, "--t-max", "lots")
    assert res.exit_code == 2 and "cannot read size 'lots'" in res.output
    bad = tmp_path / "manifests" / "cordex" / "a.zarr"
    bad.mkdir(parents=True)
    (bad / "manifest.json").write_text('{"format": "toolkit-archive-manifest/1"}')
    res = invoke("show", "cordex/a.zarr", "--manifests", manifests)
    assert res.exit_code == 1 and "'scope'" in res.output  # a stored one: corrupt, not usage


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["partition", "--data", "{tmp}/nope"], "does not exist"),
        (["scan", "--data", "{tmp}/empty", "--executor", "sync"], "no Zarr stores"),
        (["partition", "--data", "{data}", "--t-max", "1KiB", "--t-min", "1MiB"], "--t-min"),
        (["partition", "missing.zarr", "--data", "{data}"], "missing.zarr: no Zarr metadata"),
        (["resolve", "a/b", "--manifests", "{tmp}/nowhere"], "no manifests under"),
        (["report", "--data", "{data}", "--manifests", "{tmp}/nowhere"], "no manifests under"),
        (["report", "nope.zarr", "--data", "{data}"], "no manifest for scope 'nope.zarr'"),
        (["report", "--data", "{data}", "--events", "{tmp}/none.jsonl"], "does not exist"),
        (["report", "--data", "{data}", "--events", "{tmp}/bad.jsonl"], "line 1: not JSON"),
        (["partition", "--data", "{data}", "--bogus"], "No such option"),
    ],
)
def test_bad_usage_exits_2_with_one_reason(
    local, tmp_path: Path, args: list[str], says: str
) -> None:
    data, manifests = local
    (tmp_path / "empty").mkdir()
    (tmp_path / "bad.jsonl").write_text("{oops\n")
    invoke("partition", "--data", data, "--manifests", manifests, *POLICY)
    argv = [a.format(tmp=tmp_path, data=data) for a in args]
    if "--manifests" not in argv:
        argv += ["--manifests", manifests]
    res = invoke(*argv)
    assert res.exit_code == 2, res.output
    assert says in " ".join(res.output.split()), res.output
    assert "Traceback" not in res.output


def test_scan_on_s3_with_storage_options(s3_endpoint: str) -> None:
    bucket = make_bucket(s3_endpoint)
    opts = ["--endpoint", s3_endpoint, "--region", "us-east-1", "--allow-http", "--path-style"]
    data = storage.open_store(
        f"s3://{bucket}/data",
        endpoint=s3_endpoint,
        region="us-east-1",
        allow_http=True,
        path_style=True,
    )
    zarrgen.cordex_v3(data, "a.zarr")
    zarrgen.cordex_v3(data, "b.zarr")
    res = invoke(
        "scan",
        "--data",
        f"s3://{bucket}/data",
        "--manifests",
        f"s3://{bucket}/m",
        *POLICY,
        *opts,
        "--executor",
        "sync",
        "--json",
    )
    assert res.exit_code == 0, res.output
    assert [o["scope"] for o in json.loads(res.stdout)] == ["a.zarr", "b.zarr"]
    res = invoke("resolve", "b.zarr/tas/c/0/0/0", "--manifests", f"s3://{bucket}/m", *opts)
    assert res.stdout.split("\t")[:3] == ["b.zarr/tas/c/0/0/0", "b.zarr", "b_tas_0"]
    url = f"s3://{bucket}/data/b.zarr/tas/c/0/0/0"  # as a user pastes it
    for extra in ([], ["--data", f"s3://{bucket}/data"]):
        res = invoke("resolve", url, "--manifests", f"s3://{bucket}/m", *opts, *extra, "--json")
        assert res.exit_code == 0, res.output
        (row,) = json.loads(res.stdout)
        assert (row["key"], row["scope"], row["blob"]) == (url, "b.zarr", "b_tas_0")


def test_unreachable_endpoint_exits_2_naming_the_store() -> None:
    res = invoke(
        "partition",
        "--data",
        "s3://bkt/data",
        "--manifests",
        "s3://bkt/m",
        "--endpoint",
        "http://127.0.0.1:9",
        "--allow-http",
        "--region",
        "us-east-1",
        "--retry-seconds",
        "1",
    )
    assert res.exit_code == 2 and "unreachable" in res.output and "s3://bkt/data" in res.output
    res = invoke("resolve", "a/b", "--manifests", "s3://bkt/m", "--endpoint", "http://127.0.0.1:9")
    assert res.exit_code == 2 and "--allow-http" in res.output
