"""Strict decoders for discovery documents, and the sans-IO discovery walk.

Rules: the server's order is kept (no sorting, no de-duplication). A missing or mistyped
required field, a mistyped optional field, or an inconsistent version relation rejects the
whole document with a :class:`DecodeError` naming the JSON path. Subresources
(``deployments/status``) are attached to their parent, never made top-level resources.

The walk's state moves only by its transition table (``_TRANSITIONS``, published by
:meth:`Discovery.transitions`): each answer is classified into a :class:`DiscoveryInput`,
then the last answer of the walk moves it to DONE. A move the table lacks is a bug of the
machine, an AssertionError naming the state and the input.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NoReturn

from . import _json
from ._errors import DecodeError, KubeMoonError, LocalProtocolError
from ._request import USER_AGENT, Request, Response
from ._resources import APIResource, GroupVersion, GroupVersionResource, Scope
from ._status import ApiError, error_from_response
from ._transitions import TransitionTable

__all__ = [
    "AGGREGATED_DISCOVERY_ACCEPT",
    "APIGroup",
    "APIGroupDiscoveryList",
    "APIGroupList",
    "APIResourceList",
    "APIVersions",
    "Discovery",
    "DiscoveryInput",
    "DiscoveryState",
    "decode_aggregated_discovery",
    "decode_api_group_list",
    "decode_api_resource_list",
    "decode_api_versions",
]

AGGREGATED_DISCOVERY_ACCEPT = (
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json"
)

Document = bytes | Mapping[str, Any]


# --- a small path-tracking reader -------------------------------------------------------


def _join(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def _mapping(value: Any, path: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise DecodeError(f"expected an object, got {type(value).__name__}", path=path or "$")
    return value


def _get(obj: Mapping[str, Any], key: str, path: str, kind: type, *, required: bool) -> Any:
    where = _join(path, key)
    if key not in obj:
        if required:
            raise DecodeError("required field is missing", path=where)
        return None
    value = obj[key]
    # bool is an int in Python; JSON keeps them apart, and so do we.
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        raise DecodeError(f"expected {kind.__name__}, got {type(value).__name__}", path=where)
    return value


def _string(obj: Mapping[str, Any], key: str, path: str, *, required: bool = True) -> str:
    value = _get(obj, key, path, str, required=required)
    return "" if value is None else str(value)


def _strings(
    obj: Mapping[str, Any], key: str, path: str, *, required: bool = False
) -> tuple[str, ...]:
    items = _get(obj, key, path, list, required=required) or []
    where = _join(path, key)
    for i, item in enumerate(items):
        if not isinstance(item, str):
            raise DecodeError(f"expected str, got {type(item).__name__}", path=_join(where, i))
    return tuple(items)


def _items(obj: Mapping[str, Any], key: str, path: str) -> list[tuple[str, Mapping[str, Any]]]:
    items = _get(obj, key, path, list, required=True)
    where = _join(path, key)
    return [(_join(where, i), _mapping(item, _join(where, i))) for i, item in enumerate(items)]


def _document(data: Document) -> Mapping[str, Any]:
    return _mapping(_json.loads(data) if isinstance(data, bytes) else data, "")


def _expect_kind(doc: Mapping[str, Any], kind: str) -> None:
    found = _string(doc, "kind", "", required=False)
    if found and found != kind:
        raise DecodeError(f"expected kind {kind}, got {found}", path="kind")


# --- legacy discovery -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class APIVersions:
    """``GET /api``: the versions of the core group."""

    versions: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class APIGroup:
    """One named group of ``GET /apis``, its versions in the server's order."""

    name: str
    versions: tuple[GroupVersion, ...]
    preferred_version: GroupVersion | None


@dataclass(frozen=True, slots=True)
class APIGroupList:
    """``GET /apis``: the named groups."""

    groups: tuple[APIGroup, ...]


@dataclass(frozen=True, slots=True)
class APIResourceList:
    """``GET /api/v1`` or ``/apis/{group}/{version}``: the resources of one group version."""

    group_version: GroupVersion
    resources: tuple[APIResource, ...]


def _group_version(value: str, path: str) -> GroupVersion:
    try:
        return GroupVersion.parse(value)
    except LocalProtocolError as exc:
        raise DecodeError(str(exc), path=path) from None


def decode_api_versions(data: Document) -> APIVersions:
    """Decode the core group's version list (``GET /api``)."""
    doc = _document(data)
    _expect_kind(doc, "APIVersions")
    versions = _strings(doc, "versions", "", required=True)
    for i, version in enumerate(versions):
        _group_version(version, f"versions[{i}]")
    return APIVersions(versions)


