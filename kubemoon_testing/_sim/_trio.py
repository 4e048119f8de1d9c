"""The simulated API server over HTTP/1.1 on in-memory streams, for the trio adapter.

Rules: no sockets. ``SimulatedCluster.client()`` is a real ``kubemoon_trio.Client`` whose
connections are h11 server connections in memory: the client's bytes are parsed by h11,
answered by :func:`handle_request` at ``trio.current_time()`` (so trio's ``MockClock``
drives virtual time), and framed back by h11; a WATCH is a chunked response fed as writes
happen, with bookmarks and the end of ``timeoutSeconds`` on the virtual clock. Only
``http://`` is served (a TLS handshake is refused). Every :class:`NotModelled` refusal is
answered with 501 and kept in :attr:`SimulatedCluster.refusals`;
:meth:`SimulatedCluster.check` raises the first one, so a test cannot pass over it.
"""

from __future__ import annotations

import math
import ssl
from collections.abc import Iterable
from typing import Any
from urllib.parse import parse_qsl, unquote

import h11
import httpcore
import trio

from kubemoon_core import Request, Response
from kubemoon_core.kubeconfig import ClientConfig
from kubemoon_trio import Client

from ._errors import NotModelled
from ._kinds import SimResource
from ._rest import handle_request, not_modelled_response
from ._store import SimApiServer, SimWatch

__all__ = ["SIM_SERVER_URL", "SimulatedCluster", "SimNetworkBackend"]

SIM_SERVER_URL = "http://kubemoon-sim"


class SimulatedCluster:
    """A :class:`SimApiServer` served to real clients over in-memory HTTP on trio.

    Build it inside ``trio.run`` (with ``clock=trio.testing.MockClock(autojump_threshold=0)``
    for virtual time); pass ``server`` to share a model built beforehand.
    """

    def __init__(
        self,
        resources: Iterable[SimResource | type] = (),
        *,
        server: SimApiServer | None = None,
        seed: int = 0,
    ) -> None:
        self.server = server if server is not None else SimApiServer(resources, seed=seed)
        self.refusals: list[NotModelled] = []
        self.requests = 0
        self._changed = trio.Event()
        self._streams: set[_SimStream] = set()

    def now(self) -> float:
        """Virtual time: trio's clock (a ``MockClock`` in simulations)."""
        return trio.current_time()

    def answer(self, request: Request) -> Response | SimWatch:
        """Answer one request now (what each in-memory connection calls)."""
        self.requests += 1
        writes = self.server.writes
        try:
            answer = handle_request(self.server, request, self.now())
        except NotModelled as refusal:
            self.refusals.append(refusal)
            return not_modelled_response(refusal)
        if self.server.writes != writes:
            self.notify()
        return answer

    def notify(self) -> None:
        """Wake every open watch (after a change made on the model directly)."""
        self._changed.set()
        self._changed = trio.Event()

    def check(self) -> None:
        """Raise the first :class:`NotModelled` refusal served, if any."""
        if self.refusals:
            raise self.refusals[0]

    def client(self, **kwargs: Any) -> Client:
        """A real ``kubemoon_trio.Client`` connected to this cluster (no sockets)."""
        return Client(
            ClientConfig(server=SIM_SERVER_URL), network_backend=SimNetworkBackend(self), **kwargs
        )

    @property
    def open_connections(self) -> int:
        """In-memory connections not yet closed by their client."""
        return len(self._streams)


class SimNetworkBackend(httpcore.AsyncNetworkBackend):
    """httpcore's network backend interface, connecting to a :class:`SimulatedCluster`."""

    def __init__(self, cluster: SimulatedCluster) -> None:
        self._cluster = cluster

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Any = None,
    ) -> httpcore.AsyncNetworkStream:
        await trio.lowlevel.checkpoint()
        return _SimStream(self._cluster)

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Any = None
    ) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("the simulated cluster has no unix sockets")

    async def sleep(self, seconds: float) -> None:
        await trio.sleep(seconds)


