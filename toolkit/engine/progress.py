"""Progress bars for `run(..., progress=...)`: one bar per stage, counting tasks.

The same bars serve the terminal (the CLI draws them on stderr) and Jupyter, where rich renders
them as a live output cell (with ipywidgets installed):

    with toolkit.engine.progress_bar() as bar:
        toolkit.engine.run(plan, cluster=client, progress=bar)
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

ProgressFn = Callable[[str, int, int], None]


@contextmanager
def progress_bar(console: Console | None = None) -> Iterator[ProgressFn]:
    """Yield a `progress(stage, done, total)` callback that draws a bar per stage.

    The bars appear with the first progress: a command that fails before any work prints its
    one error line and nothing else (an empty bar display still ends with a blank line).
    What was printed before is flushed first: in Jupyter the bars live in an output widget,
    and a kernel's stdout flushed while it is showing lands inside it, where each redraw
    clears it (the dashboard link printed just before would vanish)."""
    sys.stdout.flush()
    sys.stderr.flush()
    bars: Progress | None = None
    ids: dict[str, Any] = {}

    def update(stage: str, done: int, total: int) -> None:
        nonlocal bars
        if bars is None:
            bars = Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=console,
            )
            bars.start()
        if stage not in ids:
            ids[stage] = bars.add_task(stage, total=total)
        bars.update(ids[stage], completed=done)

    try:
        yield update
    finally:
        if bars is not None:
            bars.stop()
