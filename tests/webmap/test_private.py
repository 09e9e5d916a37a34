"""A pyramid in a private bucket on a real S3 server that checks signatures (SeaweedFS): the
map is served with the environment's credentials, and neither they nor any user:password of
the location reach a page, a JSON answer, a tile or a header."""

from __future__ import annotations

import os

import pytest
from starlette.testclient import TestClient
from typer.testing import CliRunner

import toolkit.pyramid
from tests.conftest import make_bucket, s3_options
from toolkit import storage
from toolkit.cli import app
from toolkit.examples.synthetic import write_store
from toolkit.webmap.app import Served, create_app
from toolkit.webmap.view import Source


@pytest.mark.slow
def test_a_private_bucket_is_served_and_its_credentials_never_leave_the_server(seaweed_endpoint):
    opts = s3_options(seaweed_endpoint)
    url = f"s3://{make_bucket(seaweed_endpoint)}/field.zarr"  # private: only the env's identity
    write_store(storage.open_store(url, **opts), shape=(64, 128), shards=(32, 32), bands=1)
    toolkit.pyramid.build(url, levels=2, executor="sync", options=storage.Options(**opts))
    # really private: read anonymously, the command is refused in one line, exit 2
    flags = [
        "--endpoint",
        seaweed_endpoint,
        "--region",
        "us-east-1",
        "--allow-http",
        "--path-style",
    ]
    refused = CliRunner().invoke(app, ["serve", url, "--anonymous", *flags])
    assert refused.exit_code == 2, refused.output
    line = refused.output.strip()
    assert "\n" not in line and "field.zarr" in line and "denied" in line.lower(), line
    c = TestClient(create_app(Served(Source(url, store_options=opts))))
    answers = [c.get(p) for p in ("/", "/meta", "/static/map.js", "/tiles/0/0/0.png",
                                  "/point?lat=10&lon=10&zoom=0", "/tiles/9/0/0.png")]  # fmt: skip
    assert [a.status_code for a in answers] == [200, 200, 200, 200, 200, 200]
    meta = answers[1].json()
    assert meta["source"] == url and meta["variables"]["field"]["levels"] == ["0", "2x", "4x"]
    secrets = {os.environ["AWS_ACCESS_KEY_ID"], os.environ["AWS_SECRET_ACCESS_KEY"]}
    for a in answers:
        seen = a.content + repr(sorted(a.headers.items())).encode()
        assert not any(s.encode() in seen for s in secrets), a.url


def test_the_shown_location_drops_any_user_password_or_query():
    for given, shown in (
        ("s3://AKIA:sEcReT@bucket/data.zarr", "s3://bucket/data.zarr"),
        (
            "https://me:pw@host.example/data.zarr?X-Amz-Signature=abc",
            "https://host.example/data.zarr",
        ),
        ("/data/t2m.zarr/", "/data/t2m.zarr"),
        ("s3://bucket/champ é.zarr", "s3://bucket/champ é.zarr"),
    ):
        assert Source(given).name == shown
