"""Requests as values: what an adapter must send, built and validated without I/O.

Rules: a ``Request`` is immutable and complete (method, path, query, headers, body, and
whether the response is a stream); adapters add only the origin and credentials. Every
query option is validated here, so an adapter never has to.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode

from . import _json
from ._errors import DecodeError, LocalProtocolError
from ._kept_out import KeptOut
from ._page_scanners import _split_page
from ._resources import (
    APIResource,
    GroupVersionResource,
    NamespaceRequired,
    ResourcePath,
    Scope,
)
from ._shard import ShardSelector
from ._status import error_from_response

__all__ = [
    "METADATA_ONLY_ACCEPT",
    "PAGE_BODY_LIMIT",
    "METADATA_ONLY_LIST_ACCEPT",
    "DeleteOptions",
    "ListOptions",
    "PatchType",
    "Request",
    "Response",
    "WriteOptions",
    "apply_request",
    "decode_response",
    "create_request",
    "delete_collection_request",
    "delete_request",
    "get_request",
    "list_request",
    "patch_request",
    "replace_request",
    "shard_probe_request",
    "sharding_enabled",
    "watch_request",
    "USER_AGENT",
]

USER_AGENT = "kubemoon-python/0.1.0"
JSON = "application/json"

Headers = tuple[tuple[str, str], ...]


def _lookup(pairs: Iterable[tuple[str, str]], name: str, *, fold: bool) -> str | None:
    """The first value whose key is ``name`` (header names compare case-insensitively)."""
    for key, value in pairs:
        if (key.lower() if fold else key) == name:
            return value
    return None


@dataclass(frozen=True, slots=True)
class Request:
    """One HTTP request an adapter should perform against the configured API server."""

    method: str
    path: str
    query: tuple[tuple[str, str], ...] = ()
    headers: Headers = (("Accept", JSON), ("User-Agent", USER_AGENT))
    body: bytes = b""
    stream: bool = False
    #: A cap on the answer's body below the client's own (``max_body_size``), or None: a
    #: paginated LIST page of more than one object is held to :data:`PAGE_BODY_LIMIT`.
    body_limit: int | None = None

    @property
    def target(self) -> str:
        """Path and query as sent on the request line."""
        if not self.query:
            return self.path
        return f"{self.path}?{urlencode(self.query, quote_via=quote)}"

    def header(self, name: str) -> str | None:
        """The value of a header, case-insensitively, or None."""
        return _lookup(self.headers, name.lower(), fold=True)

    def query_value(self, name: str) -> str | None:
        """The value of a query parameter, or None."""
        return _lookup(self.query, name, fold=False)


@dataclass(frozen=True, slots=True)
class Response:
    """A complete HTTP response, as an adapter hands it to the core."""

    status_code: int
    headers: Headers = ()
    body: bytes = b""

    def header(self, name: str) -> str | None:
        """The value of a header, case-insensitively, or None."""
        return _lookup(self.headers, name.lower(), fold=True)

    @property
    def ok(self) -> bool:
        """True for 2xx."""
        return 200 <= self.status_code < 300


class PatchType(enum.Enum):
    """The patch formats the API server accepts, by Content-Type."""

    JSON = "application/json-patch+json"
    MERGE = "application/merge-patch+json"
    STRATEGIC_MERGE = "application/strategic-merge-patch+json"
    APPLY = "application/apply-patch+yaml"


def _bool(value: bool) -> str:
    return "true" if value else "false"


def _non_negative(name: str, value: int | None) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        raise LocalProtocolError(f"{name} must be a non-negative integer, got {value!r}")


def _text(name: str, value: str | None) -> None:
    if value is not None and (not isinstance(value, str) or "\x00" in value):
        raise LocalProtocolError(f"{name} must be a string without NUL, got {value!r}")


_RV_MATCH = ("", "Exact", "NotOlderThan")


@dataclass(frozen=True, slots=True)
class ListOptions:
    """Query options for list, watch and deletecollection.

    ``shard_selector`` (a :class:`ShardSelector`) asks a server with the
    ``ShardedListAndWatch`` gate for one shard only; keep it on every page (the
    ``continue`` token does not carry it). :func:`delete_collection_request` refuses it
    unless asked explicitly: a server without the gate would ignore it and delete all.
    """

    label_selector: str | None = None
    field_selector: str | None = None
    limit: int | None = None
    continue_token: str | None = None
    resource_version: str | None = None
    resource_version_match: str | None = None
    timeout_seconds: int | None = None
    allow_watch_bookmarks: bool | None = None
    send_initial_events: bool | None = None
    shard_selector: ShardSelector | None = None

    def __post_init__(self) -> None:
        if self.shard_selector is not None and not isinstance(self.shard_selector, ShardSelector):
            raise LocalProtocolError(
                f"shard_selector must be a ShardSelector (see ShardSelector.parse), "
                f"got {type(self.shard_selector).__name__}"
            )
        for name in ("label_selector", "field_selector", "continue_token", "resource_version"):
            _text(name, getattr(self, name))
        _non_negative("limit", self.limit)
        _non_negative("timeout_seconds", self.timeout_seconds)
        if self.resource_version_match is not None:
            if self.resource_version_match not in _RV_MATCH:
                raise LocalProtocolError(
                    f"resource_version_match must be one of {_RV_MATCH}, "
                    f"got {self.resource_version_match!r}"
                )
            if self.resource_version is None:
                raise LocalProtocolError("resource_version_match needs a resource_version")
        if self.send_initial_events and self.resource_version_match != "NotOlderThan":
            raise LocalProtocolError(
                "send_initial_events requires resource_version_match='NotOlderThan'"
            )

    def query(self) -> list[tuple[str, str]]:
        """The options as query parameters, in a stable order."""
        q: list[tuple[str, str]] = []
        if self.label_selector is not None:
            q.append(("labelSelector", self.label_selector))
        if self.field_selector is not None:
            q.append(("fieldSelector", self.field_selector))
        if self.limit is not None:
            q.append(("limit", str(self.limit)))
        if self.continue_token is not None:
            q.append(("continue", self.continue_token))
        if self.resource_version is not None:
            q.append(("resourceVersion", self.resource_version))
        if self.resource_version_match is not None:
            q.append(("resourceVersionMatch", self.resource_version_match))
        if self.timeout_seconds is not None:
            q.append(("timeoutSeconds", str(self.timeout_seconds)))
        if self.allow_watch_bookmarks is not None:
            q.append(("allowWatchBookmarks", _bool(self.allow_watch_bookmarks)))
        if self.send_initial_events is not None:
            q.append(("sendInitialEvents", _bool(self.send_initial_events)))
        if self.shard_selector is not None:
            q.append(("shardSelector", self.shard_selector.render()))
        return q


@dataclass(frozen=True, slots=True)
class WriteOptions:
    """Query options for create, replace, patch and apply."""

    dry_run: bool = False
    field_manager: str | None = None
    force: bool | None = None

    def __post_init__(self) -> None:
        _text("field_manager", self.field_manager)
        if self.field_manager is not None and not 0 < len(self.field_manager) <= 128:
            raise LocalProtocolError("field_manager must have 1 to 128 characters")

    def query(self) -> list[tuple[str, str]]:
        """The options as query parameters."""
        q: list[tuple[str, str]] = []
        if self.dry_run:
            q.append(("dryRun", "All"))
        if self.field_manager is not None:
            q.append(("fieldManager", self.field_manager))
        if self.force is not None:
            q.append(("force", _bool(self.force)))
        return q


_PROPAGATION = ("Orphan", "Background", "Foreground")


@dataclass(frozen=True, slots=True)
class DeleteOptions:
    """Options for delete and deletecollection, sent as a ``DeleteOptions`` body."""

    propagation_policy: str | None = None
    grace_period_seconds: int | None = None
    dry_run: bool = False
    precondition_uid: str | None = None
    precondition_resource_version: str | None = None

    def __post_init__(self) -> None:
        if self.propagation_policy is not None and self.propagation_policy not in _PROPAGATION:
            raise LocalProtocolError(
                f"propagation_policy must be one of {_PROPAGATION}, got {self.propagation_policy!r}"
            )
        _non_negative("grace_period_seconds", self.grace_period_seconds)
        _text("precondition_uid", self.precondition_uid)
        _text("precondition_resource_version", self.precondition_resource_version)

    def query(self) -> list[tuple[str, str]]:
        """Options the API server also reads from the query string."""
        q: list[tuple[str, str]] = []
        if self.dry_run:
            q.append(("dryRun", "All"))
        if self.grace_period_seconds is not None:
            q.append(("gracePeriodSeconds", str(self.grace_period_seconds)))
        if self.propagation_policy is not None:
            q.append(("propagationPolicy", self.propagation_policy))
        return q

    def body(self) -> bytes:
        """A ``meta/v1 DeleteOptions`` document, or empty when there is nothing to say."""
        doc: dict[str, Any] = {}
        preconditions: dict[str, str] = {}
        if self.precondition_uid is not None:
            preconditions["uid"] = self.precondition_uid
        if self.precondition_resource_version is not None:
            preconditions["resourceVersion"] = self.precondition_resource_version
        if preconditions:
            doc["preconditions"] = preconditions
        if not doc:
            return b""
        return _json.dumps({"apiVersion": "v1", "kind": "DeleteOptions", **doc})


Target = GroupVersionResource | APIResource


def _path(
    resource: Target,
    namespace: str | None,
    name: str | None,
    subresource: str | None,
    *,
    collection: bool,
) -> str:
    gvr = resource.gvr if isinstance(resource, APIResource) else resource
    if isinstance(resource, APIResource):
        if resource.scope is Scope.CLUSTER and namespace is not None:
            raise LocalProtocolError(f"{gvr} is cluster-scoped; do not give a namespace")
        if resource.scope is Scope.NAMESPACED and namespace is None and not collection:
            raise NamespaceRequired(gvr, resource.kind, name, hint="give namespace=")
    return ResourcePath(gvr, namespace, name, subresource).render()


def _headers(content_type: str | None = None) -> Headers:
    base: Headers = (("Accept", JSON), ("User-Agent", USER_AGENT))
    return base + ((("Content-Type", content_type),) if content_type else ())


METADATA_ONLY_ACCEPT = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
"""The ``Accept`` value asking for objects' metadata only (metadata-only watches)."""
METADATA_ONLY_LIST_ACCEPT = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
"""The ``Accept`` value asking for a list of objects' metadata only."""

