"""docs/development/archive-internals.md cannot drift: its call graphs are regenerated from the AST and compared."""

from pathlib import Path

import pytest

from toolkit.examples.archive_callgraph import build, render, select, update_doc

DOC = Path(__file__).resolve().parents[2] / "docs" / "development" / "archive-internals.md"


def test_doc_call_graphs_match_the_code() -> None:
    text = DOC.read_text()
    assert text.count("<!-- callgraph") >= 3
    assert update_doc(text) == text, (
        "run: python -m toolkit.examples.archive_callgraph --write docs/development/archive-internals.md"
    )


def test_read_arrays_only_lists_and_gets_metadata() -> None:
    edges = select(build(), "read_listing", depth=1)  # read_arrays and plan-read read through it
    assert ("hierarchy.read_arrays", "hierarchy.read_listing") in select(
        build(), "read_arrays", depth=1
    )
    calls = {b for _, b in edges if b.startswith("storage.") and b[8].islower()}  # not errors
    assert calls == {"storage.list_objects", "storage.get"}


def test_entry_depth_module_and_private_options() -> None:
    g = build()
    one = select(g, "partition_store", depth=1)
    three = select(g, "partition_store", depth=3)
    assert set(one) < set(three)
    assert ("service.propose", "hierarchy.read_arrays") in three
    assert ("service.partition_store", "service.propose") in one
    public = select(g, module="resolve")
    private = select(g, module="resolve", private=True)
    assert all("Trie._node" not in (a, b) and "_Node" not in a + b for a, b in public)
    assert ("resolve.Trie.add", "resolve.Trie._node") in private
    assert all(a.startswith("resolve.") for a, _ in private)
    assert render(one).startswith("flowchart LR")
    with pytest.raises(ValueError, match="no function"):
        select(g, "does_not_exist")
