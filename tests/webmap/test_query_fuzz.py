"""The web map's query parameters, fed values nobody listed (NaN, infinities, huge and
negative numbers, odd units, unicode, empty): every answer is a result or a 4xx with one line
of text naming the parameter, never a 500. Derandomized and without a database."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from tests.test_cli_fuzz import NUMBERS, TEXT, TIMES, UNITS
from toolkit.webmap.app import Served, create_app
from toolkit.webmap.view import Source

EXAMPLES = 200
PATHS = ["/meta", "/point", "/tiles/{z}/{x}/{y}.png", "/tiles/WorldCRS84Quad/{z}/{x}/{y}.png"]
KEYS = ["variable", "v", "lat", "lon", "zoom", "time", "lat", "lon", "zoom"]
VALUE = st.one_of(NUMBERS, UNITS, TIMES, TEXT, st.just(""), st.sampled_from(["temperature", "0"]))


@pytest.fixture(scope="module")
def client(cf_pyramid: Any) -> TestClient:
    return TestClient(create_app(Served(Source(str(cf_pyramid)))), raise_server_exceptions=False)


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))  # fmt: skip
@given(
    path=st.sampled_from(PATHS),
    zxy=st.tuples(*[st.integers(0, 2**40)] * 3),
    query=st.dictionaries(st.sampled_from(KEYS) | TEXT, VALUE, max_size=4),
)
def test_any_query_is_a_result_or_a_one_line_4xx(
    client: TestClient, path: str, zxy: tuple[int, int, int], query: dict[str, str]
) -> None:
    z, x, y = zxy
    res = client.get(path.format(z=z % 40, x=x, y=y), params=query)
    assert res.status_code < 500, (path, zxy, query, res.text)
    if res.status_code >= 400:
        assert res.text and len(res.text.splitlines()) == 1, (path, query, res.text)


@pytest.mark.parametrize(
    ("query", "says"),
    [
        ({"lat": "10", "lon": "nan"}, "/point lon=: want a longitude in degrees from -360 to 360"),
        ({"lat": "10", "lon": "inf"}, "/point lon=: want a longitude"),
        ({"lat": "nan", "lon": "1"}, "/point lat=: want a latitude in degrees from -90 to 90"),
        ({"lat": "1", "lon": "1", "zoom": "nan"}, "/point zoom=: want a zoom level from 0 to 30"),
        ({"lat": "1", "lon": "1", "zoom": "1e400"}, "/point zoom=: want a zoom level"),
        ({"lon": "1"}, "/point wants lat=, a latitude in degrees"),
    ],
)
def test_a_bad_point_parameter_is_a_400_naming_it(
    client: TestClient, query: dict[str, str], says: str
) -> None:
    res = client.get("/point", params=query)
    assert res.status_code == 400 and res.text.startswith(says), res.text


def test_a_range_that_is_not_finite_is_refused_before_serving(cf_pyramid: Any) -> None:
    from toolkit.options import BadValue

    with pytest.raises(BadValue, match="two finite numbers"):
        Served(Source(str(cf_pyramid)), value_range=(0.0, float("inf")))
