"""Typed decoding and encoding: strict, path-named errors; None-free output; typed views."""

import datetime
import enum
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

import pytest

from kubemoon_core import KubeMoonError, ObjectKey
from kubemoon_core.builtin.meta_v1 import ObjectMeta
from kubemoon_core.errors import DecodeError, LocalProtocolError, SchemaError, TypedDecodeError
from kubemoon_core.lowlevel import Store
from kubemoon_core.typed import (
    JsonName,
    MetadataField,
    PreserveUnknown,
    TypedView,
    custom_resource,
    decode,
    encode,
)

UTC = datetime.UTC


class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


@dataclass
class Leaf:
    name: str
    weight: float = 1.0


@dataclass
class Everything:
    text: str
    count: int
    ratio: float
    flag: bool
    anything: Any
    port: int | str
    mode: Literal["a", "b"]
    number: Literal[1, 2]
    colour: Colour
    level: Level
    when: datetime.datetime
    names: list[str]
    grid: list[list[int]]
    leaves: list[Leaf]
    labels: dict[str, str]
    by_name: dict[str, Leaf]
    times: list[datetime.datetime]
    leaf: Leaf
    maybe: str | None = None
    maybe_leaf: Leaf | None = None
    defaulted: int = 7
    factory: list[str] = field(default_factory=lambda: ["x"])
    renamed: Annotated[str, JsonName("URL")] = ""


def good() -> dict[str, Any]:
    return {
        "text": "t",
        "count": 3,
        "ratio": 0.5,
        "flag": True,
        "anything": {"free": [1, None]},
        "port": "http",
        "mode": "a",
        "number": 2,
        "colour": "blue",
        "level": 1,
        "when": "2026-11-30T10:00:00Z",
        "names": ["a", "b"],
        "grid": [[1, 2], []],
        "leaves": [{"name": "l", "weight": 2.5}],
        "labels": {"k": "v"},
        "byName": {"x": {"name": "x"}},
        "times": ["2026-01-01T00:00:00+02:00"],
        "leaf": {"name": "only"},
        "maybe": "m",
        "maybeLeaf": None,
        "defaulted": 8,
        "factory": ["f"],
        "URL": "u",
    }


def test_a_good_document_decodes_to_the_declared_types() -> None:
    obj = decode(Everything, good())
    assert obj.colour is Colour.BLUE
    assert obj.level is Level.LOW
    assert obj.when == datetime.datetime(2026, 11, 30, 10, tzinfo=UTC)
    assert obj.times[0].utcoffset() == datetime.timedelta(hours=2)
    assert obj.leaves == [Leaf("l", 2.5)]
    assert obj.by_name == {"x": Leaf("x")}
    assert obj.maybe_leaf is None
    assert obj.renamed == "u"
    assert obj.anything == {"free": [1, None]}


def test_encode_gives_the_document_back_without_none() -> None:
    data = good()
    del data["maybeLeaf"]  # None is left out when encoding
    data["byName"]["x"]["weight"] = 1.0  # the default is written out
    data["leaf"]["weight"] = 1.0
    assert encode(decode(Everything, good())) == data


def test_absent_optional_fields_take_their_defaults() -> None:
    data = good()
    for key in ("maybe", "maybeLeaf", "defaulted", "factory", "URL"):
        del data[key]
    obj = decode(Everything, data)
    assert (obj.maybe, obj.maybe_leaf, obj.defaulted, obj.factory, obj.renamed) == (
        None,
        None,
        7,
        ["x"],
        "",
    )
    assert "maybe" not in encode(obj)


def test_an_int_is_accepted_as_a_float() -> None:
    data = good()
    data["ratio"] = 2
    value = decode(Everything, data).ratio
    assert value == 2.0
    assert type(value) is float


def test_decoded_lists_and_dicts_are_copies() -> None:
    data = good()
    obj = decode(Everything, data)
    obj.names.append("c")
    obj.labels["new"] = "x"
    assert data["names"] == ["a", "b"]
    assert data["labels"] == {"k": "v"}


def mutated(path: list[Any], value: Any) -> dict[str, Any]:
    data = good()
    target: Any = data
    for step in path[:-1]:
        target = target[step]
    if value is DELETE:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return data


DELETE = object()

