"""`report.html` of `toolkit demo`: what each job did, as tables and pictures, in one file.

The page is self-contained (images are embedded PNG data URIs) so it can be mailed, attached
to a ticket or opened from a cluster's shared disk. Pictures are drawn with matplotlib's
object API (`Figure`), never pyplot: no global figure state, no display backend needed.
"""

from __future__ import annotations

import base64
import html
import io
import pathlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from toolkit.plan import Report


@dataclass(frozen=True)
class Picture:
    """One embedded image; `level` names the pyramid level it shows, if it shows one."""

    title: str
    png: bytes
    level: str | None = None


@dataclass(frozen=True)
class Section:
    """One job's part of the page: its plans' stage tables, its pictures, extra tables."""

    job: str
    summary: str
    reports: tuple[Report, ...] = ()
    pictures: tuple[Picture, ...] = ()
    tables: tuple[tuple[str, tuple[str, ...], tuple[tuple[Any, ...], ...]], ...] = ()


@dataclass(frozen=True)
class Page:
    workdir: str
    dashboard: str | None
    seconds: float
    sections: tuple[Section, ...] = field(default_factory=tuple)


def _png(fig: Any) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    return buf.getvalue()


def _figure(width: float, height: float) -> Any:
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout="constrained")


def _field_image(
    title: str, data: Any, x: Any, y: Any, label: str, limits: tuple[float, float]
) -> bytes:
    """A lat/lon field as an image, NaN transparent; axis extent from the coordinates, colour
    limits shared by the pictures meant to be compared."""
    fig = _figure(4.2, 2.5)
    ax = fig.add_subplot()
    values = np.asarray(data, dtype="float64")
    xs, ys = np.asarray(x, dtype="float64"), np.asarray(y, dtype="float64")
    extent = (xs.min(), xs.max(), ys.min(), ys.max())
    origin = "upper" if ys.size > 1 and ys[0] > ys[-1] else "lower"
    im = ax.imshow(
        values,
        extent=extent,
        origin=origin,
        aspect="auto",
        cmap="viridis",
        vmin=limits[0],
        vmax=limits[1],
    )
    fig.colorbar(im, ax=ax, label=label, shrink=0.85)
    ax.set_title(title, fontsize=9)
    return _png(fig)


def pyramid_pictures(path: str | pathlib.Path, variable: str) -> tuple[Picture, ...]:
    """Every level of the pyramid at `path`, in the order its multiscales layout lists them."""
    import xarray as xr
    import zarr

    root = zarr.open_group(str(path), mode="r")
    layout = dict(root.attrs).get("multiscales", {}).get("layout", [])
    levels = []
    for entry in layout:
        asset = entry["asset"]
        group = None if asset == "." else asset
        levels.append(("level 0" if group is None else asset, xr.open_zarr(str(path), group=group)))
    limits = _limits(levels[0][1][variable].values) if levels else (0.0, 1.0)
    pictures = []
    for name, ds in levels:
        da = ds[variable]
        ydim, xdim = da.dims[-2:]
        title = f"{name}: {da.shape[-1]}x{da.shape[-2]}"
        png = _field_image(title, da.values, ds[xdim].values, ds[ydim].values, variable, limits)
        pictures.append(Picture(title, png, level=name))
    return tuple(pictures)


def _limits(*arrays: Any) -> tuple[float, float]:
    values = np.concatenate([np.asarray(a, dtype="float64").ravel() for a in arrays])
    finite = values[np.isfinite(values)]
    return (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)


def virtual_maps(
    repo: str | pathlib.Path, variable: str, before_snapshot: str
) -> tuple[Picture, ...]:
    """The newest init's first lead of `variable`, decoded from GRIB, before and after."""
    from toolkit.virtual import open_dataset

    fields = []
    for when, snapshot in (("before the update", before_snapshot), ("after the update", None)):
        ds = open_dataset(str(repo), snapshot=snapshot)
        first = ds[variable].isel(lead_time=0).load()  # one decode of every init's lead 0
        present = np.flatnonzero(np.isfinite(first).any(dim=first.dims[-2:]).values)
        if not present.size:
            raise ValueError(f"{repo}: {variable} has no decoded field {when}")
        fields.append((when, first.isel(init_time=int(present[-1])), ds))
    limits = _limits(*(f.values for _, f, _ in fields))
    pictures = []
    for when, newest, ds in fields:
        init = np.datetime_as_string(newest["init_time"].values, unit="h")
        ydim, xdim = newest.dims[-2:]
        title = f"{variable}, init {init}, lead 0 ({when})"
        png = _field_image(title, newest.values, ds[xdim].values, ds[ydim].values, variable, limits)
        pictures.append(Picture(title, png))
    return tuple(pictures)


