"""The one rule for a key, prefix or scope a user names (pure).

Keys are taken literally, segment by segment: an object store never normalises `a/../b`, and
neither does the resolver's trie, so a `.` or `..` segment would be answered against the scope
it is written under, not the one it points at. Zarr forbids such node names (and empty ones),
so no key of a store can hold them: they are refused, never resolved. An empty key names
nothing. A leading `/` is dropped (keys are relative to the data root).
"""

from __future__ import annotations

__all__ = ["BadKey", "check_key", "check_pasted", "key_problem"]


class BadKey(ValueError):
    """A user-given key, prefix or scope that names no object of any store (a usage error)."""


def key_problem(key: str) -> str | None:
    """Why `key` (leading '/' already dropped) is refused, with the fix; None when it is fine."""
    if not key:
        return "is empty: name a key relative to the data root (store.zarr/var/c/0)"
    for segment in key.split("/"):
        if segment in (".", ".."):
            return (
                f"has a {segment!r} segment, which names no object (keys are taken "
                "literally, never normalised): write it without '.' or '..' segments"
            )
        if not segment:
            return "has an empty segment (a doubled or trailing '/'): drop the extra '/'"
    return None


def check_key(key: str, what: str = "key") -> str:
    """`key` with one leading '/' dropped; `BadKey` naming it (as `what`) if it is refused."""
    text = key[1:] if key.startswith("/") else key
    why = key_problem(text)
    if why is not None:
        raise BadKey(f"{what} {key!r} {why}")
    return text


def check_pasted(key: str) -> str:
    """`key` unchanged once its path passes the rule: a URL's after `scheme://`, an absolute
    path's after its '/', else the key itself; `BadKey` naming the whole key otherwise."""
    path = key.split("://", 1)[1] if "://" in key else key
    why = key_problem(path[1:] if path.startswith("/") else path)
    if why is not None:
        raise BadKey(f"key {key!r} {why}")
    return key
