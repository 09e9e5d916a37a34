"""GEFS 0.25° ensemble forecast (``pgrb2s``), virtual over ``s3://noaa-gefs-pds``.

6-hourly cycles, leads 0-240 h every 3 h (the 0.25° files stop at 240 h), members 0 (control),
1-30 (perturbed) and the ensemble mean. `ensemble_member` labels are strings, "0".."30" and
"mean", so the mean sits on the same axis as the members it summarises.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar

import numpy as np

from toolkit.virtual.datasets.common import NoaaDataset, hour_range
from toolkit.virtual.sources.noaa import GEFS, Member

__all__ = ["MEMBERS", "GefsForecast"]

MEMBERS: tuple[Member, ...] = (*range(31), "mean")


def member_label(member: Member) -> str:
    if member is None:
        raise ValueError("GEFS files always belong to a member")
    return str(member)


@dataclass(frozen=True)
class GefsForecast(NoaaDataset):
    """NOAA GEFS 0.25° ensemble forecast (31 members + mean), 0-240 h, virtual over NODD."""

    first_init: datetime = datetime(2020, 10, 1)  # GEFSv12 on NODD

    bucket: ClassVar[str] = GEFS.bucket  # declared once, by the source
    title: ClassVar[str] = "NOAA GEFS 0.25 degree ensemble forecast (virtual)"
    source_cls: ClassVar[type] = GEFS

    def default_file_types(self) -> tuple[str, ...]:
        return ("pgrb2s",)

    def lead_times(self) -> np.ndarray:
        return hour_range(0, 240, 3)

    def members(self) -> tuple[Member, ...]:
        return MEMBERS

    def member_label(self, member: Member) -> Any:
        return member_label(member)

    def member_labels(self) -> np.ndarray:
        return np.array([member_label(m) for m in MEMBERS])

    def split_sizes(self) -> int | dict[str | None, int]:
        # 81 leads x 32 members = 2592 refs/init per array: 64 inits ~ 166k refs ~ 2.6 MiB.
        return 64
