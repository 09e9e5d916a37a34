"""`toolkit demo`'s report.html says what the demo did, truly: the demo runs once (sync) for
this module and its page is read as a reader sees it; the pictures' figures are checked where
they are built, on small arrays."""

from __future__ import annotations

import html
import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xarray as xr

from toolkit.examples import demo_report


class _Page(HTMLParser):
    """Sections' summaries by job, tables by caption (rows of cells), figure captions, images'
    attributes, and all the text."""

    def __init__(self) -> None:
        super().__init__()
        self.summaries: dict[str, str] = {}
        self.tables: dict[str, list[list[str]]] = {}
        self.figcaptions: list[str] = []
        self.images: list[dict[str, str | None]] = []
        self.text = ""
        self.pieces: list[str] = []  # each element's text: a heading, a paragraph, a cell...
        self._job: str | None = None
        self._in: str | None = None  # the element whose text is being gathered
        self._buf = ""
        self._table: list[list[str]] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "img":
            self.images.append(dict(attrs))
        elif tag == "table":
            self._table = []
        elif tag == "tr" and self._table is not None:
            self._table.append([])
        if tag in ("h2", "p", "caption", "td", "figcaption", "li"):
            self._in, self._buf = tag, ""

    def handle_endtag(self, tag: str) -> None:
        if tag != self._in:
            if tag == "table":
                self._table = None
            elif tag == "tr" and self._table and not self._table[-1]:
                self._table.pop()  # the header row: no cells
            return
        text, self._in = self._buf, None
        self.pieces.append(text)
        if tag == "h2":
            self._job = text
        elif tag == "p" and self._job is not None and self._job not in self.summaries:
            self.summaries[self._job] = text
        elif tag == "caption" and self._table is not None:
            self.tables[text] = self._table
        elif tag == "td" and self._table is not None:
            self._table[-1].append(text)
        elif tag == "figcaption":
            self.figcaptions.append(text)

    def handle_data(self, data: str) -> None:
        self.text += data
        if self._in is not None:
            self._buf += data


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, _Page]:
    """The demo, run once in this process with the sync executor: (workdir, html, page)."""
    from toolkit.examples.demo import run_demo

    root = tmp_path_factory.mktemp("demo")
    result = run_demo(root, executor="sync", say=lambda _: None)
    source = result.html.read_text(encoding="utf-8")
    page = _Page()
    page.feed(source)
    return root, source, page


def _trie(root: Path) -> Any:
    from toolkit import storage
    from toolkit.archive.manifests import ManifestStore
    from toolkit.archive.resolve import Trie

    return Trie(ManifestStore(storage.open_store(str(root / "manifests"))).load_all())


# 1 ------------------------------------------------------------------- keys resolved


def test_every_key_resolved_names_the_blob_that_holds_it(demo: tuple[Path, str, _Page]) -> None:
    root, _, page = demo
    trie = _trie(root)
    rows = page.tables["keys resolved"]
    assert rows and all(len(r) == 3 for r in rows)
    for key, scope, blob in rows:
        answer = trie.resolve(key)
        assert blob and answer.kind == "blob" and blob == answer.blob, (key, blob, answer)
        assert scope == answer.scope
        # the manifest's blob (a bucketed one answers with its bucket, `<id>_<n>`) covers the key
        manifest = trie.manifests[scope]
        held = [b for b in manifest.blobs if blob == b.id or blob.startswith(b.id + "_")]
        assert held and any(key.startswith(p) for b in held for p in b.prefixes), (key, blob)
    blobs = {b.id for m in trie.manifests.values() for b in m.blobs}
    shown = {b for _, _, b in rows}
    assert all(any(s == b or s.startswith(b + "_") for s in shown) for b in blobs)
    others = page.tables["keys in no blob"]
    assert {kind for _, kind, _ in others} == {"hot", "unmanaged"}
    assert all(trie.resolve(key).kind == kind for key, kind, _ in others)


# 2 ------------------------------------------------------------- what was partitioned


def test_archive_text_names_the_stores_partitioned(demo: tuple[Path, str, _Page]) -> None:
    from toolkit import storage
    from toolkit.archive.manifests import ManifestStore

    root, _, page = demo
    scopes = ManifestStore(storage.open_store(str(root / "manifests"))).scopes()
    assert scopes == ["pyramid-demo.zarr"]  # the demo's one Zarr store
    text = " ".join(page.summaries["archive"].split())
    assert "every store" not in text.lower()
    n = len(scopes)
    said = f"{n} Zarr store{'' if n == 1 else 's'} partitioned into archive blobs: "
    assert text.startswith(said + ", ".join(scopes) + ";"), text
    named = text.split("not partitioned, not Zarr stores: ", 1)[1]
    for output in ("foundation", "virtual/virtual-repo", "virtual/virtual-source"):
        assert output in named and (root / output).is_dir() and output not in scopes
    assert {r[0] for r in page.tables["blobs"]} == set(scopes)


