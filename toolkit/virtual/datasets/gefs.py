"""GEFS 0.25° ensemble forecast (``pgrb2s``), virtual over ``s3://noaa-gefs-pds``.

6-hourly cycles, leads 0-240 h every 3 h (the 0.25° files stop at 240 h), members 0 (control),
1-30 (perturbed) and the ensemble mean. `ensemble_member` labels are strings, "0".."30" and
"mean", so the mean sits on the same axis as the members it summarises.
"""

from __future__ import annotations

from datetime import datetime

from toolkit import storage
from toolkit.virtual.dataset import Dataset
from toolkit.virtual.datasets.common import forecast, hour_range, latlon_0p25, latlon_crs_attrs
from toolkit.virtual.sources.noaa import GEFS, Member

__all__ = ["MEMBERS", "gefs"]

MEMBERS: tuple[Member, ...] = (*range(31), "mean")


def gefs(
    source_store: storage.Store | None = None,
    *,
    first_init: datetime = datetime(2020, 10, 1),  # GEFSv12 on NODD
    append_dim_end: datetime | None = None,
    init_freq_hours: int = 6,
    source_file_types: tuple[str, ...] | None = None,
) -> Dataset:
    """NOAA GEFS 0.25° ensemble forecast (31 members + mean), 0-240 h, virtual over NODD."""
    return forecast(
        "gefs",
        GEFS(),
        title="NOAA GEFS 0.25 degree ensemble forecast (virtual)",
        source_store=source_store,
        file_types=source_file_types or ("pgrb2s",),
        first_init=first_init,
        append_dim_end=append_dim_end,
        init_freq_hours=init_freq_hours,
        allowed_init_freq=(6,),
        lead_times=hour_range(0, 240, 3),
        grid=latlon_0p25(),
        crs=latlon_crs_attrs(),
        # 81 leads x 32 members = 2592 refs/init per array: 64 inits ~ 166k refs ~ 2.6 MiB.
        split=64,
        members=MEMBERS,
        member_labels=tuple(str(m) for m in MEMBERS),
    )
