"""The paginator: the items of a LIST, page after page (``limit`` and ``continue``).

Rules: one page is held at a time; a page whose body is over the client's cap
(``ResponseTooLarge``) is asked for again with half the limit (``next_page_limit``, down
to one object) for the rest of the list, and counted in ``page_shrinks``; a response that
is not a list of objects is a ``DecodeError`` naming ``items`` (``null`` items, as an empty
metadata-only list has, are none); after the iteration,
``resource_version`` is the list's resourceVersion; with ``metadata_only`` the items are
``PartialObjectMetadata``; :class:`TypedItems` decodes each item into a kind as it is
handed out (one that does not decode is a ``TypedDecodeError`` naming ``items[n]``). An
item too deeply nested to decode is left out of the list, logged at ERROR (the first
``MAX_KEPT_OUT_LOGGED`` of a list) and recorded in ``kept_out``, so one such object does
not fail the list. Requests go through the client's ``request`` (its retries, credentials
and write gate), which this module only calls.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
from typing import Any, Generic, Protocol, TypeVar

from kubemoon_core import ListOptions, Request, list_request
from kubemoon_core._request import Target, next_page_limit
from kubemoon_core.errors import DecodeError, TypedDecodeError
from kubemoon_core.lowlevel import KeptOut
from kubemoon_core.typed import decode
from kubemoon_io import ResponseTooLarge

__all__ = ["DEFAULT_PAGE_SIZE", "MAX_KEPT_OUT_LOGGED", "Items", "TypedItems"]

logger = logging.getLogger("kubemoon.client")

DEFAULT_PAGE_SIZE = 500
T = TypeVar("T")
# How many kept-out items one list logs (each at ERROR); the rest are only recorded.
MAX_KEPT_OUT_LOGGED = 10


class Requester(Protocol):
    """What the paginator needs of its client: a request performed and decoded."""

    async def request(self, request: Request, *, kept_out: list[KeptOut] | None = None) -> Any: ...


class Items:
    """The items of a LIST, page after page (``limit`` and ``continue``)."""

    def __init__(
        self,
        client: Requester,
        resource: Target,
        namespace: str | None,
        options: ListOptions,
        *,
        metadata_only: bool = False,
    ) -> None:
        self._client = client
        self._metadata_only = metadata_only
        self._resource = resource
        self._namespace = namespace
        self._options = options
        self._items: collections.deque[dict[str, Any]] = collections.deque()
        self._continue: str | None = options.continue_token
        self._done = False
        self.resource_version: str | None = None
        self.page_shrinks = 0  # pages asked for again with half the limit (too large)
        # Items the server holds that could not be decoded (too deep): not listed.
        self.kept_out: list[KeptOut] = []

    def __aiter__(self) -> Items:
        return self

    async def __anext__(self) -> dict[str, Any]:
        while not self._items:
            if self._done:
                raise StopAsyncIteration
            options = dataclasses.replace(self._options, continue_token=self._continue)
            kept: list[KeptOut] = []
            try:
                page = await self._client.request(
                    list_request(
                        self._resource,
                        namespace=self._namespace,
                        options=options,
                        metadata_only=self._metadata_only,
                    ),
                    kept_out=kept,
                )
            except ResponseTooLarge:
                # Ask for the same page in halves (down to one object) for the rest of
                # this list; a page of one object too large is the caller's error.
                smaller = next_page_limit(options.limit or DEFAULT_PAGE_SIZE)
                if smaller is None:
                    raise
                logger.warning(
                    "LIST %s: a page of %s objects exceeded the body cap; asking for %d",
                    self._resource,
                    options.limit,
                    smaller,
                )
                self._options = dataclasses.replace(self._options, limit=smaller)
                self.page_shrinks += 1
                continue
            for record in kept:
                if len(self.kept_out) < MAX_KEPT_OUT_LOGGED:
                    logger.error("LIST %s: %s; left out of the list", self._resource, record)
                self.kept_out.append(record)
            items = page.get("items", ()) if isinstance(page, dict) else None
            if items is None and isinstance(page, dict):
                items = []  # an empty PartialObjectMetadataList has "items": null
            metadata = page.get("metadata") if isinstance(page, dict) else None
            if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
                raise DecodeError("a list response has no list of objects", path="items")
            if not isinstance(metadata, dict):
                metadata = {}
            token = metadata.get("continue")
            self._continue = token if isinstance(token, str) and token else None
            self._done = self._continue is None
            version = metadata.get("resourceVersion")
            self.resource_version = version if isinstance(version, str) else None
            self._items.extend(items)
        return self._items.popleft()


class TypedItems(Generic[T]):
    """The items of a LIST decoded into a kind (``client.list(ConfigMap)``), page after
    page as :class:`Items` hands them out; ``resource_version`` and ``page_shrinks`` are
    its."""

    def __init__(self, items: Items, cls: type[T]) -> None:
        self._items = items
        self._cls = cls
        self._index = 0

    @property
    def resource_version(self) -> str | None:
        """The list's resourceVersion, once iterated."""
        return self._items.resource_version

    @property
    def page_shrinks(self) -> int:
        """How many pages were asked for again with half the limit (too large)."""
        return self._items.page_shrinks

    def __aiter__(self) -> TypedItems[T]:
        return self

    async def __anext__(self) -> T:
        item = await self._items.__anext__()
        index, self._index = self._index, self._index + 1
        try:
            return decode(self._cls, item)
        except TypedDecodeError as exc:
            raise TypedDecodeError(exc.reason, path=f"items[{index}]{exc.path}") from None