# 3 ----------------------------------------------------------------- one shape convention

_SHAPE = re.compile(r"\b(\d+(?:\s*x\s*\d+)+)\b(?:\s*\(([^()]*)\))?")


def _arrays(root: Path) -> dict[str, tuple[tuple[str, ...], tuple[int, ...]]]:
    """Each pictured array's (dims, shape): pyramid levels by name, and the virtual maps."""
    import zarr

    from toolkit.virtual import open_dataset

    store = root / "pyramid-demo.zarr"
    out = {}
    for entry in zarr.open_group(str(store), mode="r").attrs["multiscales"]["layout"]:
        group = None if entry["asset"] == "." else entry["asset"]
        with xr.open_zarr(str(store), group=group) as ds:
            out["level 0" if group is None else group] = (ds["field"].dims, ds["field"].shape)
    t2m = open_dataset(str(root / "virtual" / "virtual-repo"))["temperature_2m"]
    out["temperature_2m"] = (t2m.dims[-2:], t2m.shape[-2:])
    return out


def test_every_shape_written_is_the_array_shape_with_its_dims(
    demo: tuple[Path, str, _Page],
) -> None:
    root, _, page = demo
    arrays = _arrays(root)
    known = {(tuple(map(str, d)), tuple(s)) for d, s in arrays.values()}
    found = [m for piece in page.pieces for m in _SHAPE.finditer(" ".join(piece.split()))]
    found += [m for i in page.images for m in _SHAPE.finditer(i["alt"] or "")]
    assert len(found) >= len(arrays) + 1  # every picture's caption and the pyramid's summary
    for m in found:
        shape = tuple(int(v) for v in re.split(r"\s*x\s*", m.group(1)))
        dims = tuple(re.split(r"\s*x\s*", m.group(2) or ""))
        assert (dims, shape) in known, m.group(0)
    for caption in page.figcaptions:  # each picture's caption gives its own array's shape
        name = next((k for k in arrays if caption.startswith(f"{k}:") or k in caption), None)
        if name is None:
            continue
        dims, shape = arrays[name]
        assert demo_report.shape_text(dims, shape) in caption, caption
    level0 = arrays["level 0"]
    assert demo_report.shape_text(*level0) in page.summaries["pyramid"]
    assert demo_report.shape_text(*level0) == "720 x 1440 (lat x lon)"


# 4 ------------------------------------------------------------------ labelled figures


def _grid(attrs: bool) -> xr.DataArray:
    lat = np.linspace(45.0, 40.0, 6)
    lon = np.linspace(250.0, 260.0, 11)
    da = xr.DataArray(
        np.arange(66, dtype="float32").reshape(6, 11),
        dims=("latitude", "longitude"),
        coords={"latitude": lat, "longitude": lon},
        name="temperature_2m",
    )
    if attrs:
        da.attrs = {"units": "K", "long_name": "temperature, 2 m above ground"}
        da["latitude"].attrs = {"units": "degrees_north", "standard_name": "latitude"}
        da["longitude"].attrs = {"units": "degrees_east", "standard_name": "longitude"}
    return da


def _colorbar_label(fig: Any) -> str:
    (ax,) = [a for a in fig.axes if a.images]
    return ax.images[0].colorbar.ax.get_ylabel()


def test_field_figure_labels_axes_and_colorbar_with_units() -> None:
    fig = demo_report.field_figure(_grid(attrs=True), limits=(0.0, 65.0))
    (ax,) = [a for a in fig.axes if a.images]
    assert ax.get_xlabel() == "longitude [degrees_east]"
    assert ax.get_ylabel() == "latitude [degrees_north]"
    assert _colorbar_label(fig) == "temperature, 2 m above ground [K]"
    assert ax.images[0].get_clim() == (0.0, 65.0)
    assert ax.get_title() == ""  # the caption is printed once, under the picture
    left, right, bottom, top = ax.images[0].get_extent()
    assert (left, right) == (250.0, 260.0) and {bottom, top} == {40.0, 45.0}


def test_field_figure_without_cf_attributes_falls_back_to_names() -> None:
    fig = demo_report.field_figure(_grid(attrs=False))
    (ax,) = [a for a in fig.axes if a.images]
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("longitude", "latitude")
    assert _colorbar_label(fig) == "temperature_2m"


