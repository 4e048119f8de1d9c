"""kube-apiserver's REST surface over :class:`SimApiServer`: a core ``Request`` in, a
``Response`` (or an open :class:`SimWatch`) out.

Rules: pure (``now`` is passed in). Paths are parsed as kube-apiserver routes them; query
parameters that are not modelled are refused with :class:`NotModelled`, answered as 501
with a Status naming the feature (and recorded by the caller), never ignored.
"""

from __future__ import annotations

import functools
from typing import Any

from kubemoon_core import Request, ResourcePath, Response
from kubemoon_core.errors import LocalProtocolError

from ._errors import NotModelled, StatusError
from ._raw import dumps, loads
from ._store import SimApiServer, SimWatch

__all__ = ["handle_request", "not_modelled_response", "parse_path", "status_response"]

_JSON = (("Content-Type", "application/json"),)

# Query parameters read per verb; ignored ones change nothing the simulator models.
# ``shardSelector`` belongs to the alpha ShardedListAndWatch feature gate, off by default:
# kube-apiserver then drops it and answers the whole collection, as the simulator does.
_IGNORED = frozenset({"pretty", "timeout", "fieldManager", "fieldValidation", "shardSelector"})
_LIST = frozenset(
    {
        "labelSelector",
        "fieldSelector",
        "limit",
        "continue",
        "resourceVersion",
        "resourceVersionMatch",
    }
)
_WATCH = frozenset(
    {
        "watch",
        "labelSelector",
        "fieldSelector",
        "resourceVersion",
        "resourceVersionMatch",
        "timeoutSeconds",
        "allowWatchBookmarks",
        "sendInitialEvents",
    }
)
_DELETE = frozenset({"propagationPolicy", "gracePeriodSeconds"})


@functools.lru_cache(maxsize=4096)
def parse_path(path: str) -> ResourcePath:
    """``ResourcePath.parse``, remembered: a simulation sends the same paths again and
    again (a ``ResourcePath`` is immutable; a refusal is not remembered)."""
    return ResourcePath.parse(path)


def _dumps(document: Any) -> bytes:
    return dumps(document)


def status_response(error: StatusError) -> Response:
    """The HTTP answer of a Status failure."""
    return Response(error.code, _JSON, _dumps(error.status()))


def not_modelled_response(refusal: NotModelled) -> Response:
    """501 with a Status naming what is not modelled (reason ``NotModelled``)."""
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": str(refusal),
        "reason": "NotModelled",
        "code": 501,
    }
    return Response(501, _JSON, _dumps(body))


def _check_query(request: Request, allowed: frozenset[str]) -> None:
    for name, _ in request.query:
        if name not in allowed and name not in _IGNORED:
            raise NotModelled(f"the query parameter {name}= on {request.method}")


def _int(request: Request, name: str) -> int | None:
    value = request.query_value(name)
    if value is None:
        return None
    if not value.isdigit():
        raise NotModelled(f"{name}={value!r} (not a non-negative integer)")
    return int(value)


def _bool(request: Request, name: str) -> bool | None:
    value = request.query_value(name)
    if value is None:
        return None
    if value in ("true", "1"):
        return True
    if value in ("false", "0"):
        return False
    raise NotModelled(f"{name}={value!r}")


def _body(request: Request) -> Any:
    try:
        return loads(request.body)
    except (ValueError, UnicodeDecodeError):
        raise NotModelled("a request body that is not JSON") from None
    except RecursionError:
        # A body that is not an object and too deep to decode (an object's deep members
        # are kept as their text by loads).
        raise NotModelled("a body nested too deep to decode that is not an object") from None


# The simulator authorizes every request, like kube-apiserver started with
# --authorization-mode=AlwaysAllow, and answers access reviews accordingly (a Manager's
# start-up permission check, a webhook's SubjectAccessReview).
_ACCESS_REVIEWS = frozenset({"selfsubjectaccessreviews", "subjectaccessreviews"})


def _access_review(request: Request, name: str | None) -> Response:
    if request.method != "POST" or name is not None:
        raise NotModelled(f"{request.method} on an access review (only a create is)")
    review = _body(request)
    spec = review.get("spec") if isinstance(review, dict) else None
    kinds = [
        key
        for key in ("resourceAttributes", "nonResourceAttributes")
        if isinstance(spec, dict) and isinstance(spec.get(key), dict)
    ]
    if len(kinds) != 1:  # kube-apiserver's 422 for it is not modelled
        raise NotModelled("an access review without exactly one kind of attributes")
    answer = {
        **review,
        "status": {
            "allowed": True,
            "reason": "the simulated cluster authorizes every request (AlwaysAllow)",
        },
    }
    return Response(201, _JSON, _dumps(answer))


