"""OpenTelemetry traces of the runtime, on every adapter (``pip install kubemoon[otel]``).

Rules: only the OpenTelemetry *API* is used, and only if it is installed; the SDK, its
exporters and its sampler are the application's choice. Without the API, or while no
TracerProvider is set (the API's default proxy), every hook is a cheap no-op: nothing is
allocated and no span is started. Spans:

- one per reconcile (``reconcile <controller>``), the root of a trace;
- one per API request made *inside* another span (HTTP client conventions:
  ``http.request.method``, ``url.full`` without credentials, ``server.address``,
  ``http.response.status_code``, ``http.request.resend_count``), so that a controller's
  lease renewals and informers outside a span do not each start a trace;
- one per informer LIST page and WATCH (relists and watch restarts counted on them);
- leader transitions as span events;
- one SERVER span per webhook request, continuing the caller's W3C ``traceparent``.

Every request sent while a span is current carries its ``traceparent`` (and
``tracestate``); baggage is never sent. Nothing here reads a clock of its own or knows the
event loop: the OpenTelemetry context lives in ``contextvars``, which trio tasks, asyncio
tasks and threads each carry.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import inspect
import json
import os
import re
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, TypeVar, cast
from urllib.parse import urlsplit, urlunsplit

from kubemoon_core._resources import ObjectKey
from kubemoon_core.errors import LocalProtocolError

from ._logging import _enter_object, _leave_object

if TYPE_CHECKING:
    from opentelemetry.trace import Span, Tracer, TracerProvider

try:  # the extra: kubemoon[otel]
    from opentelemetry import context as _otel_context
    from opentelemetry import trace as _otel_trace
    from opentelemetry.propagators.textmap import Getter
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
except ImportError:  # pragma: no cover - exercised by the test without the extra
    _otel_trace = None  # type: ignore[assignment]
    _otel_context = None  # type: ignore[assignment]
_AVAILABLE: Final = _otel_trace is not None

__all__ = [
    "TRACER_NAME",
    "tracing_enabled",
    "use_tracer_provider",
]

TRACER_NAME: Final = "kubemoon"
"""The instrumentation scope of every span the runtime starts."""

F = TypeVar("F", bound=Callable[..., Any])
_NO_HEADERS: tuple[tuple[bytes, bytes], ...] = ()
_override: TracerProvider | None = None
_UNKNOWN = object()
_GLOBAL_PROBE: Final = _AVAILABLE and "OTEL_PYTHON_TRACER_PROVIDER" not in os.environ
_cached: tuple[object, Tracer] | None = None
# The Request sent last in this context and how often: a request sent again (a 401
# refresh, a Retry-After) is the same object, which gives ``http.request.resend_count``.
_last_sent: contextvars.ContextVar[tuple[object, int]] = contextvars.ContextVar(
    "kubemoon_last_sent", default=(None, 0)
)


def use_tracer_provider(provider: TracerProvider | None) -> None:
    """Trace with ``provider`` instead of OpenTelemetry's global one (``None``: the global).

    Applications normally call ``opentelemetry.trace.set_tracer_provider`` once; this is
    for tests and benchmarks that switch tracing on and off in one process. Anything
    without ``get_tracer`` raises :class:`~kubemoon_core.errors.LocalProtocolError`.
    """
    global _override, _cached
    if provider is not None and not callable(getattr(provider, "get_tracer", None)):
        raise LocalProtocolError(
            f"use_tracer_provider needs an OpenTelemetry TracerProvider or None, got {provider!r}"
        )
    _override = provider
    _cached = None


def _tracer() -> Tracer | None:
    """The runtime's tracer, or None while tracing is off (no API, no provider)."""
    global _cached
    if not _AVAILABLE:
        return None
    provider = _override
    if provider is None:
        # The API keeps the global provider in a module variable (None until one is
        # set); reading it is the cheapest "is tracing off?" there is. Without it, or
        # with OTEL_PYTHON_TRACER_PROVIDER naming one, ask the public function.
        if _GLOBAL_PROBE and getattr(_otel_trace, "_TRACER_PROVIDER", _UNKNOWN) is None:
            return None
        provider = _otel_trace.get_tracer_provider()
    cached = _cached
    if cached is not None and cached[0] is provider:
        return cached[1]
    if isinstance(provider, _otel_trace.ProxyTracerProvider | _otel_trace.NoOpTracerProvider):
        return None
    tracer = provider.get_tracer(TRACER_NAME)
    _cached = (provider, tracer)
    return tracer


