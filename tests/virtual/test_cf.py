"""Every virtual dataset speaks CF: units, names, grid mapping, valid time, global attributes.

The oracle is written here from the WMO GRIB2 code table 4.2 (and NCEP's local entries, the
codes >= 192), never imported from the project's own table: a unit or a standard name dropped
or changed there fails here.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import zarr
from typer.testing import CliRunner

from tests.virtual.test_backfill import sim
from tests.virtual.test_real_bytes import wave_dataset
from tests.virtual.test_user_dataset import example
from toolkit import icechunk as R
from toolkit import storage
from toolkit.cli import app
from toolkit.virtual import open_dataset
from toolkit.virtual.builtin import DATASETS, build
from toolkit.virtual.template import Template, TemplateVar
from toolkit.virtual.write import ensure_repo, run

pyproj = pytest.importorskip("pyproj")

# (discipline, category, number) -> (short name, units, CF standard name or None)
WMO = {
    (0, 0, 0): ("TMP", "K", "air_temperature"),
    (0, 0, 4): ("TMAX", "K", "air_temperature"),
    (0, 0, 5): ("TMIN", "K", "air_temperature"),
    (0, 0, 6): ("DPT", "K", "dew_point_temperature"),
    (0, 1, 1): ("RH", "%", "relative_humidity"),
    (0, 1, 3): ("PWAT", "kg m-2", "atmosphere_mass_content_of_water_vapor"),
    (0, 1, 7): ("PRATE", "kg m-2 s-1", "precipitation_flux"),
    (0, 1, 8): ("APCP", "kg m-2", "precipitation_amount"),
    (0, 1, 192): ("CRAIN", "1", None),  # NCEP local: categorical, code table 4.222
    (0, 2, 0): ("WDIR", "degree", "wind_from_direction"),
    (0, 2, 1): ("WIND", "m s-1", "wind_speed"),
    (0, 2, 2): ("UGRD", "m s-1", "eastward_wind"),
    (0, 2, 3): ("VGRD", "m s-1", "northward_wind"),
    (0, 2, 22): ("GUST", "m s-1", "wind_speed_of_gust"),
    (0, 3, 0): ("PRES", "Pa", "air_pressure"),
    (0, 3, 1): ("PRMSL", "Pa", "air_pressure_at_mean_sea_level"),
    (0, 3, 5): ("HGT", "m", "geopotential_height"),  # gpm
    (0, 4, 192): ("DSWRF", "W m-2", None),  # NCEP local
    (0, 5, 192): ("DLWRF", "W m-2", None),  # NCEP local
    (0, 6, 1): ("TCDC", "%", "cloud_area_fraction"),
    (0, 7, 6): ("CAPE", "J kg-1", "atmosphere_convective_available_potential_energy"),
    (0, 16, 196): ("REFC", "dBZ", None),  # NCEP local
    (0, 19, 0): ("VIS", "m", "visibility_in_air"),
    (10, 0, 3): ("HTSGW", "m", "sea_surface_wave_significant_height"),
    (10, 0, 4): ("WVDIR", "degree", "sea_surface_wind_wave_from_direction"),
    (10, 0, 5): ("WVHGT", "m", "sea_surface_wind_wave_significant_height"),
    (10, 0, 6): ("WVPER", "s", "sea_surface_wind_wave_mean_period"),
    (10, 0, 7): ("SWDIR", "degree", "sea_surface_swell_wave_from_direction"),
    (10, 0, 8): ("SWELL", "m", "sea_surface_swell_wave_significant_height"),
    (10, 0, 9): ("SWPER", "s", "sea_surface_swell_wave_mean_period"),
    (10, 0, 10): ("DIRPW", "degree", "sea_surface_wave_from_direction"),
    (10, 0, 11): ("PERPW", "s", "sea_surface_wave_period_at_variance_spectral_density_maximum"),
}
SHORT = {short: code for code, (short, _, _) in WMO.items()}
# the field at a named surface has its own CF name
AT_SURFACE = {
    ("PRES", "surface"): "surface_air_pressure",
    ("DSWRF", "surface"): "surface_downwelling_shortwave_flux_in_air",
    ("DLWRF", "surface"): "surface_downwelling_longwave_flux_in_air",
}
GRID_RELATIVE = {"UGRD": "x_wind", "VGRD": "y_wind"}  # HRRR's winds follow its Lambert grid
ECMWF_DATASETS = {"ecmwf-ifs-oper", "ecmwf-aifs-single"}
UNNAMED = {"hrrr": {"local_16_201_atmosphere"}, "hrrr-analysis": {"local_16_201_atmosphere"}}
SPHERE = 6371229.0
FORECASTS = {"hrrr", "gfs", "gefs", "sim-gfs", "doc-example", "gfswave", *ECMWF_DATASETS}


def eccodes_says(short_name: str, aifs: bool) -> dict:
    """What ecCodes (the oracle) says of an ECMWF shortName: units, name and GRIB2 code."""
    eccodes = pytest.importorskip("eccodes")
    h = eccodes.codes_grib_new_from_samples("GRIB2")
    try:
        if short_name == "tp":  # an accumulation: its template first, then the parameter
            eccodes.codes_set_long(h, "productDefinitionTemplateNumber", 8)
            eccodes.codes_set_long(h, "paramId", 228228 if aifs else 228)
        else:
            eccodes.codes_set_string(h, "shortName", short_name)
        get = lambda k: eccodes.codes_get(h, k)  # noqa: E731
        code = f"{get('discipline')}/{get('parameterCategory')}/{get('parameterNumber')}"
        return {"units": get("units"), "name": get("name"), "code": code}
    finally:
        eccodes.codes_release(h)


def check_ecmwf(name: str, var: str, a: dict) -> None:
    """An ECMWF variable is described as ecCodes describes its shortName."""
    want = eccodes_says(a["short_name"], aifs=name == "ecmwf-aifs-single")
    assert a["units"] == want["units"], (name, var)
    assert a["long_name"].lower().startswith(want["name"].lower()), (name, var, want["name"])
    assert a["grib_parameter"] == want["code"], (name, var)
    assert a["standard_name"], (name, var)


def datasets(tmp_path) -> dict:
    """Every dataset in the catalog, the docs' user example and a GFS-Wave user dataset."""
    src = storage.open_store(str(tmp_path / "src"))
    out = {name: make(src) for name, make in DATASETS.items()}
    module = tmp_path / "mymodel.py"
    module.write_text(example())
    out["doc-example"] = build(f"{module}:DATASET", src)
    grid = {"latitude": 55.0 - 0.5 * np.arange(8), "longitude": 260.0 + 0.5 * np.arange(9)}
    out["gfswave"] = wave_dataset(src, grid)
    return out