class _SimStream(httpcore.AsyncNetworkStream):
    """One in-memory connection: an h11 server fed the client's bytes."""

    def __init__(self, cluster: SimulatedCluster) -> None:
        self._cluster = cluster
        self._h11 = h11.Connection(h11.SERVER)
        self._out = bytearray()
        self._request: h11.Request | None = None
        self._body = bytearray()
        self._watch: SimWatch | None = None
        self._closed = False
        cluster._streams.add(self)

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        # No checkpoint: the answer's read that always follows is one (a scheduler pass
        # per write would be most of a request's cost).
        if self._closed:
            raise httpcore.WriteError("the connection is closed")
        if not buffer:
            return  # h11 reads b"" as the end of the stream
        self._h11.receive_data(bytes(buffer))
        self._drain_requests()

    def _drain_requests(self) -> None:
        while True:
            try:
                event = self._h11.next_event()
            except h11.RemoteProtocolError as exc:
                raise httpcore.WriteError(
                    f"the simulated server refused the request: {exc}"
                ) from None
            if event is h11.NEED_DATA or event is h11.PAUSED:
                return
            if isinstance(event, h11.Request):
                self._request, self._body = event, bytearray()
            elif isinstance(event, h11.Data):
                self._body += event.data
            elif isinstance(event, h11.EndOfMessage):
                self._respond()
            elif isinstance(event, h11.ConnectionClosed):
                return

    def _respond(self) -> None:
        head = self._request
        assert head is not None
        target = head.target.decode("ascii")
        path, _, query = target.partition("?")
        request = Request(
            method=head.method.decode("ascii"),
            path=unquote(path),
            query=tuple(parse_qsl(query, keep_blank_values=True)),
            headers=tuple((k.decode("latin-1"), v.decode("latin-1")) for k, v in head.headers),
            body=bytes(self._body),
        )
        answer = self._cluster.answer(request)
        if isinstance(answer, SimWatch):
            self._watch = answer
            self._out += self._h11.send(
                h11.Response(
                    status_code=200,
                    headers=[
                        ("Content-Type", "application/json"),
                        ("Transfer-Encoding", "chunked"),
                    ],
                )
            )
            return
        headers = [*answer.headers, ("Content-Length", str(len(answer.body)))]
        self._out += self._h11.send(h11.Response(status_code=answer.status_code, headers=headers))
        if answer.body:
            self._out += self._h11.send(h11.Data(data=answer.body))
        self._out += self._h11.send(h11.EndOfMessage())
        self._next_cycle()

    def _next_cycle(self) -> None:
        if self._h11.our_state is h11.DONE and self._h11.their_state is h11.DONE:
            self._h11.start_next_cycle()
            self._drain_requests()

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        deadline = math.inf if timeout is None else trio.current_time() + timeout
        while True:
            if self._out:
                data = bytes(self._out[:max_bytes])
                del self._out[:max_bytes]
                await trio.lowlevel.checkpoint()
                return data
            if self._closed or self._h11.our_state in (h11.MUST_CLOSE, h11.CLOSED):
                await trio.lowlevel.checkpoint()
                return b""
            watch = self._watch
            if watch is None:
                raise httpcore.ReadError("the simulated server has no answer pending")
            server = self._cluster.server
            lines = watch.take(self._cluster.now(), server.resource_version)
            if lines:
                self._out += self._h11.send(
                    h11.Data(data=b"".join(line.encode() for line in lines))
                )
                continue
            if watch.closed:
                server.forget(watch)
                self._watch = None
                self._out += self._h11.send(h11.EndOfMessage())
                self._next_cycle()
                continue
            wake = watch.next_deadline()
            until = min(deadline, math.inf if wake is None else wake)
            changed = self._cluster._changed
            with trio.move_on_at(until):
                await changed.wait()
            if not changed.is_set() and trio.current_time() >= deadline and not watch.has_pending:
                raise httpcore.ReadTimeout("the simulated watch sent nothing in time")

    async def aclose(self) -> None:
        self._closed = True
        if self._watch is not None:
            self._cluster.server.forget(self._watch)
            self._watch = None
        self._cluster._streams.discard(self)

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("the simulated cluster serves http:// only")

    def get_extra_info(self, info: str) -> Any:
        if info == "is_readable":
            return self._closed or bool(self._out)
        return None
