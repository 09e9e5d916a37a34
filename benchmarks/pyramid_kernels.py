"""Reducer throughput: numba kernels vs numpy references, same data, same run.

GB/s are level-0 input bytes per second, single thread (numba and numpy alike). Ratios are
against the nodata-aware numpy sum/count reference (isfinite, where, reshape-sum, divide where
count > 0) and against plain `reshape().mean()` (not nodata-aware, the floor numpy users start
from). Mode is compared with a vectorised numpy one-hot/argmax reference. Run:
    .venv/bin/python -m benchmarks pyramid_kernels
Writes benchmarks/results/pyramid_kernels.{json,md}.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from benchmarks._report import write
from toolkit import kernels

ROUNDS = 3  # every case of a block timed once per round, the rounds one after another


def best(fn: Callable[[], object], repeat: int = 7) -> float:
    """Best of `repeat` after a warm-up call (compiles / loads the numba cache)."""
    fn()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def interleaved(cases: dict[str, Callable[[], object]], **kw: int) -> dict[str, float]:
    """Each case's best over `ROUNDS` rounds of `best`, the cases interleaved: the first cases
    of a process ran cold (clock ramp, first page faults) when each was timed in one go: the
    same kernel measured 17.8x numpy first and 23.5x once warm."""
    secs: dict[str, float] = {}
    for _ in range(ROUNDS):
        for name, fn in cases.items():
            secs[name] = min(secs.get(name, float("inf")), best(fn, **kw))
    return secs


def numpy_mean(block: np.ndarray) -> np.ndarray:
    """The numpy sum/count reference: joint isfinite mask, where, reshape-sum, guarded divide."""
    b, h, w = block.shape
    valid = np.isfinite(block).all(axis=0)
    vals = np.where(valid, block, 0.0)
    sums = vals.reshape(b, h // 2, 2, w // 2, 2).sum(axis=(2, 4))
    counts = valid.reshape(h // 2, 2, w // 2, 2).sum(axis=(1, 3))
    return np.divide(sums, counts, out=np.full_like(sums, np.nan), where=counts > 0)


def numpy_plain_mean(block: np.ndarray) -> np.ndarray:
    b, h, w = block.shape
    return block.reshape(b, h // 2, 2, w // 2, 2).mean(axis=(2, 4))


def numpy_mode(block: np.ndarray, fill: int) -> np.ndarray:
    """Vectorised 2x2 mode (labels < 256): one-hot window counts, argmax (ties -> smallest)."""
    b, h, w = block.shape
    win = (
        block.reshape(b, h // 2, 2, w // 2, 2)
        .transpose(0, 1, 3, 2, 4)
        .reshape(b, h // 2, w // 2, 4)
    )
    counts = np.zeros((b, h // 2, w // 2, 256), np.uint8)
    for i in range(4):
        np.add.at(counts, (*np.indices(win.shape[:3]), win[..., i]), 1)
    counts[..., fill] = 0
    out = counts.argmax(axis=-1).astype(block.dtype)
    out[counts.max(axis=-1) == 0] = fill
    return out


MEMCPY = "memcpy of the same bytes (np.copyto), this machine's bandwidth"


def mean_rows(block: np.ndarray, label: str) -> list[dict]:
    gb = block.nbytes / 1e9
    valid = kernels.joint_valid(block, np.nan)
    ref = kernels.pool_level0(block, np.nan, "mean", np.nan)[0]
    np.testing.assert_allclose(ref, numpy_mean(block), rtol=1e-5, atol=1e-5)  # float32 sums
    nan, out, count = block.dtype.type(np.nan), np.empty_like(ref), np.empty(ref.shape[1:], "u4")
    kernels._mean2_level0(block, nan, count, out, nan)
    assert np.array_equal(out.view("u4"), ref.view("u4"))  # the kernel alone: the same bits
    cases = {
        "numba mean, factor-2 path, level 0 (joint mask fused)": lambda: kernels.pool_level0(
            block, np.nan, "mean", np.nan
        ),
        "numba mean, factor-2 path, cascade (count plane given)": lambda: kernels.pool(
            block, valid, "mean", np.nan
        ),
        # the same kernels writing into outputs made once: what the calls above spend besides
        # is the first touch of their fresh output pages (32 MiB a call on the 1-band block)
        "numba mean, factor-2 level 0, outputs made once (the kernel alone)": lambda: (
            kernels._mean2_level0(block, nan, count, out, nan)
        ),
        "numba mean, factor-2 cascade, outputs made once (the kernel alone)": lambda: (
            kernels._mean2(block, valid, count, out, nan)
        ),
        "numba mean, general path, level 0 (joint_valid + pool)": lambda: kernels.pool(
            block, kernels.joint_valid(block, np.nan), "mean", np.nan, fast=False
        ),
        "numba mean, general path, cascade (count plane given)": lambda: kernels.pool(
            block, valid, "mean", np.nan, fast=False
        ),
        "numpy sum/count reference": lambda: numpy_mean(block),
        "numpy reshape().mean() (not nodata-aware)": lambda: numpy_plain_mean(block),
        MEMCPY: lambda: np.copyto(copy, block),
    }
    copy = np.empty_like(block)
    secs = interleaved(cases)
    ref_s = secs["numpy sum/count reference"]
    plain_s = secs["numpy reshape().mean() (not nodata-aware)"]
    return [
        {
            "block": label,
            "reducer": name,
            "seconds": s,
            "GB/s": gb / s,
            "x numpy sum/count": ref_s / s,
            "x reshape().mean()": plain_s / s,
            "% of memcpy": 100 * secs[MEMCPY] / s,
        }
        for name, s in secs.items()
    ]


def mode_rows(labels: np.ndarray, label: str) -> list[dict]:
    gb = labels.nbytes / 1e9
    lvalid = kernels.joint_valid(labels, 0)
    assert np.array_equal(kernels.pool(labels, lvalid, "mode", 0)[0], numpy_mode(labels, 0))
    classes = np.unique(labels[labels != 0])
    plane = labels[0]

    def class_level1() -> np.ndarray:
        return kernels.classes_level0(plane, 0, classes)[0]

    _, counts1, _ = kernels.classes_level0(plane, 0, classes)

    def class_cascade() -> np.ndarray:
        return kernels.pool_classes(counts1, classes, 0, plane.dtype)[0]

    assert np.array_equal(class_level1(), numpy_mode(labels, 0)[0])
    secs = interleaved(
        {
            "numba mode (no declared classes: labels ranked per window)": lambda: kernels.pool(
                labels, lvalid, "mode", 0
            ),
            "numba mode with declared classes, level 0 (class counts + mode)": class_level1,
            "numba mode with declared classes, cascade step (sum counts 2x2 + mode)": (
                class_cascade
            ),
        }
    )
    secs["numpy one-hot mode reference"] = best(lambda: numpy_mode(labels, 0), repeat=2)
    ref_s = secs["numpy one-hot mode reference"]
    return [
        {
            "block": label,
            "reducer": name,
            "seconds": s,
            "GB/s": gb / s,
            "x numpy sum/count": "",
            "x reshape().mean()": "",
            "% of memcpy": "",
            "x numpy mode ref": ref_s / s,
        }
        for name, s in secs.items()
    ]


def main() -> None:
    rng = np.random.default_rng(0)
    rows = []
    one = rng.normal(size=(1, 4096, 4096)).astype(np.float32)
    one[rng.random(one.shape) < 0.3] = np.nan
    rows += mean_rows(one, "1x4096x4096 f32, 30% NaN")
    three = rng.normal(size=(3, 2048, 4096)).astype(np.float32)
    three[rng.random(three.shape) < 0.1] = np.nan  # bands invalid at different pixels
    rows += mean_rows(three, "3x2048x4096 f32, 10% NaN per band")
    labels = rng.integers(0, 8, (1, 2048, 2048)).astype(np.uint8)
    rows += mode_rows(labels, "1x2048x2048 u8, 8 labels, 0 = nodata")
    for r in rows:
        r.setdefault("x numpy mode ref", "")
    notes = (
        "Single thread, best of 7 after a warm-up, in 3 rounds with the cases of a block interleaved; GB/s = level-0 input bytes / s. "
        "Ratios are against the numpy references on the same array in the same run. The "
        "factor-2 path is bitwise equal to the general path (tests/pyramid/test_kernels_fast.py). "
        "Mode with declared classes (CF flag_values) is what a build runs: level 1 counts each "
        "class per window and takes the mode from the counts; each further level sums the "
        "parent's counts 2x2 (the cascade step is timed on the level-1 counts of the same "
        "block, so its GB/s is per level-0 byte those counts stand for). The memcpy row copies "
        "the same block in the same run: '% of memcpy' is the kernel's share of this machine's "
        "memory bandwidth. The factor-2 mean loads every pixel before selecting on its weight: "
        "with the load under the condition (as until 2026-12-04) numba 0.68's LLVM kept a branch that "
        "mispredicts on scattered nodata: the unchanged kernel measured 1.03 GB/s, where an "
        "earlier session's numba (unpinned, the venv is rebuilt) made it 3.5-5.9 GB/s. Since "
        "2026-12-05 the level-0 path selects on its 0/1 mask without multiplying by a weight "
        "(v * 1.0 is v: bitwise the same), about 1.3x faster interleaved against the old kernel. "
        "A cascade step reads a uint32 count plane beside the values, twice the bytes of level 0, "
        "and multiplies by it. The 'outputs made once' rows call the same kernels with their "
        "output arrays made before the clock: the difference to the `pool` call above them is "
        "the first touch of a call's fresh output pages (the allocator returns freed blocks of "
        "this size to the system, so each call faults its outputs in again)."
    )
    write("pyramid_kernels", rows, notes)


if __name__ == "__main__":
    main()
