"""What a new manifest changes against the stored one (pure), in words a reviewer can check."""

from __future__ import annotations

from dataclasses import dataclass

from toolkit.archive.model import DEFAULT_HOT_ALWAYS, Blob, Manifest, Pin, Retired

__all__ = ["Diff", "diff"]


def _size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"


@dataclass(frozen=True)
class Diff:
    scope: str
    epoch_from: int | None
    epoch_to: int
    added: tuple[Blob, ...] = ()
    removed: tuple[Blob, ...] = ()
    changed: tuple[tuple[Blob, Blob], ...] = ()
    hot_added: tuple[str, ...] = ()
    hot_removed: tuple[str, ...] = ()
    pins_added: tuple[Pin, ...] = ()
    pins_removed: tuple[Pin, ...] = ()
    hot_always_added: tuple[str, ...] = ()

    @property
    def empty(self) -> bool:
        return not (
            self.added
            or self.removed
            or self.changed
            or self.hot_added
            or self.hot_removed
            or self.pins_added
            or self.pins_removed
            or self.hot_always_added
        )

    retired: tuple[Retired, ...] = ()

    @property
    def orphaned(self) -> tuple[str, ...]:
        """Blob ids whose tape content no longer matches a live blob of the new manifest (a
        re-cut retires them: their ids stay in the manifest and are never given again)."""
        return tuple(sorted([b.id for b in self.removed] + [old.id for old, _ in self.changed]))

    def describe(self) -> str:
        start = "new manifest" if self.epoch_from is None else f"epoch {self.epoch_from}"
        if self.empty and self.epoch_from == self.epoch_to:
            return f"{self.scope}: unchanged at epoch {self.epoch_to}"
        lines = [f"{self.scope}: {start} -> epoch {self.epoch_to}"]
        for b in self.added:
            how = f", bucketed every {b.bucket.width} first-index chunks" if b.bucket else ""
            lines.append(
                f"  + blob {b.id}: {len(b.prefixes)} prefix(es), {_size(b.bytes)}, "
                f"{b.objects} objects{how}"
            )
        states = {r.blob.id: r.states for r in self.retired}
        for b in self.removed:
            held = ", ".join(f"{k} {v}" for k, v in states.get(b.id, {}).items())
            lines.append(
                f"  - blob {b.ids()} retired: re-cut into new ids; the id stays taken"
                + (f" (tier: {held})" if held else "")
            )
        for old, new in self.changed:
            lines.append(
                f"  ~ blob {old.id} re-cut: {list(old.prefixes)} -> {list(new.prefixes)} (orphaned)"
            )
        lines += [f"  + hot {p}" for p in self.hot_added]
        lines += [f"  - hot {p}" for p in self.hot_removed]
        lines += [f"  + pin {p.prefix} by {p.who}: {p.why}" for p in self.pins_added]
        lines += [f"  - pin {p.prefix} by {p.who}" for p in self.pins_removed]
        lines += [f"  + hot_always {name}" for name in self.hot_always_added]
        if self.empty:
            lines.append("  (no change in cuts)")
        return "\n".join(lines)


def _same(a: Blob, b: Blob) -> bool:
    return a.prefixes == b.prefixes and a.bucket == b.bucket


def diff(previous: Manifest | None, new: Manifest) -> Diff:
    old_blobs = {b.id: b for b in previous.blobs} if previous else {}
    new_blobs = {b.id: b for b in new.blobs}
    old_hot = set(previous.hot) if previous else set()
    old_pins = {p.prefix: p for p in previous.pins} if previous else {}
    old_retired = {r.blob.id for r in previous.retired} if previous else set()
    new_pins = {p.prefix: p for p in new.pins}
    return Diff(
        scope=new.scope,
        epoch_from=previous.epoch if previous else None,
        epoch_to=new.epoch,
        added=tuple(b for i, b in new_blobs.items() if i not in old_blobs),
        removed=tuple(b for i, b in old_blobs.items() if i not in new_blobs),
        changed=tuple(
            (old_blobs[i], b)
            for i, b in new_blobs.items()
            if i in old_blobs and not _same(old_blobs[i], b)
        ),
        hot_added=tuple(p for p in new.hot if p not in old_hot),
        hot_removed=tuple(sorted(old_hot - set(new.hot))),
        pins_added=tuple(p for k, p in new_pins.items() if old_pins.get(k) != p),
        pins_removed=tuple(p for k, p in old_pins.items() if k not in new_pins),
        retired=tuple(r for r in new.retired if r.blob.id not in old_retired),
        hot_always_added=tuple(
            n
            for n in new.hot_always
            if n not in (previous.hot_always if previous else DEFAULT_HOT_ALWAYS)
        ),
    )