def tracing_enabled() -> bool:
    """True when the OpenTelemetry API is installed and a real TracerProvider is set."""
    return _tracer() is not None


# -- propagation ---------------------------------------------------------------------------


_SAMPLED: Final = 0x01
"""The W3C ``sampled`` trace flag, the only flag :func:`trace_headers` sends."""


def trace_headers() -> Sequence[tuple[bytes, bytes]]:
    """The W3C ``traceparent`` (and ``tracestate``) of the current span, encoded.

    Empty when there is no valid current span (or no API). Built from the span context
    directly: the values are hex digits and a validated ``tracestate``, never user text.
    """
    if not _AVAILABLE or not _otel_context.get_current():
        return _NO_HEADERS
    context = _otel_trace.get_current_span().get_span_context()
    if not context.is_valid:
        return _NO_HEADERS
    # Only the sampled bit: kube-apiserver 1.35 and 1.36 vendor a propagator that discards a
    # version-00 traceparent whose flags are above 02, and SDKs now set the W3C random bit
    # (flags 03), so copying the flags would lose the trace on those servers.
    sampled = "01" if context.trace_flags & _SAMPLED else "00"
    parent = f"00-{context.trace_id:032x}-{context.span_id:016x}-{sampled}"
    headers = [(b"traceparent", parent.encode("ascii"))]
    state = propagated_tracestate(context.trace_state.to_header())
    if state:
        headers.append((b"tracestate", state.encode("latin-1")))
    return headers


MAX_PROPAGATED_TRACESTATE: Final = 512
"""The longest ``tracestate`` sent on (W3C: a propagator SHOULD send at most 512)."""
_LONG_MEMBER = 128


def propagated_tracestate(state: str) -> str:
    """``state`` cut to :data:`MAX_PROPAGATED_TRACESTATE` characters, as W3C suggests:
    members longer than 128 characters go first, then members from the end. A caller's
    valid 8 KiB tracestate would otherwise ride on every request a handler makes."""
    if len(state) <= MAX_PROPAGATED_TRACESTATE:
        return state
    members = [m.strip() for m in state.split(",") if m.strip()]
    members = [m for m in members if len(m) <= _LONG_MEMBER]
    while members and len(",".join(members)) > MAX_PROPAGATED_TRACESTATE:
        members.pop()
    return ",".join(members)


# W3C Trace Context tracestate list members (key "=" value), checked here so that the
# OpenTelemetry propagator never sees a malformed one: it logs a WARNING per request that
# quotes the caller's text.
_STATE_KEY = re.compile(
    r"[a-z][a-z0-9_*/-]{0,255}|[a-z0-9][a-z0-9_*/-]{0,240}@[a-z][a-z0-9_*/-]{0,13}"
)
_STATE_VALUE = re.compile(r"[\x20-\x2b\x2d-\x3c\x3e-\x7e]{0,255}[\x21-\x2b\x2d-\x3c\x3e-\x7e]")
_MAX_MEMBERS = 32


def tracestate_problem(values: Sequence[str]) -> str | None:
    """Why the ``tracestate`` header lines ``values`` are not valid W3C, or None.

    The reason is one of a few fixed phrases, never the caller's text, so it is safe to log.
    """
    if sum(len(value) + 1 for value in values) > _MAX_TRACESTATE:
        return f"tracestate longer than {_MAX_TRACESTATE} characters"
    keys: set[str] = set()
    for value in values:
        for raw in value.split(","):
            member = raw.strip(" \t")
            if not member:
                continue
            key, sep, item = member.partition("=")
            if not sep or not _STATE_KEY.fullmatch(key) or not _STATE_VALUE.fullmatch(item):
                return "tracestate with a malformed list member"
            if key in keys:
                return "tracestate with a duplicate key"
            keys.add(key)
            if len(keys) > _MAX_MEMBERS:
                return f"tracestate with more than {_MAX_MEMBERS} list members"
    return None


# Longer values are dropped here, silently: the propagator would log a warning for each,
# and whoever reaches a webhook port chooses these headers.
_MAX_TRACEPARENT = 512
_MAX_TRACESTATE = 8192


