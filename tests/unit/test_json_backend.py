"""The replaceable JSON backend."""

from collections.abc import Iterator

import pytest

import kubemoon_core
from kubemoon_core import _json
from kubemoon_core.errors import DecodeError, LocalProtocolError


@pytest.fixture(autouse=True)
def _restore_backend() -> Iterator[None]:
    yield
    kubemoon_core.json_backends.use_standard_json()


def test_standard_backend_round_trips_unicode() -> None:
    assert kubemoon_core.json_backends.json_backend() == "json"
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
    assert kubemoon_core.json_backends.use_fast_json() is True
    assert kubemoon_core.json_backends.json_backend() == "orjson"
    assert _json.loads(b'{"a":"\xc3\xa9"}') == {"a": "é"}
    with pytest.raises(DecodeError):
        _json.loads(b"{")
    with pytest.raises(LocalProtocolError):
        _json.dumps({"x": object()})


def test_msgspec_backend_switches_and_behaves_the_same() -> None:
    assert kubemoon_core.json_backends.use_msgspec_json() is True
    assert kubemoon_core.json_backends.json_backend() == "msgspec"
    assert _json.loads(b'{"a":"\xc3\xa9","n":123456789012345678901234567890}') == {
        "a": "é",
        "n": 123456789012345678901234567890,
    }
    assert _json.loads('{"a":[1,2.5]}') == {"a": [1, 2.5]}
    assert _json.dumps({"k": "é"}) == '{"k":"é"}'.encode()
    for bad in (b"{", b'"\xff"', b"\xef\xbb\xbf{}", b"{}x"):
        with pytest.raises(DecodeError, match="invalid JSON"):
            _json.loads(bad, offset=7)
    with pytest.raises(LocalProtocolError):
        _json.dumps({"x": object()})


def test_missing_msgspec_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "msgspec", None)
    assert kubemoon_core.json_backends.use_msgspec_json() is False
    assert kubemoon_core.json_backends.json_backend() == "json"


def test_custom_backend() -> None:
    calls: list[bytes] = []

    def loads(data: bytes) -> object:
        calls.append(data)
        return {"custom": True}

    kubemoon_core.json_backends.set_json_backend("custom", loads, lambda v: b"{}")
    assert _json.loads(b"anything") == {"custom": True}
    assert _json.dumps({"a": 1}) == b"{}"
    assert calls == [b"anything"]
    assert kubemoon_core.json_backends.json_backend() == "custom"


def test_missing_fast_backend_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "orjson", None)
    assert kubemoon_core.json_backends.use_fast_json() is False
    assert kubemoon_core.json_backends.json_backend() == "json"


# --- RFC 8259 on every backend (issue 15) ------------------------------------------------

NON_FINITE_DOCUMENTS = [
    b"NaN",
    b"Infinity",
    b"-Infinity",
    b"1e999999",
    b"-1e999999",
    b'{"a": [1, NaN]}',
    b'{"spec": {"replicas": Infinity}}',
    b'{"n": 1.5e400}',
]


@pytest.fixture(params=["json", "orjson", "msgspec"])
def backend(request: pytest.FixtureRequest) -> str:
    if request.param == "orjson":
        assert kubemoon_core.json_backends.use_fast_json() is True
    elif request.param == "msgspec":
        assert kubemoon_core.json_backends.use_msgspec_json() is True
    return str(request.param)


@pytest.mark.parametrize("document", NON_FINITE_DOCUMENTS)
def test_non_finite_numbers_are_not_json(backend: str, document: bytes) -> None:
    with pytest.raises(DecodeError, match="invalid JSON"):
        _json.loads(document)
    with pytest.raises(DecodeError, match="invalid JSON"):
        _json.loads(document.decode())


def test_finite_extremes_still_decode(backend: str) -> None:
    assert _json.loads(b"[1e308, -0.0, 5e-324, 12345678901234567890]") == [
        1e308,
        -0.0,
        5e-324,
        12345678901234567890,
    ]


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_numbers_cannot_be_encoded(backend: str, value: float) -> None:
    with pytest.raises(LocalProtocolError, match="cannot be encoded"):
        _json.dumps({"spec": {"ratio": value}})
    with pytest.raises(LocalProtocolError, match="cannot be encoded"):
        _json.dumps([None, {"deep": [1, (2, value)]}])
    # A real null next to a finite float is fine.
    assert _json.loads(_json.dumps({"a": None, "b": 1.5})) == {"a": None, "b": 1.5}


def _nested(depth: int) -> object:
    value: object = {}
    for _ in range(depth):
        value = {"a": [value]}
    return value


def test_encoding_a_deeply_nested_object_is_a_local_error(backend: str) -> None:
    with pytest.raises(LocalProtocolError, match="cannot be encoded"):
        _json.dumps(_nested(100_000))


def test_a_request_body_too_deep_to_encode_is_a_local_error(backend: str) -> None:
    from kubemoon_core import GroupVersionResource, create_request

    configmaps = GroupVersionResource("", "v1", "configmaps")
    body = {"metadata": {"name": "x"}, "data": _nested(100_000)}
    with pytest.raises(LocalProtocolError, match="cannot be encoded"):
        create_request(configmaps, body, namespace="ns")


def test_decoding_a_deeply_nested_response_is_a_decode_error(backend: str) -> None:
    from kubemoon_core import Response, decode_response

    deep = b'{"a":' * 100_000 + b"1" + b"}" * 100_000
    with pytest.raises(DecodeError):
        decode_response(Response(200, (), deep))
