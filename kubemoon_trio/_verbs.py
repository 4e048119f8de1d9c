"""The client's verbs (GET, LIST, POST, PUT, PATCH, apply, DELETE), dynamic and typed.

Rules: a verb builds the core's request and performs it through ``request`` (the client's
retries, credentials and write gate), which this module only calls. Given a resource
(``client.get(CONFIGMAPS, name)``) a verb answers the decoded JSON; given a kind, a class
of :class:`~kubemoon_core.typed.DeclaredKind` (``client.get(ConfigMap, name)``) or one of
its objects (``client.create(ConfigMap(...))``), the request is built for the kind's
declared scope, so a namespaced kind without a namespace is refused before it is sent
(:class:`~kubemoon_core.errors.NamespaceRequired`), and the answer is decoded into the
class (:func:`~kubemoon_core.typed.decode`; a mismatch is a
:class:`~kubemoon_core.errors.TypedDecodeError` naming its path).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar, overload

from kubemoon_core import (
    APIResource,
    DeleteOptions,
    GroupVersionResource,
    ListOptions,
    PatchType,
    Request,
    WriteOptions,
    apply_request,
    create_request,
    delete_request,
    get_request,
    patch_request,
    replace_request,
)
from kubemoon_core._request import Target
from kubemoon_core.errors import LocalProtocolError, MethodNotAllowed
from kubemoon_core.lowlevel import KeptOut
from kubemoon_core.typed import DeclaredKind, decode, encode, resource_info

from ._paginate import DEFAULT_PAGE_SIZE, Items, TypedItems

__all__ = ["ClientVerbs"]

K = TypeVar("K", bound=DeclaredKind)


def _target(resource: Target | type[DeclaredKind]) -> Target:
    """The resource a request is built for: a kind's carries its scope."""
    return resource_info(resource).api_resource if isinstance(resource, type) else resource


def _object(
    verb: str, resource: Target | DeclaredKind, obj: Mapping[str, Any] | None
) -> tuple[Target, Mapping[str, Any], type[Any] | None]:
    """(the target, the body, the class to decode the answer into) of a write."""
    if isinstance(resource, GroupVersionResource | APIResource):
        if obj is None:
            raise LocalProtocolError(f"{verb}({resource}) needs the object")
        return resource, obj, None
    if obj is not None or isinstance(resource, type) or not dataclasses.is_dataclass(resource):
        raise LocalProtocolError(
            f"{verb}() takes a resource and a mapping, or an object of a kind alone; "
            f"not {type(resource).__name__}"
        )
    cls = type(resource)
    return resource_info(cls).api_resource, encode(resource), cls


def _subresource(resource: object, subresource: str | None) -> None:
    """A kind's answer decodes into it for the object and its status only."""
    if isinstance(resource, type) and subresource not in (None, "status"):
        raise LocalProtocolError(
            f"subresource {subresource!r} answers another kind than {resource.__name__}: "
            f"name the resource ({resource_info(resource).gvr}) for it"
        )


def _decoded(cls: type[Any] | None, answer: Any) -> Any:
    return answer if cls is None else decode(cls, answer)