def expected_standard_name(name: str, attrs: dict) -> str | None:
    short, level = attrs["grib_element"], attrs["grib_index_level"]
    if name.startswith("hrrr") and short in GRID_RELATIVE:
        return GRID_RELATIVE[short]
    return AT_SURFACE.get((short, level), WMO[SHORT[short]][2])


def test_every_variable_of_every_dataset_carries_its_cf_attributes(tmp_path):
    seen_codes = set()
    for name, ds in datasets(tmp_path).items():
        t = ds.template
        unnamed = set()
        for var, v in t.variables.items():
            if not v.dims:
                continue
            a = dict(v.attrs)
            assert a["long_name"] and a["short_name"], (name, var)
            if name != "gfswave":  # the wave example names no CRS
                assert a["grid_mapping"] == "spatial_ref", (name, var)
            assert (a.get("coordinates") == "valid_time") == (name in FORECASTS), (name, var)
            if name in ECMWF_DATASETS:
                check_ecmwf(name, var, a)
                continue
            if a["short_name"] not in SHORT:
                unnamed.add(var)
                assert "units" not in a and "standard_name" not in a  # never a guessed unit
                continue
            code = SHORT[a["short_name"]]
            seen_codes.add(code)
            assert a["short_name"] == a["grib_element"], (name, var)
            assert a["grib_parameter"] == "/".join(map(str, code)), (name, var)
            assert a["units"] == WMO[code][1], (name, var)
            assert a.get("standard_name") == expected_standard_name(name, a), (name, var)
            if a["step_type"] != "instant":
                assert a["cell_methods"].startswith("time: "), (name, var)
            # a direction is in degrees and says so by its standard name's suffix
            is_direction = a.get("standard_name", "").endswith("_direction")
            assert is_direction == (a["units"] == "degree"), (name, var)
        assert unnamed == UNNAMED.get(name, set()), name
    assert {SHORT[s] for s in ("DIRPW", "WVDIR", "SWDIR", "WDIR")} <= seen_codes