ERRORS: list[tuple[list[Any], Any, str]] = [
    (["text"], 1, ".text: expected str, got int"),
    (["text"], None, ".text: expected str, got null"),
    (["count"], True, ".count: expected int, got bool"),
    (["count"], 1.0, ".count: expected int, got float"),
    (["ratio"], "1", ".ratio: expected float, got str"),
    (["ratio"], False, ".ratio: expected float, got bool"),
    (["flag"], 1, ".flag: expected bool, got int"),
    (["port"], 1.5, ".port: expected int or str, got float"),
    (["mode"], "c", ".mode: expected one of 'a', 'b', got 'c'"),
    (["mode"], 1, ".mode: expected one of 'a', 'b', got 1"),
    (["number"], True, ".number: expected one of 1, 2, got True"),
    (["colour"], "green", ".colour: expected one of 'red', 'blue', got 'green'"),
    (["level"], "1", ".level: expected one of 1, 2, got '1'"),
    (["level"], True, ".level: expected one of 1, 2, got True"),
    (["when"], 5, ".when: expected date-time str, got int"),
    (["when"], "yesterday", ".when: expected an RFC 3339 date-time, got 'yesterday'"),
    (["when"], "2026-11-30", ".when: expected an RFC 3339 date-time with an offset"),
    (["names"], "a", ".names: expected list, got str"),
    (["names", 1], 2, ".names[1]: expected str, got int"),
    (["grid", 0, 1], "x", ".grid[0][1]: expected int, got str"),
    (["leaves", 0, "name"], 1, ".leaves[0].name: expected str, got int"),
    (["leaves", 0], [], ".leaves[0]: expected object, got list"),
    (["labels"], [], ".labels: expected object, got list"),
    (["labels", "k"], 1, ".labels.k: expected str, got int"),
    (["byName", "x", "weight"], "w", ".byName.x.weight: expected float, got str"),
    (["times", 0], "never", ".times[0]: expected an RFC 3339 date-time"),
    (["leaf"], DELETE, ".leaf: required field is missing"),
    (["leaf", "name"], DELETE, ".leaf.name: required field is missing"),
    (["leaf", "extra"], 1, ".leaf.extra: unknown field"),
    (["surprise"], 1, ".surprise: unknown field"),
    (["maybeLeaf"], {"name": 1}, ".maybeLeaf.name: expected str, got int"),
    (["defaulted"], None, ".defaulted: expected int, got null"),
    (["factory", 0], 0, ".factory[0]: expected str, got int"),
]


@pytest.mark.parametrize(("path", "value", "message"), ERRORS)
def test_errors_name_the_json_path(path: list[Any], value: Any, message: str) -> None:
    with pytest.raises(TypedDecodeError) as caught:
        decode(Everything, mutated(path, value))
    assert str(caught.value).startswith(message)
    assert isinstance(caught.value, DecodeError)
    assert caught.value.path == message.split(":", maxsplit=1)[0]


def test_a_document_that_is_not_an_object() -> None:
    with pytest.raises(TypedDecodeError) as caught:
        decode(Leaf, ["not", "an", "object"])
    assert str(caught.value) == ".: expected object, got list"
    assert caught.value.path == ""


def test_an_optional_field_may_be_null() -> None:
    assert decode(Everything, mutated(["maybe"], None)).maybe is None


@dataclass
class Open:
    known: str
    rest: Annotated[dict[str, Any], PreserveUnknown()] = field(default_factory=dict)


def test_unknown_fields_are_kept_when_the_schema_says_so() -> None:
    obj = decode(Open, {"known": "k", "x": 1, "y": {"z": None}})
    assert obj.rest == {"x": 1, "y": {"z": None}}
    assert encode(obj) == {"known": "k", "x": 1, "y": {"z": None}}
    assert decode(Open, {"known": "k"}).rest == {}
    # A preserved key never overrides a declared field.
    assert encode(Open("k", {"known": "other", "w": 2})) == {"known": "k", "w": 2}


@custom_resource(group="example.com", version="v1")
@dataclass
class Gadget:
    spec: Leaf
    status: Leaf | None = None
    metadata: MetadataField = MetadataField()


def test_a_resource_keeps_metadata_and_checks_api_version_and_kind() -> None:
    data = {
        "apiVersion": "example.com/v1",
        "kind": "Gadget",
        "metadata": {"name": "g", "namespace": "ns"},
        "spec": {"name": "s"},
    }
    obj = decode(Gadget, data)
    assert obj.metadata == ObjectMeta(name="g", namespace="ns")
    assert encode(obj) == {**data, "spec": {"name": "s", "weight": 1.0}}
    # apiVersion, kind and metadata may be absent (list items, hand-made objects).
    bare = decode(Gadget, {"spec": {"name": "s"}})
    assert bare.metadata == ObjectMeta()
    assert encode(bare) == {
        "apiVersion": "example.com/v1",
        "kind": "Gadget",
        "spec": {"name": "s", "weight": 1.0},
    }


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        (
            "apiVersion",
            "example.com/v2",
            ".apiVersion: expected example.com/v1, got 'example.com/v2'",
        ),
        ("kind", "Widget", ".kind: expected Gadget, got 'Widget'"),
        ("metadata", [], ".metadata: expected object, got list"),
        ("other", 1, ".other: unknown field"),
    ],
)
def test_resource_envelope_errors(key: str, value: Any, message: str) -> None:
    with pytest.raises(TypedDecodeError, match="^" + message.replace("(", r"\(")):
        decode(Gadget, {"spec": {"name": "s"}, key: value})