class ClientVerbs:
    """The verbs of :class:`~kubemoon_trio.Client`, on its ``request``."""

    async def request(self, request: Request, *, kept_out: list[KeptOut] | None = None) -> Any:
        """Perform ``request`` and return its decoded JSON body (the client's)."""
        raise NotImplementedError  # pragma: no cover - the client's own

    @overload
    async def get(self, resource: type[K], name: str, *, namespace: str | None = None) -> K: ...
    @overload
    async def get(
        self,
        resource: Target,
        name: str,
        *,
        namespace: str | None = None,
        subresource: str | None = None,
    ) -> dict[str, Any]: ...
    async def get(
        self,
        resource: Target | type[DeclaredKind],
        name: str,
        *,
        namespace: str | None = None,
        subresource: str | None = None,
    ) -> Any:
        """GET one object: ``get(CONFIGMAPS, name)`` answers a mapping,
        ``get(ConfigMap, name, namespace=...)`` a ``ConfigMap``."""
        _subresource(resource, subresource)
        request = get_request(_target(resource), name, namespace=namespace, subresource=subresource)
        answer = await self.request(request)
        return _decoded(resource if isinstance(resource, type) else None, answer)

    @overload
    def list(
        self,
        resource: type[K],
        *,
        namespace: str | None = None,
        options: ListOptions | None = None,
    ) -> TypedItems[K]: ...
    @overload
    def list(
        self,
        resource: Target,
        *,
        namespace: str | None = None,
        options: ListOptions | None = None,
        metadata_only: bool = False,
    ) -> Items: ...
    def list(
        self,
        resource: Target | type[DeclaredKind],
        *,
        namespace: str | None = None,
        options: ListOptions | None = None,
        metadata_only: bool = False,
    ) -> Items | TypedItems[Any]:
        """Iterate over every object of a collection, following ``continue`` page by page.

        Pages hold ``options.limit`` objects (500 by default). After the iteration, the
        iterator's ``resource_version`` is the list's resourceVersion. With
        ``metadata_only`` each object is its ``PartialObjectMetadata`` (no data, no spec:
        what a list costs does not grow with the objects' contents). Given a kind
        (``list(ConfigMap)``), the items are decoded into it (:class:`TypedItems`).
        """
        options = options or ListOptions()
        if options.limit is None:
            options = dataclasses.replace(options, limit=DEFAULT_PAGE_SIZE)
        if isinstance(resource, type) and metadata_only:
            raise LocalProtocolError(
                f"list({resource.__name__}, metadata_only=True): metadata is no "
                f"{resource.__name__}; name the resource ({resource_info(resource).gvr})"
            )
        items = Items(self, _target(resource), namespace, options, metadata_only=metadata_only)
        return TypedItems(items, resource) if isinstance(resource, type) else items

    @overload
    async def create(
        self, resource: K, *, namespace: str | None = None, options: WriteOptions | None = None
    ) -> K: ...
    @overload
    async def create(
        self,
        resource: Target,
        obj: Mapping[str, Any],
        *,
        namespace: str | None = None,
        options: WriteOptions | None = None,
    ) -> dict[str, Any]: ...
    async def create(
        self,
        resource: Target | DeclaredKind,
        obj: Mapping[str, Any] | None = None,
        *,
        namespace: str | None = None,
        options: WriteOptions | None = None,
    ) -> Any:
        """POST a new object; return it as stored (``create(ConfigMap(...))``: typed).

        The namespace is ``namespace=`` or else ``obj.metadata.namespace``; a namespaced
        resource given neither is a ``LocalProtocolError``, never the server's 405.
        """
        target, body, cls = _object("create", resource, obj)
        request = create_request(target, body, namespace=namespace, options=options)
        try:
            answer = await self.request(request)
        except MethodNotAllowed as exc:
            if namespace is None and "/namespaces/" not in request.path:
                raise LocalProtocolError(
                    f"{request.path} refused a create without a namespace: the resource is "
                    "namespaced; give namespace= or metadata.namespace"
                ) from exc
            raise
        return _decoded(cls, answer)

    @overload
    async def replace(
        self, resource: K, *, namespace: str | None = None, options: WriteOptions | None = None
    ) -> K: ...
    @overload
    async def replace(
        self,
        resource: Target,
        obj: Mapping[str, Any],
        *,
        namespace: str | None = None,
        name: str | None = None,
        subresource: str | None = None,
        options: WriteOptions | None = None,
    ) -> dict[str, Any]: ...
    async def replace(
        self,
        resource: Target | DeclaredKind,
        obj: Mapping[str, Any] | None = None,
        *,
        namespace: str | None = None,
        name: str | None = None,
        subresource: str | None = None,
        options: WriteOptions | None = None,
    ) -> Any:
        """PUT a whole object (conditional on its resourceVersion); return it as stored."""
        target, body, cls = _object("replace", resource, obj)
        _subresource(cls, subresource)
        request = replace_request(
            target, body, namespace=namespace, name=name, subresource=subresource, options=options
        )
        return _decoded(cls, await self.request(request))

    @overload
    async def patch(
        self,
        resource: type[K],
        name: str,
        patch: Mapping[str, Any] | Sequence[Any] | bytes,
        *,
        patch_type: PatchType = PatchType.MERGE,
        namespace: str | None = None,
        options: WriteOptions | None = None,
    ) -> K: ...
    @overload
    async def patch(
        self,
        resource: Target,
        name: str,
        patch: Mapping[str, Any] | Sequence[Any] | bytes,
        *,
        patch_type: PatchType = PatchType.MERGE,
        namespace: str | None = None,
        subresource: str | None = None,
        options: WriteOptions | None = None,
    ) -> dict[str, Any]: ...
    async def patch(
        self,
        resource: Target | type[DeclaredKind],
        name: str,
        patch: Mapping[str, Any] | Sequence[Any] | bytes,
        *,
        patch_type: PatchType = PatchType.MERGE,
        namespace: str | None = None,
        subresource: str | None = None,
        options: WriteOptions | None = None,
    ) -> Any:
        """PATCH an object (merge patch by default); return it as stored."""
        _subresource(resource, subresource)
        request = patch_request(
            _target(resource),
            name,
            patch,
            patch_type=patch_type,
            namespace=namespace,
            subresource=subresource,
            options=options,
        )
        answer = await self.request(request)
        return _decoded(resource if isinstance(resource, type) else None, answer)

    @overload
    async def apply(
        self,
        resource: K,
        *,
        field_manager: str,
        namespace: str | None = None,
        force: bool = False,
        dry_run: bool = False,
    ) -> K: ...
    @overload
    async def apply(
        self,
        resource: Target,
        obj: Mapping[str, Any],
        *,
        field_manager: str,
        namespace: str | None = None,
        force: bool = False,
        subresource: str | None = None,
        dry_run: bool = False,
    ) -> dict[str, Any]: ...
    async def apply(
        self,
        resource: Target | DeclaredKind,
        obj: Mapping[str, Any] | None = None,
        *,
        field_manager: str,
        namespace: str | None = None,
        force: bool = False,
        subresource: str | None = None,
        dry_run: bool = False,
    ) -> Any:
        """Server-side apply ``obj`` as ``field_manager``; return the object as stored."""
        target, body, cls = _object("apply", resource, obj)
        _subresource(cls, subresource)
        request = apply_request(
            target,
            body,
            field_manager=field_manager,
            namespace=namespace,
            force=force,
            subresource=subresource,
            dry_run=dry_run,
        )
        return _decoded(cls, await self.request(request))

    async def delete(
        self,
        resource: Target | type[DeclaredKind],
        name: str,
        *,
        namespace: str | None = None,
        options: DeleteOptions | None = None,
    ) -> dict[str, Any]:
        """DELETE an object; return what the server answers (the object or a Status)."""
        request = delete_request(_target(resource), name, namespace=namespace, options=options)
        result: dict[str, Any] = await self.request(request)
        return result
