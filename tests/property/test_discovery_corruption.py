"""Hypothesis: every single-field corruption of a valid discovery document is rejected,
and the error names the corrupted field's path.

Each decoder's schema below lists the fields it reads: type, whether required, and the
shape of nested objects and lists. A corruption either gives a field a value of another
JSON type, or deletes a required field.
"""

import copy
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from discovery_samples import (
    AGGREGATED_API,
    AGGREGATED_APIS,
    API_GROUP_LIST,
    API_VERSIONS,
    APPS_V1,
    CORE_V1,
)
from hypothesis import given
from hypothesis import strategies as st

from kubemoon_core.errors import DecodeError
from kubemoon_core.lowlevel import (
    decode_aggregated_discovery,
    decode_api_group_list,
    decode_api_resource_list,
    decode_api_versions,
)

# A schema node: ("str" | "bool"), ("list", item), ("obj", {key: (node, required)}).
Node = Any
STR, BOOL = "str", "bool"


def obj(**fields: tuple[Node, bool]) -> Node:
    return ("obj", fields)


def lst(item: Node) -> Node:
    return ("list", item)


KIND = (STR, False)
VERSION_ENTRY = obj(groupVersion=(STR, True), version=(STR, True))
API_VERSIONS_SCHEMA = obj(kind=KIND, versions=(lst(STR), True))
GROUP_LIST_SCHEMA = obj(
    kind=KIND,
    groups=(
        lst(
            obj(
                name=(STR, True),
                versions=(lst(VERSION_ENTRY), True),
                preferredVersion=(VERSION_ENTRY, False),
            )
        ),
        True,
    ),
)
RESOURCE_LIST_SCHEMA = obj(
    kind=KIND,
    groupVersion=(STR, True),
    resources=(
        lst(
            obj(
                name=(STR, True),
                namespaced=(BOOL, True),
                kind=(STR, True),
                verbs=(lst(STR), True),
                singularName=(STR, False),
                shortNames=(lst(STR), False),
                categories=(lst(STR), False),
                group=(STR, False),
                version=(STR, False),
            )
        ),
        True,
    ),
)
AGGREGATED_SCHEMA = obj(
    kind=KIND,
    items=(
        lst(
            obj(
                metadata=(obj(name=(STR, False)), False),
                versions=(
                    lst(
                        obj(
                            version=(STR, True),
                            freshness=(STR, False),
                            resources=(
                                lst(
                                    obj(
                                        resource=(STR, True),
                                        scope=(STR, True),
                                        verbs=(lst(STR), True),
                                        responseKind=(obj(kind=(STR, True)), False),
                                        singularResource=(STR, False),
                                        shortNames=(lst(STR), False),
                                        categories=(lst(STR), False),
                                        subresources=(
                                            lst(
                                                obj(
                                                    subresource=(STR, True),
                                                    verbs=(lst(STR), False),
                                                )
                                            ),
                                            False,
                                        ),
                                    )
                                ),
                                False,
                            ),
                        )
                    ),
                    True,
                ),
            )
        ),
        True,
    ),
)

Location = tuple[str | int, ...]


def render(location: Location) -> str:
    out = ""
    for part in location:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
    return out


def fields(doc: Any, schema: Node, here: Location = ()) -> Iterator[tuple[Location, Node, bool]]:
    """Every (location, schema node, required) that is present in the document."""
    if schema[0] == "obj":
        for key, (node, required) in schema[1].items():
            if key in doc:
                yield (*here, key), node, required
                yield from fields(doc[key], node, (*here, key))
            elif required:
                raise AssertionError(f"sample lacks required {render((*here, key))}")
    elif schema[0] == "list":
        for i, item in enumerate(doc):
            yield (*here, i), schema[1], True
            yield from fields(item, schema[1], (*here, i))


WRONG: dict[str, list[Any]] = {
    STR: [1, 2.5, True, None, [], {}],
    BOOL: ["true", 1, 0, None, [], {}],
    "list": ["x", 1, True, None, {}],
    "obj": ["x", 1, False, None, []],
}


def kind_of(node: Node) -> str:
    return node if isinstance(node, str) else node[0]


CASES: list[tuple[str, dict[str, Any], Node, Callable[[Any], Any]]] = [
    ("APIVersions", API_VERSIONS, API_VERSIONS_SCHEMA, decode_api_versions),
    ("APIGroupList", API_GROUP_LIST, GROUP_LIST_SCHEMA, decode_api_group_list),
    ("core/v1", CORE_V1, RESOURCE_LIST_SCHEMA, decode_api_resource_list),
    ("apps/v1", APPS_V1, RESOURCE_LIST_SCHEMA, decode_api_resource_list),
    ("aggregated /apis", AGGREGATED_APIS, AGGREGATED_SCHEMA, decode_aggregated_discovery),
    ("aggregated /api", AGGREGATED_API, AGGREGATED_SCHEMA, decode_aggregated_discovery),
]


@st.composite
def corruptions(draw: st.DrawFn) -> tuple[str, Any, Callable[[Any], Any], str]:
    name, sample, schema, decoder = draw(st.sampled_from(CASES))
    location, node, required = draw(st.sampled_from(list(fields(sample, schema))))
    doc = copy.deepcopy(sample)
    parent = doc
    for part in location[:-1]:
        parent = parent[part]
    last = location[-1]
    delete = isinstance(last, str) and required and draw(st.booleans())
    if delete:
        del parent[last]
    else:
        parent[last] = draw(st.sampled_from(WRONG[kind_of(node)]))
    return name, doc, decoder, render(location)


@given(corruptions())
def test_each_single_field_corruption_is_rejected_at_its_path(
    case: tuple[str, Any, Callable[[Any], Any], str],
) -> None:
    name, doc, decoder, path = case
    with pytest.raises(DecodeError) as info:
        decoder(doc)
    assert info.value.path == path, f"{name}: corrupted {path}, error names {info.value.path}"


def test_the_samples_themselves_decode() -> None:
    for _, sample, schema, decoder in CASES:
        assert list(fields(sample, schema))
        decoder(sample)
