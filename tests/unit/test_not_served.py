"""A 404 about the request's group, version or resource is told apart from a missing object.

The bodies are the real kube-apiserver v1.37.2's (recorded by
tests/integration/test_not_served_on_apiserver.py, which checks them live on every adapter).
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kubemoon_core import KubeMoonError, Request, Response, decode_response
from kubemoon_core.errors import NotFound, ResourceNotServed
from kubemoon_core.lowlevel import error_from_response

PAGE_NOT_FOUND = b"404 page not found\n"
GENERIC = json.dumps(
    {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "the server could not find the requested resource",
        "reason": "NotFound",
        "details": {},
        "code": 404,
    }
).encode()
MISSING_OBJECT = json.dumps(
    {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'configmaps "a" not found\n',
        "reason": "NotFound",
        "details": {"name": "a", "kind": "configmaps"},
        "code": 404,
    }
).encode()


def test_an_unknown_group_names_group_version_and_resource() -> None:
    path = "/apis/widgets.example.org/v1/namespaces/ns/widgets/a"
    error = error_from_response(404, (("Content-Type", "text/plain"),), PAGE_NOT_FOUND, path=path)
    assert isinstance(error, ResourceNotServed)
    assert isinstance(error, NotFound)  # existing handlers keep working
    assert (error.group, error.version, error.resource, error.subresource) == (
        "widgets.example.org",
        "v1",
        "widgets",
        "",
    )
    assert error.code == 404
    assert error.path == path
    assert str(error) == (
        "404 ResourceNotServed: the server does not serve resource 'widgets' in "
        "widgets.example.org/v1 (it said: 404 page not found)"
    )


def test_an_unknown_version_of_the_core_group_is_not_served() -> None:
    error = error_from_response(404, (), GENERIC, path="/api/v2/namespaces/ns/configmaps/a")
    assert isinstance(error, ResourceNotServed)
    assert (error.group, error.version, error.resource) == ("", "v2", "configmaps")
    assert "resource 'configmaps' in v2 (core group)" in str(error)
    assert "could not find the requested resource" in str(error)


def test_a_missing_object_stays_a_plain_not_found_without_a_trailing_newline() -> None:
    error = error_from_response(404, (), MISSING_OBJECT, path="/api/v1/namespaces/ns/configmaps/a")
    assert type(error) is NotFound
    assert str(error) == '404 NotFound: configmaps "a" not found'
    assert error.status.message == 'configmaps "a" not found'


@pytest.mark.parametrize(
    ("path", "parts", "described"),
    [
        ("/apis/apps/v9/namespaces/ns/deployments", ("apps", "v9", "deployments", ""), "apps/v9"),
        ("/api/v1/namespaces/ns/pods/p/bogus", ("", "v1", "pods", "bogus"), "'pods/bogus'"),
        ("/api/v1/namespaces/ns/finalize", ("", "v1", "namespaces", "finalize"), "namespaces"),
        ("/api/v1/nodes/n?watch=1", ("", "v1", "nodes", ""), "'nodes'"),
        ("/apis/widgets.example.org/v1", ("widgets.example.org", "v1", "", ""), "the API"),
        ("/apis/widgets.example.org", ("widgets.example.org", "", "", ""), "group"),
        ("/apis", ("", "", "", ""), "the requested path"),
        ("/healthz", ("", "", "", ""), "the requested path"),
        ("", ("", "", "", ""), "the requested path"),
    ],
)
def test_what_a_path_names(path: str, parts: tuple[str, ...], described: str) -> None:
    error = error_from_response(404, (), PAGE_NOT_FOUND, path=path)
    assert isinstance(error, ResourceNotServed)
    assert (error.group, error.version, error.resource, error.subresource) == parts
    assert described in str(error)


def test_decode_response_takes_the_path_from_the_request() -> None:
    request = Request("GET", "/apis/widgets.example.org/v1/widgets")
    with pytest.raises(ResourceNotServed, match="'widgets' in widgets.example.org/v1"):
        decode_response(Response(404, (), PAGE_NOT_FOUND), request)
    with pytest.raises(ResourceNotServed, match="the requested path"):
        decode_response(Response(404, (), PAGE_NOT_FOUND))


def test_other_codes_with_plain_text_bodies_are_not_affected() -> None:
    error = error_from_response(403, (), b"forbidden\n", path="/apis/x/v1/y")
    assert not isinstance(error, NotFound)
    assert str(error).endswith("forbidden")


@given(path=st.text(max_size=80), body=st.binary(max_size=200))
def test_any_path_and_body_give_a_typed_not_found(path: str, body: bytes) -> None:
    error = error_from_response(404, (), body, path=path)
    assert isinstance(error, NotFound)
    assert isinstance(error, KubeMoonError)
    assert not any(ch in str(error) for ch in "\n\r\x00\x1b")


def test_a_status_without_details_but_another_message_is_an_objects_not_found() -> None:
    # What a scripted server or a fake sends for a missing object: no details, own text.
    body = json.dumps(
        {"kind": "Status", "code": 404, "reason": "NotFound", "message": 'pods "x" not found'}
    ).encode()
    error = error_from_response(404, (), body, path="/api/v1/namespaces/ns/pods/x")
    assert type(error) is NotFound