def _version_entry(group: str, entry: Mapping[str, Any], path: str) -> GroupVersion:
    group_version = _string(entry, "groupVersion", path)
    version = _string(entry, "version", path)
    parsed = _group_version(group_version, _join(path, "groupVersion"))
    if parsed.group != group or parsed.version != version:
        raise DecodeError(
            f"groupVersion {group_version!r} does not match group {group!r} "
            f"and version {version!r}",
            path=_join(path, "groupVersion"),
        )
    return parsed


def decode_api_group_list(data: Document) -> APIGroupList:
    """Decode the named groups (``GET /apis``)."""
    doc = _document(data)
    _expect_kind(doc, "APIGroupList")
    groups = []
    for gpath, raw in _items(doc, "groups", ""):
        name = _string(raw, "name", gpath)
        if not name:
            raise DecodeError("a named group has an empty name", path=_join(gpath, "name"))
        versions = tuple(
            _version_entry(name, entry, vpath) for vpath, entry in _items(raw, "versions", gpath)
        )
        preferred = None
        raw_preferred = _get(raw, "preferredVersion", gpath, Mapping, required=False)
        if raw_preferred is not None:
            ppath = _join(gpath, "preferredVersion")
            preferred = _version_entry(name, raw_preferred, ppath)
            if preferred not in versions:
                raise DecodeError(
                    f"preferred version {preferred.api_version} is not among the versions",
                    path=_join(ppath, "groupVersion"),
                )
        groups.append(APIGroup(name, versions, preferred))
    return APIGroupList(tuple(groups))


def _resource_name(value: str, path: str) -> None:
    if not value:
        raise DecodeError("empty resource name", path=path)


def decode_api_resource_list(data: Document) -> APIResourceList:
    """Decode one group version's resources; subresources attach to their parents."""
    doc = _document(data)
    _expect_kind(doc, "APIResourceList")
    gv = _group_version(_string(doc, "groupVersion", ""), "groupVersion")
    parents: list[APIResource] = []
    subs_of: dict[str, list[str]] = {}
    pending_subs: list[tuple[str, str, str]] = []
    for rpath, raw in _items(doc, "resources", ""):
        name = _string(raw, "name", rpath)
        _resource_name(name, _join(rpath, "name"))
        namespaced = _get(raw, "namespaced", rpath, bool, required=True)
        kind = _string(raw, "kind", rpath)
        verbs = _strings(raw, "verbs", rpath, required=True)
        singular = _string(raw, "singularName", rpath, required=False)
        short_names = _strings(raw, "shortNames", rpath)
        categories = _strings(raw, "categories", rpath)
        for key in ("group", "version"):
            _string(raw, key, rpath, required=False)
        if "/" in name:
            parent, _, sub = name.partition("/")
            pending_subs.append((parent, sub, _join(rpath, "name")))
            continue
        try:
            gvr = GroupVersionResource(gv.group, gv.version, name)
        except LocalProtocolError as exc:
            raise DecodeError(str(exc), path=_join(rpath, "name")) from None
        scope = Scope.NAMESPACED if namespaced else Scope.CLUSTER
        parents.append(APIResource(gvr, kind, scope, verbs, singular, short_names, categories))
        subs_of.setdefault(name, [])
    for parent, sub, path in pending_subs:
        if parent not in subs_of or not sub or "/" in sub:
            raise DecodeError(f"subresource of an unknown resource {parent!r}", path=path)
        subs_of[parent].append(sub)
    resources = [
        dataclasses.replace(r, subresources=tuple(subs_of[r.gvr.resource])) for r in parents
    ]
    return APIResourceList(gv, tuple(resources))


# --- aggregated discovery (apidiscovery.k8s.io/v2) --------------------------------------


@dataclass(frozen=True, slots=True)
class APIGroupDiscoveryList:
    """An aggregated discovery document: every group, version and resource at once.

    ``groups`` keeps the server's order; the versions of each group come preferred first.
    """

    groups: tuple[APIGroup, ...]
    resources: tuple[APIResource, ...]
    stale_group_versions: tuple[GroupVersion, ...]


_SCOPES = {"Namespaced": Scope.NAMESPACED, "Cluster": Scope.CLUSTER}
_FRESHNESS = ("", "Current", "Stale")


