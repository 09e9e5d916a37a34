"""Run every benchmark module (each has `main()`), or the ones named on the command line."""

from __future__ import annotations

import importlib
import pkgutil
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    here = Path(__file__).parent
    names = argv or sorted(
        m.name for m in pkgutil.iter_modules([str(here)]) if not m.name.startswith("_")
    )
    for name in names:
        module = importlib.import_module(f"benchmarks.{name}")
        if hasattr(module, "main"):
            print(f"== {name}", flush=True)
            sys.argv = [f"benchmarks/{name}.py"]  # each runs with its own defaults
            module.main()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
