"""The map page in a real browser: Debian's Chromium (headless, driven by Playwright through
`executable_path`; `.ci/run` installs it) against `toolkit serve` started as users start it, on
a virtual forecast repo of real GRIB2. The screenshot's pixels are checked against xarray's
read of the repo and matplotlib's colormap, the level shown against the zoom, the selectors
against the tiles they load, and a fire's commit against what the page shows after it."""

from __future__ import annotations

import io
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from tests.webmap.conftest import FIRE, forecast_repo
from tests.webmap.oracle import colour_ok
from tests.webmap.test_cli import start
from tests.webmap.test_repo import _nearest, main
from toolkit import icechunk as R
from toolkit import storage
from toolkit.virtual.update import update

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# what the probe of this machine found Chromium needs here: no sandbox as root, no GPU, and no
# background connections (this machine's closed network refuses them, many at a time)
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]  # fmt: skip
DOCS = Path(__file__).resolve().parents[2] / "docs"
LAT, LON = 46.0, -104.0  # a cell centre of the simulated grid (0.25 deg, 250..262 E)
LATEST = "2025-08-01T06:00:00Z"


def _browser_or_skip():
    if not Path(CHROMIUM).exists():
        if os.environ.get("TOOLKIT_NEEDS_BROWSER"):  # CI installs it: missing there is a failure
            pytest.fail(f"no Chromium at {CHROMIUM}: `apt-get install chromium` (.ci/run does)")
        pytest.skip("Debian's chromium is not installed (apt-get install chromium)")
    return pytest.importorskip("playwright.sync_api")


def _centre_rgba(page) -> np.ndarray:
    """The 5x5 pixels at the middle of the map element, from a screenshot of it."""
    img = np.asarray(Image.open(io.BytesIO(page.locator("#map").screenshot())).convert("RGBA"))
    h, w = img.shape[:2]
    return img[h // 2 - 2 : h // 2 + 3, w // 2 - 2 : w // 2 + 3].reshape(-1, 4)


def _settled(page) -> None:
    """Every tile the view asked for has loaded, and the level readout is in."""
    page.wait_for_function(
        "m => m.meta && m.pending === 0 && m.loaded > 0 && m.level !== null",
        arg=page.evaluate_handle("window.toolkitMap"),
    )


def _go(page, z: int, lat: float = LAT, lon: float = LON) -> str:
    page.evaluate("h => { window.toolkitMap.level = null; location.hash = h; }",
                  f"#{z}/{lat:.5f}/{lon:.5f}")  # fmt: skip
    _settled(page)
    return page.evaluate("window.toolkitMap.level")


def test_the_page_draws_the_data_follows_zoom_and_selectors_and_a_fire(tmp_path):
    sync = _browser_or_skip()
    archive, files, job = forecast_repo(tmp_path)
    repo = tmp_path / "repo"
    proc, url = start(str(repo), "--variable", "temperature_2m", "--refresh", "0.2")
    try:
        with sync.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            page = browser.new_page(viewport={"width": 1000, "height": 640})
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(f"{url}#6/{LAT:.5f}/{LON:.5f}")
            _settled(page)
            legend = page.evaluate("window.toolkitMap.meta.variables.temperature_2m.legend")
            ds = main(repo)

            def want(lead_h: int) -> float:
                return _nearest(ds, "temperature_2m", LAT, LON, init_time=np.datetime64(LATEST[:-1]),
                                lead_time=np.timedelta64(lead_h, "h"))  # fmt: skip

            # the pixels under the cell hold the colormap's colour of its value
            v0 = want(0)
            rgba = _centre_rgba(page)
            assert colour_ok(rgba, np.full(len(rgba), v0), legend["vmin"], legend["vmax"]).all()
            page.screenshot(path=str(tmp_path / "serve.png"))
            if os.environ.get("TOOLKIT_WRITE_DOCS"):  # docs/serve.png is this screenshot
                shutil.copy(tmp_path / "serve.png", DOCS / "serve.png")
            # the value under the cursor, from /point, with its units and level
            box = page.locator("#map").bounding_box()
            page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
            page.wait_for_function("document.getElementById('value').textContent.includes('level')")
            said = page.inner_text("#value")
            assert "(level 0)" in said and " K " in said
            assert float(said.split()[0]) == pytest.approx(v0, abs=0.06)
            # zooming out changes the level that serves the view
            assert [_go(page, z) for z in (2, 1, 0)] == ["0", "2x", "4x"]
            assert "4x" in page.inner_text("#level")
            # the lead-time selector loads other tiles, coloured by that lead's values
            _go(page, 6)
            v6 = want(6)
            assert v6 != v0
            page.select_option("#sel-lead_time", "PT6H")
            _settled(page)
            srcs = page.eval_on_selector_all(".tile", "els => els.map(e => e.src)")
            assert srcs and all("lead_time=PT6H" in s for s in srcs)
            rgba = _centre_rgba(page)
            assert colour_ok(rgba, np.full(len(rgba), v6), legend["vmin"], legend["vmax"]).all()
            # a fire lands two init times: the page moves to the new snapshot and the newest
            # init time by itself (its init selector was never touched), lead time kept
            archive.publish(files[6:])
            update(job, fire_time=FIRE, deadline_seconds=60)
            snapshot = R.snapshot_of(R.open_repo(storage.open_store(str(repo)), fresh=True))
            page.wait_for_function(
                "s => document.getElementById('version').textContent.includes(s)", arg=snapshot
            )
            _settled(page)
            assert page.input_value("#sel-init_time") == "2025-08-01T18:00:00Z"
            assert page.input_value("#sel-lead_time") == "PT6H"
            srcs = page.eval_on_selector_all(".tile", "els => els.map(e => e.src)")
            assert all(f"v={snapshot}" in s and "lead_time=PT6H" in s for s in srcs)
            v_new = _nearest(main(repo), "temperature_2m", LAT, LON,
                             init_time=np.datetime64("2025-08-01T18"), lead_time=np.timedelta64(6, "h"))  # fmt: skip
            rgba = _centre_rgba(page)
            assert colour_ok(rgba, np.full(len(rgba), v_new), legend["vmin"], legend["vmax"]).all()
            # another variable: its own legend (asked for when chosen) and its own tiles
            page.select_option("#variable", "pressure_reduced_to_mean_sea_level")
            page.wait_for_function("document.getElementById('legend').textContent.includes('(Pa)')")
            _settled(page)
            srcs = page.eval_on_selector_all(".tile", "els => els.map(e => e.src)")
            assert srcs and all("variable=pressure_reduced_to_mean_sea_level" in s for s in srcs)
            assert not errors
            browser.close()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