@dataclass
class Checked:
    value: int

    def __post_init__(self) -> None:
        if self.value < 0:
            raise ValueError("must not be negative")
        if self.value == 13:
            raise LocalProtocolError("unlucky")


def test_a_dataclass_that_refuses_its_values() -> None:
    with pytest.raises(TypedDecodeError) as caught:
        decode(Checked, {"value": -1})
    assert str(caught.value) == ".: Checked refused the value: must not be negative"
    # KubeMoon's own errors pass through unchanged.
    with pytest.raises(LocalProtocolError, match="unlucky"):
        decode(Checked, {"value": 13})


def test_datetimes_encode_as_rfc3339() -> None:
    @dataclass
    class When:
        at: datetime.datetime

    assert encode(When(datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC))) == {
        "at": "2026-01-02T03:04:05Z"
    }
    tz = datetime.timezone(datetime.timedelta(hours=-5))
    assert encode(When(datetime.datetime(2026, 1, 2, tzinfo=tz))) == {
        "at": "2026-01-02T00:00:00-05:00"
    }
    with pytest.raises(LocalProtocolError, match="without a timezone"):
        encode(When(datetime.datetime(2026, 1, 2)))


def test_only_declared_dataclasses_have_codecs() -> None:
    with pytest.raises(SchemaError, match="int is not a dataclass"):
        decode(int, 1)
    with pytest.raises(SchemaError, match="str is not a dataclass"):
        encode("text")
    with pytest.raises(KubeMoonError):
        TypedView(Store(), dict)


def test_codecs_are_generated_once_per_class() -> None:
    from kubemoon_core._typed import codec

    assert codec(Leaf) is codec(Leaf)
    assert codec(Everything).decode is not codec(Leaf).decode


def obj(name: str, rv: str, weight: float = 1.0) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ns", "resourceVersion": rv},
        "spec": {"name": name, "weight": weight},
    }


def test_a_typed_view_of_a_store() -> None:
    store = Store()
    view = TypedView(store, Gadget)
    assert len(view) == 0
    store.upsert(obj("a", "1"))
    store.upsert(obj("b", "2"))
    key = ObjectKey("ns", "a")
    first = view.get(key)
    assert first is not None
    assert first.spec == Leaf("a")
    assert view.get(key) is first  # decoded once while the stored object is the same
    store.upsert(obj("a", "3", weight=2.0))
    second = view.get(key)
    assert second is not None
    assert second.spec.weight == 2.0
    assert [g.spec.name for g in view.objects()] == ["a", "b"]
    assert [k.name for k, _ in view.items()] == ["a", "b"]
    assert len(view) == 2
    store.delete(obj("a", "4"))
    assert view.get(key) is None
    store.delete(obj("b", "5"))
    assert view.objects() == []


def test_a_typed_view_forgets_objects_deleted_from_the_store() -> None:
    store = Store()
    view = TypedView(store, Gadget)
    store.upsert(obj("a", "1"))
    store.upsert(obj("b", "2"))
    assert len(view.objects()) == 2
    store.delete(obj("a", "3"))
    assert [g.spec.name for g in view.objects()] == ["b"]
    assert len(view._cache) == 1  # bounded by the store


def test_a_typed_view_raises_on_an_object_that_does_not_decode() -> None:
    store = Store()
    view = TypedView(store, Gadget)
    bad = obj("a", "1")
    bad["spec"]["name"] = 5
    store.upsert(bad)
    with pytest.raises(TypedDecodeError, match=r"^\.spec\.name: expected str, got int"):
        view.objects()


def test_an_optional_field_without_a_default_is_none_when_absent() -> None:
    @dataclass
    class Bare:
        maybe: str | None

    assert decode(Bare, {}) == Bare(None)
    assert encode(Bare(None)) == {}


def test_any_items_and_keyword_only_fields() -> None:
    @dataclass(kw_only=True)
    class Loose:
        free: dict[str, Any]
        items: list[Any]
        name: str = "n"

    @dataclass
    class Mixed:
        first: int
        loose: Loose
        later: str = field(default="l", kw_only=True)

    data = {"first": 1, "loose": {"free": {"a": [None]}, "items": [1, "x", None]}, "later": "z"}
    obj = decode(Mixed, data)
    assert obj == Mixed(1, Loose(free={"a": [None]}, items=[1, "x", None]), later="z")
    assert encode(obj) == {**data, "loose": {**data["loose"], "name": "n"}}
    with pytest.raises(TypedDecodeError, match=r"^\.loose\.items: expected list, got object"):
        decode(Mixed, {"first": 1, "loose": {"free": {}, "items": {}}})
