"""Hypothesis: encode then decode gives the value back, for arbitrary values of declared types.

Values are drawn from the type hints directly (an oracle independent of the generated
codecs). Also: encoding yields JSON, and decoding arbitrary JSON either succeeds or raises
TypedDecodeError, never another exception.
"""

import dataclasses
import datetime
import enum
import json
import sys
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from configmirror._api import ConfigMirror
from kubemoon_core.errors import TypedDecodeError
from kubemoon_core.typed import JsonName, PreserveUnknown, decode, encode

sys.path.insert(0, str(Path(__file__).parents[2] / "examples" / "widgets"))
from widget_api import Widget

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=8,
)
TIMEZONES = st.sampled_from(
    [datetime.UTC, datetime.timezone(datetime.timedelta(hours=5, minutes=30))]
)


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
    colour: Colour
    level: Level
    when: datetime.datetime
    grid: list[list[int]]
    leaves: list[Leaf]
    by_name: dict[str, Leaf]
    times: dict[str, list[datetime.datetime]]
    maybe: Leaf | None = None
    renamed: Annotated[str | None, JsonName("URL")] = None
    extra: Annotated[dict[str, Any], PreserveUnknown()] = field(default_factory=dict)


KNOWN = {"text", "count", "ratio", "flag", "anything", "port", "mode", "colour", "level"}
KNOWN |= {"when", "grid", "leaves", "byName", "times", "maybe", "URL"}


def strategy(tp: Any) -> st.SearchStrategy[Any]:
    """Values of a declared type, from its hints."""
    if typing.get_origin(tp) is Annotated:
        return strategy(typing.get_args(tp)[0])
    args = typing.get_args(tp)
    if type(None) in args:
        rest = [a for a in args if a is not type(None)]
        return st.none() | strategy(rest[0] if len(rest) == 1 else typing.Union[tuple(rest)])  # noqa: UP007
    simple: dict[Any, st.SearchStrategy[Any]] = {
        str: st.text(max_size=8),
        int: st.integers(),
        float: st.floats(allow_nan=False, allow_infinity=False),
        bool: st.booleans(),
        Any: JSON,
        datetime.datetime: st.datetimes(timezones=TIMEZONES),
    }
    if tp in simple:
        return simple[tp]
    if set(args) == {int, str}:
        return st.integers() | st.text(max_size=8)
    origin = typing.get_origin(tp)
    if origin is Literal:
        return st.sampled_from(args)
    if origin is list:
        return st.lists(strategy(args[0]), max_size=3)
    if origin is dict:
        return st.dictionaries(st.text(max_size=5), strategy(args[1]), max_size=3)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return st.sampled_from(list(tp))
    assert dataclasses.is_dataclass(tp), tp
    hints = typing.get_type_hints(tp, include_extras=True)
    fields = {}
    for f in dataclasses.fields(tp):
        hint = hints[f.name]
        if any(isinstance(m, PreserveUnknown) for m in getattr(hint, "__metadata__", ())):
            keys = st.text(max_size=5).filter(lambda k: k not in KNOWN)
            fields[f.name] = st.dictionaries(keys, JSON, max_size=3)
        elif f.name == "metadata":
            fields[f.name] = st.dictionaries(st.text(max_size=5), JSON, max_size=3)
        else:
            fields[f.name] = strategy(hint)
    return st.builds(tp, **fields)


def round_trips(cls: type, value: Any) -> None:
    encoded = encode(value)
    assert json.loads(json.dumps(encoded)) == encoded  # plain JSON values only
    decoded = decode(cls, encoded)
    assert decoded == value
    assert encode(decoded) == encoded


@given(strategy(Everything))
def test_every_supported_type_round_trips(value: Everything) -> None:
    round_trips(Everything, value)


@given(strategy(ConfigMirror))
def test_configmirror_round_trips(value: ConfigMirror) -> None:
    round_trips(ConfigMirror, value)


@given(strategy(Widget))
def test_widget_round_trips(value: Widget) -> None:
    round_trips(Widget, value)


@given(st.dictionaries(st.sampled_from(["spec", "status", "metadata", "kind", "x"]), JSON))
def test_arbitrary_json_decodes_or_raises_a_typed_error(data: dict[str, Any]) -> None:
    for cls in (ConfigMirror, Widget, Everything):
        try:
            decode(cls, data)
        except TypedDecodeError:
            pass


@given(strategy(ConfigMirror), st.data())
def test_a_wrongly_typed_leaf_is_named_by_its_path(
    value: ConfigMirror, data: st.DataObject
) -> None:
    encoded = encode(value)
    # Every (path, container, key) of a string leaf.
    leaves: list[tuple[str, Any, Any]] = []

    def walk(node: Any, path: str) -> None:
        items = node.items() if isinstance(node, dict) else enumerate(node)
        for key, child in items:
            child_path = f"{path}.{key}" if isinstance(node, dict) else f"{path}[{key}]"
            if isinstance(child, dict | list):
                if not child_path.startswith(".metadata"):
                    walk(child, child_path)
            elif isinstance(child, str) and child_path not in (".apiVersion", ".kind"):
                leaves.append((child_path, node, key))

    walk(encoded, "")
    path, container, key = data.draw(st.sampled_from(leaves))
    container[key] = 12345
    with pytest.raises(TypedDecodeError) as caught:
        decode(ConfigMirror, encoded)
    assert caught.value.path == path
    assert caught.value.reason.endswith(("got int", "got 12345"))
