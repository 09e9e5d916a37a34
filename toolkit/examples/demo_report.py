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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Any

import numpy as np

from toolkit.plan import Report


@dataclass(frozen=True)
class Picture:
    """One embedded image; `title` is its caption (printed once, under the image, never inside
    it), `alt` what it shows for readers who cannot see it; `level` names the pyramid level it
    shows, if it shows one."""

    title: str
    png: bytes
    level: str | None = None
    alt: str = "picture"


@dataclass(frozen=True)
class Section:
    """One job's part of the page: its plans' stage tables, its pictures, extra tables, and
    how to open what it wrote with xarray (`opens`: one Python expression per output)."""

    job: str
    summary: str
    reports: tuple[Report, ...] = ()
    pictures: tuple[Picture, ...] = ()
    tables: tuple[tuple[str, tuple[str, ...], tuple[tuple[Any, ...], ...]], ...] = ()
    opens: tuple[str, ...] = ()
    views: tuple[str, ...] = ()  # shell commands that show an output on a map
    stages: Mapping[str, str] = field(default_factory=dict)  # stage name -> what it does


@dataclass(frozen=True)
class Workdir:
    """Where the stores are, as the page names them; `kept` False: they were in a temporary
    folder removed at the end, and `path` is the placeholder of `--workdir DIR`."""

    path: str
    kept: bool = True


@dataclass(frozen=True)
class Dashboard:
    """The Dask dashboard's address (None: no Dask) and whether its cluster outlives the run
    (one the user named does; the demo's embedded one stops with it)."""

    link: str | None
    outlives: bool = False


@dataclass(frozen=True)
class Page:
    workdir: Workdir
    dashboard: Dashboard
    seconds: float
    sections: tuple[Section, ...] = field(default_factory=tuple)


def open_datatree(store: str | pathlib.Path) -> str:
    """How to open a pyramid (every level a node) with xarray."""
    return f'xr.open_datatree("{store}", engine="toolkit")'


def open_dataset(repo: str | pathlib.Path) -> str:
    """How to open a virtual (Icechunk) dataset with xarray."""
    return f'xr.open_dataset("{repo}", engine="toolkit")'


def serve_command(store: str | pathlib.Path, variable: str | None = None) -> str:
    """The command that shows an output on a web map (`toolkit serve`, docs/serve.md)."""
    import shlex

    flag = f" --variable {shlex.quote(variable)}" if variable else ""
    return f"toolkit serve {shlex.quote(str(store))}{flag}"


def shape_text(dims: Sequence[str], shape: Sequence[int]) -> str:
    """A grid's size as the page writes it everywhere: numpy's shape order, with the dims named,
    e.g. `720 x 1440 (lat x lon)` (720 rows of latitude, 1440 columns of longitude)."""
    return f"{' x '.join(map(str, shape))} ({' x '.join(dims)})"


MAP_SIZE = (7.2, 4.0)  # inches, at DPI: a map about 700 px wide, two to a row of the page
DPI = 100


def _png(fig: Any) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, bbox_inches="tight")
    return buf.getvalue()


def _figure(width: float, height: float) -> Any:
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout="constrained")


def _label(name: str, attrs: Any) -> str:
    """An axis or colour-bar label from CF metadata: `long_name` or `standard_name` or the
    name, then `[units]` when the attributes give units."""
    text = attrs.get("long_name") or attrs.get("standard_name") or name
    units = attrs.get("units")
    return f"{text} [{units}]" if units not in (None, "") else str(text)


def field_figure(da: Any, limits: tuple[float, float] | None = None) -> Any:
    """A 2-D field (an xarray DataArray, its last two dims y then x) as a matplotlib `Figure`:
    NaN transparent; the axes span the coordinates and are labelled with their names and units
    (e.g. `longitude [degrees_east]`); the colour bar carries the variable's name and CF `units`.
    `limits` are colour limits shared by pictures meant to be compared. No title: the page
    prints the caption under the image."""
    values = np.asarray(da.values, dtype="float64")
    ydim, xdim = da.dims[-2:]
    x, y = da[xdim], da[ydim]
    xs, ys = np.asarray(x.values, dtype="float64"), np.asarray(y.values, dtype="float64")
    fig = _figure(*MAP_SIZE)
    ax = fig.add_subplot()
    extent = (xs.min(), xs.max(), ys.min(), ys.max())
    origin = "upper" if ys.size > 1 and ys[0] > ys[-1] else "lower"
    lo, hi = limits if limits is not None else _limits(values)
    im = ax.imshow(
        values, extent=extent, origin=origin, aspect="auto", cmap="viridis", vmin=lo, vmax=hi
    )
    ax.set_xlabel(_label(str(xdim), x.attrs), fontsize=10)
    ax.set_ylabel(_label(str(ydim), y.attrs), fontsize=10)
    ax.tick_params(labelsize=9)
    bar = fig.colorbar(im, ax=ax, shrink=0.9)
    bar.set_label(_label(str(da.name or "value"), da.attrs), fontsize=10)
    bar.ax.tick_params(labelsize=9)
    return fig


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
        title = f"{name}: {variable}, {shape_text(da.dims, da.shape)}"
        png = _png(field_figure(da, limits))
        pictures.append(Picture(title, png, level=name, alt=f"pyramid map ({name})"))
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
        fields.append((when, first.isel(init_time=int(present[-1]))))
    limits = _limits(*(f.values for _, f in fields))
    pictures = []
    for when, newest in fields:
        init = np.datetime_as_string(newest["init_time"].values, unit="h")
        shape = shape_text(newest.dims, newest.shape)
        title = f"{variable}, init {init}, lead 0, {shape} ({when})"
        alt = f"map of {variable} {when.replace('the update', 'updating')}"
        pictures.append(Picture(title, _png(field_figure(newest, limits)), alt=alt))
    return tuple(pictures)


