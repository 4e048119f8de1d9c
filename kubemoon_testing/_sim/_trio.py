"""The simulated API server served to real clients in memory, for the trio and asyncio
adapters (its waits and clock are anyio's, so one cluster serves either loop:
``cluster.client()`` on trio, ``cluster.asyncio_client()`` on asyncio).

Rules: no sockets. ``SimulatedCluster.client()`` is a real ``kubemoon_trio.Client`` whose
requests are answered by :func:`handle_request` at ``trio.current_time()`` (so trio's
``MockClock`` drives virtual time): handed over unframed by default, or as HTTP/1.1 bytes
through h11 on both ends with ``framing=True`` (see ``_transport``); a WATCH is a streamed
response fed as writes happen, with bookmarks and the end of ``timeoutSeconds`` on the
virtual clock. Only ``http://`` is served (a TLS handshake is refused). Every
:class:`NotModelled` refusal is answered with 501 and kept in
:attr:`SimulatedCluster.refusals`; :meth:`SimulatedCluster.check` raises the first one, so
a test cannot pass over it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.lowlevel

from kubemoon_core import KubeMoonError, Request, ResourcePath, Response
from kubemoon_core.kubeconfig import ClientConfig
from kubemoon_trio import Client

from ._errors import NotModelled, StatusError
from ._kinds import SimResource
from ._raw import loads
from ._rest import handle_request, not_modelled_response, parse_path, status_response
from ._store import SimApiServer, SimWatch, WatchLine
from ._transport import SimNetworkBackend, _SimConnection, _SimStream

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
        self._changed: anyio.Event | None = None  # made when a watch first waits on it
        self._streams: set[_SimStream | _SimConnection] = set()
        self._paused: dict[str, float] = {}
        self._pause_on_write: dict[str, float] = {}
        self._pause_changed = _Event()
        self._held: dict[str, list[object]] = {}

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
        method, _, rest = head.partition(b" ")
        target = rest.partition(b" ")[0]
        self._writing_request(identity, method, target)

    def _writing_request(self, identity: str, method: bytes, target: bytes) -> None:
        seconds = self._pause_on_write.get(identity)
        if seconds is None:
            return
        path = target.decode("latin-1")
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

    def _thawed(self, identity: str) -> bool:
        until = self._paused.get(identity)
        if until is None or self.now() >= until:
            self._paused.pop(identity, None)
            return True
        return False

    async def hold(self, identity: str) -> None:
        """Return once ``identity`` is not paused; the wait is shielded from cancellation
        (a frozen process notices nothing until it thaws). Its held operations go on in
        the order they were held (not in the order the loop happens to wake them)."""
        if self._thawed(identity):
            return
        line = self._held.setdefault(identity, [])
        turn = object()
        line.append(turn)
        try:
            with anyio.CancelScope(shield=True):
                while not (self._thawed(identity) and line[0] is turn):
                    until = self._paused.get(identity, math.inf)
                    changed = self._pause_changed
                    with anyio.CancelScope(deadline=until):
                        await changed.wait()
        finally:
            line.remove(turn)
            if not line:
                del self._held[identity]
            self._wake_paused()  # the next one in line

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
        if self._changed is not None:
            self._changed.set()
            self._changed = None

    def changed(self) -> anyio.Event:
        """The event the next change (:meth:`notify`) sets: what an open watch waits on."""
        if self._changed is None:
            self._changed = _Event()
        return self._changed

    def check(self) -> None:
        """Raise the first :class:`NotModelled` refusal served, if any."""
        if self.refusals:
            raise self.refusals[0]

    def client(self, identity: str = "", *, framing: bool = False, **kwargs: Any) -> Client:
        """A real ``kubemoon_trio.Client`` connected to this cluster (no sockets); its
        requests are traced, paused and failed as ``identity``'s. With ``framing`` its
        requests and answers go as HTTP/1.1 bytes through h11 on both ends (slower; it
        checks the framing); by default they are handed over unframed (see
        :class:`SimNetworkBackend`)."""
        return Client(
            ClientConfig(server=SIM_SERVER_URL),
            network_backend=SimNetworkBackend(self, identity, framing=framing),
            **kwargs,
        )

    def asyncio_client(self, identity: str = "", *, framing: bool = False, **kwargs: Any) -> Any:
        """A real ``kubemoon_asyncio.Client`` connected to this cluster (run it on
        :func:`~kubemoon_testing.sim.run_virtual` for virtual time); ``framing`` as for
        :meth:`client`."""
        from kubemoon_asyncio import Client as AsyncioClient  # noqa: PLC0415 - optional loop

        return AsyncioClient(
            ClientConfig(server=SIM_SERVER_URL),
            network_backend=SimNetworkBackend(self, identity, framing=framing),
            **kwargs,
        )

    @property
    def open_connections(self) -> int:
        """In-memory connections not yet closed by their client."""
        return len(self._streams)


def _written_name(request: Request) -> str | None:
    try:
        path = parse_path(request.path)
    except KubeMoonError:
        return None
    if path.name is not None:
        return path.name
    try:
        body = loads(request.body)
    except (NotModelled, RecursionError, ValueError):  # a body that is not JSON: refused
        return None
    metadata = body.get("metadata") if isinstance(body, dict) else None
    name = metadata.get("name") if isinstance(metadata, dict) else None
    return name if isinstance(name, str) else None


def _Event() -> anyio.Event:
    return anyio.Event()
