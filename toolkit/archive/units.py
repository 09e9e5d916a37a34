"""Sizes and rates on the command line: "50GiB", "300MB/s", "1e9" (pure).

Parsed by `toolkit.options`, the one place every option's value is checked (NaN, infinities,
overflow refused there); named here for the archive's modules and the graphs."""

from __future__ import annotations

from toolkit.options import parse_rate, parse_size

__all__ = ["parse_rate", "parse_size"]
