"""Decoding GRIB2 chunks through gribberish's zarr v3 codec.

A virtual array's serializer is ``{"name": "gribberish", "configuration": {"var": ...}}``. zarr
finds the codec through gribberish's ``zarr.codecs`` entry point, so a reader needs gribberish
installed and nothing from toolkit. ``var`` is always set: without it gribberish writes codec
metadata it cannot read back, which breaks opening the whole group.

`decode_via_codec` runs a message through exactly that reader path (a one-chunk zarr array
whose chunk is the message bytes), so tests and validation see what a reader sees.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from toolkit.virtual.grib.errors import CodecUnavailableError
from toolkit.virtual.grib.message import split_fields

CODEC_NAME = "gribberish"
INSTALL_HINT = "install it with `pip install 'gribberish>=1.9'` (Python >= 3.12)"


def codec_config(
    var: str, *, adjust_longitude_range: bool = False, north_up: bool = False
) -> dict[str, Any]:
    """The zarr v3 serializer entry for a variable (always with `var`)."""
    if not var:
        raise ValueError(
            "the gribberish codec needs var: with var=None its metadata cannot be read back"
        )
    config: dict[str, Any] = {"var": var}
    if adjust_longitude_range:
        config["adjust_longitude_range"] = True
    if north_up:
        config["north_up"] = True
    return {"name": CODEC_NAME, "configuration": config}


def codec(var: str, *, adjust_longitude_range: bool = False, north_up: bool = False) -> Any:
    """A GribberishCodec instance for `var` (the serializer to pass to zarr.create_array)."""
    cls = codec_class()
    return cls.from_dict(
        codec_config(var, adjust_longitude_range=adjust_longitude_range, north_up=north_up)
    )


def codec_class() -> type:
    """The codec class zarr resolves for "gribberish"; CodecUnavailableError if it cannot."""
    from zarr.registry import get_codec_class

    try:
        return get_codec_class(CODEC_NAME)
    except Exception as err:  # zarr: UnknownCodecError; a broken install: ImportError
        raise CodecUnavailableError(
            f"zarr cannot load the '{CODEC_NAME}' codec that decodes GRIB chunks ({err}); {INSTALL_HINT}"
        ) from err


def require_codec() -> None:
    """Fail early, with the fix, when this process cannot decode virtual GRIB chunks."""
    codec_class()


def grid_shape(message: bytes) -> tuple[int, ...]:
    """The (ny, nx) grid of a message, from its own metadata."""
    import gribberish

    return tuple(gribberish.parse_grib_message_metadata(message, 0).grid_shape)


def decode_direct(message: bytes, field: int = 1) -> np.ndarray:
    """gribberish's own decode of one field (1-based) of a message, shaped to its grid."""
    import gribberish

    data = message if field == 1 else split_fields(message)[field - 1]
    values = gribberish.parse_grib_array(data, 0)
    return values.reshape(grid_shape(data))


def decode_via_codec(
    message: bytes, var: str, dtype: str = "float64", shape: tuple[int, ...] | None = None
) -> np.ndarray:
    """Decode `message` the way a reader of a virtual array does: zarr + the gribberish codec."""
    import zarr
    from zarr.core.buffer import cpu
    from zarr.storage import MemoryStore

    shape = shape or grid_shape(message)
    chunks: dict[str, Any] = {}
    store = MemoryStore(chunks)
    array = zarr.create_array(
        store,
        shape=shape,
        chunks=shape,
        dtype=dtype,
        serializer=codec(var),
        compressors=None,
        fill_value=float("nan"),
    )
    chunks["c/" + "/".join("0" for _ in shape)] = cpu.Buffer.from_bytes(message)
    return np.asarray(array[...])
