"""Embed the KubeMoon core in any event loop: here anyio (asyncio or trio), with h11.

The core decides everything (the ``Reflector``: what to request, when, what a failure or a
stall means); ``kubemoon_io`` builds the TLS context and the credentials from a
``ClientConfig``. What is left for the embedder is moving bytes: one connection per
request, an HTTP/1.1 exchange with h11, and the loop's clock. Run it against a scripted
server::

    $ python examples/embed_any_loop.py
    ADDED a 9
    ADDED b 11
    MODIFIED a 12
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any

import anyio
import h11

from kubemoon_core import Change, GroupVersionResource, Request, Response
from kubemoon_core.kubeconfig import ClientConfig
from kubemoon_core.lowlevel import Reflector
from kubemoon_io import CredentialProvider, ssl_context
from kubemoon_testing import Reply, ScriptedServer

CONFIGMAPS = GroupVersionResource("", "v1", "configmaps")


class Embedding:
    """The I/O a reflector needs, on anyio: connect, send a request, read the answer."""

    def __init__(self, config: ClientConfig) -> None:
        self.config = config
        self.tls = ssl_context(config) if config.scheme == "https" else None
        self.credentials = CredentialProvider(config)

    async def _headers(self, request: Request) -> list[tuple[str, str]]:
        run = self.credentials.plugin_run(time.time())
        if run is not None:  # an exec plugin: run it on this loop
            done = await anyio.run_process(list(run.argv), env=dict(run.env), check=False)
            self.credentials.receive_plugin_output(done.returncode, done.stdout)
        headers = [("Host", self.config.host_header), *request.headers]
        authorization, _ = self.credentials.header()
        if authorization is not None:
            headers.append(("Authorization", authorization))
        if request.body:
            headers.append(("Content-Length", str(len(request.body))))
        return headers

    async def perform(
        self, reflector: Reflector, request: Request, on_change: Callable[[Change], bool]
    ) -> None:
        """Perform one request of ``reflector``, feed it the outcome, pass on its changes.

        ``on_change`` returns True to stop (a watch is then left early).
        """
        host, port = self.config.host_header.rsplit(":", 1)
        connection = h11.Connection(h11.CLIENT)
        stream: Any = await anyio.connect_tcp(
            host, int(port), tls=self.tls is not None, ssl_context=self.tls
        )
        stop = False
        async with stream:
            head = h11.Request(
                method=request.method, target=request.target, headers=await self._headers(request)
            )
            await stream.send(connection.send(head) + connection.send(h11.Data(request.body)))
            await stream.send(connection.send(h11.EndOfMessage()))
            status, headers, body = 0, (), bytearray()
            while True:
                event = connection.next_event()
                if event is h11.NEED_DATA:
                    # A watch may stay silent: wait only until the reflector's deadline.
                    deadline = reflector.next_deadline()
                    with anyio.fail_after(
                        None if deadline is None else deadline - anyio.current_time()
                    ):
                        connection.receive_data(await _receive(stream))
                elif isinstance(event, h11.Response):
                    status = event.status_code
                    headers = tuple((k.decode(), v.decode()) for k, v in event.headers)
                    if request.stream:
                        reflector.receive_watch_head(status, headers, anyio.current_time())
                elif isinstance(event, h11.Data) and request.stream:
                    now = anyio.current_time()
                    for change in reflector.receive_watch_data(bytes(event.data), now):
                        stop = on_change(change) or stop
                    if stop:
                        break
                elif isinstance(event, h11.Data):
                    body += event.data
                else:  # EndOfMessage or ConnectionClosed
                    break
        if request.stream:
            reflector.watch_ended(anyio.current_time(), None)
            return
        answer = Response(status, headers, bytes(body))
        for change in reflector.receive_response(answer, anyio.current_time()):
            on_change(change)


async def _receive(stream: Any) -> bytes:
    try:
        return bytes(await stream.receive())
    except (anyio.EndOfStream, anyio.BrokenResourceError):
        return b""


async def run_reflector(config: ClientConfig, *, changes: int) -> list[str]:
    """Keep ConfigMaps of ``default`` in sync until ``changes`` changes were seen."""
    embedding = Embedding(config)
    reflector = Reflector(CONFIGMAPS, rng=random.Random(0), namespace="default")
    seen: list[str] = []

    def on_change(change: Change) -> bool:
        metadata = change.object["metadata"]
        seen.append(f"{change.type.value} {metadata['name']} {metadata['resourceVersion']}")
        print(seen[-1])
        return len(seen) >= changes

    while len(seen) < changes:
        now = anyio.current_time()
        request = reflector.next_request(now)
        if request is None:
            await anyio.sleep(max((reflector.next_deadline() or now) - now, 0.0))
            continue
        try:
            await embedding.perform(reflector, request, on_change)
        except (OSError, TimeoutError, h11.ProtocolError, anyio.BrokenResourceError) as exc:
            if request.stream:
                reflector.watch_ended(anyio.current_time(), exc)
            else:
                reflector.request_failed(anyio.current_time(), exc)
    return seen


def main() -> None:
    """Run the reflector against a scripted server (in a thread) on asyncio."""

    def cm(name: str, rv: str) -> dict[str, object]:
        return {"metadata": {"name": name, "namespace": "default", "resourceVersion": rv}}

    server = ScriptedServer()
    server.add(
        Reply.json({"metadata": {"resourceVersion": "10"}, "items": [cm("a", "9")]}),
        Reply.watch([("ADDED", cm("b", "11")), ("MODIFIED", cm("a", "12"))], stall=True),
    )
    with server:
        anyio.run(lambda: run_reflector(server.client_config(token="t"), changes=3))


if __name__ == "__main__":
    main()
