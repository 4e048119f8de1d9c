"""``Client.list(metadata_only=True)``: the paginator asks for PartialObjectMetadataList
pages and an empty one (``"items": null``, as the apiserver answers it) holds no items."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from kubemoon_core import (
    GroupVersionResource,
    ListOptions,
    ObjectKey,
    Request,
    Response,
    decode_response,
)
from kubemoon_core._request import METADATA_ONLY_LIST_ACCEPT
from kubemoon_core.errors import DecodeError
from kubemoon_core.lowlevel import KeptOut
from kubemoon_sync._paginate import Items

CM = GroupVersionResource("", "v1", "configmaps")


class Pages:
    """A requester answering the pages it was given, in order, and keeping the requests."""

    def __init__(self, *pages: Any) -> None:
        self.pages = list(pages)
        self.requests: list[Request] = []

    def request(self, request: Request, *, kept_out: Any = None) -> Any:
        self.requests.append(request)
        return self.pages.pop(0)


def _page(items: Any, token: str | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"resourceVersion": "9"}
    if token:
        metadata["continue"] = token
    return {"kind": "PartialObjectMetadataList", "metadata": metadata, "items": items}


def test_a_metadata_only_list_asks_for_metadata_and_reads_null_items_as_none() -> None:
    item = {"kind": "PartialObjectMetadata", "metadata": {"name": "a", "namespace": "ns"}}
    client = Pages(_page([item], token="t"), _page(None))
    listed = list(Items(client, CM, None, ListOptions(limit=1), metadata_only=True))
    assert listed == [item]
    assert [dict(r.headers)["Accept"] for r in client.requests] == [METADATA_ONLY_LIST_ACCEPT] * 2
    empty = Pages(_page(None))
    assert list(Items(empty, CM, "ns", ListOptions(limit=5), metadata_only=True)) == []
    full = Pages(_page([]))
    assert list(Items(full, CM, "ns", ListOptions(limit=5))) == []
    assert dict(full.requests[0].headers)["Accept"] != METADATA_ONLY_LIST_ACCEPT


DEPTH = 10_000


def _deep_page() -> bytes:
    deep = '{"f:a":' * DEPTH + "{}" + "}" * DEPTH
    items = [
        '{"metadata":{"name":"a","namespace":"ns","uid":"u-a"}}',
        '{"metadata":{"name":"deep","namespace":"ns","uid":"u-deep","resourceVersion":"8",'
        f'"managedFields":[{{"fieldsV1":{deep}}}]}}}}',
        '{"metadata":{"name":"b","namespace":"ns","uid":"u-b"}}',
    ]
    return (
        '{"kind":"PartialObjectMetadataList","apiVersion":"meta.k8s.io/v1",'
        '"metadata":{"resourceVersion":"9"},"items":[' + ",".join(items) + "]}"
    ).encode()


def test_a_list_page_keeps_a_too_deep_item_out_with_every_backend(backend: str) -> None:
    """Attacker's pass, round four: one item nested 10,000 levels (a receiving tenant's
    copy with deep managedFields) failed every ``Client.list`` of the collection with
    DecodeError, so a ConfigMirror's cleanup never finished. The page's other items are
    answered; the deep one is recorded, named, and left out."""
    kept: list[KeptOut] = []
    page = decode_response(Response(200, (), _deep_page()), kept_out=kept)
    assert [i["metadata"]["name"] for i in page["items"]] == ["a", "b"]
    assert [(k.key, k.uid) for k in kept] == [(ObjectKey("ns", "deep"), "u-deep")]
    assert "deep" in kept[0].reason
    # Without kept_out (any other response) it is an error, as before.
    with pytest.raises(DecodeError):
        decode_response(Response(200, (), _deep_page()))
    # Anything else wrong still fails the page.
    with pytest.raises(DecodeError):
        decode_response(Response(200, (), _deep_page()[:-1]), kept_out=[])


class DeepPages(Pages):
    """A requester answering ``pages`` as raw bodies, decoded as the client decodes them."""

    def request(self, request: Request, *, kept_out: Any = None) -> Any:
        self.requests.append(request)
        return decode_response(Response(200, (), self.pages.pop(0)), kept_out=kept_out)


def test_items_lists_the_rest_and_records_what_it_kept_out(
    caplog: pytest.LogCaptureFixture,
) -> None:
    client = DeepPages(_deep_page())
    items = Items(client, CM, None, ListOptions(limit=5), metadata_only=True)
    with caplog.at_level(logging.ERROR, logger="kubemoon.client"):
        assert [i["metadata"]["name"] for i in items] == ["a", "b"]
    assert [k.key for k in items.kept_out] == [ObjectKey("ns", "deep")]
    assert "ns/deep" in caplog.text and "left out of the list" in caplog.text