_METADATA_HEADERS: Headers = (("Accept", METADATA_ONLY_ACCEPT), ("User-Agent", USER_AGENT))
_METADATA_LIST_HEADERS: Headers = (
    ("Accept", METADATA_ONLY_LIST_ACCEPT),
    ("User-Agent", USER_AGENT),
)


def _body(obj: Mapping[str, Any] | bytes) -> bytes:
    if isinstance(obj, bytes):
        return obj
    if not isinstance(obj, Mapping):
        raise LocalProtocolError(f"a body must be a mapping or bytes, got {type(obj).__name__}")
    return _json.dumps(obj)


def _object_name(obj: Mapping[str, Any] | bytes, name: str | None) -> str:
    if name is not None:
        return name
    metadata = obj.get("metadata") if isinstance(obj, Mapping) else None
    found = metadata.get("name") if isinstance(metadata, Mapping) else None
    if not isinstance(found, str):
        raise LocalProtocolError("the object has no metadata.name; pass name= explicitly")
    return found


def _write_namespace(
    resource: Target, obj: Mapping[str, Any] | bytes, namespace: str | None
) -> str | None:
    """The namespace a write goes to: ``namespace=``, else the object's own.

    The two must agree when both are given (the API server refuses a mismatch with 400).
    A cluster-scoped resource ignores ``metadata.namespace`` (the server clears it); a
    namespaced one needs a namespace from somewhere. A bytes body is not inspected.
    """
    found: str | None = None
    metadata = obj.get("metadata") if isinstance(obj, Mapping) else None
    if isinstance(metadata, Mapping):
        value = metadata.get("namespace")
        if value is not None and not isinstance(value, str):
            raise LocalProtocolError(f"metadata.namespace must be a string, got {value!r}")
        found = value or None  # "" means no namespace, as in client-go
    if isinstance(resource, APIResource) and not resource.namespaced:
        return namespace
    if namespace is not None and found is not None and namespace != found:
        raise LocalProtocolError(
            f"namespace={namespace!r} does not match metadata.namespace={found!r}"
        )
    chosen = namespace if namespace is not None else found
    if chosen is None and isinstance(resource, APIResource):
        named = metadata.get("name") if isinstance(metadata, Mapping) else None
        raise NamespaceRequired(
            resource.gvr, resource.kind, named if isinstance(named, str) else None
        )
    return chosen