def test_blob_figure_labels_axes_without_a_title() -> None:
    """Bars are named as the tables name the blobs; by scope too when there are several."""
    blobs = [{"id": "b_x_0", "bytes": 2048, "objects": 2}]
    (ax,) = demo_report.blob_figure([{"scope": "s.zarr", "blobs": blobs}]).axes
    assert ax.get_xlabel() == "size [KiB]" and ax.get_ylabel() == "blob of s.zarr"
    assert [t.get_text() for t in ax.get_yticklabels()] == ["b_x_0"]
    assert ax.get_title() == ""
    two = [{"scope": "s.zarr", "blobs": blobs}, {"scope": "t.zarr", "blobs": blobs}]
    (ax,) = demo_report.blob_figure(two).axes
    assert ax.get_ylabel() == "scope/blob"
    assert [t.get_text() for t in ax.get_yticklabels()] == ["s.zarr/b_x_0", "t.zarr/b_x_0"]


def test_the_demo_maps_carry_units(demo: tuple[Path, str, _Page]) -> None:
    """The demo's own arrays have CF units: the labels built from them say so."""
    from toolkit.virtual import open_dataset

    root, _, _ = demo
    t2m = open_dataset(str(root / "virtual" / "virtual-repo"))["temperature_2m"]
    fig = demo_report.field_figure(t2m.isel(init_time=0, lead_time=0))
    assert _colorbar_label(fig).endswith("[K]")
    with xr.open_zarr(str(root / "pyramid-demo.zarr")) as ds:
        (ax,) = [a for a in demo_report.field_figure(ds["field"]).axes if a.images]
        assert ax.get_xlabel().endswith("[degrees_east]")
        assert ax.get_ylabel().endswith("[degrees_north]")


# 5 ------------------------------------------------------------------ captions once


def test_each_caption_occurs_once(demo: tuple[Path, str, _Page]) -> None:
    _, source, page = demo
    assert len(page.figcaptions) == len(page.images) == 6  # 3 levels, 2 maps, 1 chart
    for caption in page.figcaptions:
        assert source.count(html.escape(caption)) == 1, caption
        assert page.text.count(caption) == 1, caption
    assert page.pieces.count("archive blobs by size") == 1  # not also a heading or a title
    for caption in page.tables:
        assert source.count(f"<caption>{html.escape(caption)}</caption>") == 1, caption
    for image in page.images:
        assert image["alt"] and image["alt"] not in page.figcaptions


# the xarray line ---------------------------------------------------------------------


def test_the_page_says_how_to_open_each_output_with_xarray(
    demo: tuple[Path, str, _Page],
) -> None:
    root, _, page = demo
    text = " ".join(page.text.split())
    assert f'xr.open_datatree("{root / "pyramid-demo.zarr"}", engine="toolkit")' in text
    assert f'xr.open_dataset("{root / "virtual" / "virtual-repo"}", engine="toolkit")' in text


def test_the_page_says_how_to_see_each_output_on_a_map(demo: tuple[Path, str, _Page]) -> None:
    """The viewer's command for the pyramid and the virtual repo, each one runnable as shown
    (the paths quoted for a shell) and accepted by `toolkit serve`'s arguments."""
    import shlex

    from toolkit.webmap.cli import command

    root, _, page = demo
    text = " ".join(page.text.split())
    for store, extra in ((root / "pyramid-demo.zarr", ""),
                         (root / "virtual" / "virtual-repo", " --variable temperature_2m")):  # fmt: skip
        line = f"toolkit serve {shlex.quote(str(store))}{extra}"
        assert line in text
        args = shlex.split(line)[2:]
        assert command.make_context("serve", args).params["source"] == str(store)


# 6 ------------------------------------------------------------- one name per blob


def test_every_blob_the_keys_resolve_to_is_a_row_of_the_blob_table(
    demo: tuple[Path, str, _Page],
) -> None:
    """The blob table lists the archive's units as the resolver names them (a bucketed blob:
    one row per bucket, `<id>_<n>`), each with the objects and bytes the resolver puts in it;
    every blob the "keys resolved" table names is one of its rows, by the same name."""
    from toolkit import storage

    root, _, page = demo
    table = {row[2]: row for row in page.tables["blobs"]}
    assert len(table) == len(page.tables["blobs"])  # each blob once
    named = [blob for _, _, blob in page.tables["keys resolved"]]
    assert named and all(blob in table for blob in named), (named, sorted(table))
    assert set(named) == set(table)  # the demo resolves one key per blob
    trie = _trie(root)
    held: dict[str, list[int]] = {}
    objects = storage.list_objects(storage.open_store(str(root)), "pyramid-demo.zarr")
    for o, r in zip(objects, trie.lookup_many(o.key for o in objects), strict=True):
        if r.kind == "blob":
            held.setdefault(r.blob, []).append(o.size)
    assert {b: (str(len(s)), str(sum(s))) for b, s in held.items()} == {
        b: (row[4], row[5]) for b, row in table.items()
    }
    buckets = [row for row in table.values() if row[3].startswith("bucket ")]
    assert buckets and all(row[3].endswith(" of " + row[2].rpartition("_")[0]) for row in buckets)