def decode_aggregated_discovery(data: Document) -> APIGroupDiscoveryList:
    """Decode ``APIGroupDiscoveryList`` (``/api`` or ``/apis`` with the v2 Accept header)."""
    doc = _document(data)
    _expect_kind(doc, "APIGroupDiscoveryList")
    groups: list[APIGroup] = []
    resources: list[APIResource] = []
    stale: list[GroupVersion] = []
    for gpath, raw_group in _items(doc, "items", ""):
        metadata = _get(raw_group, "metadata", gpath, Mapping, required=False) or {}
        name = _string(metadata, "name", _join(gpath, "metadata"), required=False)
        versions: list[GroupVersion] = []
        for vpath, raw_version in _items(raw_group, "versions", gpath):
            version = _string(raw_version, "version", vpath)
            try:
                gv = GroupVersion(name, version)
            except LocalProtocolError as exc:
                raise DecodeError(str(exc), path=_join(vpath, "version")) from None
            freshness = _string(raw_version, "freshness", vpath, required=False)
            if freshness not in _FRESHNESS:
                raise DecodeError(
                    f"unknown freshness {freshness!r}", path=_join(vpath, "freshness")
                )
            if freshness == "Stale":
                stale.append(gv)
            versions.append(gv)
            raw_resources = _get(raw_version, "resources", vpath, list, required=False)
            if raw_resources is None:
                continue
            for rpath, raw in _items(raw_version, "resources", vpath):
                resources.append(_aggregated_resource(gv, raw, rpath))
        groups.append(APIGroup(name, tuple(versions), versions[0] if versions else None))
    return APIGroupDiscoveryList(tuple(groups), tuple(resources), tuple(stale))


def _aggregated_resource(gv: GroupVersion, raw: Mapping[str, Any], path: str) -> APIResource:
    plural = _string(raw, "resource", path)
    scope_name = _string(raw, "scope", path)
    if scope_name not in _SCOPES:
        raise DecodeError(f"unknown scope {scope_name!r}", path=_join(path, "scope"))
    verbs = _strings(raw, "verbs", path, required=True)
    kind = ""
    response_kind = _get(raw, "responseKind", path, Mapping, required=False)
    if response_kind is not None:
        kind = _string(response_kind, "kind", _join(path, "responseKind"))
    singular = _string(raw, "singularResource", path, required=False)
    short_names = _strings(raw, "shortNames", path)
    categories = _strings(raw, "categories", path)
    subs: list[str] = []
    if _get(raw, "subresources", path, list, required=False) is not None:
        for spath, raw_sub in _items(raw, "subresources", path):
            sub = _string(raw_sub, "subresource", spath)
            _resource_name(sub, _join(spath, "subresource"))
            _strings(raw_sub, "verbs", spath)
            subs.append(sub)
    try:
        gvr = GroupVersionResource(gv.group, gv.version, plural)
    except LocalProtocolError as exc:
        raise DecodeError(str(exc), path=_join(path, "resource")) from None
    return APIResource(
        gvr, kind, _SCOPES[scope_name], verbs, singular, short_names, categories, tuple(subs)
    )


# --- the discovery walk -----------------------------------------------------------------


class DiscoveryState(enum.Enum):
    """Where a :class:`Discovery` walk is."""

    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"


class DiscoveryInput(enum.Enum):
    """What moves a :class:`Discovery` walk: how one answer was taken."""

    AGGREGATED = "aggregated root document"
    EXPANDED = "legacy root document, its group versions queued"
    GROUP_VERSION = "group version document"
    GROUP_VERSION_FAILED = "group version refused, recorded and skipped"
    ROOT_FAILED = "root refused"
    INVALID = "document invalid"
    FINISHED = "nothing left to ask or to wait for"


_DS, _DI = DiscoveryState, DiscoveryInput
_TRANSITIONS: dict[tuple[DiscoveryState, DiscoveryInput], DiscoveryState] = {
    (_DS.RUNNING, _DI.AGGREGATED): _DS.RUNNING,
    (_DS.RUNNING, _DI.EXPANDED): _DS.RUNNING,
    (_DS.RUNNING, _DI.GROUP_VERSION): _DS.RUNNING,
    (_DS.RUNNING, _DI.GROUP_VERSION_FAILED): _DS.RUNNING,
    (_DS.RUNNING, _DI.ROOT_FAILED): _DS.FAILED,
    (_DS.RUNNING, _DI.INVALID): _DS.FAILED,
    (_DS.RUNNING, _DI.FINISHED): _DS.DONE,
}
del _DS, _DI
_TABLE = TransitionTable.from_targets(
    "Discovery", DiscoveryState.RUNNING, DiscoveryInput, _TRANSITIONS
)


@dataclass(frozen=True, slots=True)
class _Pending:
    index: int  # position in the final result, so answers may arrive in any order
    request: Request
    root: bool
    group_version: GroupVersion | None


def _discovery_request(path: str, *, aggregated: bool) -> Request:
    accept = AGGREGATED_DISCOVERY_ACCEPT if aggregated else "application/json"
    return Request("GET", path, headers=(("Accept", accept), ("User-Agent", USER_AGENT)))


