"""The replaceable JSON backend."""

from collections.abc import Iterator

import pytest

import kubemoon_core
from kubemoon_core import DecodeError, LocalProtocolError, _json


@pytest.fixture(autouse=True)
def _restore_backend() -> Iterator[None]:
    yield
    kubemoon_core.use_standard_json()


def test_standard_backend_round_trips_unicode() -> None:
    assert kubemoon_core.json_backend() == "json"
    data = _json.dumps({"k": "é", "n": [1, 2]})
    assert data == '{"k":"é","n":[1,2]}'.encode()
    assert _json.loads(data) == {"k": "é", "n": [1, 2]}


@pytest.mark.parametrize("bad", [b"{", b"\xff", b"", b"[" * 100_000])
def test_decode_failures_are_decode_errors_with_the_offset(bad: bytes) -> None:
    with pytest.raises(DecodeError) as info:
        _json.loads(bad, offset=42)
    assert info.value.offset == 42
    assert "byte 42" in str(info.value)


def test_encode_failures_are_local_errors() -> None:
    with pytest.raises(LocalProtocolError):
        _json.dumps({"x": {1, 2}})


def test_fast_backend_switches_and_behaves_the_same() -> None:
    assert kubemoon_core.use_fast_json() is True
    assert kubemoon_core.json_backend() == "orjson"
    assert _json.loads(b'{"a":"\xc3\xa9"}') == {"a": "é"}
    with pytest.raises(DecodeError):
        _json.loads(b"{")
    with pytest.raises(LocalProtocolError):
        _json.dumps({"x": object()})


def test_custom_backend() -> None:
    calls: list[bytes] = []

    def loads(data: bytes) -> object:
        calls.append(data)
        return {"custom": True}

    kubemoon_core.set_json_backend("custom", loads, lambda v: b"{}")
    assert _json.loads(b"anything") == {"custom": True}
    assert _json.dumps({"a": 1}) == b"{}"
    assert calls == [b"anything"]
    assert kubemoon_core.json_backend() == "custom"


def test_missing_fast_backend_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "orjson", None)
    assert kubemoon_core.use_fast_json() is False
    assert kubemoon_core.json_backend() == "json"