def get_request(
    resource: Target, name: str, *, namespace: str | None = None, subresource: str | None = None
) -> Request:
    """GET one object (or one of its subresources)."""
    return Request("GET", _path(resource, namespace, name, subresource, collection=False))


#: The most one LIST page of several objects may weigh (its body, in bytes); past it the
#: client refuses the page (``ResponseTooLarge``) and the pager asks again for half as
#: many objects. One object alone gets the client's own cap. A tenant's large objects thus
#: cost the operator small pages, never a page of many megabytes decoded at once.
PAGE_BODY_LIMIT = 16 * 1024 * 1024


def next_page_limit(limit: int) -> int | None:
    """The ``limit`` to ask a LIST page again with after it was too large for the client:
    half of ``limit`` (rounded down), or None at 1 (one object is as small as a page gets).

    The paging of the reflector and of ``Client.list`` share it: after a too-large page they
    halve for the rest of that list (a ``continue`` token accepts another limit), so at most
    about log2(limit) pages are refused, and the next list starts at its default again.
    """
    if limit <= 1:
        return None
    return limit // 2


def list_request(
    resource: Target,
    *,
    namespace: str | None = None,
    options: ListOptions | None = None,
    metadata_only: bool = False,
) -> Request:
    """GET a collection (one page of it when ``options.limit`` is set).

    With ``metadata_only`` the server answers a ``PartialObjectMetadataList``: each item
    holds ``apiVersion``, ``kind`` and ``metadata`` only.
    """
    opts = options or ListOptions()
    headers = _METADATA_LIST_HEADERS if metadata_only else _headers()
    return Request(
        "GET",
        _path(resource, namespace, None, None, collection=True),
        tuple(opts.query()),
        headers=headers,
        # A page of several objects is held to the page limit, so big objects make smaller
        # pages (next_page_limit), not big buffers; one object gets the client's cap.
        body_limit=PAGE_BODY_LIMIT if opts.limit is not None and opts.limit > 1 else None,
    )


