"""Which zarr codec pipeline the arrays a run opens in this process use.

zarr's default pipeline schedules one coroutine per chunk on its single event loop; a build that
reads and writes thousands of inner chunks spends most of its time there, and the loop thread
holds the GIL the kernels and the engine's threads need (profiled in benchmarks/pyramid_build).
zarr 3.4's fused pipeline runs the codec chain of a batch synchronously, in one hop off the
loop: the same bytes, written and read (the pyramid suite passes under it), in less time.

It stays opt-in in zarr, so toolkit opts in only around its own runs in this process (`fused`),
and never over a choice the user made: a `codec_pipeline.path` set by them (`zarr.config.set`,
or `ZARR_CODEC_PIPELINE__PATH`) is left as it is. Workers of a cluster the user runs keep their
own configuration.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

log = logging.getLogger(__name__)

BATCHED = "zarr.core.codec_pipeline.BatchedCodecPipeline"  # zarr's default
FUSED = "zarr.core.codec_pipeline.FusedCodecPipeline"


def fused_available() -> bool:
    """Whether the installed zarr has the fused pipeline (zarr >= 3.4)."""
    from zarr.core import codec_pipeline

    return hasattr(codec_pipeline, "FusedCodecPipeline")


def chosen(current: str, available: bool) -> str | None:
    """The pipeline to switch to for a run, or None to leave `current` as it is: only zarr's
    default is replaced, and only by a pipeline this zarr has."""
    return FUSED if available and current == BATCHED else None


@contextlib.contextmanager
def fused() -> Iterator[str]:
    """zarr's fused codec pipeline for the arrays opened inside (yields the path in force).

    Entered while another run in this process holds it, it changes nothing, so the first run's
    exit restores the default and no setting outlives the runs that made it."""
    import zarr

    current = zarr.config.get("codec_pipeline.path")
    path = chosen(current, fused_available())
    if path is None:
        log.debug("zarr codec pipeline left as it is: %s", current)
        yield current
        return
    log.info("zarr codec pipeline for this run: %s", path.rsplit(".", 1)[-1])
    with zarr.config.set({"codec_pipeline.path": path}):
        yield path
