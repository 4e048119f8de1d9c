"""``Client.list(metadata_only=True)``: the paginator asks for PartialObjectMetadataList
pages and an empty one (``"items": null``, as the apiserver answers it) holds no items."""

from __future__ import annotations

from typing import Any

from kubemoon_core import GroupVersionResource, ListOptions, Request
from kubemoon_core._request import METADATA_ONLY_LIST_ACCEPT
from kubemoon_sync._paginate import Items

CM = GroupVersionResource("", "v1", "configmaps")


class Pages:
    """A requester answering the pages it was given, in order, and keeping the requests."""

    def __init__(self, *pages: dict[str, Any]) -> None:
        self.pages = list(pages)
        self.requests: list[Request] = []

    def request(self, request: Request) -> Any:
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