def test_wave_directions_are_circular_by_name(tmp_path):
    t = datasets(tmp_path)["gfswave"].template
    names = {v: t.variables[v].attrs["standard_name"] for v in t.variables if t.variables[v].dims}
    assert names["primary_wave_direction"] == "sea_surface_wave_from_direction"
    assert names["wind_wave_direction"] == "sea_surface_wind_wave_from_direction"
    assert names["swell_direction"] == "sea_surface_swell_wave_from_direction"
    assert names["significant_height_combined"] == "sea_surface_wave_significant_height"
    assert t.coord_attrs["level"]["units"] == "1"  # swell partitions: not pressure levels
    for v in ("primary_wave_direction", "wind_wave_direction", "swell_direction"):
        assert t.variables[v].attrs["units"] == "degree"


def test_spatial_ref_decodes_with_pyproj_to_the_grid_it_describes(tmp_path):
    for name, ds in datasets(tmp_path).items():
        if name == "gfswave":
            continue
        attrs = dict(ds.template.variables["spatial_ref"].attrs)
        crs = pyproj.CRS.from_cf(attrs)
        cf_only = {k: v for k, v in attrs.items() if k not in ("crs_wkt", "spatial_ref")}
        assert crs == pyproj.CRS.from_cf(cf_only) == pyproj.CRS.from_wkt(attrs["spatial_ref"])
        assert attrs["crs_wkt"].startswith(("GEOGCRS[", "PROJCRS["))  # WKT2
        assert crs.ellipsoid.semi_major_metre == SPHERE == crs.ellipsoid.semi_minor_metre
        if name.startswith("hrrr"):
            assert attrs["grid_mapping_name"] == "lambert_conformal_conic"
            assert crs.coordinate_operation.method_name == "Lambert Conic Conformal (2SP)"
            # the grid's first point, as HRRR's GRIB header gives it: 21.138123 N, 122.719528 W
            x0, y0 = ds.template.coords["x"][0], ds.template.coords["y"][0]
            lon, lat = pyproj.Transformer.from_crs(crs, crs.geodetic_crs, always_xy=True).transform(
                x0, y0
            )
            assert lat == pytest.approx(21.138123, abs=1e-5)
            assert lon == pytest.approx(-122.719528, abs=1e-5)
        else:
            assert attrs["grid_mapping_name"] == "latitude_longitude" and crs.is_geographic


