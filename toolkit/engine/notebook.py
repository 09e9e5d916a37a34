"""Progress bars for Jupyter that a saved notebook keeps in their final state.

`toolkit.engine.progress_bar` draws in Jupyter through rich's live display, an ipywidgets
`Output` widget: a saved notebook keeps only `Output()` of it (a widget's state is not part of the
cell's outputs), and rich does not redraw it when the bars stop, so the cell shows whatever the
last timed refresh caught (`15/16`). This `progress_bar` draws the same bars as an ordinary
display output that it updates in place (`display_id`, no widget), and draws them once more when
they stop, so the cell ends, live and saved, with every stage's final count:

    from toolkit.engine.notebook import progress_bar

    with progress_bar() as bar:
        toolkit.engine.run(plan, cluster=client, progress=bar)

Outside Jupyter it is `toolkit.engine.progress_bar` (a live bar on the terminal).
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from toolkit.engine.progress import ProgressFn
from toolkit.engine.progress import progress_bar as terminal_progress_bar

REDRAW_SECONDS = 0.2  # at most five redraws a second while the counts move


def _display(progress: Progress, handle: Any | None) -> Any:
    """Show the bars' current state (HTML and plain text): a new output, or in place of the
    one `handle` names."""
    from IPython.display import display

    if handle is None:
        return display(progress, display_id=True)
    handle.update(progress)
    return handle


@contextmanager
def progress_bar(console: Console | None = None) -> Iterator[ProgressFn]:
    """Yield a `progress(stage, done, total)` callback that draws a bar per stage; in Jupyter
    as a display output that ends in the bars' final state (see the module's docstring)."""
    if not (console or Console()).is_jupyter:
        with terminal_progress_bar(console) as update:
            yield update
        return
    sys.stdout.flush()  # what the cell printed before stays above the bars
    sys.stderr.flush()
    bars = Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        auto_refresh=False,
    )
    ids: dict[str, Any] = {}
    handle: Any | None = None
    drawn = 0.0
    lock = threading.Lock()  # progress may come from the client's event-loop thread

    def update(stage: str, done: int, total: int) -> None:
        nonlocal handle, drawn
        with lock:
            if stage not in ids:
                ids[stage] = bars.add_task(stage, total=total)
            bars.update(ids[stage], completed=done)
            now = time.monotonic()
            if handle is None or now - drawn >= REDRAW_SECONDS or done == total:
                handle, drawn = _display(bars, handle), now

    try:
        yield update
    finally:
        with lock:
            if ids:  # the bars appear with the first progress; this drawing is their final state
                for task in bars.tasks:
                    bars.stop_task(task.id)  # the elapsed time stops with the bars
                _display(bars, handle)
