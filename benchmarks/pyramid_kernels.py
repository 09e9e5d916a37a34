"""Reducer throughput: numba kernels vs the numpy sum/count reference and reshape().mean().

Same data, same run; GB/s of level-0 input and ratios. Run:
    .venv/bin/python benchmarks/pyramid_kernels.py
Writes benchmarks/results/pyramid_kernels.{json,md}.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from toolkit import kernels

OUT = Path(__file__).resolve().parent / "results"


def best(fn, repeat: int = 5) -> float:
    fn()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def numpy_mean(block: np.ndarray) -> np.ndarray:
    b, h, w = block.shape
    valid = np.isfinite(block).all(axis=0)
    vals = np.where(valid, block, 0.0)
    sums = vals.reshape(b, h // 2, 2, w // 2, 2).sum(axis=(2, 4))
    counts = valid.reshape(h // 2, 2, w // 2, 2).sum(axis=(1, 3))
    return np.divide(sums, counts, out=np.full_like(sums, np.nan), where=counts > 0)


def numpy_mode(block: np.ndarray, fill: int) -> np.ndarray:
    """Vectorised per-window mode over 2x2 windows (labels < 256): one-hot counts + argmax."""
    b, h, w = block.shape
    win = block.reshape(b, h // 2, 2, w // 2, 2).transpose(0, 1, 3, 2, 4).reshape(b, h // 2, w // 2, 4)
    counts = np.zeros((b, h // 2, w // 2, 256), np.uint8)
    for i in range(4):
        np.add.at(counts, (*np.indices(win.shape[:3]), win[..., i]), 1)
    counts[..., fill] = 0
    out = counts.argmax(axis=-1).astype(block.dtype)
    out[counts.max(axis=-1) == 0] = fill
    return out


def main() -> None:
    rng = np.random.default_rng(0)
    shape = (1, 4096, 4096)
    block = rng.normal(size=shape).astype(np.float32)
    block[rng.random(shape) < 0.3] = np.nan
    gb = block.nbytes / 1e9
    valid = kernels.joint_valid(block, np.nan)
    rows = {}
    rows["numba mean (joint_valid + pool)"] = best(
        lambda: kernels.pool(block, kernels.joint_valid(block, np.nan), "mean", np.nan, 2))
    rows["numba mean (pool, weights given)"] = best(lambda: kernels.pool(block, valid, "mean", np.nan, 2))
    rows["numpy sum/count reference"] = best(lambda: numpy_mean(block))
    rows["numpy reshape().mean() (not nodata-aware)"] = best(
        lambda: block.reshape(1, 2048, 2, 2048, 2).mean(axis=(2, 4)))
    rows["numba max"] = best(lambda: kernels.pool(block, valid, "max", np.nan, 2))
    labels = rng.integers(0, 8, (1, 2048, 2048)).astype(np.uint8)
    lvalid = kernels.joint_valid(labels, 0)
    mode_gb = labels.nbytes / 1e9
    mode_rows = {
        "numba mode": best(lambda: kernels.pool(labels, lvalid, "mode", 0, 2)),
        "numpy one-hot mode reference": best(lambda: numpy_mode(labels, 0), repeat=2),
    }
    ref = rows["numpy sum/count reference"]
    results = {
        "shape": list(shape),
        "dtype": "float32",
        "nodata_fraction": 0.3,
        "mean": {k: {"seconds": v, "GB/s": gb / v, "speedup_vs_numpy_ref": ref / v}
                 for k, v in rows.items()},
        "mode": {k: {"seconds": v, "GB/s": mode_gb / v,
                     "speedup_vs_numpy_ref": mode_rows["numpy one-hot mode reference"] / v}
                 for k, v in mode_rows.items()},
    }
    OUT.mkdir(exist_ok=True)
    (OUT / "pyramid_kernels.json").write_text(json.dumps(results, indent=2))
    lines = ["| reducer | s | GB/s | x numpy ref |", "|---|---|---|---|"]
    for section in ("mean", "mode"):
        for k, v in results[section].items():
            lines.append(f"| {k} | {v['seconds']:.4f} | {v['GB/s']:.2f} | {v['speedup_vs_numpy_ref']:.2f} |")
    (OUT / "pyramid_kernels.md").write_text(
        f"# pyramid reducers, {shape} float32 (30% NaN), single thread\n\n" + "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
