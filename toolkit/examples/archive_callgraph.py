"""A call graph of toolkit.archive from the AST, as a mermaid flowchart (for docs/development/archive-internals.md).

    python -m toolkit.examples.archive_callgraph --entry partition_store --depth 2
    python -m toolkit.examples.archive_callgraph --module resolve --private
    python -m toolkit.examples.archive_callgraph --write docs/development/archive-internals.md   # regenerate the doc's blocks

Only calls that name a function of toolkit.archive (or `toolkit.storage`) are edges; anything else
(builtins, methods of values) is left out. A doc block is `<!-- callgraph ARGS -->`, a mermaid
fence, then `<!-- /callgraph -->`; the tests regenerate every block and compare.
"""

from __future__ import annotations

import argparse
import ast
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Graph", "build", "render", "select", "update_doc"]

PACKAGE = Path(__file__).resolve().parents[1] / "archive"  # the package drawn, beside examples
EXTERNAL = {"toolkit.storage": "storage", "toolkit.engine": "engine"}


@dataclass
class Graph:
    defined: dict[str, set[str]] = field(default_factory=dict)  # module -> qualnames
    edges: dict[str, set[str]] = field(default_factory=dict)  # "mod.qual" -> {"mod.qual"}


def _imports(tree: ast.Module) -> tuple[dict[str, str], dict[str, str]]:
    """(name -> 'module.name', alias -> module) for imports from this package or the edges."""
    names: dict[str, str] = {}
    modules: dict[str, str] = {}
    for node in tree.body:
        if not isinstance(node, ast.ImportFrom) or not node.module:
            continue
        for alias in node.names:
            local = alias.asname or alias.name
            full = f"{node.module}.{alias.name}"
            if node.module == "toolkit.archive":
                modules[local] = alias.name
            elif node.module.startswith("toolkit.archive."):
                names[local] = f"{node.module.rsplit('.', 1)[1]}.{alias.name}"
            elif full in EXTERNAL:
                modules[local] = EXTERNAL[full]
            elif node.module in EXTERNAL:
                names[local] = f"{EXTERNAL[node.module]}.{alias.name}"
    return names, modules


class _Calls(ast.NodeVisitor):
    def __init__(
        self,
        module: str,
        cls: str | None,
        local: set[str],
        names: dict[str, str],
        modules: dict[str, str],
    ) -> None:
        self.module, self.cls, self.local = module, cls, local
        self.names, self.modules = names, modules
        self.found: set[str] = set()
        self.types: dict[str, str] = {}  # variable -> "module.Class", from annotations/assignments

    def _class(self, expr: ast.AST | None) -> str | None:
        """The package class an annotation or a constructing expression names."""
        if isinstance(expr, ast.Name):
            if expr.id in self.local:
                return f"{self.module}.{expr.id}"
            return self.names.get(expr.id)
        if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
            try:
                return self._class(ast.parse(expr.value, mode="eval").body)
            except SyntaxError:
                return None
        if isinstance(expr, ast.BinOp):  # `A | B`: the first package class
            return self._class(expr.left) or self._class(expr.right)
        if isinstance(expr, ast.Call):
            return self._class(expr.func)
        if isinstance(expr, ast.IfExp):
            return self._class(expr.body) or self._class(expr.orelse)
        return None

    def visit_arg(self, node: ast.arg) -> None:
        cls = self._class(node.annotation)
        if cls:
            self.types[node.arg] = cls

    def visit_Assign(self, node: ast.Assign) -> None:
        cls = self._class(node.value)
        for target in node.targets:
            if isinstance(target, ast.Name) and cls:
                self.types[target.id] = cls
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        f = node.func
        if isinstance(f, ast.Name):
            if f.id in self.local:
                self.found.add(f"{self.module}.{f.id}")
            elif f.id in self.names:
                self.found.add(self.names[f.id])
        elif isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name):
            base = f.value.id
            if base in self.modules:
                self.found.add(f"{self.modules[base]}.{f.attr}")
            elif base in ("self", "cls") and self.cls and f"{self.cls}.{f.attr}" in self.local:
                self.found.add(f"{self.module}.{self.cls}.{f.attr}")
            elif base in self.local:
                self.found.add(f"{self.module}.{base}.{f.attr}")
            elif base in self.names:
                self.found.add(f"{self.names[base]}.{f.attr}")
            elif base in self.types:
                self.found.add(f"{self.types[base]}.{f.attr}")
        self.generic_visit(node)


