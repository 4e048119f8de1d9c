"""No JSON backend changes a value: for documents holding integers of any size (next to
floats, strings and the rest, nested in objects and arrays), every backend decodes exactly
what the standard library's ``json.loads`` gives (the same types, the same values, the same
key order), on every path that decodes with it (a document, a watch line, a declared
class), and writes every value so that it reads back the same.

Integers beyond 64 bits matter: the apiserver serves a tenant's ``1e20`` as the integer
literal ``100000000000000000000``; a backend that read it as a float would hand a
reconcile a float, and writing it back would change the tenant's data.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kubemoon_core import KubeMoonError, _json
from kubemoon_core.json_backends import (
    decode_json,
    use_fast_json,
    use_msgspec,
    use_msgspec_json,
    use_standard_json,
)
from kubemoon_core.lowlevel import WatchDecoder
from kubemoon_core.typed import decode

BACKENDS: dict[str, Callable[[], object]] = {
    "json": use_standard_json,
    "orjson": use_fast_json,
    "msgspec": use_msgspec_json,
}
TEXT = st.text(max_size=8).filter(lambda text: not any(0xD800 <= ord(c) < 0xE000 for c in text))
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()  # unbounded: beyond 64 bits too
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.sampled_from([10**20, -(10**20), 2**63, -(2**63) - 1, 2**64, 10**400])
    | st.floats(allow_nan=False, allow_infinity=False)
    | TEXT
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=12,
)


def exact(value: Any) -> Any:
    """``value`` with every type spelled out (``1 == 1.0 == True`` and ``0.0 == -0.0`` in
    Python; not here), key order included."""
    if isinstance(value, dict):
        return ("object", [(key, exact(item)) for key, item in value.items()])
    if isinstance(value, list):
        return ("array", [exact(item) for item in value])
    if isinstance(value, float):
        return ("float", repr(value))
    return (type(value).__name__, value)


@pytest.fixture(autouse=True)
def _standard_afterwards() -> Iterator[None]:
    yield
    use_standard_json()
    use_msgspec(True)


@given(VALUES, st.booleans())
def test_every_backend_decodes_what_the_standard_library_does(value: Any, spaced: bool) -> None:
    text = json.dumps(value, separators=(", ", ": ") if spaced else (",", ":"))
    expected = exact(json.loads(text))
    for name, select in BACKENDS.items():
        assert select() is not False, name
        assert exact(_json.loads(text.encode())) == expected, name
        assert exact(_json.loads(bytearray(text.encode()))) == expected, name
        assert exact(_json.loads(text)) == expected, name


@given(VALUES)
def test_every_backend_writes_what_reads_back_the_same(value: Any) -> None:
    expected = exact(value)
    for name, select in BACKENDS.items():
        assert select() is not False, name
        written = _json.dumps(value)
        assert exact(json.loads(written)) == expected, name
        assert exact(_json.loads(written)) == expected, name


@given(st.lists(VALUES, min_size=1, max_size=4))
def test_every_backend_gives_watch_events_their_exact_objects(values: list[Any]) -> None:
    objects = [{"metadata": {"name": f"o{i}"}, "data": value} for i, value in enumerate(values)]
    stream = b"".join(
        json.dumps({"type": "MODIFIED", "object": obj}).encode() + b"\n" for obj in objects
    )
    expected = [exact(obj) for obj in objects]
    for name, select in BACKENDS.items():
        assert select() is not False, name
        for keep_raw in (False, True):
            events = WatchDecoder(keep_raw=keep_raw).receive_data(stream)
            assert [exact(event.object) for event in events] == expected, (name, keep_raw)


@dataclass
class Numbers:
    count: int = 0
    anything: Any = None
    ratio: float = 0.0
    counts: list[int] = field(default_factory=list)
    table: dict[str, Any] = field(default_factory=dict)


NUMBERS = st.fixed_dictionaries(
    {},
    optional={
        "count": SCALARS,
        "anything": VALUES,
        "ratio": SCALARS,
        "counts": st.lists(SCALARS, max_size=3),
        "table": st.dictionaries(TEXT, VALUES, max_size=3),
    },
)


def outcome(decode_it: Callable[[], Any]) -> Any:
    try:
        result = decode_it()
    except KubeMoonError as exc:  # any foreign exception fails the test
        return ("error", type(exc).__name__, str(exc))
    return exact(
        {
            "count": result.count,
            "anything": result.anything,
            "ratio": result.ratio,
            "counts": result.counts,
            "table": result.table,
        }
    )


@given(NUMBERS)
def test_typed_decoding_keeps_integers_of_any_size(document: dict[str, Any]) -> None:
    data = json.dumps(document).encode()
    expected = outcome(lambda: decode(Numbers, json.loads(data)))
    for name, select in BACKENDS.items():
        assert select() is not False, name
        for fast in (True, False):
            use_msgspec(fast)
            assert outcome(lambda: decode_json(Numbers, data)) == expected, (name, fast)
