"""Decoding through gribberish's zarr codec: the real files, ecCodes agreement, missing codec."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from toolkit.virtual.grib.decode import codec_config, decode_direct, decode_via_codec, grid_shape
from toolkit.virtual.grib.message import scan_messages

DATA = Path(__file__).resolve().parents[2] / "data"  # tests/data: real files, with licences
GRIBS = sorted((DATA / "grib").glob("*.grib2"))


def _messages() -> list[tuple[str, int, bytes]]:
    out = []
    for path in GRIBS:
        data = path.read_bytes()
        out += [(path.name, s.number, data[s.offset : s.end]) for s in scan_messages(data)]
    return out


MESSAGES = _messages()


@pytest.mark.parametrize(
    ("name", "number", "message"), MESSAGES, ids=[f"{n}#{i}" for n, i, _ in MESSAGES]
)
def test_codec_path_equals_direct_and_ecCodes(name: str, number: int, message: bytes) -> None:
    eccodes = pytest.importorskip("eccodes")
    direct = decode_direct(message)
    via_codec = decode_via_codec(message, "field")
    np.testing.assert_array_equal(via_codec, direct)  # NaN == NaN here

    h = eccodes.codes_new_from_message(message)
    try:
        ec = eccodes.codes_get_values(h).reshape(direct.shape)
        missing = eccodes.codes_get(h, "missingValue")
        e = eccodes.codes_get(h, "binaryScaleFactor")
        d = eccodes.codes_get(h, "decimalScaleFactor")
    finally:
        eccodes.codes_release(h)
    # bitmap or complex-packing missing values: ecCodes' missingValue exactly where gribberish has NaN
    ec_nan = ec == missing
    np.testing.assert_array_equal(np.isnan(direct), ec_nan)
    if name.startswith(("gfswave", "gfs.t12z")):
        assert ec_nan.any(), "these messages carry missing points"
    valid = ~np.isnan(direct)
    precision = 2.0**e / 10.0**d
    np.testing.assert_allclose(direct[valid], ec[valid], rtol=1e-6, atol=precision)


def test_bitmap_message_has_nans_in_float32_too() -> None:
    path = DATA / "grib" / "gfs.t12z.pgrb2.0p25.f023-PV-TMP-missing.grib2"
    values = decode_via_codec(path.read_bytes(), "tmp", dtype="float32")
    assert values.dtype == np.float32 and values.shape == (721, 1440)
    assert 0 < np.isnan(values).sum() < values.size


def test_codec_config_always_names_var() -> None:
    assert codec_config("t2m") == {"name": "gribberish", "configuration": {"var": "t2m"}}
    assert codec_config("t", north_up=True)["configuration"] == {"var": "t", "north_up": True}
    with pytest.raises(ValueError, match="needs var"):
        codec_config("")


def _write_virtual_like_array(root: Path) -> bytes:
    import zarr

    from toolkit.virtual.grib.decode import codec

    data = (DATA / "grib" / "gfswave.t18z.atlocn.0p16.f001.grib2").read_bytes()
    message = data[:41723]
    zarr.create_array(
        root,
        shape=grid_shape(message),
        chunks=grid_shape(message),
        dtype="float32",
        serializer=codec("wind"),
        compressors=None,
        fill_value=float("nan"),
    )
    (root / "c" / "0").mkdir(parents=True)
    (root / "c" / "0" / "0").write_bytes(message)
    return message


def test_reader_needs_only_gribberish(tmp_path: Path) -> None:
    message = _write_virtual_like_array(tmp_path / "a")
    meta = json.loads((tmp_path / "a" / "zarr.json").read_text())
    assert meta["codecs"] == [{"name": "gribberish", "configuration": {"var": "wind"}}]
    script = f"""
        import sys, numpy as np, zarr
        assert not any(m.startswith("toolkit") for m in sys.modules)
        a = zarr.open_array({str(tmp_path / "a")!r}, mode="r")
        np.save(sys.stdout.buffer, a[...])
    """
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)], capture_output=True, check=True
    )
    import io

    values = np.load(io.BytesIO(out.stdout))
    np.testing.assert_array_equal(values, decode_direct(message).astype(np.float32))


_HIDE = """
import importlib.metadata as md, sys
_orig = md.entry_points
md.entry_points = lambda **kw: md.EntryPoints([e for e in _orig(**kw) if not e.value.startswith("gribberish")])
class _NoGribberish:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "gribberish":
            raise ModuleNotFoundError("No module named 'gribberish'")
sys.meta_path.insert(0, _NoGribberish())
"""


def test_what_a_reader_without_gribberish_sees(tmp_path: Path) -> None:
    _write_virtual_like_array(tmp_path / "a")
    script = _HIDE + textwrap.dedent(f"""
        import zarr
        try:
            zarr.open_array({str(tmp_path / "a")!r}, mode="r")
        except Exception as err:
            print("zarr:", type(err).__name__, err)
        from toolkit.virtual.grib.decode import require_codec
        try:
            require_codec()
        except Exception as err:
            print("toolkit:", type(err).__name__, err)
    """)
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    ).stdout
    zarr_line, toolkit_line = out.strip().splitlines()
    # zarr itself refuses to open the array and names the package that provides the codec
    assert zarr_line.startswith("zarr: UnknownCodecError") and "gribberish" in zarr_line
    # toolkit's early check says the same, with the install command
    assert toolkit_line.startswith("toolkit: CodecUnavailableError")
    assert "pip install 'gribberish>=1.9'" in toolkit_line