def blob_chart(scopes: Sequence[dict[str, Any]]) -> Picture:
    """Bytes per archive blob, one bar each, grouped by scope."""
    labels = [f"{s['scope']}/{b['id']}" for s in scopes for b in s["blobs"]]
    sizes = [b["bytes"] / 1024 for s in scopes for b in s["blobs"]]
    fig = _figure(6.5, 0.3 * max(len(labels), 3) + 0.8)
    ax = fig.add_subplot()
    ax.barh(range(len(labels)), sizes, color="#4c72b0")
    ax.set_yticks(range(len(labels)), labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("KiB")
    ax.set_title("archive blobs by size", fontsize=9)
    return Picture("archive blobs by size", _png(fig))


_STYLE = """
body{font-family:system-ui,sans-serif;margin:2em;max-width:1400px;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.2em}
th,td{border:1px solid #ccc;padding:3px 8px;font-size:13px}
td.n{text-align:right}
.pics{display:flex;flex-wrap:wrap;gap:12px;align-items:flex-start}
figure{margin:0}figcaption{font-size:12px;color:#555}
code{background:#f4f4f4;padding:1px 4px}
"""


def _table(
    caption: str, head: Sequence[str], rows: Sequence[Sequence[Any]], plan: str | None = None
) -> str:
    """A table; `plan` tags a plan's stage table (`data-plan`) for readers of the page."""
    e = html.escape
    cells = "".join(f"<th>{e(h)}</th>" for h in head)
    body = "".join(
        "<tr>"
        + "".join(
            f'<td class="n">{e(str(v))}</td>'
            if isinstance(v, int | float)
            else f"<td>{e(str(v))}</td>"
            for v in row
        )
        + "</tr>"
        for row in rows
    )
    tag = f' data-plan="{e(plan)}"' if plan is not None else ""
    return f"<table{tag}><caption>{e(caption)}</caption><tr>{cells}</tr>{body}</table>"


def _stage_table(report: Report) -> str:
    rows = [
        (
            s.name,
            s.tasks,
            s.skipped,
            s.written,
            f"{s.seconds:.2f}",
            "-" if s.gate_want is None else f"{s.gate_have}/{s.gate_want}",
        )
        for s in report.stages
    ]
    caption = f"plan {report.plan} ({report.digest}, {report.executor}, {report.seconds:.2f} s)"
    head = ("stage", "tasks", "skipped", "written", "seconds", "gate have/want")
    return _table(caption, head, rows, plan=report.plan)


def _picture(p: Picture) -> str:
    data = base64.b64encode(p.png).decode("ascii")
    level = f' data-level="{html.escape(p.level)}"' if p.level is not None else ""
    return (
        f'<figure><img{level} alt="{html.escape(p.title)}" src="data:image/png;base64,{data}">'
        f"<figcaption>{html.escape(p.title)}</figcaption></figure>"
    )


def render(page: Page) -> str:
    """The whole page as one HTML string."""
    e = html.escape
    dash = (
        f'<a href="{e(page.dashboard)}">{e(page.dashboard)}</a>'
        if page.dashboard and page.dashboard.startswith("http")
        else e(page.dashboard or "none (run with --executor sync)")
    )
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>toolkit demo</title>",
        f"<style>{_STYLE}</style></head><body><h1>toolkit demo</h1>",
        f"<p>Stores under <code>{e(page.workdir)}</code>. Dask dashboard: {dash}. "
        f"Total {page.seconds:.1f} s.</p>",
    ]
    for section in page.sections:
        parts.append(f"<h2>{e(section.job)}</h2><p>{e(section.summary)}</p>")
        parts += [_stage_table(r) for r in section.reports]
        parts += [_table(c, h, rows) for c, h, rows in section.tables]
        if section.pictures:
            parts.append('<div class="pics">' + "".join(map(_picture, section.pictures)) + "</div>")
    parts.append("</body></html>")
    return "\n".join(parts)


def write(page: Page, path: pathlib.Path) -> pathlib.Path:
    path.write_text(render(page), encoding="utf-8")
    return path