def watch_request(
    resource: Target,
    *,
    namespace: str | None = None,
    options: ListOptions | None = None,
    metadata_only: bool = False,
) -> Request:
    """A streaming WATCH of a collection (``watch=1``); the response is newline-delimited.

    With ``metadata_only`` each event's object is a ``PartialObjectMetadata``.
    """
    opts = options or ListOptions()
    return Request(
        "GET",
        _path(resource, namespace, None, None, collection=True),
        (("watch", "1"), *opts.query()),
        headers=_METADATA_HEADERS if metadata_only else _headers(),
        stream=True,
    )


def create_request(
    resource: Target,
    obj: Mapping[str, Any] | bytes,
    *,
    namespace: str | None = None,
    options: WriteOptions | None = None,
) -> Request:
    """POST a new object to its collection.

    Without ``namespace=`` the object's ``metadata.namespace`` is used; given both, they
    must agree. A namespaced :class:`APIResource` with no namespace anywhere is refused.
    """
    opts = options or WriteOptions()
    namespace = _write_namespace(resource, obj, namespace)
    return Request(
        "POST",
        _path(resource, namespace, None, None, collection=False),
        tuple(opts.query()),
        _headers(JSON),
        _body(obj),
    )


def replace_request(
    resource: Target,
    obj: Mapping[str, Any] | bytes,
    *,
    namespace: str | None = None,
    name: str | None = None,
    subresource: str | None = None,
    options: WriteOptions | None = None,
) -> Request:
    """PUT a whole object; its ``metadata.resourceVersion`` makes the write conditional.

    The namespace comes from ``namespace=`` or ``metadata.namespace``, as for
    :func:`create_request`.
    """
    opts = options or WriteOptions()
    namespace = _write_namespace(resource, obj, namespace)
    path = _path(resource, namespace, _object_name(obj, name), subresource, collection=False)
    return Request("PUT", path, tuple(opts.query()), _headers(JSON), _body(obj))


def patch_request(
    resource: Target,
    name: str,
    patch: Mapping[str, Any] | Sequence[Any] | bytes,
    *,
    patch_type: PatchType,
    namespace: str | None = None,
    subresource: str | None = None,
    options: WriteOptions | None = None,
) -> Request:
    """PATCH an object with a JSON, merge, strategic-merge or apply patch."""
    opts = options or WriteOptions()
    if patch_type is PatchType.APPLY and opts.field_manager is None:
        raise LocalProtocolError("server-side apply requires a field_manager")
    if patch_type is not PatchType.APPLY and opts.force is not None:
        raise LocalProtocolError("force is only valid for server-side apply")
    if isinstance(patch, bytes):
        body = patch
    elif patch_type is PatchType.JSON:
        if not isinstance(patch, Sequence) or isinstance(patch, str):
            raise LocalProtocolError("a JSON patch must be a list of operations")
        body = _json.dumps(list(patch))
    elif isinstance(patch, Mapping):
        body = _json.dumps(patch)  # JSON is valid YAML, so apply patches are sent as JSON
    else:
        raise LocalProtocolError(f"a {patch_type.name} patch must be a mapping")
    path = _path(resource, namespace, name, subresource, collection=False)
    return Request("PATCH", path, tuple(opts.query()), _headers(patch_type.value), body)