def build(package: Path = PACKAGE) -> Graph:
    graph = Graph()
    sources = {
        p.stem: ast.parse(p.read_text())
        for p in sorted(package.glob("*.py"))
        if p.stem != "__init__"
    }
    for module, tree in sources.items():
        funcs: dict[str, tuple[ast.AST, str | None]] = {}
        for node in tree.body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                funcs[node.name] = (node, None)
            elif isinstance(node, ast.ClassDef):
                funcs[node.name] = (node, None)  # calling a class: construction
                for item in node.body:
                    if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                        funcs[f"{node.name}.{item.name}"] = (item, node.name)
        graph.defined[module] = set(funcs)
        names, modules = _imports(tree)
        for qual, (node, cls) in funcs.items():
            if isinstance(node, ast.ClassDef):
                continue
            visitor = _Calls(module, cls, set(funcs), names, modules)
            for arg in node.args.args + node.args.kwonlyargs:  # type: ignore[attr-defined]
                visitor.visit_arg(arg)
            for stmt in node.body:  # type: ignore[attr-defined]
                visitor.visit(stmt)
            graph.edges[f"{module}.{qual}"] = visitor.found - {f"{module}.{qual}"}
    return graph


def _private(node: str) -> bool:
    return any(part.startswith("_") and not part.startswith("__") for part in node.split(".")[1:])


def _known(graph: Graph, node: str) -> bool:
    module, _, qual = node.partition(".")
    return module in EXTERNAL.values() or qual in graph.defined.get(module, set())


def select(
    graph: Graph,
    entry: str | None = None,
    depth: int = 2,
    module: str | None = None,
    private: bool = False,
) -> list[tuple[str, str]]:
    """The edges to draw: reachable from `entry` within `depth`, or all of `module`, or all."""

    def keep(n: str) -> bool:
        return _known(graph, n) and (private or not _private(n))

    if entry is not None:
        starts = [n for n in graph.edges if n == entry or n.split(".", 1)[1] == entry]
        if not starts:
            raise ValueError(f"no function {entry!r} in toolkit.archive")
        out: set[tuple[str, str]] = set()
        frontier, seen = list(starts), set(starts)
        for _ in range(depth):
            nxt = []
            for n in frontier:
                for m in graph.edges.get(n, ()):
                    if keep(m):
                        out.add((n, m))
                        if m not in seen:
                            seen.add(m)
                            nxt.append(m)
            frontier = nxt
        return sorted(out)
    return sorted(
        (n, m)
        for n, targets in graph.edges.items()
        for m in targets
        if keep(n) and keep(m) and (module is None or n.split(".", 1)[0] == module)
    )


def render(edges: list[tuple[str, str]]) -> str:
    nodes = sorted({n for e in edges for n in e})
    ids = {n: f"n{i}" for i, n in enumerate(nodes)}
    lines = ["flowchart LR"]
    for module in sorted({n.split(".", 1)[0] for n in nodes}):
        lines.append(f'  subgraph {module}["{module}"]')
        lines += [
            f'    {ids[n]}["{n.split(".", 1)[1]}"]' for n in nodes if n.split(".", 1)[0] == module
        ]
        lines.append("  end")
    lines += [f"  {ids[a]} --> {ids[b]}" for a, b in edges]
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m toolkit.examples.archive_callgraph")
    p.add_argument("--entry", help="function to start from (name or module.name)")
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--module", help="only calls made by this module")
    p.add_argument("--private", action="store_true", help="include _private functions")
    p.add_argument("--write", type=Path, help="regenerate the callgraph blocks of a markdown file")
    return p


def generate(argv: list[str]) -> str:
    args = _parser().parse_args(argv)
    edges = select(build(), args.entry, args.depth, args.module, args.private)
    return render(edges)


_BLOCK = re.compile(
    r"(<!-- callgraph(?P<args>[^>]*)-->\n)```mermaid\n.*?```\n(<!-- /callgraph -->)", re.S
)


def update_doc(text: str) -> str:
    """The doc with every callgraph block regenerated from the code."""
    return _BLOCK.sub(
        lambda m: (
            f"{m.group(1)}```mermaid\n{generate(shlex.split(m.group('args')))}\n```\n{m.group(3)}"
        ),
        text,
    )


def main(argv: list[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    if args.write:
        args.write.write_text(update_doc(args.write.read_text()))
        return
    print(render(select(build(), args.entry, args.depth, args.module, args.private)))


if __name__ == "__main__":
    main()
