"""Model-based test: the reflector against a pure model of the API server, on a virtual clock.

Hypothesis interleaves writes, compactions, bookmarks, 410s, 429/5xx and refusals,
disconnects at any byte, clean ends, stalls and time jumps. Invariants, after every step:

- the store is exactly the server's state at the reflector's resourceVersion (so it never
  exposes part of a list, and nothing is lost or resurrected), and empty before the first
  sync;
- every relist has a cause the server produced (a 410, a refused page or stream, a failed
  stream), counted per reason;
- every request has the shape the rules require (page size, continue without RV, watch
  from the resume point with bookmarks and a timeout in [300, 600], relists at the last RV
  after a watch 410 and at the newest state after a LIST 410).

At the end the faults stop and the machine runs until quiet: the store must then equal the
server's objects.
"""

from __future__ import annotations

import random
from typing import Any

from apiserver_model import NAMESPACE, PATH, ApiServerModel, WatchConn, status_response
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from kubemoon_core import GroupVersionResource, Request
from kubemoon_core._reflector import STREAM_REFUSAL_CODES, Reflector
from kubemoon_core._reflector_states import ReflectorState, RelistReason

CONFIGMAPS = GroupVersionResource("", "v1", "configmaps")
NAMES = st.sampled_from(["a", "b", "c", "d", "e", "f", "g"])
# Values with multi-byte UTF-8, so chunk splits land inside characters.
VALUES = st.text(alphabet=st.sampled_from('xyz é漢🙂\\"'), max_size=12)
FAULTS = st.sampled_from(["conn", 400, 429, 500, 503])


