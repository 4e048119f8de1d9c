"""Admission handlers of a kind: the review's objects decoded into its class first.

Rules: the wrapper is synchronous or asynchronous as the handler is (the app tells them
apart by ``inspect.iscoroutinefunction``); ``object`` and ``old_object`` are decoded with
:func:`~kubemoon_core.typed.decode`, and one that does not decode is denied with 400
``BadRequest`` naming the class and the JSON path, before the handler runs. A patch of
:meth:`AdmissionResponse.patched` is computed again against the review's raw object, the
one the API server applies it to.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Mapping
from typing import Any

from ._admission import AdmissionRequest, AdmissionResponse, rebase_on_raw
from ._typed import TypedDecodeError, decode

__all__ = ["typed_handler"]


def _typed_request(cls: type, request: AdmissionRequest) -> AdmissionRequest[Any]:
    def typed(value: Mapping[str, Any] | None, which: str) -> Any:
        if value is None:
            return None
        try:
            return decode(cls, value)
        except TypedDecodeError as exc:
            raise _Undecodable(f"{which} is no {cls.__name__}: {exc}") from None

    return dataclasses.replace(
        request,
        object=typed(request.object, "object"),
        old_object=typed(request.old_object, "oldObject"),
    )


class _Undecodable(Exception):
    pass


def _deny(exc: _Undecodable) -> AdmissionResponse:
    return AdmissionResponse.deny(str(exc), code=400, reason="BadRequest")


def _on_raw(response: Any, request: AdmissionRequest) -> Any:
    """A typed mutation's patch, made against the object the API server sent (it applies
    the patch to that one, where a default of the class may be absent)."""
    if isinstance(response, AdmissionResponse):
        return rebase_on_raw(response, request.object)
    return response


def typed_handler(cls: type, handler: Any) -> Any:
    """``handler`` (sync or async) given requests whose objects are decoded into ``cls``.

    What :meth:`WebhookDeclarations.validating` does for a kind; for a
    :class:`WebhookApp` route: ``app.validating("/validate", typed_handler(Widget, f))``.
    """
    asynchronous = inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(
        getattr(handler, "__call__", None)  # noqa: B004 - an object's async __call__
    )
    if asynchronous:

        async def serve_async(request: AdmissionRequest) -> Any:
            try:
                typed = _typed_request(cls, request)
            except _Undecodable as exc:
                return _deny(exc)
            return _on_raw(await handler(typed), request)

        serve: Any = serve_async
    else:

        def serve_sync(request: AdmissionRequest) -> Any:
            try:
                typed = _typed_request(cls, request)
            except _Undecodable as exc:
                return _deny(exc)
            return _on_raw(handler(typed), request)

        serve = serve_sync
    functools.update_wrapper(serve, handler, updated=())
    return serve
