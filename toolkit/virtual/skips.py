"""Files an update skipped, fire after fire: after `give_up_after` fires in a row, missing for good.

A file the source published but that cannot be read (a stale index, a bad header) is skipped
with its reason and retried by the next fire. Retried forever, it would hide in every fire's
log; so each fire records its skips in one object in the repo's store (written by the lease
holder only), and a file skipped in N distinct fires in a row is given up: no longer fetched,
named by every fire as missing for good, failing validation. A given-up file is retried when
the source object changes (its size or modification time differ from the skipped one's) --
a re-upload is the fix -- and an ingest clears it.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from toolkit import storage

__all__ = ["SKIPS_KEY", "Strike", "given_up", "load", "retried", "save", "tally"]

SKIPS_KEY = "toolkit-update.skipped.json"


@dataclass(frozen=True)
class Strike:
    """One file's consecutive skips: the fires (labels) that skipped it and the last reason."""

    url: str
    reason: str
    fires: tuple[str, ...]
    size: int | None = None
    modified: str | None = None

    def line(self) -> str:
        return (
            f"{self.url}: missing for good, skipped in {len(self.fires)} fires in a row "
            f"({self.fires[0]} .. {self.fires[-1]}): {self.reason}; re-upload the source file "
            "(the next fire retries a changed object)"
        )


def tally(
    before: Mapping[str, Strike],
    fire: str,
    skipped: Sequence[Any],
    ingested: Collection[str],
) -> dict[str, Strike]:
    """The strikes after `fire`: its skips add the fire (once, however many processes ran
    it), its ingests clear theirs, every other file's strikes are kept as they were."""
    out = {url: s for url, s in before.items() if url not in set(ingested)}
    for s in skipped:
        old = out.get(s.url)
        fires = old.fires if old else ()
        if fire not in fires:
            fires = (*fires, fire)
        out[s.url] = Strike(
            s.url,
            s.reason,
            fires,
            getattr(s, "size", None),
            None if getattr(s, "modified", None) is None else str(s.modified),
        )
    return out


def given_up(strikes: Mapping[str, Strike], after: int) -> dict[str, Strike]:
    """The files skipped in at least `after` fires in a row (0: never give up)."""
    if after < 0:
        raise ValueError(f"give_up_after must be >= 0 (0: never give up), not {after}")
    return {u: s for u, s in strikes.items() if after and len(s.fires) >= after}


def retried(strike: Strike, size: int | None, modified: Any) -> bool:
    """The source object changed since it was skipped: try it again."""
    return (size, None if modified is None else str(modified)) != (strike.size, strike.modified)


def load(store: storage.Store) -> dict[str, Strike]:
    try:
        doc = json.loads(bytes(storage.get(store, SKIPS_KEY).data))
    except storage.NotFound:
        return {}
    except ValueError as err:
        raise ValueError(
            f"{store.url}/{SKIPS_KEY}: not the JSON an update writes ({err}); delete it to "
            "start the skip counts afresh"
        ) from None
    return {d["url"]: Strike(**{**d, "fires": tuple(d["fires"])}) for d in doc.get("files", [])}


def save(store: storage.Store, strikes: Mapping[str, Strike]) -> None:
    if not strikes:
        if storage.exists(store, SKIPS_KEY):
            storage.delete(store, SKIPS_KEY)
        return
    doc = {"files": [asdict(s) for _, s in sorted(strikes.items())]}
    storage.put(store, SKIPS_KEY, json.dumps(doc, indent=1).encode())
