"""Manifests, partition_store and scan on real stores: frozen cuts, appends, races."""

import uuid

import pytest

from tests.archive import zarrgen
from toolkit import storage
from toolkit.archive.manifests import ManifestConflict, ManifestStore
from toolkit.archive.model import Manifest, ManifestError, Pin, Policy
from toolkit.archive.resolve import Trie
from toolkit.archive.service import commit, partition_store, propose, report, scan

S = "cordex/a.zarr"
P = Policy(t_max=5000, t_hot=100, t_min=3000)


@pytest.fixture
def stores(any_store: storage.Store) -> tuple[storage.Store, storage.Store]:
    data = any_store.child("data")
    return data, any_store.child("manifests")


def test_partition_writes_the_expected_manifest(stores) -> None:
    data, manifests = stores
    zarrgen.cordex_v3(data)
    out = partition_store(data, manifests, S, P)
    assert out.written and out.epoch == 1
    m = ManifestStore(manifests).read(S).manifest
    assert m == out.manifest
    assert m.hot == (f"{S}/lat", f"{S}/time")
    ids = {b.id: b for b in m.blobs}
    assert set(ids) == {"b_tas", "g_orog", "g_sub_ps_813d8de1"}
    assert ids["b_tas"].bucket.width == 5 and ids["g_orog"].prefixes == (f"{S}/orog", f"{S}/pr")
    trie = Trie([m])
    for key in storage.list_keys(data, S):
        r = trie.lookup(key)
        assert r.kind in ("blob", "hot") and (r.kind == "hot") == (
            key.endswith("zarr.json") or "/time/" in key or "/lat/" in key
        )
    assert trie.lookup(f"{S}/tas/c/19/0/0").blob == "b_tas_3"


def test_changed_policy_changes_nothing(stores) -> None:
    data, manifests = stores
    zarrgen.cordex_v3(data)
    first = partition_store(data, manifests, S, P)
    again = partition_store(data, manifests, S, Policy(t_max=10**9, t_hot=1, t_min=1))
    assert not again.written and again.manifest == first.manifest and again.diff.empty
    assert ManifestStore(manifests).read(S).manifest.epoch == 1


def test_append_needs_no_manifest_change(stores) -> None:
    data, manifests = stores
    zarrgen.cordex_v3(data)
    first = partition_store(data, manifests, S, P)
    before = storage.get(manifests, f"{S}/manifest.json")
    # grow tas from 20 to 40 shards along time
    zarrgen.v3_array(
        data,
        f"{S}/tas",
        (80, 4, 4),
        (1, 2, 2),
        shards=(2, 4, 4),
        dims=("time", "lat", "lon"),
        object_bytes=1000,
    )
    out = partition_store(data, manifests, S, P)
    assert not out.written
    after = storage.get(manifests, f"{S}/manifest.json")
    assert after.data == before.data and after.version == before.version
    assert Trie([first.manifest]).lookup(f"{S}/tas/c/39/0/0").blob == "b_tas_7"


def test_new_array_gets_a_new_blob(stores) -> None:
    data, manifests = stores
    zarrgen.cordex_v3(data)
    first = partition_store(data, manifests, S, P)
    zarrgen.v3_array(data, f"{S}/uas", (10,), (1,), dims=("time",), object_bytes=400)
    out = partition_store(data, manifests, S, P)
    assert out.written and out.epoch == 2
    assert out.manifest.blobs[: len(first.manifest.blobs)] == first.manifest.blobs
    assert [b.id for b in out.diff.added] == ["w_uas"] and out.orphaned == ()


def test_two_concurrent_partitions_one_wins_the_other_writes_nothing(stores) -> None:
    data, manifests = stores
    zarrgen.cordex_v3(data)
    ms = ManifestStore(manifests)
    a = propose(data, ms, S, P)
    b = propose(data, ms, S, Policy(t_max=10**6, t_hot=1, t_min=1))
    commit(ms, a)
    with pytest.raises(ManifestConflict, match="nothing was written"):
        commit(ms, b)
    assert ms.read(S).manifest == a.manifest
    # the same race on an update (if-match), after a new array appears
    zarrgen.v3_array(data, f"{S}/uas", (10,), (1,), object_bytes=400)
    c = propose(data, ms, S, P)
    d = propose(data, ms, S, P, force=True)
    commit(ms, d)
    with pytest.raises(ManifestConflict, match=S):
        commit(ms, c)
    assert ms.read(S).manifest == d.manifest


def test_force_keeps_pins_bumps_epoch_and_lists_orphans(stores) -> None:
    data, manifests = stores
    zarrgen.cordex_v3(data)
    ms = ManifestStore(manifests)
    partition_store(data, manifests, S, P)
    stored = ms.read(S)
    ms.write(stored.manifest.with_pin(Pin(f"{S}/pr", "ana", "paper", "2027-01-01")), stored)
    out = partition_store(data, manifests, S, Policy(t_max=10**6, t_hot=100, t_min=1), force=True)
    assert out.epoch == 3 and out.manifest.pins == (Pin(f"{S}/pr", "ana", "paper", "2027-01-01"),)
    assert set(out.orphaned) == {"b_tas", "g_orog", "g_sub_ps_813d8de1"}
    # ids are forever: the re-cut's blob takes its cut's id, the old ones stay, retired
    assert [b.id for b in out.manifest.blobs] == ["w2_orog"]
    assert {r.blob.id for r in out.manifest.retired} == set(out.orphaned)
    assert [c.number for c in out.manifest.cuts] == [1, 2]
    assert out.manifest.cut.policy == Policy(t_max=10**6, t_hot=100, t_min=1)


