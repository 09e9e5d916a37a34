"""Sizes and rates on the command line: "50GiB", "300MB/s", "1e9" (pure)."""

from __future__ import annotations

import re

__all__ = ["parse_rate", "parse_size"]

_UNITS = {
    "": 1,
    "b": 1,
    "k": 10**3,
    "kb": 10**3,
    "m": 10**6,
    "mb": 10**6,
    "g": 10**9,
    "gb": 10**9,
    "t": 10**12,
    "tb": 10**12,
    "p": 10**15,
    "pb": 10**15,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
    "pib": 2**50,
}
_SIZE = re.compile(r"\s*([0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*([a-z]*)\s*", re.IGNORECASE)


def parse_size(text: str | int) -> int:
    """Bytes from "50GiB" / "2TB" / "1e9" / 123."""
    if isinstance(text, int):
        return text
    m = _SIZE.fullmatch(text)
    unit = m.group(2).lower() if m else None
    if m is None or unit not in _UNITS:
        raise ValueError(
            f"cannot read size {text!r}: use a number with B, KB, MB, GB, TB, KiB, MiB, GiB, TiB"
        )
    return int(float(m.group(1)) * _UNITS[unit])


def parse_rate(text: str) -> float:
    """Bytes per second from "300MB/s" (the "/s" is optional)."""
    body = text.strip()
    body = body[:-2] if body.lower().endswith("/s") else body
    rate = parse_size(body)
    if rate <= 0:
        raise ValueError(f"rate {text!r} must be positive")
    return float(rate)