class _HeaderGetter:
    """Reads W3C headers from a list of (name, value) pairs, case-insensitively."""

    def get(self, carrier: Sequence[tuple[str, str]], key: str) -> list[str] | None:
        key = key.lower()
        values = [value for name, value in carrier if name.lower() == key]
        if key == "traceparent":
            values = values[:1] if values and len(values[0]) <= _MAX_TRACEPARENT else []
        elif sum(len(value) + 1 for value in values) > _MAX_TRACESTATE:
            return None
        return values or None

    def keys(self, carrier: Sequence[tuple[str, str]]) -> list[str]:
        return [name for name, _ in carrier]


_GETTER = cast("Getter[Sequence[tuple[str, str]]]", _HeaderGetter())
_PROPAGATOR = TraceContextTextMapPropagator() if _AVAILABLE else None


# -- API requests ----------------------------------------------------------------------------


def _use(span: Span) -> contextlib.AbstractContextManager[Span]:
    """Make ``span`` current; the caller records errors and ends it."""
    assert _otel_trace is not None
    return _otel_trace.use_span(
        span, end_on_exit=False, record_exception=False, set_status_on_exception=False
    )


def _safe_url(url: str) -> str:
    """``url`` without user information (credentials never reach a span)."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, host, parts.path, parts.query, ""))


def _route(path: str) -> tuple[str, dict[str, Any]]:
    """A low-cardinality route of an API path and the Kubernetes attributes it names."""
    parts = [p for p in path.split("/") if p]
    attributes: dict[str, Any] = {}
    if parts[:1] == ["api"] and len(parts) >= 2:
        prefix, rest, group = parts[:2], parts[2:], ""
    elif parts[:1] == ["apis"] and len(parts) >= 3:
        prefix, rest, group = parts[:3], parts[3:], parts[1]
    else:
        return path, attributes
    template = list(prefix)
    if len(rest) >= 3 and rest[0] == "namespaces":
        attributes["k8s.namespace.name"] = rest[1]
        template += ["namespaces", "{namespace}"]
        rest = rest[2:]
    if rest:
        resource = rest[0]
        attributes["kubemoon.k8s.resource"] = f"{resource}.{group}" if group else resource
        template.append(resource)
        if len(rest) >= 2:
            template.append("{name}")
            if resource == "namespaces":
                attributes["k8s.namespace.name"] = rest[1]
        if len(rest) >= 3:
            attributes["kubemoon.k8s.subresource"] = rest[2]
            template.append(rest[2])
    return "/" + "/".join(template), attributes


def _start_request_span(tracer: Tracer, request: Any, url: str) -> Span:
    route, attributes = _route(request.path)
    parts = urlsplit(url)
    attributes["http.request.method"] = request.method
    attributes["url.full"] = _safe_url(url)
    attributes["url.template"] = route
    if parts.hostname:
        attributes["server.address"] = parts.hostname
    port = parts.port or (443 if parts.scheme == "https" else 80)
    attributes["server.port"] = port
    if request.stream:
        attributes["kubemoon.k8s.watch"] = True
    last, count = _last_sent.get()
    resend = count + 1 if last is request else 0
    _last_sent.set((request, resend))
    if resend:
        attributes["http.request.resend_count"] = resend
    assert _otel_trace is not None
    return tracer.start_span(
        f"{request.method} {route}", kind=_otel_trace.SpanKind.CLIENT, attributes=attributes
    )


def _end_request_span(span: Span, result: Any, error: BaseException | None) -> None:
    assert _otel_trace is not None
    if error is not None:
        span.set_attribute("error.type", type(error).__qualname__)
        span.set_status(_otel_trace.Status(_otel_trace.StatusCode.ERROR, str(error)[:200]))
    else:
        status = int(result.status_code)
        span.set_attribute("http.response.status_code", status)
        if status >= 400:
            span.set_attribute("error.type", str(status))
            span.set_status(_otel_trace.Status(_otel_trace.StatusCode.ERROR))
    span.end()


def _request_span(request: Any, url: str) -> Span | None:
    tracer = _tracer()
    if tracer is None:
        return None
    assert _otel_trace is not None
    if not _otel_trace.get_current_span().get_span_context().is_valid:
        return None  # requests outside any span do not start traces of their own
    return _start_request_span(tracer, request, url)


def traced_request(method: F) -> F:
    """Decorate a client method ``(self, request, url, ...)`` returning ``.status_code``.

    Each call is one CLIENT span (one HTTP exchange), current while the method runs so
    that :func:`trace_headers` puts its ``traceparent`` on the request. Works on a
    coroutine function and on a plain one (the blocking twin). Without the API the
    method is returned as it is.
    """
    if not _AVAILABLE:
        return method
    if inspect.iscoroutinefunction(method):

        @functools.wraps(method)
        async def traced_async(self: Any, request: Any, url: str, *args: Any, **kw: Any) -> Any:
            span = _request_span(request, url)
            if span is None:
                return await method(self, request, url, *args, **kw)
            with _use(span):
                try:
                    result = await method(self, request, url, *args, **kw)
                except BaseException as exc:
                    _end_request_span(span, None, exc)
                    raise
            _end_request_span(span, result, None)
            return result

        return cast("F", traced_async)

    @functools.wraps(method)
    def traced(self: Any, request: Any, url: str, *args: Any, **kw: Any) -> Any:
        span = _request_span(request, url)
        if span is None:
            return method(self, request, url, *args, **kw)
        with _use(span):
            try:
                result = method(self, request, url, *args, **kw)
            except BaseException as exc:
                _end_request_span(span, None, exc)
                raise
        _end_request_span(span, result, None)
        return result

    return cast("F", traced)


# -- reconciles ------------------------------------------------------------------------------


def _reconcile_span(tracer: Tracer, controller: str, item: Any) -> Any:
    """The (not yet entered) current-span manager of one reconcile: a root span."""
    assert _otel_trace is not None
    key: ObjectKey = item.key
    attributes: dict[str, Any] = {
        "kubemoon.controller": controller,
        "kubemoon.key": str(key),
        "kubemoon.object.name": key.name,
        "kubemoon.reconcile_id": item.reconcile_id,
        "kubemoon.requeues": item.requeues,
    }
    if key.namespace:
        attributes["k8s.namespace.name"] = key.namespace
    # A reconcile starts a trace of its own, whatever context the worker inherited.
    return tracer.start_as_current_span(
        f"reconcile {controller}",
        context=_otel_context.Context(),
        kind=_otel_trace.SpanKind.INTERNAL,
        attributes=attributes,
        record_exception=True,
        set_status_on_exception=True,
    )


def _record_outcome(span: Span, outcome: Any) -> None:
    assert _otel_trace is not None
    result = getattr(outcome, "result", None)
    label = getattr(result, "value", None)
    if isinstance(label, str):
        span.set_attribute("kubemoon.reconcile.result", label)
        span.set_attribute("kubemoon.reconcile.requeue", label.startswith("requeue"))
    delay = getattr(outcome, "delay", None)
    if isinstance(delay, int | float):
        span.set_attribute("kubemoon.reconcile.requeue_after", float(delay))
    error = getattr(outcome, "error", None)
    if label in ("error", "terminal_error"):
        if isinstance(error, BaseException):
            span.record_exception(error)
        span.set_status(_otel_trace.Status(_otel_trace.StatusCode.ERROR, str(error)[:200]))


def traced_reconcile(method: F) -> F:
    """Decorate ``(self, item) -> outcome`` where ``self.name`` is the controller's name.

    The call runs in the log context of its object (``controller``, ``namespace``,
    ``name``; see :func:`~kubemoon_io.object_context`) and, while tracing is on, inside a
    ``reconcile <controller>`` span recording the key, the result, whether it requeues and
    the error (an exception escaping it is recorded too).
    """
    if inspect.iscoroutinefunction(method):

        @functools.wraps(method)
        async def traced_async(self: Any, item: Any) -> Any:
            key = item.key
            token = _enter_object(self.name, key.namespace, key.name)
            try:
                tracer = _tracer()
                if tracer is None:
                    return await method(self, item)
                with _reconcile_span(tracer, self.name, item) as span:
                    outcome = await method(self, item)
                    _record_outcome(span, outcome)
                    return outcome
            finally:
                _leave_object(token)

        return cast("F", traced_async)

    @functools.wraps(method)
    def traced(self: Any, item: Any) -> Any:
        key = item.key
        token = _enter_object(self.name, key.namespace, key.name)
        try:
            tracer = _tracer()
            if tracer is None:
                return method(self, item)
            with _reconcile_span(tracer, self.name, item) as span:
                outcome = method(self, item)
                _record_outcome(span, outcome)
                return outcome
        finally:
            _leave_object(token)

    return cast("F", traced)


# -- informers -------------------------------------------------------------------------------


def _informer_span(informer: Any, verb: str) -> Span | None:
    tracer = _tracer()
    if tracer is None:
        return None
    assert _otel_trace is not None
    stats = informer.reflector.stats
    attributes: dict[str, Any] = {
        "kubemoon.informer": informer.name,
        "kubemoon.reflector.relists": stats.relists,
        "kubemoon.reflector.watch_restarts": stats.watch_restarts,
    }
    reason = stats.last_relist_reason
    if reason is not None:
        attributes["kubemoon.reflector.last_relist_reason"] = str(getattr(reason, "value", reason))
    return tracer.start_span(
        f"informer {verb} {informer.name}",
        context=_otel_context.Context(),
        kind=_otel_trace.SpanKind.INTERNAL,
        attributes=attributes,
    )


def _end_informer_span(span: Span, informer: Any, before: Any, error: BaseException | None) -> None:
    assert _otel_trace is not None
    stats = informer.reflector.stats
    span.set_attribute("kubemoon.reflector.events", stats.events - before.events)
    if stats.relists > before.relists:  # this request ended in a relist (a 410...)
        reason = stats.last_relist_reason
        span.set_attribute("kubemoon.reflector.relist", str(getattr(reason, "value", reason)))
    if error is None and stats.failures > before.failures:  # it backed off: it failed
        error = informer.reflector.last_error
    if error is not None and not isinstance(error, Exception):
        error = None  # a cancellation is a stop, not a failure
    if error is not None:
        span.set_attribute("error.type", type(error).__qualname__)
        span.set_status(_otel_trace.Status(_otel_trace.StatusCode.ERROR, str(error)[:200]))
    span.end()


def traced_informer(verb: str) -> Callable[[F], F]:
    """Decorate an informer's ``(self, request, ...)`` LIST page or WATCH method.

    While tracing is on, each call is a root span ``informer <verb> <name>`` (its request
    a child of it) carrying the reflector's relist and watch-restart counts, the events
    it delivered, the relist it led to (``kubemoon.reflector.relist``: the reason) and
    the error when it failed (a backoff, a broken connection).
    """

    def decorate(method: F) -> F:
        if not _AVAILABLE:
            return method
        if inspect.iscoroutinefunction(method):

            @functools.wraps(method)
            async def traced_async(self: Any, *args: Any, **kw: Any) -> Any:
                span = _informer_span(self, verb)
                if span is None:
                    return await method(self, *args, **kw)
                before = self.reflector.stats
                with _use(span):
                    try:
                        result = await method(self, *args, **kw)
                    except BaseException as exc:
                        _end_informer_span(span, self, before, exc)
                        raise
                _end_informer_span(span, self, before, None)
                return result

            return cast("F", traced_async)

        @functools.wraps(method)
        def traced(self: Any, *args: Any, **kw: Any) -> Any:
            span = _informer_span(self, verb)
            if span is None:
                return method(self, *args, **kw)
            before = self.reflector.stats
            with _use(span):
                try:
                    result = method(self, *args, **kw)
                except BaseException as exc:
                    _end_informer_span(span, self, before, exc)
                    raise
            _end_informer_span(span, self, before, None)
            return result

        return cast("F", traced)

    return decorate


# -- leader election -------------------------------------------------------------------------


def leader_transition(event: object, identity: str) -> None:
    """Record a leader-election event (started, stopped leading, new leader) as a span event.

    On the current span if one is recording, else on a short ``leader election`` span.
    """
    tracer = _tracer()
    if tracer is None:
        return
    assert _otel_trace is not None
    name = {
        "StartedLeading": "leader.started_leading",
        "StoppedLeading": "leader.stopped_leading",
        "NewLeader": "leader.new_leader",
    }.get(type(event).__name__, "leader.event")
    attributes: dict[str, Any] = {"kubemoon.leader.identity": identity}
    holder = getattr(event, "identity", None)
    if isinstance(holder, str):
        attributes["kubemoon.leader.holder"] = holder
    current = _otel_trace.get_current_span()
    if current.is_recording():
        current.add_event(name, attributes)
        return
    with tracer.start_as_current_span("leader election", context=_otel_context.Context()) as span:
        span.add_event(name, attributes)


# -- webhook reviews -------------------------------------------------------------------------


class ReviewSpan:
    """The span of one webhook request; :meth:`end` closes it with the reply."""

    __slots__ = ("_span", "_token", "ignored")

    def __init__(self, span: Span | None, token: object | None, ignored: str | None = None) -> None:
        self._span = span
        self._token = token
        #: Why the caller's ``tracestate`` was ignored (a fixed phrase), or None.
        self.ignored = ignored

    def end(self, reply: Any) -> None:
        """Record ``reply`` (status, webhook, outcome, allowed) and end the span."""
        span = self._span
        if span is None:
            return
        self._span = None
        assert _otel_trace is not None
        if reply is not None:
            span.set_attribute("http.response.status_code", reply.status)
            if reply.webhook:
                span.set_attribute("kubemoon.webhook", reply.webhook)
            if reply.uid:
                span.set_attribute("kubemoon.admission.uid", reply.uid)
            span.set_attribute("kubemoon.webhook.outcome", reply.outcome)
            if reply.outcome in ("allowed", "patched", "denied"):
                span.set_attribute("kubemoon.admission.allowed", reply.outcome != "denied")
            if reply.status >= 500:
                span.set_status(_otel_trace.Status(_otel_trace.StatusCode.ERROR))
        else:
            span.set_attribute("error.type", "no_reply")
        if self._token is not None:
            _otel_context.detach(cast("contextvars.Token[Any]", self._token))
        span.end()


_NO_REVIEW = ReviewSpan(None, None)


def review_span(method: str, target: str, headers: Sequence[tuple[str, str]]) -> ReviewSpan:
    """Start the SERVER span of a webhook request, continuing the caller's ``traceparent``.

    A malformed ``traceparent`` is ignored (a new trace starts), as W3C Trace Context
    asks; a malformed ``tracestate`` is dropped (the trace continues without it) and
    :attr:`ReviewSpan.ignored` says why, for the server's rate-limited log. The span is
    current until :meth:`ReviewSpan.end`.
    """
    tracer = _tracer()
    if tracer is None:
        return _NO_REVIEW
    assert _otel_trace is not None
    assert _PROPAGATOR is not None
    states = [value for name, value in headers if name.lower() == "tracestate"]
    ignored = tracestate_problem(states) if states else None
    if ignored is not None:  # the trace continues without the caller's tracestate
        headers = [(name, value) for name, value in headers if name.lower() != "tracestate"]
    parent = _PROPAGATOR.extract(headers, context=_otel_context.Context(), getter=_GETTER)
    path = target.split("?", 1)[0]
    span = tracer.start_span(
        f"{method} {path}",
        context=parent,
        kind=_otel_trace.SpanKind.SERVER,
        attributes={"http.request.method": method, "url.path": path, "http.route": path},
    )
    token = _otel_context.attach(_otel_trace.set_span_in_context(span))
    return ReviewSpan(span, token, ignored)


def current_span() -> Any:
    """The current span (None without the OpenTelemetry API), to hand to another thread."""
    if not _AVAILABLE:
        return None
    return _otel_trace.get_current_span()


def note_review(body: bytes, span: Any = None) -> None:
    """Put an AdmissionReview's operation and object on ``span`` (by default the current
    one). The body is parsed only when the span records."""
    if not _AVAILABLE:
        return
    if span is None:
        span = _otel_trace.get_current_span()
    if not span.is_recording():
        return
    try:
        review = json.loads(body)
    except (ValueError, RecursionError):
        return
    request = review.get("request") if isinstance(review, Mapping) else None
    if not isinstance(request, Mapping):
        return
    for field, attribute in (
        ("operation", "kubemoon.admission.operation"),
        ("namespace", "k8s.namespace.name"),
        ("name", "kubemoon.object.name"),
    ):
        value = request.get(field)
        if isinstance(value, str) and value:
            span.set_attribute(attribute, value[:253])
    resource = request.get("resource")
    if isinstance(resource, Mapping) and isinstance(resource.get("resource"), str):
        span.set_attribute("kubemoon.k8s.resource", str(resource["resource"])[:253])
