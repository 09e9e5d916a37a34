"""archive benchmarks: trie resolution vs a linear prefix scan, trie size vs object count,
partition time for a 10^5-object store.

    .venv/bin/python benchmarks/archive_bench.py [--keys 1000000] [--objects 100000] [--local DIR]

Writes benchmarks/results/archive_bench.json and .md.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import time
import uuid
from pathlib import Path

from toolkit import storage
from toolkit.archive.model import ArrayInfo, Manifest, Policy
from toolkit.archive.partition import partition
from toolkit.archive.resolve import Trie
from toolkit.archive.service import partition_store

OUT = Path(__file__).resolve().parent / "results"
POLICY = Policy(t_max=10 * 2**30, t_hot=2**20, t_min=2**30)


def scope_arrays(scope: str, objects_big: int) -> list[ArrayInfo]:
    """One large bucketed variable, 20 mid-size ones (coalesced), 3 coordinates."""
    arrays = [
        ArrayInfo(
            f"{scope}/tas",
            (objects_big, 8),
            (1, 8),
            dimension_names=("time", "x"),
            stored_bytes=objects_big * 50 * 2**20,
            objects=objects_big,
        )
    ]
    arrays += [
        ArrayInfo(f"{scope}/v{i:02d}", (100,), (1,), stored_bytes=400 * 2**20 + i, objects=100)
        for i in range(20)
    ]
    arrays += [
        ArrayInfo(f"{scope}/{c}", (10,), (10,), dimension_names=(c,), stored_bytes=80, objects=1)
        for c in ("time", "lat", "lon")
    ]
    return arrays


def manifests(n_scopes: int, objects_big: int = 10_000) -> list[Manifest]:
    return [
        partition(
            scope_arrays(f"project{s // 10}/store{s:03d}.zarr", objects_big),
            f"project{s // 10}/store{s:03d}.zarr",
            POLICY,
        )
        for s in range(n_scopes)
    ]


def event_keys(mans: list[Manifest], n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    keys = []
    for _ in range(n):
        m = rng.choice(mans)
        r = rng.random()
        if r < 0.6:
            keys.append(f"{m.scope}/tas/c/{rng.randrange(10_000)}/0")
        elif r < 0.9:
            keys.append(f"{m.scope}/v{rng.randrange(20):02d}/c/{rng.randrange(100)}")
        elif r < 0.95:
            keys.append(f"{m.scope}/tas/zarr.json")
        else:
            keys.append(f"elsewhere/{rng.randrange(10**6)}/x")
    return keys


def linear(prefixes: list[str], key: str) -> str | None:
    """The baseline: test every prefix (longest first) against the key."""
    for p in prefixes:
        if key == p or key.startswith(p + "/"):
            return p
    return None


def bench_resolve(n_keys: int, n_scopes: int) -> dict:
    mans = manifests(n_scopes)
    trie = Trie(mans)
    keys = event_keys(mans, n_keys)
    t0 = time.perf_counter()
    for k in keys:
        trie.lookup(k)
    trie_s = time.perf_counter() - t0
    prefixes = sorted(
        {p for m in mans for b in m.blobs for p in b.prefixes} | {h for m in mans for h in m.hot},
        key=len,
        reverse=True,
    )
    sample = keys[: max(1, n_keys // 100)]
    t0 = time.perf_counter()
    for k in sample:
        linear(prefixes, k)
    lin_s = time.perf_counter() - t0
    trie_rate, lin_rate = n_keys / trie_s, len(sample) / lin_s
    return {
        "keys": n_keys,
        "scopes": n_scopes,
        "cuts": len(trie),
        "prefixes": len(prefixes),
        "trie_per_s": round(trie_rate),
        "linear_per_s": round(lin_rate),
        "linear_sampled_keys": len(sample),
        "ratio": round(trie_rate / lin_rate, 1),
        "trie_us_per_key": round(1e6 / trie_rate, 3),
    }


def bench_size() -> list[dict]:
    rows = []
    for objects in (10**2, 10**3, 10**4, 10**5, 10**6):
        m = partition(scope_arrays("s.zarr", objects), "s.zarr", POLICY)
        trie = Trie([m])
        total = objects + 20 * 100 + 3
        rows.append(
            {"objects": total, "cuts": len(trie), "nodes": trie.nodes, "blobs": len(m.blobs)}
        )
    return rows


def write_store(store: storage.Store, scope: str, objects: int) -> None:
    """A raw v3 store of `objects` chunk objects: one big array and 9 smaller ones."""

    def meta(path: str, shape: list[int], chunks: list[int]) -> None:
        doc = {
            "zarr_format": 3,
            "node_type": "array",
            "shape": shape,
            "data_type": "uint8",
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": chunks}},
            "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
            "fill_value": 0,
            "codecs": [{"name": "bytes"}],
        }
        storage.put(store, f"{path}/zarr.json", json.dumps(doc).encode())

    storage.put(store, f"{scope}/zarr.json", b'{"zarr_format": 3, "node_type": "group"}')
    big = objects // 2
    meta(f"{scope}/big", [big, 1], [1, 1])
    for i in range(big):
        storage.put(store, f"{scope}/big/c/{i}/0", b"x" * 64)
    rest = objects - big
    for v in range(9):
        n = rest // 9 + (1 if v < rest % 9 else 0)
        meta(f"{scope}/v{v}", [n], [1])
        for i in range(n):
            storage.put(store, f"{scope}/v{v}/c/{i}", b"y" * 16)


def bench_partition(objects: int, local: Path | None) -> list[dict]:
    rows = []
    targets = [("memory", f"memory://{uuid.uuid4().hex}")]
    if local is not None:
        targets.append(("local", str(local / uuid.uuid4().hex)))
    policy = Policy(t_max=2**20, t_hot=1024, t_min=2**18)
    for kind, url in targets:
        data = storage.open_store(url)
        t0 = time.perf_counter()
        write_store(data, "big.zarr", objects)
        write_s = time.perf_counter() - t0
        manifests_store = storage.open_store(f"memory://{uuid.uuid4().hex}")
        t0 = time.perf_counter()
        out = partition_store(data, manifests_store, "big.zarr", policy)
        first_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        again = partition_store(data, manifests_store, "big.zarr", policy)
        second_s = time.perf_counter() - t0
        rows.append(
            {
                "store": kind,
                "objects": objects,
                "write_s": round(write_s, 2),
                "partition_s": round(first_s, 3),
                "repartition_s": round(second_s, 3),
                "blobs": len(out.manifest.blobs),
                "rewritten": again.written,
            }
        )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--scopes", type=int, default=100)
    ap.add_argument("--objects", type=int, default=100_000)
    ap.add_argument("--local", type=Path, default=None)
    args = ap.parse_args()
    result = {
        "machine": platform.platform(),
        "python": platform.python_version(),
        "resolve": bench_resolve(args.keys, args.scopes),
        "trie_size": bench_size(),
        "partition": bench_partition(args.objects, args.local),
    }
    OUT.mkdir(exist_ok=True)
    (OUT / "archive_bench.json").write_text(json.dumps(result, indent=2) + "\n")
    r = result["resolve"]
    md = [
        "# archive benchmarks",
        "",
        f"`{' '.join(['benchmarks/archive_bench.py', *[f'--{k} {v}' for k, v in vars(args).items() if v is not None]])}`"
        f" on {result['machine']}, Python {result['python']}.",
        "",
        "## Resolution: trie vs linear prefix scan",
        "",
        "| keys | scopes | cuts | trie keys/s | linear keys/s | ratio | trie µs/key |",
        "|---:|---:|---:|---:|---:|---:|---:|",
        f"| {r['keys']} | {r['scopes']} | {r['cuts']} | {r['trie_per_s']} | {r['linear_per_s']} "
        f"| {r['ratio']}x | {r['trie_us_per_key']} |",
        "",
        f"The linear scan was timed on {r['linear_sampled_keys']} of the keys (its rate does not "
        "depend on how many keys are fed).",
        "",
        "## Trie size vs object count (one scope)",
        "",
        "| objects | cuts (len) | nodes | blobs |",
        "|---:|---:|---:|---:|",
    ]
    md += [
        f"| {s['objects']} | {s['cuts']} | {s['nodes']} | {s['blobs']} |"
        for s in result["trie_size"]
    ]
    md += [
        "",
        "## Partition time",
        "",
        "| store | objects | write s | partition s | repartition s (no change) | blobs |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    md += [
        f"| {p['store']} | {p['objects']} | {p['write_s']} | {p['partition_s']} | "
        f"{p['repartition_s']} | {p['blobs']} |"
        for p in result["partition"]
    ]
    (OUT / "archive_bench.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
