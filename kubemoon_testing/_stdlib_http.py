"""The test kube-apiserver's own HTTP plumbing, on ``http.client`` and ``ssl`` only.

A test fixture must not depend on the KubeMoon adapters it helps to test: one request to
the apiserver read whole (:class:`RawResponse`), and etcd's JSON gateway (health, and the
key-value calls the fixture makes).
"""

from __future__ import annotations

import base64
import http.client
import json
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ._apiserver_errors import ApiServerError

__all__ = ["RawResponse"]


@dataclass(frozen=True, slots=True)
class RawResponse:
    """One HTTP response, read completely (watches end when the server closes them)."""

    status: int
    reason: str
    headers: Mapping[str, str]
    body: bytes

    def json(self) -> Any:
        """The body decoded as JSON."""
        return json.loads(self.body)

    def events(self) -> list[dict[str, Any]]:
        """The body of a watch response: one JSON object per line."""
        return [json.loads(line) for line in self.body.splitlines() if line.strip()]


def _b64(data: bytes) -> str:
    # bytes fields are base64 in etcd's JSON gateway (proto3 JSON mapping).
    return base64.b64encode(data).decode("ascii")


def https_request(
    port: int,
    context: ssl.SSLContext,
    method: str,
    path: str,
    *,
    data: bytes | None,
    headers: Mapping[str, str],
    timeout: float,
) -> RawResponse:
    """Send one request to ``https://127.0.0.1:port`` and read the whole response."""
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=timeout)
    try:
        conn.request(method, path, body=data, headers=dict(headers))
        resp = conn.getresponse()
        payload = resp.read()
        return RawResponse(
            status=resp.status,
            reason=resp.reason,
            headers={k.lower(): v for k, v in resp.getheaders()},
            body=payload,
        )
    finally:
        conn.close()


def etcd_healthy(port: int) -> bool:
    """Whether etcd on ``port`` answers its ``/health`` as healthy."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2.0)
    try:
        conn.request("GET", "/health")
        resp = conn.getresponse()
        return resp.status == 200 and json.loads(resp.read()).get("health") == "true"
    finally:
        conn.close()


def etcd_post(port: int, path: str, payload: Mapping[str, object]) -> dict[str, Any]:
    """POST ``payload`` to etcd's JSON gateway; its answer, or :class:`ApiServerError`."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10.0)
    try:
        conn.request(
            "POST",
            path,
            body=json.dumps(payload).encode(),
            headers={"Content-Type": "application/json"},
        )
        resp = conn.getresponse()
        raw = resp.read()
    finally:
        conn.close()
    try:
        answer: dict[str, Any] = json.loads(raw)
    except ValueError:
        answer = {}
    if resp.status != 200:
        message = answer.get("message") or raw[:300].decode("utf-8", "replace")
        raise ApiServerError(f"etcd {path} -> {resp.status}: {message}")
    return answer