BLOB_CHART = "archive blobs by size"


def blob_figure(scopes: Sequence[dict[str, Any]]) -> Any:
    """Bytes per archive blob, one bar each, grouped by scope, as a matplotlib `Figure` (no
    title: the page prints the caption under the image). Bars are named as the tables name
    the blobs; by `scope/blob` only when several scopes could share an id."""
    one = len(scopes) == 1
    labels = [b["id"] if one else f"{s['scope']}/{b['id']}" for s in scopes for b in s["blobs"]]
    sizes = [b["bytes"] / 1024 for s in scopes for b in s["blobs"]]
    fig = _figure(6.5, 0.3 * max(len(labels), 3) + 0.8)
    ax = fig.add_subplot()
    ax.barh(range(len(labels)), sizes, color="#4c72b0")
    ax.set_yticks(range(len(labels)), labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("size [KiB]")
    ax.set_ylabel(f"blob of {scopes[0]['scope']}" if one else "scope/blob")
    return fig


def blob_chart(scopes: Sequence[dict[str, Any]]) -> Picture:
    """`blob_figure` as a picture of the page."""
    return Picture(BLOB_CHART, _png(blob_figure(scopes)), alt="bar chart of blob sizes")


_STYLE = """
body{font-family:system-ui,sans-serif;margin:2em;max-width:1500px;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.2em}
th,td{border:1px solid #ccc;padding:3px 8px;font-size:13px}
td.n{text-align:right}
.pics{display:flex;flex-wrap:wrap;gap:12px;align-items:flex-start}
figure{margin:0}figure img{max-width:100%}figcaption{font-size:12px;color:#555}
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


STAGE_COLUMNS = (
    ("stage", "one step of the plan; the next starts only once this one's gate passes"),
    ("tasks", "the stage's units of work (a tile, a shard, a file, a check)"),
    ("skipped", "tasks whose output was already there: a rerun resumes where it stopped"),
    ("written", "tasks that ran in this run"),
    ("seconds", "wall-clock time of the stage"),
    (
        "gate have/want",
        "after the stage, the objects its gate counted in the store (have) against the "
        "objects the plan must have produced (want); equal: complete, so the next stage "
        "builds on whole data; '-': the stage has no gate (a check reports its failures "
        "instead; the update commits file by file)",
    ),
    ("what it does", "the stage in one line"),
)


def _stage_table(report: Report, lines: Mapping[str, str]) -> str:
    rows = [
        (
            s.name,
            s.tasks,
            s.skipped,
            s.written,
            f"{s.seconds:.2f}",
            "-" if s.gate_want is None else f"{s.gate_have}/{s.gate_want}",
            lines.get(s.name, ""),
        )
        for s in report.stages
    ]
    caption = f"plan {report.plan} ({report.digest}, {report.executor}, {report.seconds:.2f} s)"
    return _table(caption, [c for c, _ in STAGE_COLUMNS], rows, plan=report.plan)


def _legend() -> str:
    """How to read the stage tables: each column in one line, said once for the page."""
    e = html.escape
    items = "".join(f"<li><b>{e(c)}</b>: {e(why)}</li>" for c, why in STAGE_COLUMNS)
    return f'<p class="legend">How to read the stage tables:</p><ul class="legend">{items}</ul>'


def _dashboard(d: Dashboard) -> str:
    """The dashboard's address, marked live only during the run unless its cluster outlives
    it: the report is read after the run, when the demo's own cluster is gone."""
    e = html.escape
    if d.link is None:
        return "none (run with --executor sync)"
    if not d.link.startswith("http"):
        return e(d.link)
    if d.outlives:
        return f'<a href="{e(d.link)}">{e(d.link)}</a> (the cluster you named: it outlives the run)'
    return (
        f"<code>{e(d.link)}</code> (live only during the run: the demo's own cluster stopped "
        "when it ended)"
    )


def _where(w: Workdir) -> str:
    e = html.escape
    if w.kept:
        return f"Stores under <code>{e(w.path)}</code>."
    return (
        "The stores were written to a temporary folder, removed when the demo ended; to keep "
        f"them and open them as below, run <code>toolkit demo --workdir {e(w.path)}</code> "
        f"(<code>{e(w.path)}</code> below is that folder)."
    )


def _picture(p: Picture) -> str:
    data = base64.b64encode(p.png).decode("ascii")
    level = f' data-level="{html.escape(p.level)}"' if p.level is not None else ""
    return (
        f'<figure><img{level} alt="{html.escape(p.alt)}" src="data:image/png;base64,{data}">'
        f"<figcaption>{html.escape(p.title)}</figcaption></figure>"
    )


def render(page: Page) -> str:
    """The whole page as one HTML string."""
    e = html.escape
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>toolkit demo</title>",
        f"<style>{_STYLE}</style></head><body><h1>toolkit demo</h1>",
        f"<p>{_where(page.workdir)} Dask dashboard: {_dashboard(page.dashboard)}. "
        f"Total {page.seconds:.1f} s.</p>",
    ]
    opens = [(s.job, o) for s in page.sections for o in s.opens]
    if opens:
        parts.append(
            '<p class="open">Open the outputs with xarray (<code>import xarray as xr</code>): '
            + "; ".join(f"{e(job)}: <code>{e(o)}</code>" for job, o in opens)
            + ".</p>"
        )
    views = [(s.job, v) for s in page.sections for v in s.views]
    if views:
        parts.append(
            '<p class="open">See them on a web map, each zoom read from its own level '
            "(docs/serve.md): "
            + "; ".join(f"{e(job)}: <code>{e(v)}</code>" for job, v in views)
            + ", then open the address it prints.</p>"
        )
    if any(s.reports for s in page.sections):
        parts.append(_legend())
    for section in page.sections:
        parts.append(f"<h2>{e(section.job)}</h2><p>{e(section.summary)}</p>")
        parts += [_stage_table(r, section.stages) for r in section.reports]
        parts += [_table(c, h, rows) for c, h, rows in section.tables]
        if section.pictures:
            parts.append('<div class="pics">' + "".join(map(_picture, section.pictures)) + "</div>")
    parts.append("</body></html>")
    return "\n".join(parts)