class ReflectorMachine(RuleBasedStateMachine):
    """Drives one reflector, as an adapter would, against :class:`ApiServerModel`."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 1000.0
        self.conn: WatchConn | None = None
        self.fault: tuple[Any, float | None] | None = None
        self.seen_relists = 0

    @initialize(
        streaming=st.booleans(),
        supports_streaming=st.booleans(),
        list_rv_expires=st.booleans(),
        page_size=st.integers(1, 4),
        seed=st.integers(0, 2**32 - 1),
        initial=st.lists(st.tuples(NAMES, VALUES), max_size=8),
    )
    def setup(
        self,
        *,
        streaming: bool,
        supports_streaming: bool,
        list_rv_expires: bool,
        page_size: int,
        seed: int,
        initial: list[tuple[str, str]],
    ) -> None:
        self.model = ApiServerModel(
            supports_streaming=supports_streaming, list_rv_expires=list_rv_expires
        )
        for name, value in initial:
            self.model.put(name, value)
        self.page_size = page_size
        self.reflector = Reflector(
            CONFIGMAPS,
            rng=random.Random(seed),
            namespace=NAMESPACE,
            page_size=page_size,
            streaming_list=streaming,
        )

    # -- the server's side -------------------------------------------------------------------

    @rule(name=NAMES, value=VALUES)
    def put(self, name: str, value: str) -> None:
        self.model.put(name, value)

    @rule(name=NAMES)
    def delete(self, name: str) -> None:
        self.model.delete(name)

    @rule()
    def compact(self) -> None:
        self.model.compact()

    @rule(fault=FAULTS, retry_after=st.none() | st.integers(0, 20).map(float))
    def inject_fault(self, fault: Any, retry_after: float | None) -> None:
        self.fault = (fault, retry_after)

    @precondition(lambda self: self.conn is not None)
    @rule()
    def bookmark(self) -> None:
        assert self.conn is not None
        self.model.bookmark(self.conn)

    @precondition(lambda self: self.conn is not None)
    @rule()
    def expire_watch(self) -> None:
        assert self.conn is not None
        self.model.expire(self.conn)

    @precondition(lambda self: self.conn is not None)
    @rule(code=st.sampled_from([429, 500, 503]))
    def error_event(self, code: int) -> None:
        assert self.conn is not None
        self.model.fail(self.conn, code, "InternalError" if code == 500 else "TooManyRequests")

    # -- the network -------------------------------------------------------------------------

    @precondition(lambda self: self.conn is not None)
    @rule(size=st.integers(1, 400))
    def deliver(self, size: int) -> None:
        assert self.conn is not None
        self._feed(self.conn.take(size))

    @precondition(lambda self: self.conn is not None)
    @rule(size=st.integers(0, 200))
    def drop(self, size: int) -> None:
        assert self.conn is not None
        self._feed(self.conn.take(size))
        if self.conn is not None:
            self._close(ConnectionResetError("connection reset by peer"))

    @precondition(lambda self: self.conn is not None)
    @rule(lines=st.integers(0, 3))
    def end_cleanly(self, lines: int) -> None:
        """The server ends the response at a line boundary (its timeout passed)."""
        assert self.conn is not None
        self._feed(self.conn.take_lines(lines))
        if self.conn is not None:
            self._close(None)

    @precondition(lambda self: self.conn is not None)
    @rule()
    def stall(self) -> None:
        deadline = self.reflector.next_deadline()
        assert deadline is not None
        self.now = max(self.now, deadline)
        assert self.reflector.poll(self.now)
        self._close(None)

    @rule(seconds=st.floats(0, 700))
    def advance(self, seconds: float) -> None:
        self.now += seconds
        if self.conn is not None and self.reflector.poll(self.now):
            self._close(None)

    @precondition(lambda self: self.conn is None)
    @rule()
    def step(self) -> None:
        """Perform the reflector's next request (waiting for its deadline first)."""
        r = self.reflector
        deadline = r.next_deadline()
        assert deadline is not None, f"an idle reflector needs a deadline ({r.state})"
        self.now = max(self.now, deadline)
        request = r.next_request(self.now)
        assert request is not None
        self._check_request(request)
        fault, self.fault = self.fault, None
        if not request.stream:
            self._list(request, fault)
        else:
            self._watch(request, fault)

    # -- the adapter -------------------------------------------------------------------------

    def _list(self, request: Request, fault: tuple[Any, float | None] | None) -> None:
        r = self.reflector
        if fault is None:
            r.receive_response(self.model.handle_list(request), self.now)
        elif fault[0] == "conn":
            r.request_failed(self.now, ConnectionRefusedError("refused"))
        else:
            code, retry_after = fault
            if code == 400 and request.query_value("continue") is not None:
                self.model.counters.continue_refused += 1
            r.receive_response(self._error(code, retry_after), self.now)

    def _watch(self, request: Request, fault: tuple[Any, float | None] | None) -> None:
        r = self.reflector
        streaming = request.query_value("sendInitialEvents") == "true"
        counters = self.model.counters
        if fault is not None and fault[0] == "conn":
            if streaming:
                counters.stream_failed += 1
            r.watch_ended(self.now, ConnectionRefusedError("refused"))
            return
        conn: WatchConn | None = None
        if fault is not None:
            code, retry_after = fault
            refusal = self._error(code, retry_after)
            if streaming:
                if code in STREAM_REFUSAL_CODES:
                    counters.stream_refused += 1
                else:
                    counters.stream_failed += 1
        else:
            refusal, conn = self.model.open_watch(request)
        if refusal is not None:
            r.receive_watch_head(refusal.status_code, refusal.headers, self.now)
            half = len(refusal.body) // 2
            for piece in (refusal.body[:half], refusal.body[half:]):
                assert r.receive_watch_data(piece, self.now) == []
            r.watch_ended(self.now, None)
            return
        r.receive_watch_head(200, (("Content-Type", "application/json"),), self.now)
        self.conn = conn
        self._feed(b"")

    def _error(self, code: int, retry_after: float | None) -> Any:
        headers = () if retry_after is None else (("Retry-After", str(int(retry_after))),)
        reason = {400: "BadRequest", 429: "TooManyRequests", 500: "InternalError"}.get(
            code, "ServiceUnavailable"
        )
        return status_response(code, reason, headers)

    def _feed(self, data: bytes) -> None:
        conn = self.conn
        assert conn is not None
        if data:
            self.reflector.receive_watch_data(data, self.now)
        if self.reflector.poll(self.now):
            self._close(None)
        elif conn.ending and conn.pending == 0:
            self._close(None)  # the server ends the response after its last event

    def _close(self, error: BaseException | None) -> None:
        assert self.conn is not None
        self.reflector.watch_ended(self.now, error)
        self.model.close(self.conn)
        self.conn = None

    def _check_request(self, request: Request) -> None:
        r = self.reflector
        stats = r.stats
        relisted = stats.relists > self.seen_relists
        self.seen_relists = stats.relists
        reason = stats.last_relist_reason
        assert request.path == PATH
        rv = request.query_value("resourceVersion")
        if not request.stream:
            assert request.query_value("limit") == str(self.page_size)
            if request.query_value("continue") is not None:
                assert rv is None
                assert request.query_value("resourceVersionMatch") is None
                return
            if rv is not None:
                assert rv == r.resource_version
                assert request.query_value("resourceVersionMatch") == "NotOlderThan"
        else:
            assert request.query_value("allowWatchBookmarks") == "true"
            assert 300 <= int(request.query_value("timeoutSeconds") or 0) <= 600
            if request.query_value("sendInitialEvents") == "true":
                assert request.query_value("resourceVersionMatch") == "NotOlderThan"
                assert rv in ("", r.resource_version)
            else:
                assert rv == r.resource_version
                assert not relisted
        if relisted and reason is RelistReason.WATCH_EXPIRED:
            assert rv == r.resource_version
        if relisted and reason in (
            RelistReason.LIST_EXPIRED,
            RelistReason.CONTINUE_EXPIRED,
            RelistReason.STREAM_EXPIRED,
        ):
            assert not rv

    # -- invariants --------------------------------------------------------------------------

    @invariant()
    def store_is_a_consistent_snapshot(self) -> None:
        r = self.reflector
        stored = {key.name: obj["metadata"]["resourceVersion"] for key, obj in r.store.items()}
        if not r.has_synced:
            assert stored == {}
            return
        assert stored == self.model.state_at(int(r.resource_version))
        for obj in r.store.objects():
            assert (obj["apiVersion"], obj["kind"]) == ("v1", "ConfigMap")

    @invariant()
    def every_relist_has_a_cause(self) -> None:
        reasons = self.reflector.stats.relist_reasons
        c = self.model.counters
        causes = {
            RelistReason.WATCH_EXPIRED: c.watch_410,
            RelistReason.LIST_EXPIRED: c.list_410,
            RelistReason.CONTINUE_EXPIRED: c.continue_410,
            RelistReason.LIST_FAILED: c.continue_refused,
            RelistReason.STREAM_EXPIRED: c.stream_410,
            RelistReason.STREAM_FAILED: c.stream_failed,
            RelistReason.STREAM_REFUSED: c.stream_refused,
        }
        for reason, count in reasons.items():
            assert count <= causes[reason], (reason, count, c)
        assert self.reflector.stats.relists == sum(reasons.values())

    def teardown(self) -> None:
        if not hasattr(self, "reflector"):
            return
        self.fault = None
        r = self.reflector
        for _ in range(1000):
            if self.conn is None:
                self.step()
            elif self.conn.pending:
                self._feed(self.conn.take(self.conn.pending))
            elif r.state is ReflectorState.WATCHING:
                break
            else:
                raise AssertionError(f"an open connection with nothing to say in {r.state}")
        assert r.state is ReflectorState.WATCHING
        stored = {key.name: obj["metadata"]["resourceVersion"] for key, obj in r.store.items()}
        assert stored == self.model.current()


ReflectorMachine.TestCase.settings = settings(settings(), stateful_step_count=40, deadline=None)
TestReflectorModel = ReflectorMachine.TestCase
