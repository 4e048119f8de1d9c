"""ConfigMirror's logs (KubeMoon's JSON formatter) and its tracing set-up from OTEL_*."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ParentBased

from configmirror import _logs
from configmirror._cli import parse_args
from kubemoon_io import JsonLogFormatter

OTEL = (
    "OTEL_SDK_DISABLED",
    "OTEL_TRACES_EXPORTER",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
    "OTEL_SERVICE_NAME",
    "OTEL_RESOURCE_ATTRIBUTES",
    "OTEL_TRACES_SAMPLER",
    "OTEL_TRACES_SAMPLER_ARG",
)


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in OTEL:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


@pytest.fixture
def root_handlers() -> Iterator[None]:
    root = logging.getLogger()
    saved, level = list(root.handlers), root.level
    yield
    root.handlers[:] = saved
    root.setLevel(level)


def _provider(env: pytest.MonkeyPatch, **variables: str) -> Any:
    import os

    for name, value in variables.items():
        env.setenv(name, value)
    return _logs._provider_from_environment(os.environ)


def test_json_logs_use_kubemoons_formatter(root_handlers: None) -> None:
    _logs.configure_logging("debug", "json")
    (handler,) = logging.getLogger().handlers
    assert isinstance(handler.formatter, JsonLogFormatter)
    record = logging.LogRecord("configmirror", logging.INFO, "", 0, "probes on %s", ("x",), None)
    line = json.loads(handler.format(record))
    assert (line["level"], line["msg"], line["logger"]) == ("info", "probes on x", "configmirror")
    _logs.configure_logging("info", "text")
    (handler,) = logging.getLogger().handlers
    assert handler.format(record) == "INFO    configmirror: probes on x"
    assert parse_args(["--log-format", "json"]).log_format == "json"


@pytest.mark.parametrize(
    "variables",
    [
        {},
        {"OTEL_SERVICE_NAME": "only-a-name"},
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317", "OTEL_SDK_DISABLED": "true"},
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317", "OTEL_TRACES_EXPORTER": "none"},
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "thrift"},
    ],
)
def test_tracing_stays_off_unless_asked_for(
    env: pytest.MonkeyPatch, variables: dict[str, str]
) -> None:
    assert _provider(env, **variables) is None


def test_otel_variables_configure_the_sdk(env: pytest.MonkeyPatch) -> None:
    provider = _provider(
        env,
        OTEL_EXPORTER_OTLP_ENDPOINT="http://collector:4317",
        OTEL_EXPORTER_OTLP_PROTOCOL="grpc",
        OTEL_TRACES_SAMPLER="parentbased_always_off",
    )
    try:
        assert isinstance(provider, TracerProvider)
        assert provider.resource.attributes["service.name"] == "kubemoon-configmirror"
        assert isinstance(provider.sampler, ParentBased)
        assert provider.sampler._root is ALWAYS_OFF
        (processor,) = provider._active_span_processor._span_processors
        exporter = processor._batch_processor._exporter
        assert isinstance(exporter, OTLPSpanExporter)
        assert exporter._endpoint == "collector:4317"
    finally:
        provider.shutdown()


def test_the_service_name_from_the_environment_wins(env: pytest.MonkeyPatch) -> None:
    provider = _provider(
        env,
        OTEL_TRACES_EXPORTER="otlp",
        OTEL_EXPORTER_OTLP_TRACES_PROTOCOL="grpc",
        OTEL_SERVICE_NAME="mirror-prod",
    )
    try:
        assert provider.resource.attributes["service.name"] == "mirror-prod"
    finally:
        provider.shutdown()


def test_a_missing_exporter_is_logged_and_tracing_stays_off(
    env: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    env.setitem(_logs._EXPORTERS, "grpc", "kubemoon_not_installed.trace_exporter")
    with caplog.at_level(logging.WARNING, "configmirror"):
        assert (
            _provider(
                env, OTEL_EXPORTER_OTLP_ENDPOINT="http://c:4317", OTEL_EXPORTER_OTLP_PROTOCOL="grpc"
            )
            is None
        )
    assert "kubemoon_not_installed" in caplog.text