def apply_request(
    resource: Target,
    obj: Mapping[str, Any],
    *,
    field_manager: str,
    namespace: str | None = None,
    force: bool = False,
    subresource: str | None = None,
    dry_run: bool = False,
) -> Request:
    """Server-side apply: PATCH with ``application/apply-patch+yaml`` as ``field_manager``.

    The namespace comes from ``namespace=`` or ``metadata.namespace``, as for
    :func:`create_request`.
    """
    return patch_request(
        resource,
        _object_name(obj, None),
        obj,
        patch_type=PatchType.APPLY,
        namespace=_write_namespace(resource, obj, namespace),
        subresource=subresource,
        options=WriteOptions(dry_run=dry_run, field_manager=field_manager, force=force),
    )


def delete_request(
    resource: Target,
    name: str,
    *,
    namespace: str | None = None,
    options: DeleteOptions | None = None,
) -> Request:
    """DELETE one object, optionally with uid/resourceVersion preconditions."""
    opts = options or DeleteOptions()
    body = opts.body()
    return Request(
        "DELETE",
        _path(resource, namespace, name, None, collection=False),
        tuple(opts.query()),
        _headers(JSON if body else None),
        body,
    )


def delete_collection_request(
    resource: Target,
    *,
    namespace: str | None = None,
    list_options: ListOptions | None = None,
    options: DeleteOptions | None = None,
    allow_shard_selector: bool = False,
) -> Request:
    """DELETE every object of a collection that matches the selectors.

    ``list_options`` carrying a ``shard_selector`` (an informer's options reused, say) is
    refused unless ``allow_shard_selector=True``: a server without the
    ``ShardedListAndWatch`` gate ignores the selector and deletes the whole collection.
    """
    lopts = list_options or ListOptions()
    if lopts.shard_selector is not None and not allow_shard_selector:
        raise LocalProtocolError(
            "delete_collection_request got list_options with a shard_selector; pass "
            "allow_shard_selector=True if deleting one shard is meant (a server without the "
            "ShardedListAndWatch gate ignores it and deletes every match)"
        )
    dopts = options or DeleteOptions()
    body = dopts.body()
    return Request(
        "DELETE",
        _path(resource, namespace, None, None, collection=True),
        (*lopts.query(), *dopts.query()),
        _headers(JSON if body else None),
        body,
    )


def decode_response(
    response: Response, request: Request | None = None, *, kept_out: list[KeptOut] | None = None
) -> Any:
    """Return the decoded JSON body of a 2xx response; raise the ApiError of any other.

    ``request`` (the request answered) lets a 404 name what the server does not serve.
    With ``kept_out`` the body is a LIST page: an item too deeply nested to decode is left
    out of the answer's ``items`` and a :class:`~kubemoon_core.lowlevel.KeptOut` naming it
    is appended to ``kept_out``, so one such object does not fail the whole page (anything
    else undecodable still raises :class:`DecodeError`).
    """
    if not response.ok:
        raise error_from_response(
            response.status_code,
            response.headers,
            response.body,
            path=request.path if request is not None else "",
        )
    if kept_out is None:
        return _json.loads(response.body)
    try:
        return _json.loads(response.body)
    except DecodeError as exc:
        document, kept = _split_page(response.body, exc)
    kept_out.extend(kept)
    return document


# A range of one hash in 2**64: no namespace of a real cluster falls in it.
_PROBE_SELECTOR = ShardSelector.of_range(0, 1)


def shard_probe_request() -> Request:
    """The LIST telling whether the server applies shard selectors (gate on or off).

    Namespaces with ``limit=1`` and a one-hash uid range: a server with the
    ``ShardedListAndWatch`` gate answers no item (built-in lists also echo
    ``metadata.shardInfo``); one without it ignores the selector and answers a namespace.
    Give the decoded answer to :func:`sharding_enabled`.
    """
    return list_request(
        GroupVersionResource("", "v1", "namespaces"),
        options=ListOptions(limit=1, shard_selector=_PROBE_SELECTOR),
    )


def sharding_enabled(document: Any) -> bool:
    """Whether the decoded answer to :func:`shard_probe_request` shows the gate on.

    On: ``metadata.shardInfo`` is echoed, or every item returned lies in the probe's range
    (none, in practice). Off: a namespace outside the range came back. A document that is
    not a list is a :class:`DecodeError`.
    """
    if not isinstance(document, Mapping):
        raise DecodeError("the shard probe answer is not a JSON object")
    metadata = document.get("metadata")
    if isinstance(metadata, Mapping) and isinstance(metadata.get("shardInfo"), Mapping):
        return True
    items = document.get("items")
    if items is None:
        return True
    if not isinstance(items, list):
        raise DecodeError("the shard probe answer's items is not an array", path="items")
    return all(isinstance(item, Mapping) and _PROBE_SELECTOR.contains(item) for item in items)
