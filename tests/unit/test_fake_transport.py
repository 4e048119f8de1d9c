"""The strict fake transport must fail loudly on anything off-script."""

import pytest

from kubemoon_core import GroupVersionResource, ListOptions, get_request, list_request
from kubemoon_testing import Exchange, FakeTransport, FakeTransportError, json_response

CM = GroupVersionResource("", "v1", "configmaps")


def test_serves_the_script_in_order() -> None:
    first = json_response(200, {"kind": "ConfigMap"})
    transport = FakeTransport([Exchange("GET", "/api/v1/namespaces/ns/configmaps/a", first)])
    transport.expect(
        "GET", "/api/v1/namespaces/ns/configmaps", json_response(200, {}), query={"limit": "500"}
    )
    with transport:
        assert transport.handle(get_request(CM, "a", namespace="ns")) is first
        assert transport.remaining == 1
        transport.handle(list_request(CM, namespace="ns", options=ListOptions(limit=500)))
    assert len(transport.requests) == 2
    assert first.header("Content-Type") == "application/json"


def test_unexpected_requests_fail() -> None:
    transport = FakeTransport()
    with pytest.raises(FakeTransportError, match="unexpected request GET"):
        transport.handle(get_request(CM, "a", namespace="ns"))
    transport = FakeTransport().expect(
        "GET", "/api/v1/namespaces/ns/configmaps/b", json_response(200, {})
    )
    with pytest.raises(FakeTransportError, match="expected GET .*/b, got GET .*/a"):
        transport.handle(get_request(CM, "a", namespace="ns"))


def test_query_and_check_mismatches_fail() -> None:
    transport = FakeTransport().expect(
        "GET", "/api/v1/configmaps", json_response(200, {}), query={"limit": "10"}
    )
    with pytest.raises(FakeTransportError, match="query limit"):
        transport.handle(list_request(CM, options=ListOptions(limit=5)))
    checked = FakeTransport().expect(
        "GET", "/api/v1/configmaps", json_response(200, {}), check=lambda r: r.stream
    )
    with pytest.raises(FakeTransportError, match="refused"):
        checked.handle(list_request(CM))


def test_unconsumed_script_fails_at_exit() -> None:
    transport = FakeTransport().expect("GET", "/api", json_response(200, {}))
    with pytest.raises(FakeTransportError, match="never came; next: GET /api"), transport:
        pass
    # An exception inside the block is not hidden by the leftover check.
    with pytest.raises(KeyError), FakeTransport().expect("GET", "/api", json_response(200, {})):
        raise KeyError("boom")