class Discovery:
    """A sans-IO walk of the discovery endpoints that yields every :class:`APIResource`.

    It asks ``/api`` and ``/apis`` for aggregated discovery; a server that answers with
    the legacy documents instead gets one request per group version. A group version that
    fails (an unavailable aggregated API, say) is recorded in ``failed_group_versions``
    and skipped, as kubectl does; a failing root fails the walk.

    Drive it with :meth:`next_requests` and :meth:`receive_response` until ``state`` is
    ``DONE``; then read :attr:`resources`.
    """

    @classmethod
    def transitions(cls) -> TransitionTable[DiscoveryState, DiscoveryInput]:
        """The walk's transition table."""
        return _TABLE

    def __init__(self, *, aggregated: bool = True) -> None:
        self._state = DiscoveryState.RUNNING
        self.failed_group_versions: dict[GroupVersion, ApiError] = {}
        self.stale_group_versions: tuple[GroupVersion, ...] = ()
        self._aggregated = aggregated
        self._results: dict[int, tuple[APIResource, ...]] = {}
        self._next_index = 0
        self._queued: list[_Pending] = []
        self._in_flight: dict[Request, _Pending] = {}
        self._queue("/api", root=True)
        self._queue("/apis", root=True)

    @property
    def state(self) -> DiscoveryState:
        """Where the walk is."""
        return self._state

    def _move(self, event: DiscoveryInput) -> None:
        target = _TABLE.step(self._state, event).target
        assert target is not None  # the walk never leaves its table
        self._state = target

    def _queue(self, path: str, *, root: bool, gv: GroupVersion | None = None) -> None:
        request = _discovery_request(path, aggregated=root and self._aggregated)
        # Indices leave room for the group versions a legacy root expands into.
        self._queued.append(_Pending(self._next_index, request, root, gv))
        self._next_index += 1

    def next_requests(self) -> list[Request]:
        """Requests to send now (possibly concurrently); empty when none are due."""
        if self._state is not DiscoveryState.RUNNING:
            return []
        out = []
        for pending in self._queued:
            self._in_flight[pending.request] = pending
            out.append(pending.request)
        self._queued.clear()
        return out

    def receive_response(self, request: Request, response: Response) -> None:
        """Take the answer to one request returned by :meth:`next_requests`."""
        pending = self._in_flight.pop(request, None)
        if self._state is not DiscoveryState.RUNNING or pending is None:
            raise LocalProtocolError(f"no discovery request in flight for {request.path}")
        if pending.root:
            self._receive_root(pending, response)
        else:
            self._receive_group_version(pending, response)
        if not self._queued and not self._in_flight:
            self._move(DiscoveryInput.FINISHED)

    def _fail(self, event: DiscoveryInput, error: KubeMoonError) -> NoReturn:
        self._move(event)
        raise error

    def _receive_root(self, pending: _Pending, response: Response) -> None:
        if not response.ok:
            self._fail(
                DiscoveryInput.ROOT_FAILED,
                error_from_response(
                    response.status_code,
                    response.headers,
                    response.body,
                    path=pending.request.path,
                ),
            )
        try:
            doc = _document(response.body)
            kind = doc.get("kind")
            if kind == "APIGroupDiscoveryList":
                aggregated = decode_aggregated_discovery(doc)
                self._results[pending.index] = aggregated.resources
                self.stale_group_versions += aggregated.stale_group_versions
                event = DiscoveryInput.AGGREGATED
            elif pending.request.path == "/api":
                for version in decode_api_versions(doc).versions:
                    self._expand(pending, GroupVersion("", version))
                event = DiscoveryInput.EXPANDED
            else:
                for group in decode_api_group_list(doc).groups:
                    for gv in group.versions:
                        self._expand(pending, gv)
                event = DiscoveryInput.EXPANDED
        except DecodeError as exc:
            self._fail(DiscoveryInput.INVALID, exc)
        self._move(event)

    def _expand(self, root: _Pending, gv: GroupVersion) -> None:
        # Results are ordered by index; group versions of /api sort before those of /apis
        # because each root's expansions use indices offset by its own.
        request = _discovery_request(gv.api_path, aggregated=False)
        index = (root.index + 1) * 1_000_000 + len(self._queued) + len(self._in_flight)
        self._queued.append(_Pending(index, request, False, gv))

    def _receive_group_version(self, pending: _Pending, response: Response) -> None:
        assert pending.group_version is not None
        if not response.ok:
            error = error_from_response(
                response.status_code, response.headers, response.body, path=pending.request.path
            )
            self.failed_group_versions[pending.group_version] = error
            self._move(DiscoveryInput.GROUP_VERSION_FAILED)
            return
        try:
            decoded = decode_api_resource_list(response.body)
        except DecodeError as exc:
            self._fail(DiscoveryInput.INVALID, exc)
        self._results[pending.index] = decoded.resources
        self._move(DiscoveryInput.GROUP_VERSION)

    @property
    def resources(self) -> tuple[APIResource, ...]:
        """Every resource found, core group first, then the named groups in server order."""
        if self._state is not DiscoveryState.DONE:
            raise LocalProtocolError(f"discovery is {self._state.value}, not done")
        return tuple(r for index in sorted(self._results) for r in self._results[index])