def test_a_root_array_store_written_by_zarr_python(stores) -> None:
    import numpy as np
    import zarr

    data, manifests = stores
    a = zarr.create_array(
        data.zarr(),
        name="bare.zarr",
        shape=(6, 2),
        chunks=(1, 2),
        dtype="f8",
        dimension_names=("time", "x"),
    )
    a[:] = np.ones((6, 2))
    out = partition_store(data, manifests, "bare.zarr", Policy(t_max=10**6, t_hot=1, t_min=1))
    assert out.manifest.root_array and out.manifest.blobs[0].prefixes == ("bare.zarr",)
    assert (
        Trie([ManifestStore(manifests).read("bare.zarr").manifest]).lookup("bare.zarr/c/5/0").blob
        == "w_root"
    )


def test_dry_run_writes_nothing(stores) -> None:
    data, manifests = stores
    zarrgen.cordex_v3(data)
    out = partition_store(data, manifests, S, P, dry_run=True)
    assert not out.written and out.diff.added
    assert storage.list_keys(manifests) == []


def test_stored_manifest_problems_are_refused(stores) -> None:
    _, manifests = stores
    ms = ManifestStore(manifests)
    storage.put(manifests, f"{S}/manifest.json", b"{broken")
    with pytest.raises(storage.CorruptObject, match=r"manifest\.json: .*not an archive manifest"):
        ms.read(S)
    m = Manifest(S, 3, P)
    storage.put(manifests, f"{S}/manifest.json", m.dumps())
    stored = ms.read(S)
    with pytest.raises(ManifestError, match="epoch"):
        ms.write(Manifest(S, 2, P), stored)
    assert ms.read(S).manifest.epoch == 3


def test_scan_partitions_every_store_one_node_each(stores) -> None:
    data, manifests = stores
    zarrgen.cordex_v3(data, "cordex/a.zarr")
    zarrgen.cordex_v3(data, "cordex/b.zarr")
    zarrgen.v2_group(data, "old/v2.zarr")
    zarrgen.v2_array(data, "old/v2.zarr/t", (6,), (1,), object_bytes=500)
    zarrgen.cordex_v3(data, "scratch/c.zarr")
    storage.put(data, "notes/readme.txt", b"not zarr")
    outcomes, rep = scan(data, manifests, P, exclude=["scratch*"], executor="sync")
    assert [o.scope for o in outcomes] == ["cordex/a.zarr", "cordex/b.zarr", "old/v2.zarr"]
    st = rep.stage("partition")
    assert (st.tasks, st.written, st.gate_have, st.gate_want) == (3, 3, 3, 3)
    assert ManifestStore(manifests).scopes() == ["cordex/a.zarr", "cordex/b.zarr", "old/v2.zarr"]
    trie = Trie(ManifestStore(manifests).load_all())
    a, b = trie.lookup("cordex/a.zarr/pr/c.0.0"), trie.lookup("cordex/b.zarr/pr/c.0.0")
    assert a.blob == b.blob and a.scope != b.scope
    rows = report(data, manifests)
    blob_rows = [r for r in rows if r.kind == "blob"]
    assert sum(r.bytes for r in blob_rows) == 2 * (20_000 + 2800 + 1800 + 2000) + 6 * 500
    assert all(r.recall_s > 90 for r in blob_rows)


@pytest.mark.slow
def test_scan_on_a_local_cluster(tmp_path, local_cluster) -> None:
    data = storage.open_store(str(tmp_path / "data"))
    manifests = storage.open_store(str(tmp_path / f"m-{uuid.uuid4().hex[:6]}"))
    for name in ("x", "y", "z"):
        zarrgen.cordex_v3(data, f"{name}.zarr")
    outcomes, rep = scan(data, manifests, P, cluster=local_cluster)
    assert [o.epoch for o in outcomes] == [1, 1, 1] and rep.stage("partition").gate_have == 3
    again, _ = scan(data, manifests, P, cluster=local_cluster)
    assert not any(o.written for o in again)


def test_a_retried_write_that_meets_its_own_first_attempt_succeeds(any_store) -> None:
    """A conditional PUT whose response was lost (the server applied it) and which the client
    retries finds its own bytes there: that is success, not a conflict. Anything else still
    conflicts."""
    data = any_store.child("data")
    zarrgen.cordex_v3(data, S)
    ms = ManifestStore(any_store.child("manifests"))
    first = propose(data, ms, S, P)
    ms.write(first.manifest, None)
    ms.write(first.manifest, None)  # the retry of a create
    stored = ms.read(S)
    pinned = stored.manifest.with_pin(Pin(f"{S}/tas", "me", "test"))
    ms.write(pinned, stored)
    ms.write(pinned, stored)  # the retry of an if-match, its version now stale
    assert ms.read(S).manifest == pinned
    other = stored.manifest.with_pin(Pin(f"{S}/pr", "you", "test"))
    with pytest.raises(ManifestConflict, match="changed since epoch 1"):
        ms.write(other, stored)