# 7 --------------------------------------------------------- the page explains itself


def test_every_stage_and_the_gate_column_are_explained(demo: tuple[Path, str, _Page]) -> None:
    _, _, page = demo
    staged = {c: rows for c, rows in page.tables.items() if c.startswith("plan ")}
    assert len(staged) == 5  # foundation, pyramid build and verify, backfill, update
    for caption, rows in staged.items():
        for row in rows:
            assert len(row) == 7 and len(row[6].split()) >= 5, (caption, row)
    said = [p for p in page.pieces if p.startswith("gate have/want: ")]
    assert len(said) == 1 and "(have)" in said[0] and "(want)" in said[0] and "'-'" in said[0]


def _rendered(dashboard: demo_report.Dashboard, workdir: demo_report.Workdir) -> str:
    return demo_report.render(demo_report.Page(workdir, dashboard, 1.0))


def test_the_dashboard_is_marked_live_only_during_the_run() -> None:
    """The demo's own cluster is gone when the page is read: its address is not a link and
    says so; a cluster the user named outlives the run, and its link stays one."""
    link = "http://127.0.0.1:8787/status"
    where = demo_report.Workdir("/w")
    own = _rendered(demo_report.Dashboard(link), where)
    assert "live only during the run" in own and "<a " not in own and link in own
    named = _rendered(demo_report.Dashboard(link, outlives=True), where)
    assert f'<a href="{link}">' in named and "live only" not in named
    assert "none (run with --executor sync)" in _rendered(demo_report.Dashboard(None), where)


# 8 ---------------------------------------------------------------- temp folders


def test_without_a_workdir_the_stores_are_removed_and_the_page_is_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`toolkit demo` without --workdir: its temporary folder is gone at the end; the page is
    in the current folder and names the stores it no longer has as `--workdir DIR` would."""
    import tempfile

    from typer.testing import CliRunner

    from toolkit.cli import app

    temp, here = tmp_path / "tmp", tmp_path / "here"
    temp.mkdir(), here.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    monkeypatch.chdir(here)
    result = CliRunner().invoke(app, ["demo", "--executor", "sync"])
    assert result.exit_code == 0, result.output
    assert list(temp.iterdir()) == []
    page = here / "toolkit-demo-report.html"
    assert [p.name for p in here.iterdir()] == [page.name]
    assert f"report{page}" in "".join(result.output.split())  # rich may wrap the path
    text = " ".join(html.unescape(page.read_text(encoding="utf-8")).split())
    assert "removed when the demo ended" in text and "toolkit demo --workdir DIR" in text
    assert 'xr.open_datatree("DIR/pyramid-demo.zarr", engine="toolkit")' in text
    assert str(temp) not in text


def test_a_report_path_that_is_a_folder_fails_before_anything_runs(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from toolkit.cli import app

    result = CliRunner().invoke(
        app, ["demo", "--workdir", str(tmp_path / "w"), "--report", str(tmp_path)]
    )
    assert result.exit_code == 2
    assert f"report page {tmp_path} is a folder" in " ".join(result.output.split())
    assert not (tmp_path / "w").exists()


# 9 ------------------------------------------------------------- the README's picture


def test_the_readme_picture_is_the_pages_level_pictures(demo: tuple[Path, str, _Page]) -> None:
    """`levels_picture` places the page's level pictures side by side, pixel for pixel."""
    import base64
    import io

    from matplotlib.image import imread

    _, source, page = demo
    levels = [i for i in page.images if i.get("data-level")]
    shown = [imread(io.BytesIO(base64.b64decode(i["src"].split(",", 1)[1]))) for i in levels]
    strip = imread(io.BytesIO(demo_report.levels_picture(source)))
    assert strip.shape[1] == sum(s.shape[1] for s in shown) + 16 * (len(shown) - 1)
    assert strip.shape[0] == max(s.shape[0] for s in shown) + 30
    first = shown[0]
    assert np.array_equal(strip[: first.shape[0], : first.shape[1], :3], first[..., :3])
