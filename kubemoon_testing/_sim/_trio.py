"""The simulated API server over HTTP/1.1 on in-memory streams, for the trio and asyncio
adapters (its waits and clock are anyio's, so one cluster serves either loop:
``cluster.client()`` on trio, ``cluster.asyncio_client()`` on asyncio).

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

import json
import math
import ssl
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, unquote

import anyio
import anyio.lowlevel
import h11
import httpcore

from kubemoon_core import KubeMoonError, Request, ResourcePath, Response
from kubemoon_core.kubeconfig import ClientConfig
from kubemoon_io import check_armed_guard
from kubemoon_trio import Client

from ._errors import NotModelled, StatusError
from ._kinds import SimResource
from ._raw import loads
from ._rest import handle_request, not_modelled_response, status_response
from ._store import SimApiServer, SimWatch, WatchLine

__all__ = [
    "SIM_SERVER_URL",
    "LeaseRecord",
    "RequestFault",
    "SimNetworkBackend",
    "SimulatedCluster",
    "TraceEntry",
]

SIM_SERVER_URL = "http://kubemoon-sim"
LEASES = "/apis/coordination.k8s.io/v1/"


_ACCESS_REVIEWS = "/apis/authorization.k8s.io/"


@dataclass(frozen=True, slots=True)
class TraceEntry:
    """One request as the simulated server received it: when (virtual seconds), from
    which client identity, what, and the status code answered (0 for an open watch)."""

    time: float
    identity: str
    method: str
    path: str
    code: int
    name: str | None = None
    """The object a write names (from the path, or a create's body); None for reads."""
    seq: int = 0
    """Its place in the trace (requests at one virtual instant are still ordered)."""

    @property
    def is_write(self) -> bool:
        """Any method but GET (what a Lease gates), except an access review: a create that
        only asks a question (the start-up permission check runs before campaigning)."""
        return self.method != "GET" and not self.path.startswith(_ACCESS_REVIEWS)

    @property
    def is_lease(self) -> bool:
        """A request to a ``coordination.k8s.io`` Lease (leader election, membership)."""
        return self.path.startswith(LEASES) and "/leases" in self.path


@dataclass(frozen=True, slots=True)
class LeaseRecord:
    """A Lease as the server stored it at ``time``: its holder and duration."""

    time: float
    lease: str  # namespace/name
    holder: str | None
    duration: float | None
    annotations: tuple[tuple[str, str], ...] = ()
    """The Lease's annotations as stored (a shard member's claims are one)."""
    seq: int = 0
    """The place in the trace of the request that stored it."""


@dataclass(slots=True)
class RequestFault:
    """Answer the next ``count`` requests that match with ``code`` instead of serving them
    (409 Conflict, 429 TooManyRequests with ``Retry-After``, 500, 503...), from virtual
    time ``start``. ``identity``/``method``/``path`` narrow what matches (``path``: a
    substring); lease requests match only when ``leases`` is true."""

    code: int
    count: int = 1
    identity: str | None = None
    method: str | None = None
    path: str = ""
    start: float = 0.0
    retry_after: int = 1
    leases: bool = False

    def matches(self, identity: str, request: Request, now: float) -> bool:
        """Whether this fault answers ``request`` (sent by ``identity`` at ``now``)."""
        if self.count <= 0 or now < self.start:
            return False
        if self.identity is not None and identity != self.identity:
            return False
        if self.method is not None and request.method != self.method:
            return False
        if self.path not in request.path:
            return False
        return self.leases or not (request.path.startswith(LEASES) and "/leases" in request.path)

    def answer(self, request: Request) -> Response:
        """The failure, worded as kube-apiserver words it."""
        self.count -= 1
        if self.code == 409:
            try:
                path = ResourcePath.parse(request.path)
            except Exception:
                path = None
            if path is None or path.name is None:
                raise NotModelled("an injected 409 Conflict on a request without an object name")
            return status_response(
                StatusError.conflict(path.gvr.group, path.gvr.resource, path.name)
            )
        if self.code == 429:
            error = StatusError(
                429,
                "TooManyRequests",
                "Too many requests, please try again later.",
            )
            body = error.status()
            body["details"] = {"retryAfterSeconds": self.retry_after}
            return Response(
                429,
                (("Content-Type", "application/json"), ("Retry-After", str(self.retry_after))),
                json.dumps(body, separators=(",", ":")).encode(),
            )
        if self.code in (500, 503):
            reason = "InternalError" if self.code == 500 else "ServiceUnavailable"
            message = (
                "Internal error occurred: injected by the simulator"
                if self.code == 500
                else "the server is currently unable to handle the request"
            )
            return status_response(StatusError(self.code, reason, message))
        raise NotModelled(f"an injected failure with status {self.code}")


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
        self.trace: list[TraceEntry] = []
        self.lease_history: list[LeaseRecord] = []
        self.faults: list[RequestFault] = []
        self.pauses: list[tuple[str, float, float]] = []
        """Every pause as it took effect: (identity, from, until) in virtual seconds (a
        pause at a write starts when that write goes out, not when it was armed)."""
        self._changed = _Event()
        self._streams: set[_SimStream] = set()
        self._paused: dict[str, float] = {}
        self._pause_on_write: dict[str, float] = {}
        self._pause_changed = _Event()

    def now(self) -> float:
        """Virtual time: the running loop's clock (trio's ``MockClock``, or asyncio's
        :func:`~kubemoon_testing.sim.run_virtual` loop, in simulations)."""
        return anyio.current_time()

    def answer(self, request: Request, identity: str = "") -> Response | SimWatch:
        """Answer one request now (what each in-memory connection calls), sent by the
        client ``identity``; kept in :attr:`trace`."""
        self.requests += 1
        writes = self.server.writes
        now = self.now()
        answer: Response | SimWatch
        try:
            for fault in self.faults:
                if fault.matches(identity, request, now):
                    answer = fault.answer(request)
                    break
            else:
                answer = handle_request(self.server, request, now)
        except NotModelled as refusal:
            self.refusals.append(refusal)
            answer = not_modelled_response(refusal)
        code = answer.status_code if isinstance(answer, Response) else 0
        name = _written_name(request) if request.method != "GET" else None
        seq = len(self.trace)
        self.trace.append(TraceEntry(now, identity, request.method, request.path, code, name, seq))
        if self.server.writes != writes:
            if (
                isinstance(answer, Response)
                and 200 <= code < 300
                and request.path.startswith(LEASES)
            ):
                self._record_lease(now, answer, seq)
            self.notify()
        return answer

    def _record_lease(self, now: float, answer: Response, seq: int) -> None:
        document = json.loads(answer.body)
        if document.get("kind") != "Lease":
            return
        meta, spec = document.get("metadata", {}), document.get("spec") or {}
        duration = spec.get("leaseDurationSeconds")
        annotations = meta.get("annotations") or {}
        self.lease_history.append(
            LeaseRecord(
                now,
                f"{meta.get('namespace', '')}/{meta.get('name', '')}",
                spec.get("holderIdentity") or None,
                None if duration is None else float(duration),
                tuple(sorted((str(k), str(v)) for k, v in annotations.items())),
                seq,
            )
        )

    # -- faults --------------------------------------------------------------------------------

    def fail_requests(self, fault: RequestFault) -> RequestFault:
        """Answer the requests ``fault`` matches with its failure (see :class:`RequestFault`)."""
        self.faults.append(fault)
        return fault

    def pause(self, identity: str, seconds: float = math.inf) -> None:
        """Freeze ``identity``'s network for ``seconds`` of virtual time (until
        :meth:`resume` by default): its connects, writes and reads wait."""
        now = self.now()
        self._paused[identity] = now + seconds
        self.pauses.append((identity, now, now + seconds))
        self._wake_paused()

    def pause_on_write(self, identity: str, seconds: float) -> None:
        """Freeze ``identity`` for ``seconds`` as its next write that is not a Lease request
        starts to go out (before its send guard is checked)."""
        self._pause_on_write[identity] = seconds

    def _writing(self, identity: str, head: bytes) -> None:
        seconds = self._pause_on_write.get(identity)
        if seconds is None:
            return
        method, _, rest = head.partition(b" ")
        path = rest.partition(b" ")[0].decode("latin-1")
        if method == b"GET" or (path.startswith(LEASES) and "/leases" in path):
            return
        del self._pause_on_write[identity]
        self.pause(identity, seconds)

    def resume(self, identity: str | None = None) -> None:
        """Thaw ``identity`` (every paused identity by default)."""
        if identity is None:
            self._paused.clear()
            self._pause_on_write.clear()
        else:
            self._paused.pop(identity, None)
        self._wake_paused()

    def paused(self, identity: str) -> bool:
        """True while ``identity`` is frozen."""
        until = self._paused.get(identity)
        return until is not None and self.now() < until

    def _wake_paused(self) -> None:
        self._pause_changed.set()
        self._pause_changed = _Event()

    async def hold(self, identity: str) -> None:
        """Return once ``identity`` is not paused; the wait is shielded from cancellation
        (a frozen process notices nothing until it thaws)."""
        while True:
            until = self._paused.get(identity)
            if until is None or self.now() >= until:
                self._paused.pop(identity, None)
                return
            changed = self._pause_changed
            with anyio.CancelScope(shield=True), anyio.CancelScope(deadline=until):
                await changed.wait()

    def drop_watches(self, identity: str | None = None) -> int:
        """Cut every open watch connection (of ``identity``, or all) mid-stream, as a
        dropped TCP connection does; returns how many."""
        cut = 0
        for stream in list(self._streams):
            if stream.watching and (identity is None or stream.identity == identity):
                stream.cut()
                cut += 1
        self.notify()
        return cut

    def expire_watches(self) -> int:
        """Compact the history to now and end every open watch with an ``ERROR`` 410
        ``Expired`` event (a watch cache reset); returns how many watches ended."""
        server = self.server
        server.compact()
        ended = 0
        for stream in list(self._streams):
            watch = stream.current_watch
            if watch is not None and not watch.closed:
                error = StatusError.expired(
                    f"too old resource version: {watch.last_rv} ({server.resource_version})"
                )
                watch.push(WatchLine("ERROR", error.status()))
                watch.deadline = min(watch.deadline, self.now())
                ended += 1
        self.notify()
        return ended

    def notify(self) -> None:
        """Wake every open watch (after a change made on the model directly)."""
        self._changed.set()
        self._changed = _Event()

    def check(self) -> None:
        """Raise the first :class:`NotModelled` refusal served, if any."""
        if self.refusals:
            raise self.refusals[0]

    def client(self, identity: str = "", **kwargs: Any) -> Client:
        """A real ``kubemoon_trio.Client`` connected to this cluster (no sockets); its
        requests are traced, paused and failed as ``identity``'s."""
        return Client(
            ClientConfig(server=SIM_SERVER_URL),
            network_backend=SimNetworkBackend(self, identity),
            **kwargs,
        )

    def asyncio_client(self, identity: str = "", **kwargs: Any) -> Any:
        """A real ``kubemoon_asyncio.Client`` connected to this cluster (run it on
        :func:`~kubemoon_testing.sim.run_virtual` for virtual time)."""
        from kubemoon_asyncio import Client as AsyncioClient  # noqa: PLC0415 - optional loop

        return AsyncioClient(
            ClientConfig(server=SIM_SERVER_URL),
            network_backend=SimNetworkBackend(self, identity),
            **kwargs,
        )

    @property
    def open_connections(self) -> int:
        """In-memory connections not yet closed by their client."""
        return len(self._streams)


def _written_name(request: Request) -> str | None:
    try:
        path = ResourcePath.parse(request.path)
    except KubeMoonError:
        return None
    if path.name is not None:
        return path.name
    try:
        body = loads(request.body)
    except (NotModelled, RecursionError):
        return None
    metadata = body.get("metadata") if isinstance(body, dict) else None
    name = metadata.get("name") if isinstance(metadata, dict) else None
    return name if isinstance(name, str) else None


def _Event() -> anyio.Event:
    return anyio.Event()


class SimNetworkBackend(httpcore.AsyncNetworkBackend):
    """httpcore's network backend interface, connecting to a :class:`SimulatedCluster`."""

    def __init__(self, cluster: SimulatedCluster, identity: str = "") -> None:
        self._cluster = cluster
        self._identity = identity

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Any = None,
    ) -> httpcore.AsyncNetworkStream:
        await anyio.lowlevel.checkpoint()
        await self._cluster.hold(self._identity)
        return _SimStream(self._cluster, self._identity)

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Any = None
    ) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("the simulated cluster has no unix sockets")

    async def sleep(self, seconds: float) -> None:
        await anyio.sleep(seconds)


