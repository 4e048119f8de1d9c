"""Client CPU per request against bare ``httpcore``, on the real kube-apiserver.

One ``kubemoon_testing.ApiServer(controller_manager=False)``; one namespace. For each
client, the blocking ``kubemoon_sync.Client`` against a bare ``httpcore.ConnectionPool``,
and ``kubemoon_trio.Client`` against a bare ``httpcore.AsyncConnectionPool`` (in one
``trio.run``), the same three operations on ConfigMaps of about 600 bytes:

- create: POST the object, decode the answer;
- get: GET it, decode the answer;
- patch: a JSON merge patch of one data key, decode the answer.

The bare floor does what the smallest useful client must: encode the body with the same
compact JSON encoder settings (the bytes are checked equal to KubeMoon's before timing),
send it with the same headers (Host, Accept, User-Agent, Content-Type, Content-Length,
the same bearer token) through a pool built on the same ``ssl.SSLContext`` object, read
the whole body, check the status and ``json.loads`` the answer. Both sides keep one
keep-alive connection warm before timing.

**Measured:** CPU time of this process only (``time.process_time``; the servers' CPU is
in other processes), around each batch of ``BATCH`` sequential requests of one verb.
Within a round, each verb's two batches run back to back (KubeMoon's, then the floor's,
or the other way round: the side that goes first alternates between rounds), so that the
two halves of a ratio see the same load on this shared machine; each round gives one
ratio per verb (KubeMoon's batch CPU / the floor's), and the row reports the median
ratio over ``ROUNDS`` rounds with both sides' median µs per request. The target is a
guard: the client adds at most 15 % CPU to a request.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _table import Row

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

BATCH = 50
ROUNDS = 21
VERBS = ("create", "get", "patch")
TARGET = 1.15
_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def configmap(name: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace, "labels": {"bench": "client"}},
        "data": {f"key-{j}": f"value {j} " + "x" * 100 for j in range(5)},
    }


def patch_body(i: int) -> dict[str, Any]:
    return {"data": {"key-0": f"patched {i}"}}


class Bare:
    """What the floor needs: URLs, headers and the token, built once."""

    def __init__(self, origin: str, host: str, token: str, namespace: str) -> None:
        from kubemoon_core._request import USER_AGENT

        self.collection = f"{origin}/api/v1/namespaces/{namespace}/configmaps"
        self.base = [
            (b"Host", host.encode()),
            (b"Accept", b"application/json"),
            (b"User-Agent", USER_AGENT.encode()),
        ]
        self.auth = (b"Authorization", f"Bearer {token}".encode())

    def headers(self, content_type: bytes | None, body: bytes) -> list[tuple[bytes, bytes]]:
        headers = list(self.base)
        if content_type is not None:
            headers.append((b"Content-Type", content_type))
            headers.append((b"Content-Length", str(len(body)).encode()))
        headers.append(self.auth)
        return headers


def encode(value: Any) -> bytes:
    return _ENCODER.encode(value).encode()


def _check(status: int, body: bytes) -> Any:
    if not 200 <= status < 300:
        raise RuntimeError(f"answered {status}: {body[:200]!r}")
    return json.loads(body)


# -- the blocking pair ------------------------------------------------------------------


def sync_pair(server: Any, namespace: str, ctx: Any, config: Any) -> dict[str, list[float]]:
    import httpcore

    import kubemoon_sync
    from kubemoon_core import GroupVersionResource

    cms = GroupVersionResource("", "v1", "configmaps")
    client = kubemoon_sync.Client(config, ssl_context=ctx)
    pool = httpcore.ConnectionPool(ssl_context=ctx, max_connections=1, retries=0)
    bare = Bare(server.url, config.host_header, server.admin_token, namespace)

    def ours(verb: str, names: list[str]) -> None:
        if verb == "create":
            for name in names:
                client.create(cms, configmap(name, namespace), namespace=namespace)
        elif verb == "get":
            for name in names:
                client.get(cms, name, namespace=namespace)
        else:
            for i, name in enumerate(names):
                client.patch(cms, name, patch_body(i), namespace=namespace)

    def floor(verb: str, names: list[str]) -> None:
        request = pool.request
        if verb == "create":
            for name in names:
                body = encode(configmap(name, namespace))
                r = request(
                    "POST",
                    bare.collection,
                    headers=bare.headers(b"application/json", body),
                    content=body,
                )
                _check(r.status, r.content)
        elif verb == "get":
            for name in names:
                r = request("GET", f"{bare.collection}/{name}", headers=bare.headers(None, b""))
                _check(r.status, r.content)
        else:
            for i, name in enumerate(names):
                body = encode(patch_body(i))
                r = request(
                    "PATCH",
                    f"{bare.collection}/{name}",
                    headers=bare.headers(b"application/merge-patch+json", body),
                    content=body,
                )
                _check(r.status, r.content)

    # Same bytes on the wire: the floor's bodies are KubeMoon's.
    from kubemoon_core import PatchType
    from kubemoon_core._request import create_request, patch_request

    assert create_request(cms, configmap("x", namespace)).body == encode(configmap("x", namespace))
    assert patch_request(cms, "x", patch_body(3), patch_type=PatchType.MERGE).body == encode(
        patch_body(3)
    )
    try:
        return interleave(ours, floor, "s")
    finally:
        client.close()
        pool.close()


def interleave(
    ours: Callable[[str, list[str]], None], floor: Callable[[str, list[str]], None], tag: str
) -> dict[str, list[float]]:
    """Warm both up, then ROUNDS rounds; per verb, the CPU seconds of each batch."""
    ours("create", [f"warm-{tag}-k"])
    floor("create", [f"warm-{tag}-f"])
    times: dict[str, list[float]] = {f"{side}-{v}": [] for side in ("k", "f") for v in VERBS}
    for round_ in range(ROUNDS):
        sides = [("k", ours), ("f", floor)]
        if round_ % 2:
            sides.reverse()
        names = {side: [f"{tag}{side}-{round_}-{i:03d}" for i in range(BATCH)] for side in "kf"}
        for verb in VERBS:
            for side, run in sides:
                start = time.process_time()
                run(verb, names[side])
                times[f"{side}-{verb}"].append(time.process_time() - start)
    return times


# -- the trio pair ----------------------------------------------------------------------


def trio_pair(server: Any, namespace: str, ctx: Any, config: Any) -> dict[str, list[float]]:
    import httpcore
    import trio

    import kubemoon_trio
    from kubemoon_core import GroupVersionResource

    cms = GroupVersionResource("", "v1", "configmaps")
    bare = Bare(server.url, config.host_header, server.admin_token, namespace)

    async def main() -> dict[str, list[float]]:
        client = kubemoon_trio.Client(config, ssl_context=ctx)
        pool = httpcore.AsyncConnectionPool(ssl_context=ctx, max_connections=1, retries=0)

        async def ours(verb: str, names: list[str]) -> None:
            if verb == "create":
                for name in names:
                    await client.create(cms, configmap(name, namespace), namespace=namespace)
            elif verb == "get":
                for name in names:
                    await client.get(cms, name, namespace=namespace)
            else:
                for i, name in enumerate(names):
                    await client.patch(cms, name, patch_body(i), namespace=namespace)

        async def floor(verb: str, names: list[str]) -> None:
            request = pool.request
            if verb == "create":
                for name in names:
                    body = encode(configmap(name, namespace))
                    r = await request(
                        "POST",
                        bare.collection,
                        headers=bare.headers(b"application/json", body),
                        content=body,
                    )
                    _check(r.status, r.content)
            elif verb == "get":
                for name in names:
                    r = await request(
                        "GET", f"{bare.collection}/{name}", headers=bare.headers(None, b"")
                    )
                    _check(r.status, r.content)
            else:
                for i, name in enumerate(names):
                    body = encode(patch_body(i))
                    r = await request(
                        "PATCH",
                        f"{bare.collection}/{name}",
                        headers=bare.headers(b"application/merge-patch+json", body),
                        content=body,
                    )
                    _check(r.status, r.content)

        await ours("create", ["warm-t-k"])
        await floor("create", ["warm-t-f"])
        times: dict[str, list[float]] = {f"{s}-{v}": [] for s in ("k", "f") for v in VERBS}
        for round_ in range(ROUNDS):
            sides: list[tuple[str, Callable[[str, list[str]], Any]]] = [("k", ours), ("f", floor)]
            if round_ % 2:
                sides.reverse()
            names = {side: [f"t{side}-{round_}-{i:03d}" for i in range(BATCH)] for side in "kf"}
            for verb in VERBS:
                for side, run in sides:
                    start = time.process_time()
                    await run(verb, names[side])
                    times[f"{side}-{verb}"].append(time.process_time() - start)
        await client.aclose()
        await pool.aclose()
        return times

    return trio.run(main)


def summarize(label: str, floor_name: str, times: dict[str, list[float]]) -> list[Row]:
    out = []
    for verb in VERBS:
        ours, floor = times[f"k-{verb}"], times[f"f-{verb}"]
        ratio = statistics.median(k / f for k, f in zip(ours, floor, strict=True))
        out.append(
            Row(
                f"client CPU per request: {label} {verb} vs {floor_name}",
                f"ConfigMaps of ~0.6 KB, real kube-apiserver, {ROUNDS} interleaved rounds "
                f"of {BATCH}",
                f"{ratio:.3f}x (median of per-round ratios; KubeMoon "
                f"{1e6 * statistics.median(ours) / BATCH:.0f} µs, floor "
                f"{1e6 * statistics.median(floor) / BATCH:.0f} µs CPU per request)",
                f"≤ {TARGET}x",
                ratio <= TARGET,
            )
        )
    return out


def rows() -> list[Row]:
    """Measure and return the table rows."""
    from kubemoon_io import load_kubeconfig
    from kubemoon_io import ssl_context as make_ssl_context
    from kubemoon_testing import ApiServer, MissingBinariesError

    try:
        server = ApiServer(controller_manager=False).start()
    except MissingBinariesError as exc:
        return [
            Row(
                "client CPU per request vs bare httpcore",
                "real kube-apiserver",
                f"not measured: {exc}",
                f"≤ {TARGET}x",
                False,
            )
        ]
    try:
        namespace = server.create_namespace(prefix="bench-client")
        config = load_kubeconfig(str(server.kubeconfig_path))
        ctx = make_ssl_context(config)
        out = summarize(
            "kubemoon_sync", "httpcore.ConnectionPool", sync_pair(server, namespace, ctx, config)
        )
        out += summarize(
            "kubemoon_trio",
            "httpcore.AsyncConnectionPool",
            trio_pair(server, namespace, ctx, config),
        )
        return out
    finally:
        server.stop()


if __name__ == "__main__":
    from _table import render

    print(render(rows(), "bench_client alone"))