def test_root_attributes_name_the_dataset_its_source_license_and_domain(tmp_path):
    for name, ds in datasets(tmp_path).items():
        a = dict(ds.template.attrs)
        assert a["Conventions"] == "CF-1.10" and a["title"] and a["source"], name
        assert a["time_coverage_start"].endswith("Z"), name
        first = ds.template.coords[ds.append_dim][0]
        assert np.datetime64(a["time_coverage_start"][:-1], "ns") == first, name
        for k in ("geospatial_lat_min", "geospatial_lat_max"):
            assert -90 <= a[k] <= 90, (name, k)
        if name in DATASETS and not name.startswith("sim-"):
            maker = "ECMWF" if name in ECMWF_DATASETS else "NCEP"
            assert maker in a["institution"] and a["license"], name
            assert ds.settings.home in a["source"], name  # the provider's bucket
    got = datasets(tmp_path)
    gfs = got["gfs"].template.attrs
    assert (gfs["geospatial_lat_min"], gfs["geospatial_lat_max"]) == (-90.0, 90.0)
    assert (gfs["geospatial_lon_min"], gfs["geospatial_lon_max"]) == (0.0, 359.75)
    hrrr = got["hrrr"].template.attrs  # the CONUS Lambert grid's edges, back in lat/lon
    assert 21.0 < hrrr["geospatial_lat_min"] < 21.2 and 52.5 < hrrr["geospatial_lat_max"] < 53
    assert -135 < hrrr["geospatial_lon_min"] < -134 and -61 < hrrr["geospatial_lon_max"] < -60
    assert got["doc-example"].template.attrs["license"] == "CC-BY-4.0"  # the user's own attrs


def test_forecasts_have_valid_time_and_analyses_a_time(tmp_path):
    for name, ds in datasets(tmp_path).items():
        t = ds.template
        n = min(3, len(t.coords[t.append_dim]))
        vt = t.valid_time(n)
        if name in FORECASTS:
            inits, leads = t.coords["init_time"][:n], t.coords["lead_time"]
            assert vt.shape == (n, len(leads)) and vt.dtype == np.dtype("datetime64[ns]")
            for i, init in enumerate(inits):
                for j, lead in enumerate(leads):
                    assert vt[i, j] == init + lead
            assert t.coord_attrs["valid_time"]["standard_name"] == "time"
            assert t.coord_attrs["init_time"]["standard_name"] == "forecast_reference_time"
            assert t.coord_attrs["lead_time"]["standard_name"] == "forecast_period"
        else:
            assert vt is None and t.append_dim == "time"
            assert t.coord_attrs["time"]["standard_name"] == "time"


def test_open_dataset_shows_the_attributes_and_valid_time(tmp_path):
    archive, files, job = sim(
        storage.open_store(str(tmp_path / "src")),
        storage.open_store(str(tmp_path / "repo")),
        publish=7,
    )
    ensure_repo(job)
    run(job)
    x = open_dataset(str(tmp_path / "repo"))
    assert x["valid_time"].dims == ("init_time", "lead_time")
    assert x["valid_time"].dtype == np.dtype("datetime64[ns]") and "valid_time" in x.coords
    want = x["init_time"].values[:, None] + x["lead_time"].values[None, :]
    np.testing.assert_array_equal(x["valid_time"].values, want)
    assert x.sizes["init_time"] == 3  # 7 files: two whole cycles and one lead of the third
    t2m = x["temperature_2m"]
    assert t2m.attrs["units"] == "K" and t2m.attrs["standard_name"] == "air_temperature"
    assert t2m.attrs["short_name"] == "TMP" and t2m.attrs["grid_mapping"] == "spatial_ref"
    assert "valid_time" in t2m.coords
    assert x["precipitation_surface"].attrs["cell_methods"] == "time: sum"
    assert pyproj.CRS.from_cf(x["spatial_ref"].attrs).is_geographic
    assert x.attrs["Conventions"] == "CF-1.10" and x.attrs["institution"] == "toolkit"
    # growing the append dim extends valid_time with it
    archive.publish(files[7:])
    run(job)
    x = open_dataset(str(tmp_path / "repo"))
    assert x.sizes["init_time"] == 4
    np.testing.assert_array_equal(
        x["valid_time"].values, x["init_time"].values[:, None] + x["lead_time"].values[None, :]
    )


