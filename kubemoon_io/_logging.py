"""JSON log lines that carry the trace and the object they are about.

Rules: one JSON object per record and per line (control characters in messages are
escaped, so a message can never forge a second line); the fields are ``ts`` (RFC 3339,
UTC, milliseconds), ``level``, ``msg``, ``logger``; ``trace_id``/``span_id`` when the
record is made inside a valid OpenTelemetry span; ``controller``/``namespace``/``name``
when it is about an object (from :func:`object_context`, which the runtime sets around
every reconcile, or from ``extra=``: ``controller``, ``namespace``, ``object_name`` —
``name`` is taken by the logging module — or a ``key`` ``"namespace/name"``); then every
other ``extra=`` field. The formatter
never raises: a value JSON cannot encode is written as its ``str``.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from typing import Any

from kubemoon_core.errors import LocalProtocolError

try:  # the extra: kubemoon[otel]
    from opentelemetry import trace as _otel_trace
except ImportError:  # pragma: no cover - exercised by the test without the extra
    _otel_trace = None  # type: ignore[assignment]
_AVAILABLE = _otel_trace is not None

__all__ = ["JsonLogFormatter", "object_context"]

_object: contextvars.ContextVar[tuple[str, str, str] | None] = contextvars.ContextVar(
    "kubemoon_log_object", default=None
)
# Attributes every LogRecord has: anything else on a record came from ``extra=``.
_RECORD_FIELDS = frozenset(
    logging.LogRecord("", 0, "", 0, "", (), None).__dict__.keys()
    | {"message", "asctime", "taskName"}
)
_OWN_FIELDS = ("ts", "level", "msg", "logger")
_OBJECT_FIELDS = ("controller", "namespace", "name")


def _enter_object(controller: str, namespace: str, name: str) -> contextvars.Token[Any]:
    return _object.set((controller, namespace, name))


def _leave_object(token: contextvars.Token[Any]) -> None:
    _object.reset(token)


@contextlib.contextmanager
def object_context(*, controller: str = "", namespace: str = "", name: str = "") -> Iterator[None]:
    """Within the block, log records are about this object (``controller``, ``namespace``,
    ``name`` in :class:`JsonLogFormatter` lines); blocks nest, the innermost wins.

    The runtime enters it around every reconcile; it follows the current task or thread
    (a ``contextvars`` variable).
    """
    token = _object.set((controller, namespace, name))
    try:
        yield
    finally:
        _object.reset(token)


def _timestamp(created: float) -> str:
    moment = datetime.fromtimestamp(created, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def _encodable(value: Any) -> Any:
    try:
        json.dumps(value)
    except (TypeError, ValueError, RecursionError):
        return str(value)
    return value


class JsonLogFormatter(logging.Formatter):
    """Formats a record as one JSON object on one line (see the module's rules).

    ``static_fields`` are added to every line (e.g. ``{"service": "configmirror"}``);
    record fields win over them; anything else raises
    :class:`~kubemoon_core.errors.LocalProtocolError`.
    """

    def __init__(self, static_fields: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        if static_fields is not None and (
            not isinstance(static_fields, Mapping)
            or not all(isinstance(key, str) for key in static_fields)
        ):
            raise LocalProtocolError(
                f"static_fields must map field names (str) to values, got {static_fields!r}"
            )
        self._static = dict(static_fields or {})

    def format(self, record: logging.LogRecord) -> str:
        """Render ``record`` as a JSON line (no trailing newline)."""
        entry: dict[str, Any] = dict(self._static)
        entry["ts"] = _timestamp(record.created)
        entry["level"] = record.levelname.lower()
        entry["msg"] = record.getMessage()
        entry["logger"] = record.name
        if _AVAILABLE:
            context = _otel_trace.get_current_span().get_span_context()
            if context.is_valid:
                entry["trace_id"] = f"{context.trace_id:032x}"
                entry["span_id"] = f"{context.span_id:016x}"
        about = _object.get()
        if about is not None:
            for field, value in zip(_OBJECT_FIELDS, about, strict=True):
                if value:
                    entry[field] = value
        extra = record.__dict__
        key = extra.get("key")
        if isinstance(key, str) and "name" not in entry and "object_name" not in extra:
            namespace, _, name = key.rpartition("/")
            entry["name"] = name
            if namespace:
                entry["namespace"] = namespace
        for field, value in extra.items():
            if field == "object_name":
                entry["name"] = value
            elif field not in _RECORD_FIELDS and field not in _OWN_FIELDS:
                entry[field] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        try:
            return json.dumps(entry, default=str)
        except (TypeError, ValueError, RecursionError):  # circular or odd keys
            safe = {str(k): _encodable(v) for k, v in entry.items()}
            return json.dumps(safe, default=str)
