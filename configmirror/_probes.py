"""The operator's probe and metrics endpoint: /healthz, /readyz and /metrics over HTTP/1.1.

Rules: it serves only GET, answers each request on its own connection (probes are rare),
bounds what it reads from a client, and never blocks the operator: it runs as one more
task in the operator's nursery.
"""

from __future__ import annotations

from collections.abc import Callable

import h11
import trio

__all__ = ["serve_probes"]

MAX_REQUEST_BYTES = 16 * 1024


async def _handle(
    stream: trio.SocketStream, routes: dict[str, Callable[[], tuple[int, str, bytes]]]
) -> None:
    conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_REQUEST_BYTES)
    with trio.move_on_after(10):
        try:
            while True:
                event = conn.next_event()
                if event is h11.NEED_DATA:
                    data = await stream.receive_some(4096)
                    conn.receive_data(data)
                    if not data:
                        return
                    continue
                break
            if not isinstance(event, h11.Request):
                return
            target = event.target.decode("ascii", "replace").split("?", 1)[0]
            route = routes.get(target) if event.method == b"GET" else None
            code, content_type, body = route() if route else (404, "text/plain", b"not found\n")
            headers = [
                ("Content-Type", content_type),
                ("Content-Length", str(len(body))),
                ("Connection", "close"),
            ]
            await stream.send_all(conn.send(h11.Response(status_code=code, headers=headers)))
            await stream.send_all(conn.send(h11.Data(data=body)))
            await stream.send_all(conn.send(h11.EndOfMessage()))
        except (h11.RemoteProtocolError, trio.BrokenResourceError, trio.ClosedResourceError):
            return
        finally:
            await stream.aclose()


async def serve_probes(
    host: str,
    port: int,
    *,
    healthy: Callable[[], bool],
    ready: Callable[[], bool],
    metrics: Callable[[], bytes],
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the probes until cancelled; reports the bound port through ``task_status``."""

    def probe(check: Callable[[], bool]) -> Callable[[], tuple[int, str, bytes]]:
        return lambda: (200, "text/plain", b"ok\n") if check() else (503, "text/plain", b"no\n")

    routes = {
        "/healthz": probe(healthy),
        "/readyz": probe(ready),
        "/metrics": lambda: (200, "text/plain; version=0.0.4; charset=utf-8", metrics()),
    }
    listeners = await trio.open_tcp_listeners(port, host=host)
    bound = listeners[0].socket.getsockname()[1]
    task_status.started(bound)

    async def handler(stream: trio.SocketStream) -> None:
        await _handle(stream, routes)

    await trio.serve_listeners(handler, listeners)
