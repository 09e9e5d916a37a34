"""The shipped JSON Schema and the hand-written validator agree, in both directions."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.archive.test_model import MALFORMED, SEMANTIC, good_doc, mutate
from toolkit.archive.model import ArrayInfo, Manifest, ManifestError, Policy
from toolkit.archive.partition import partition
from toolkit.archive.schema import schema_text, validate_document


def test_schema_file_is_shipped() -> None:
    assert '"$schema"' in schema_text()


def test_valid_document_passes_both() -> None:
    assert validate_document(good_doc()) == []
    Manifest.from_dict(good_doc())


@pytest.mark.parametrize(("mutation", "field"), MALFORMED, ids=lambda v: str(v))
def test_schema_violations_fail_both(mutation: tuple, field: str) -> None:
    doc = mutate(*mutation)
    assert validate_document(doc), f"schema accepted {mutation}"
    with pytest.raises(ManifestError):
        Manifest.from_dict(doc)


@pytest.mark.parametrize(("mutation", "field"), SEMANTIC, ids=lambda v: str(v))
def test_cross_field_rules_are_the_models(mutation: tuple, field: str) -> None:
    """JSON Schema cannot see these; the model must (documented in the schema's description)."""
    doc = mutate(*mutation)
    if mutation[0] != "pins":  # duplicate pins are the one cross-field rule the schema can't see
        assert validate_document(doc) == []
    with pytest.raises(ManifestError):
        Manifest.from_dict(doc)


sizes = st.integers(0, 5000)


@st.composite
def stores(draw: st.DrawFn) -> list[ArrayInfo]:
    names = draw(st.lists(st.text("abcXé_/", min_size=1, max_size=6), max_size=8, unique=True))
    out, used = [], set()
    for name in names:
        path = "s/" + "/".join(p for p in name.split("/") if p)
        if path == "s/" or any(
            path.startswith(u + "/") or u.startswith(path + "/") or u == path for u in used
        ):
            continue
        used.add(path)
        n = draw(st.integers(1, 40))
        out.append(ArrayInfo(path, (n * 4,), (4,), stored_bytes=draw(sizes), objects=n))
    return out


@settings(max_examples=60, deadline=None)
@given(stores(), st.integers(1, 3000), st.integers(0, 50))
def test_every_partition_output_passes_the_schema(arrays, t_max, t_hot) -> None:
    m = partition(arrays, "s", Policy(t_max=t_max, t_hot=t_hot, t_min=max(1, t_max // 3)))
    assert validate_document(m.to_dict()) == []
    assert Manifest.from_dict(m.to_dict()) == m


# Messages of the model's cross-field rules: the only refusals the schema may not share.
CROSS_FIELD = (
    "duplicate id",
    "also claimed by",
    "overlaps",
    "is outside scope",
    "exceeds t_max",
    "pinned twice",
    "whole scope",
    "is not the newest cut's",
    "is not a cut of",
    "does not increase on",
)

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-2, 10**4)
    | st.sampled_from(
        [
            "",
            " ",
            "a",
            "b_x",
            "B",
            "cordex/a.zarr",
            "cordex/a.zarr/tas",
            "cordex/a.zarr/q",
            "/x",
            "x/",
            "a//b",
            "cordex/a.zarr/../b",
            "cordex/a.zarr/.",
            "./x",
            "a/.../b",
            "2027-02-30",
            "2027-01-31",
            "zarr.json",
            "default",
            "v2",
            ".",
            "/",
            "toolkit-archive-manifest/1",
        ]
    ),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from(["id", "prefixes", "width", "who", "why", "prefix", "x"]),
            inner,
            max_size=3,
        )
    ),
    max_leaves=6,
)


def _paths(doc: object, here: tuple = ()) -> list[tuple]:
    out = [here]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _paths(v, (*here, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += _paths(v, (*here, i))
    return out


@st.composite
def mutated(draw: st.DrawFn) -> dict:
    doc = good_doc()
    for _ in range(draw(st.integers(1, 2))):
        path = draw(st.sampled_from(_paths(doc)))
        how = draw(st.sampled_from(["set", "delete", "add"]))
        if not path:  # the document itself: add a top-level field
            doc[draw(st.sampled_from(["root_array", "extra", "hot", "pins"]))] = draw(json_values)
            continue
        parent = doc
        for part in path[:-1]:
            parent = parent[part]
        if how == "delete" and isinstance(parent, dict):
            del parent[path[-1]]
        elif how == "add" and isinstance(parent[path[-1]], dict):
            parent[path[-1]][draw(st.sampled_from(["bucket", "until", "extra", "root_array"]))] = (
                draw(json_values)
            )
        else:
            parent[path[-1]] = draw(json_values)
    return doc


@settings(max_examples=400, deadline=None)
@given(mutated())
def test_schema_and_model_agree_on_any_mutation(doc: dict) -> None:
    """Both ways: the schema refuses only what the model refuses, and the model refuses more only
    for the cross-field rules JSON Schema cannot state."""
    schema_errors = validate_document(doc)
    try:
        Manifest.from_dict(doc)
    except ManifestError as err:
        if not schema_errors:
            assert any(c in str(err) for c in CROSS_FIELD), f"only the model refused: {err}"
    else:
        assert not schema_errors, f"only the schema refused: {schema_errors}"
