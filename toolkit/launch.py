"""The `toolkit` console script's first step: the C allocator setting a long command needs,
which glibc reads only when a process starts.

glibc raises its mmap threshold each time a large block is freed, so after a backfill's first
round every round's change set is carved from the heap instead of mapped and unmapped, and the
heap keeps what it freed: a backfill in process grew by ~1-2 MiB a round and its second round
alone added 60 MiB (benchmarks/results/virtual_scale.md). A fixed trim threshold turns the
dynamic threshold off, as Dask's nanny does for its workers (`MALLOC_TRIM_THRESHOLD_`,
`distributed.nanny.pre-spawn-environ`). Setting it with `mallopt` once the interpreter runs
does not help (measured), so the command re-executes itself once with the variable set; a
value the user set is kept. Everything else starts in `toolkit.cli.main`.
"""

import contextlib
import os
import sys

TRIM = "MALLOC_TRIM_THRESHOLD_"
TRIM_BYTES = "65536"  # Dask's value for its workers


def _glibc() -> bool:
    try:
        return sys.platform == "linux" and os.confstr("CS_GNU_LIBC_VERSION") is not None
    except (ValueError, OSError):
        return False


def main() -> None:
    """Re-execute once with the allocator setting (glibc only), then run the CLI."""
    if TRIM not in os.environ and _glibc() and sys.orig_argv:
        os.environ[TRIM] = TRIM_BYTES
        with contextlib.suppress(OSError):  # cannot re-execute (embedded): run as it is
            os.execv(sys.executable, [sys.executable, *sys.orig_argv[1:]])
    from toolkit.cli import main as cli

    cli()
