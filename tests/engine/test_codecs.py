"""The codec pipeline toolkit runs its pyramid builds with: zarr's fused pipeline in this
process, never over the user's own choice, and the same objects as zarr's default writes."""

from __future__ import annotations

import threading
import uuid

import pytest
import zarr
from hypothesis import given
from hypothesis import strategies as st
from zarr.core.codec_pipeline import BatchedCodecPipeline
from zarr.registry import register_pipeline

from toolkit import storage
from toolkit.engine import codecs
from toolkit.examples import synthetic
from toolkit.pyramid import build

PATH = "codec_pipeline.path"


@given(st.sampled_from([codecs.BATCHED, codecs.FUSED, "my.own.Pipeline"]), st.booleans())
def test_only_zarrs_default_is_replaced_and_only_by_what_zarr_has(current, available):
    got = codecs.chosen(current, available)
    if current == codecs.BATCHED and available:
        assert got == codecs.FUSED
    else:
        assert got is None


def test_fused_inside_restored_after_and_this_zarr_has_it():
    assert codecs.fused_available()  # zarr >= 3.4, as pyproject asks
    assert zarr.config.get(PATH) == codecs.BATCHED
    with codecs.fused() as path:
        assert path == codecs.FUSED == zarr.config.get(PATH)
        a = zarr.create_array(zarr.storage.MemoryStore(), shape=(4,), dtype="f4")
        assert type(a._async_array.codec_pipeline).__name__ == "FusedCodecPipeline"
    assert zarr.config.get(PATH) == codecs.BATCHED


def test_a_users_choice_is_left_alone():
    with zarr.config.set({PATH: codecs.BATCHED + "Mine"}), codecs.fused() as path:
        assert path == zarr.config.get(PATH) == codecs.BATCHED + "Mine"


def test_overlapping_runs_leave_nothing_behind():
    """Two runs in threads, entered and left crosswise: the default is back at the end."""
    first_in, second_in, first_out = threading.Event(), threading.Event(), threading.Event()

    def first() -> None:
        with codecs.fused():
            first_in.set()
            second_in.wait(10)
        first_out.set()

    def second() -> None:
        first_in.wait(10)
        with codecs.fused():
            second_in.set()
            first_out.wait(10)

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert zarr.config.get(PATH) == codecs.BATCHED


class Batched(BatchedCodecPipeline):
    """zarr's default pipeline under a name of the user's: a choice `fused` must respect."""


def _objects(store: storage.Store) -> dict[str, bytes]:
    keys = [k for k in storage.list_keys(store, "") if not k.startswith(".pyramid")]
    return {k: storage.get(store, k).data for k in keys if not k.endswith("zarr.json")}


@pytest.mark.parametrize("executor", ["sync", "dask"])
def test_a_build_runs_fused_and_writes_what_the_default_writes(executor, tmp_path):
    """The build opens its arrays with the fused pipeline (seen from inside the run: the
    progress callback runs in this process), leaves zarr's default behind, and every level
    object equals, byte for byte, the one a build under zarr's default pipeline writes."""
    seen: list[str] = []

    def progress(stage: str, done: int, total: int) -> None:
        seen.append(zarr.config.get(PATH))

    def source() -> storage.Store:
        store = storage.open_store(str(tmp_path / uuid.uuid4().hex))
        synthetic.write_store(store, shape=(301, 517), shards=(32, 32), chunks=(16, 16))
        return store

    fused = source()
    build(fused, levels=3, executor=executor, progress=progress)
    assert seen and set(seen) == {codecs.FUSED}
    assert zarr.config.get(PATH) == codecs.BATCHED

    register_pipeline(Batched)
    mine = f"{Batched.__module__}.{Batched.__qualname__}"
    batched = source()
    seen.clear()
    with zarr.config.set({PATH: mine}):
        build(batched, levels=3, executor="sync", progress=progress)
    assert seen and set(seen) == {mine}

    a, b = _objects(fused), _objects(batched)
    assert a.keys() == b.keys()
    assert len([k for k in a if k.startswith("8x/")]) > 2
    assert [k for k in a if a[k] != b[k]] == []
