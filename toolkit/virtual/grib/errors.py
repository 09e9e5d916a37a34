"""Errors for GRIB sources: each names the file (URL) and the reason, so a discarded file is
explained in one line of a log or a CLI message."""

from __future__ import annotations


class GribSourceError(Exception):
    """A source file (or its index) cannot be used; `url` names it, `reason` says why."""

    kind = "unusable GRIB source"

    def __init__(self, url: str, reason: str) -> None:
        self.url = url
        self.reason = reason
        super().__init__(f"{self.kind}: {url}: {reason}")


class InvalidIndexError(GribSourceError):
    """The .idx text is malformed or inconsistent (bad line, non-increasing offsets, ...)."""

    kind = "invalid index"


class StaleIndexError(GribSourceError):
    """The index does not describe the data file as it is now (e.g. re-uploaded since)."""

    kind = "stale index"


class InvalidMessageError(GribSourceError):
    """Bytes that should start a GRIB2 message do not (bad magic, edition, length)."""

    kind = "invalid GRIB message"


class TruncatedMessageError(GribSourceError):
    """A message's own header says it runs past the end of the file."""

    kind = "truncated GRIB message"


class SubMessageError(GribSourceError):
    """A field shares its GRIB message with a sibling and cannot be referenced on its own."""

    kind = "sub-message field"


class MissingRecordError(GribSourceError):
    """The index lacks a variable the file is expected to carry."""

    kind = "missing record"


class CodecUnavailableError(RuntimeError):
    """gribberish (the zarr codec that decodes GRIB chunks) is not installed for this reader."""


class MissingDataFileError(GribSourceError):
    """An index was published but the data file it describes is not there (yet)."""

    kind = "missing data file"