class _SimStream(httpcore.AsyncNetworkStream):
    """One in-memory connection: an h11 server fed the client's bytes."""

    def __init__(self, cluster: SimulatedCluster, identity: str = "") -> None:
        self._cluster = cluster
        self.identity = identity
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
        if self._closed or self._cut:
            raise httpcore.WriteError("the connection is closed")
        if not buffer:
            return  # h11 reads b"" as the end of the stream
        if self._h11.their_state is h11.IDLE and self._cluster._pause_on_write:
            self._cluster._writing(self.identity, bytes(buffer[:512]))
        if self._cluster._paused:
            await self._cluster.hold(self.identity)
        check_armed_guard()  # a gated write: its authority must hold as its bytes go out
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
        answer = self._cluster.answer(request, self.identity)
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

    @property
    def watching(self) -> bool:
        """True while this connection streams a watch."""
        return self._watch is not None and not self._closed

    @property
    def current_watch(self) -> SimWatch | None:
        """The watch this connection streams, if any."""
        return self._watch

    def cut(self) -> None:
        """Drop the connection: the client reads the end of the stream mid-response."""
        self._cut = True
        if self._watch is not None:
            self._cluster.server.forget(self._watch)
            self._watch = None

    _cut = False

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        deadline = math.inf if timeout is None else anyio.current_time() + timeout
        while True:
            if self._cluster._paused:
                await self._cluster.hold(self.identity)
            if self._cut:
                await anyio.lowlevel.checkpoint()
                return b""
            if self._out:
                data = bytes(self._out[:max_bytes])
                del self._out[:max_bytes]
                await anyio.lowlevel.checkpoint()
                return data
            if self._closed or self._h11.our_state in (h11.MUST_CLOSE, h11.CLOSED):
                await anyio.lowlevel.checkpoint()
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
            with anyio.CancelScope(deadline=until):
                await changed.wait()
            if not changed.is_set() and anyio.current_time() >= deadline and not watch.has_pending:
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
            return self._closed or self._cut or bool(self._out)
        return None
