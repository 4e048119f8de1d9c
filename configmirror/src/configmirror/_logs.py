"""Logs and traces: JSON lines (KubeMoon's formatter) or plain text, and OpenTelemetry
configured from the standard ``OTEL_*`` environment variables.

Rules: every record about a reconcile carries the object (``controller``, ``namespace``,
``name``), the reconcile id and, while tracing, the trace and span ids; credentials are
never logged, so nothing here redacts. Tracing is configured only when the environment
asks for it (an ``OTEL_EXPORTER_OTLP_*ENDPOINT`` or ``OTEL_TRACES_EXPORTER=otlp``), the
OpenTelemetry SDK and an OTLP exporter are importable and ``OTEL_SDK_DISABLED`` is not
``true``; everything else (sampler, service name, resource attributes, headers) the SDK
and the exporter read from the environment themselves.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
from collections.abc import Callable, Mapping
from typing import Any

from kubemoon_io import JsonLogFormatter

__all__ = ["configure_logging", "configure_tracing"]

logger = logging.getLogger("configmirror")

_CONTEXT_FIELDS = ("key", "reconcile_id", "result", "duration", "writes", "error")
DEFAULT_SERVICE_NAME = "kubemoon-configmirror"
_EXPORTERS = {
    "grpc": "opentelemetry.exporter.otlp.proto.grpc.trace_exporter",
    "http/protobuf": "opentelemetry.exporter.otlp.proto.http.trace_exporter",
}


class TextFormatter(logging.Formatter):
    """Human-readable lines with the context fields appended as key=value."""

    def format(self, record: logging.LogRecord) -> str:
        """Render ``record`` as one line of text."""
        base = f"{record.levelname:<7} {record.name}: {record.getMessage()}"
        extra = " ".join(f"{f}={getattr(record, f)}" for f in _CONTEXT_FIELDS if hasattr(record, f))
        line = f"{base} {extra}" if extra else base
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def configure_logging(level: str = "info", fmt: str = "text") -> None:
    """Send logs to stderr in ``fmt`` ("json" or "text") at ``level``."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonLogFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())


def _wanted(environ: Mapping[str, str]) -> bool:
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporter = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter:
        return "otlp" in [e.strip() for e in exporter.split(",")]
    return any(
        environ.get(name, "").strip()
        for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    )


def configure_tracing() -> Callable[[], None] | None:
    """Set a global TracerProvider exporting OTLP as the ``OTEL_*`` variables say.

    Returns the function that flushes and shuts it down at exit, or None when tracing
    stays off (not asked for, disabled, or the SDK or exporter is not installed: logged).
    ``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL``/``OTEL_EXPORTER_OTLP_PROTOCOL`` choose
    ``grpc`` or ``http/protobuf`` (the default); the service name defaults to
    ``kubemoon-configmirror`` unless ``OTEL_SERVICE_NAME`` or ``OTEL_RESOURCE_ATTRIBUTES``
    names one.
    """
    provider = _provider_from_environment(os.environ)
    if provider is None:
        return None
    # Imported lazily: the SDK is optional (only a provider built above gets here).
    importlib.import_module("opentelemetry.trace").set_tracer_provider(provider)
    shutdown: Callable[[], None] = provider.shutdown
    return shutdown


def _provider_from_environment(env: Mapping[str, str]) -> Any:
    """The SDK TracerProvider the environment asks for (not set globally), or None."""
    if not _wanted(env):
        return None
    protocol = (
        env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get("OTEL_EXPORTER_OTLP_PROTOCOL")
    ) or "http/protobuf"
    protocol = protocol.strip().lower()
    module_name = _EXPORTERS.get(protocol)
    if module_name is None:
        logger.warning("tracing off: unsupported OTLP protocol %r (grpc, http/protobuf)", protocol)
        return None
    try:
        resources = importlib.import_module("opentelemetry.sdk.resources")
        sdk_trace = importlib.import_module("opentelemetry.sdk.trace")
        export = importlib.import_module("opentelemetry.sdk.trace.export")
        exporter_module = importlib.import_module(module_name)
    except ImportError as exc:
        logger.warning(
            "tracing off: OTEL_* asks for it but %s is not installed "
            "(pip install kubemoon[otel] opentelemetry-sdk opentelemetry-exporter-otlp)",
            exc.name,
        )
        return None
    attributes: dict[str, str] = {}
    named = env.get("OTEL_SERVICE_NAME", "").strip() or "service.name=" in env.get(
        "OTEL_RESOURCE_ATTRIBUTES", ""
    )
    if not named:
        attributes["service.name"] = DEFAULT_SERVICE_NAME
    # The sampler comes from OTEL_TRACES_SAMPLER(_ARG), the endpoint and headers from
    # OTEL_EXPORTER_OTLP_*: the SDK and the exporter read them.
    provider = sdk_trace.TracerProvider(resource=resources.Resource.create(attributes))
    provider.add_span_processor(export.BatchSpanProcessor(exporter_module.OTLPSpanExporter()))
    logger.info("tracing: OTLP %s to %s", protocol, _endpoint(env))
    return provider


def _endpoint(env: Mapping[str, str]) -> str:
    return (
        env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        or env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
        or "the default endpoint"
    )
