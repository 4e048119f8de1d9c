"""JSON Patch (RFC 6902): computing a diff and applying operations, error paths included."""

from __future__ import annotations

from typing import Any

import pytest

from kubemoon_core.errors import JSONPatchError
from kubemoon_core.objects import apply_json_patch, escape_pointer_token, json_patch


def test_escape_pointer_token() -> None:
    assert escape_pointer_token("a/b~c") == "a~1b~0c"
    assert escape_pointer_token("~1") == "~01"


def test_equal_documents_give_an_empty_patch() -> None:
    doc = {"a": [1, {"b": None}], "c": 1.5}
    assert json_patch(doc, {"a": [1, {"b": None}], "c": 1.5}) == []


def test_diff_of_objects_and_arrays() -> None:
    a = {"keep": 1, "gone": True, "list": [1, 2, 3], "nested": {"x": "y"}, "a/b": 1}
    b = {"keep": 1, "new": [], "list": [1, 5], "nested": {"x": "z"}, "a/b": 2}
    ops = json_patch(a, b)
    assert ops == [
        {"op": "remove", "path": "/gone"},
        {"op": "add", "path": "/new", "value": []},
        {"op": "replace", "path": "/list/1", "value": 5},
        {"op": "remove", "path": "/list/2"},
        {"op": "replace", "path": "/nested/x", "value": "z"},
        {"op": "replace", "path": "/a~1b", "value": 2},
    ]
    assert apply_json_patch(a, ops) == b


def test_diff_keeps_json_types_apart() -> None:
    assert json_patch({"v": 1}, {"v": True}) == [{"op": "replace", "path": "/v", "value": True}]
    assert json_patch([1], [1.0]) == [{"op": "replace", "path": "/0", "value": 1.0}]
    assert json_patch(0.0, -0.0) == [{"op": "replace", "path": "", "value": -0.0}]
    assert json_patch([1], [1, 2]) == [{"op": "add", "path": "/1", "value": 2}]


def test_diff_does_not_share_structure_with_its_inputs() -> None:
    b: dict[str, Any] = {"new": {"deep": [1]}}
    ops = json_patch({}, b)
    b["new"]["deep"].append(2)
    assert ops == [{"op": "add", "path": "/new", "value": {"deep": [1]}}]


def test_apply_every_operation() -> None:
    doc = {"a": {"b": [1, 2]}, "c": "x", "~": 0}
    patch = [
        {"op": "add", "path": "/a/b/-", "value": 3},
        {"op": "add", "path": "/a/b/0", "value": 0},
        {"op": "remove", "path": "/a/b/1"},
        {"op": "replace", "path": "/c", "value": "y"},
        {"op": "move", "from": "/c", "path": "/d"},
        {"op": "copy", "from": "/a", "path": "/e"},
        {"op": "test", "path": "/e/b", "value": [0, 2, 3]},
        {"op": "test", "path": "/~0", "value": 0},
        {"op": "move", "from": "/d", "path": "/d"},
    ]
    assert apply_json_patch(doc, patch) == {
        "a": {"b": [0, 2, 3]},
        "d": "y",
        "e": {"b": [0, 2, 3]},
        "~": 0,
    }
    assert doc == {"a": {"b": [1, 2]}, "c": "x", "~": 0}, "the input is never modified"


def test_root_operations() -> None:
    assert apply_json_patch({"a": 1}, [{"op": "replace", "path": "", "value": [1]}]) == [1]
    assert apply_json_patch({"a": 1}, [{"op": "add", "path": "", "value": 2}]) == 2
    assert apply_json_patch({"a": {"b": 1}}, [{"op": "move", "from": "/a", "path": ""}]) == {"b": 1}
    assert apply_json_patch((1, 2), []) == [1, 2]