def write(page: Page, path: pathlib.Path) -> pathlib.Path:
    path.write_text(render(page), encoding="utf-8")
    return path


class _Figures(HTMLParser):
    """The page's pyramid-level pictures: (PNG bytes, caption), in page order."""

    def __init__(self) -> None:
        super().__init__()
        self.levels: list[tuple[bytes, str]] = []
        self._png: bytes | None = None
        self._caption: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "img" and a.get("data-level") is not None:
            self._png = base64.b64decode((a.get("src") or "").split(",", 1)[1])
        elif tag == "figcaption" and self._png is not None:
            self._caption = ""

    def handle_data(self, data: str) -> None:
        if self._caption is not None:
            self._caption += data

    def handle_endtag(self, tag: str) -> None:
        if tag == "figcaption" and self._png is not None and self._caption is not None:
            self.levels.append((self._png, self._caption))
            self._png = self._caption = None


def levels_picture(page: str) -> bytes:
    """The page's pyramid-level pictures side by side, each captioned as the page captions it,
    as one PNG: the README's picture (docs/img/demo-pyramid-levels.png), made from a report
    so the two never disagree. The pictures are placed pixel for pixel, not redrawn."""
    from matplotlib.figure import Figure
    from matplotlib.image import imread

    found = _Figures()
    found.feed(page)
    if not found.levels:
        raise ValueError("the page shows no pyramid level")
    images = [imread(io.BytesIO(png), format="png") for png, _ in found.levels]
    gap, band = 16, 30  # pixels between pictures; under them, for the captions
    width = sum(i.shape[1] for i in images) + gap * (len(images) - 1)
    height = max(i.shape[0] for i in images) + band
    fig = Figure(figsize=(width / DPI, height / DPI), dpi=DPI, facecolor="white")
    x = 0
    for image, (_, caption) in zip(images, found.levels, strict=True):
        fig.figimage(image, xo=x, yo=band + height - band - image.shape[0], origin="upper")
        fig.text((x + image.shape[1] / 2) / width, 8 / height, caption, ha="center", fontsize=11)
        x += image.shape[1] + gap
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    return buf.getvalue()


def main(argv: Sequence[str] | None = None) -> None:
    """`python -m toolkit.examples.demo_report REPORT.html OUT.png`: the README's picture."""
    import sys

    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2:
        raise SystemExit("usage: python -m toolkit.examples.demo_report REPORT.html OUT.png")
    page, out = (pathlib.Path(a) for a in args)
    out.write_bytes(levels_picture(page.read_text(encoding="utf-8")))


if __name__ == "__main__":
    main()