CF_KEYS = {"units", "long_name", "standard_name", "short_name", "grib_parameter", "cell_methods",
           "coordinates", "grid_mapping"}  # fmt: skip


def before_cf(t: Template) -> Template:
    """The template as builds before CF metadata wrote it: GRIB attrs only, no grid mapping,
    bare coordinates, a title and a source."""
    variables = {
        n: TemplateVar(v.dims, v.dtype, {k: x for k, x in v.attrs.items() if k not in CF_KEYS})
        for n, v in t.variables.items()
        if v.dims
    }
    attrs = {"title": t.attrs["title"], "source": "toolkit.virtual.simulate"}  # as built then
    return dataclasses.replace(t, variables=variables, attrs=attrs, coord_attrs={})


def test_an_update_fire_deploys_cf_metadata_to_a_repo_made_before_it(tmp_path):
    """Every file is already in: only the fire's metadata refresh can bring the attributes."""
    _, _, job = sim(
        storage.open_store(str(tmp_path / "src")),
        storage.open_store(str(tmp_path / "repo")),
    )
    old = dataclasses.replace(job, dataset=dataclasses.replace(job.dataset, template=before_cf(job.template)))  # fmt: skip
    ensure_repo(old)
    run(old)
    s = R.writable(job.repo.open(fresh=True))
    zarr.open_group(s.store, mode="r+").__delitem__("valid_time")  # an older build had none
    R.commit(s, "as an older build left it")
    x = open_dataset(str(tmp_path / "repo"))
    assert "valid_time" not in x.coords and "spatial_ref" not in x.variables
    assert "units" not in x["temperature_2m"].attrs and "Conventions" not in x.attrs

    res = CliRunner().invoke(app, [
        "virtual", "update", "sim-gfs", "--repo", str(tmp_path / "repo"),
        "--source", str(tmp_path / "src"), "--fire-time", "2025-08-01T18", "--deadline", "60",
    ])  # fmt: skip
    assert res.exit_code == 0, res.output
    x = open_dataset(str(tmp_path / "repo"))
    assert x.sizes["init_time"] == 4
    np.testing.assert_array_equal(
        x["valid_time"].values, x["init_time"].values[:, None] + x["lead_time"].values[None, :]
    )
    for var, v in job.template.variables.items():
        for k, want in v.attrs.items():
            if k != "coordinates":  # xarray turns it into the variable's coordinates
                assert x[var].attrs[k] == want, (var, k)
    assert "valid_time" in x["wind_u_10m"].coords
    assert x["wind_u_10m"].attrs["standard_name"] == "eastward_wind"
    assert x.attrs["Conventions"] == "CF-1.10" and x.attrs["title"] == job.template.attrs["title"]
    assert x["init_time"].attrs["standard_name"] == "forecast_reference_time"
    assert pyproj.CRS.from_cf(x["spatial_ref"].attrs).is_geographic
    # the next fire finds nothing to change and commits no metadata
    n = len(R.history(job.repo.open(fresh=True)))
    res = CliRunner().invoke(app, [
        "virtual", "update", "sim-gfs", "--repo", str(tmp_path / "repo"),
        "--source", str(tmp_path / "src"), "--fire-time", "2025-08-01T18", "--deadline", "5",
    ])  # fmt: skip
    assert res.exit_code == 0, res.output
    assert len(R.history(job.repo.open(fresh=True))) == n


def test_a_pyramid_of_the_repo_takes_valid_time_for_a_coordinate_not_a_variable(tmp_path):
    from toolkit.pyramid.source import read_source

    _, _, job = sim(
        storage.open_store(str(tmp_path / "src")),
        storage.open_store(str(tmp_path / "repo")),
        publish=3,
    )
    ensure_repo(job)
    run(job)
    session = R.readonly(job.repo.open(fresh=True))
    src = read_source(R.SessionView(f"{job.repo.url}@main", session), listed=False)
    assert "valid_time" not in src.arrays and "temperature_2m" in src.arrays