@pytest.mark.parametrize(
    ("doc", "patch", "message"),
    [
        ({}, "nope", "must be a list"),
        ({}, {"op": "add"}, "must be a list"),
        ({}, [1], "must be an object"),
        ({}, [{"op": "add", "path": 3, "value": 1}], "must be a string"),
        ({}, [{"op": "add", "path": "a", "value": 1}], "must start with '/'"),
        ({}, [{"op": "add", "path": "/a~2", "value": 1}], "bad '~' escape"),
        ({}, [{"op": "add", "path": "/a~", "value": 1}], "bad '~' escape"),
        ({}, [{"op": "add", "path": "/a"}], "needs a 'value'"),
        ({}, [{"op": "frobnicate", "path": "/a"}], "unknown op"),
        ({}, [{"path": "/a"}], "unknown op None"),
        ({}, [{"op": "remove", "path": "/a"}], "does not exist"),
        ({}, [{"op": "remove", "path": ""}], "whole document"),
        ({}, [{"op": "replace", "path": "/a", "value": 1}], "does not exist"),
        ({"a": 1}, [{"op": "add", "path": "/a/b", "value": 1}], "cannot add into a int"),
        ({"a": 1}, [{"op": "add", "path": "/a/b/c", "value": 1}], "cannot descend into a int"),
        ({"a": []}, [{"op": "add", "path": "/a/1", "value": 1}], "out of range"),
        ({"a": [1]}, [{"op": "remove", "path": "/a/1"}], "out of range"),
        ({"a": [1]}, [{"op": "remove", "path": "/a/-"}], "not an array index"),
        ({"a": [1]}, [{"op": "remove", "path": "/a/01"}], "not an array index"),
        ({"a": [1]}, [{"op": "remove", "path": "/a/x"}], "not an array index"),
        ({"a": [1]}, [{"op": "remove", "path": "/a/\u00b2"}], "not an array index"),
        ({"a": {}}, [{"op": "move", "from": "/a", "path": "/a/b"}], "into itself"),
        ({"a": {}}, [{"op": "move", "from": 1, "path": "/b"}], "must be a string"),
        ({"a": {}}, [{"op": "copy", "from": "/x", "path": "/b"}], "does not exist"),
        ({"a": 1}, [{"op": "test", "path": "/a", "value": True}], "test failed"),
        ({"a": 1}, [{"op": "test", "path": "/b", "value": 1}], "does not exist"),
    ],
)
def test_apply_errors_name_the_operation(doc: Any, patch: Any, message: str) -> None:
    with pytest.raises(JSONPatchError, match=message) as info:
        apply_json_patch(doc, patch)
    if isinstance(patch, list):
        assert "operation 0" in str(info.value)


def test_apply_error_names_a_later_operation() -> None:
    patch = [{"op": "add", "path": "/a", "value": 1}, {"op": "remove", "path": "/b"}]
    with pytest.raises(JSONPatchError, match="operation 1"):
        apply_json_patch({}, patch)


@pytest.mark.parametrize(
    ("doc", "value"),
    [
        (1, 1.0),
        (1.0, 1),
        ({"a": [2, {"b": 3}]}, {"a": [2.0, {"b": 3.0}]}),
        (0.0, -0.0),
        (10**20, 1e20),
    ],
)
def test_test_compares_numbers_by_value(doc: Any, value: Any) -> None:
    # RFC 6902 section 4.6: numbers are equal when their values are numerically equal.
    patch = [{"op": "test", "path": "/v", "value": value}]
    assert apply_json_patch({"v": doc}, patch) == {"v": doc}


@pytest.mark.parametrize(
    ("doc", "value"),
    [(True, 1), (1, True), (False, 0), (0.0, False), ([1], [True]), ({"a": 1}, {"a": "1"}), (1, 2)],
)
def test_test_keeps_booleans_and_numbers_apart(doc: Any, value: Any) -> None:
    patch = [{"op": "test", "path": "/v", "value": value}]
    with pytest.raises(JSONPatchError, match="test failed"):
        apply_json_patch({"v": doc}, patch)


def test_a_list_shifted_by_one_is_replaced_whole() -> None:
    before = {"items": [{"n": i} for i in range(5000)]}
    after = {"items": [{"n": -1}, *before["items"]]}
    ops = json_patch(before, after)
    assert ops == [{"op": "replace", "path": "/items", "value": after["items"]}]
    assert apply_json_patch(before, ops) == after


def test_a_few_changes_in_a_long_list_stay_element_wise() -> None:
    before = {"items": list(range(1000))}
    changed = list(range(1000))
    changed[10] = -10
    changed[500] = -500
    ops = json_patch(before, {"items": changed})
    assert ops == [
        {"op": "replace", "path": "/items/10", "value": -10},
        {"op": "replace", "path": "/items/500", "value": -500},
    ]
    # Past the limit but under half the length: still element-wise.
    many = list(range(1000))
    for index in range(0, 400, 20):
        many[index] = -index - 1
    assert len(json_patch(before, {"items": many})) == 20


def test_mappings_and_tuples_diff_like_dicts_and_lists() -> None:
    from types import MappingProxyType

    assert json_patch({"a": (1, 2)}, {"a": [1, 2]}) == []
    assert json_patch(MappingProxyType({"a": 1}), {"a": 1}) == []
    assert json_patch({"a": (1,)}, {"a": "x"}) == [{"op": "replace", "path": "/a", "value": "x"}]
    ops = json_patch({"a": 1}, {"a": (1, {"b": MappingProxyType({"c": 2})})})
    assert ops == [{"op": "replace", "path": "/a", "value": [1, {"b": {"c": 2}}]}]