def handle_request(server: SimApiServer, request: Request, now: float) -> Response | SimWatch:
    """Answer ``request`` as kube-apiserver would; a WATCH answers an open
    :class:`SimWatch` whose lines the caller streams. Raises :class:`NotModelled`."""
    try:
        return _dispatch(server, request, now)
    except StatusError as error:
        return status_response(error)


def _dispatch(server: SimApiServer, request: Request, now: float) -> Response | SimWatch:
    try:
        path = parse_path(request.path)
    except LocalProtocolError:
        raise NotModelled(f"the path {request.path!r} (discovery and non-resource URLs)") from None
    if path.gvr.group == "authorization.k8s.io" and path.gvr.resource in _ACCESS_REVIEWS:
        return _access_review(request, path.name)
    resource = server.resource(path.gvr)
    namespace = path.namespace
    if path.namespace is not None and not resource.namespaced:
        raise NotModelled(f"a namespaced path to the cluster-scoped {path.gvr}")
    method = request.method
    if path.name is None:
        if method == "GET":
            if _bool(request, "watch"):
                _check_query(request, _WATCH)
                return server.watch(
                    resource,
                    namespace,
                    now,
                    resource_version=request.query_value("resourceVersion"),
                    label_selector=request.query_value("labelSelector"),
                    field_selector=request.query_value("fieldSelector"),
                    timeout_seconds=_int(request, "timeoutSeconds"),
                    allow_watch_bookmarks=bool(_bool(request, "allowWatchBookmarks")),
                    send_initial_events=_bool(request, "sendInitialEvents"),
                    resource_version_match=request.query_value("resourceVersionMatch"),
                )
            _check_query(request, _LIST)
            document = server.list(
                resource,
                namespace,
                label_selector=request.query_value("labelSelector"),
                field_selector=request.query_value("fieldSelector"),
                limit=_int(request, "limit"),
                continue_token=request.query_value("continue"),
                resource_version=request.query_value("resourceVersion"),
                resource_version_match=request.query_value("resourceVersionMatch"),
                copy=False,  # encoded here at once: no copy of the stored items needed
            )
            return Response(200, _JSON, _dumps(document))
        if method == "POST":
            _check_query(request, frozenset())
            if resource.namespaced and namespace is None:
                raise NotModelled("a create without a namespace in the path")
            created = server.create(resource, namespace, _body(request), now)
            return Response(201, _JSON, _dumps(created))
        raise NotModelled(f"{method} on a collection")
    if path.subresource not in (None, "status"):
        raise NotModelled(f"the subresource {path.subresource!r}")
    if path.subresource == "status" and not resource.status_subresource:
        if resource.custom:  # the CRD handler's default case, before any verb or query
            raise StatusError.not_found(resource.group, resource.resource, path.name)
        raise StatusError.no_route()  # a built-in kind has no such route
    if resource.namespaced and namespace is None:
        raise NotModelled("a namespaced object path without a namespace")
    if method == "GET":
        _check_query(request, frozenset())
        # The stored object itself (``get`` would copy it), encoded at once.
        return Response(200, _JSON, _dumps(server._live(resource, namespace, path.name)))
    if method == "PUT":
        _check_query(request, frozenset())
        updated = server.update(
            resource, namespace, path.name, _body(request), now, subresource=path.subresource
        )
        return Response(200, _JSON, _dumps(updated))
    if method == "PATCH":
        _check_query(request, frozenset())
        content_type = (request.header("Content-Type") or "").partition(";")[0].strip()
        patched = server.patch(
            resource,
            namespace,
            path.name,
            _body(request),
            now,
            content_type=content_type,
            subresource=path.subresource,
        )
        return Response(200, _JSON, _dumps(patched))
    if method == "DELETE":
        _check_query(request, _DELETE)
        if path.subresource is not None:
            raise NotModelled("DELETE on a subresource")
        grace = _int(request, "gracePeriodSeconds")
        if grace not in (None, 0):
            raise NotModelled("gracePeriodSeconds other than 0")
        policy = request.query_value("propagationPolicy")
        uid = rv = None
        if request.body:
            options = _body(request)
            if not isinstance(options, dict):
                raise NotModelled("DeleteOptions that are not an object")
            unknown = set(options) - {"apiVersion", "kind", "preconditions", "propagationPolicy"}
            if unknown:
                raise NotModelled(f"DeleteOptions fields {sorted(unknown)}")
            policy = options.get("propagationPolicy", policy)
            preconditions = options.get("preconditions") or {}
            uid = preconditions.get("uid")
            rv = preconditions.get("resourceVersion")
        if policy not in (None, "Background", "Foreground", "Orphan"):
            raise NotModelled(f"propagationPolicy {policy!r}")
        deleted = server.delete(
            resource,
            namespace,
            path.name,
            now,
            propagation_policy=policy,
            precondition_uid=uid,
            precondition_resource_version=rv,
        )
        return Response(200, _JSON, _dumps(deleted))
    raise NotModelled(f"the method {method}")
