# Longer than 700 lines because the Reflector is one state machine, kept in one file: its
# handlers share its private state. Its table (_reflector_states), page scanners
# (_page_scanners) and kept-out records (_kept_out) live apart. (The docstring below is
# long, so this reason comes first, where tools reading a file's head find it.)
"""The reflector: keeps a :class:`Store` equal to a collection on the API server.

A sans-IO state machine. It says which request to perform (:meth:`Reflector.next_request`)
and when to call back (:meth:`Reflector.next_deadline`); the adapter performs requests and
feeds back complete LIST responses, watch heads, watch bytes, the end of each watch, and
the time. States are :class:`ReflectorState`; every move is one entry of
its table (:meth:`Reflector.transitions`), and a call the current state has no entry
for raises :class:`LocalProtocolError`.

Rules (client-go's reflector is the reference):

- A sync is a paginated LIST (``limit`` 500, ``continue``) or, when enabled, a streaming
  list. Its objects go into a store epoch and replace the store only when the sync is
  complete; readers never see part of a list.
- The first sync asks for the newest state (no resourceVersion: a consistent read). After
  a watch answers 410, the relist asks for ``resourceVersion=<last seen>`` with
  ``resourceVersionMatch=NotOlderThan`` ("at least as fresh as what I saw"), which the
  server may answer without a quorum read of etcd, so clients relisting together do not
  stampede it (kubernetes#86483, client-go's fix in #86430); if that LIST answers 410 it
  asks for the newest state. An expired ``continue`` token (410 on a later page) restarts
  the list from the newest state.
- A watch starts from the sync's resourceVersion with ``allowWatchBookmarks=true`` and a
  ``timeoutSeconds`` drawn from [300, 600]. Every event and bookmark moves the resume point;
  bookmarks never produce changes.
- A watch that ends cleanly is resumed at once from the resume point, without a relist
  (one that ends within a second having delivered nothing counts as a failure). Dropped
  connections, 429, 5xx, other refusals, malformed data and stalls back off
  (:class:`Backoff`) and resume, honouring ``Retry-After`` (capped at 5 minutes). Only 410
  relists, after a backoff too, as client-go's ListAndWatch loop does: short after a
  healthy spell, growing if relists repeat (no relist storm).
- A LIST page that fails with 429, 5xx, a connection error or a malformed body is retried
  after a backoff, with the same ``continue`` token. A later page refused for another
  reason restarts the list after a backoff.
- Streaming lists (``sendInitialEvents=true``, ``resourceVersionMatch=NotOlderThan``,
  resourceVersion ``""`` or the last seen) replace the store when the BOOKMARK annotated
  ``k8s.io/initial-events-end: "true"`` arrives; the same connection then carries on as the
  watch. A server that refuses them (400, 403, 405, 422) gets LIST+WATCH from then on. A
  stream that fails in any other way before its end bookmark (dropped, ended, 429/5xx,
  malformed, stalled) is followed by one LIST+WATCH sync, as client-go does; the sync after
  that tries streaming again. A 410 on a stream at a resourceVersion streams again from
  the newest state.
- Shards: with a ``shard_selector`` every LIST page (the ``continue`` token does not carry
  it), watch and streaming list asks the server for that shard only, and objects outside
  it are dropped before they reach the store (a server without the gate, or several
  apiservers behind one balancer, send them anyway); a dropped event still moves the
  resume point. :attr:`ReflectorStats.out_of_shard` counts them.
- :meth:`Reflector.reselect` switches the shard and label selectors between requests: the
  next sync lists the newest state with them (a consistent read), and its commit reports
  the objects that left the selection as deletions, exactly as if they had been deleted;
  a sharded controller tells the two apart by the object's hash (it left the range).
- The changes of the first complete list are marked ``initial`` (``Change.initial``);
  those of later relists and watches are not.
- Stalls: when no byte arrives on a watch for longer than its ``timeoutSeconds`` plus
  ``stall_margin``, :meth:`Reflector.poll` tells the adapter to abandon the connection.
"""

from __future__ import annotations

import random
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from ._backoff import Backoff
from ._changes import Change
from ._errors import DecodeError, KubeMoonError, LocalProtocolError
from ._kept_out import KeptOut, _kept_out, _stub_metadata
from ._page_scanners import _decode_page
from ._reflector_states import (
    _CLOSING,
    _DUE,
    _EDGES,
    _ENDS,
    _HEADS,
    _LIST_OUTCOMES,
    _READING,
    _REJECTED,
    _RELISTS,
    _TABLE,
    _TRANSITIONS,
    ReflectorInput,
    ReflectorState,
    RelistReason,
    _Delay,
    _Stream,
    _SyncFrom,
)
from ._request import (
    ListOptions,
    Request,
    Response,
    list_request,
    next_page_limit,
    watch_request,
)
from ._resources import APIResource, GroupVersionResource, ObjectKey
from ._shard import ShardSelector
from ._status import ApiError, Disposition, Gone, error_from_response
from ._store import Store
from ._transitions import TransitionTable, _Deprecated
from ._watch import DEFAULT_MAX_LINE_LENGTH, WatchDecoder
from ._watch_events import KeptOutEvent, WatchEvent

__all__ = ["Reflector", "ReflectorStats"]

# Bounds: how much of a refused watch's body is kept, and the longest Retry-After honoured.
ERROR_BODY_LIMIT = 64 * 1024
MAX_RETRY_AFTER = 300.0
# Watch timeouts, drawn uniformly like client-go's [minWatchTimeout, 2 * minWatchTimeout].
MIN_WATCH_TIMEOUT = 300
MAX_WATCH_TIMEOUT = 600
# A clean end this soon, with nothing received, is a failure (protects against hot loops).
SHORT_WATCH = 1.0
# Codes by which a server says it does not do streaming lists at all.
STREAM_REFUSAL_CODES = frozenset({400, 403, 405, 422})


@dataclass(frozen=True, slots=True)
class ReflectorStats:
    """Counters of a reflector, as plain data (a snapshot taken by :attr:`Reflector.stats`)."""

    syncs: int = 0  # complete lists applied (LIST or streaming)
    relists: int = 0  # syncs started again after the first one, for any reason
    relist_reasons: Mapping[RelistReason, int] = field(default_factory=dict)
    last_relist_reason: RelistReason | None = None
    watch_restarts: int = 0  # watches resumed without a relist
    stalls: int = 0
    failures: int = 0  # backoffs taken
    events: int = 0  # ADDED/MODIFIED/DELETED events received on watches
    bookmarks: int = 0
    out_of_shard: int = 0  # objects listed or watched outside the shard selector, dropped
    page_shrinks: int = 0  # LIST pages asked for again with half the limit (too large)
    kept_out: int = 0  # objects the server holds that the cache cannot (see Reflector.kept_out)
    list_bytes: int = 0  # bytes of LIST response bodies received
    watch_bytes: int = 0  # bytes of watch bodies received (streaming lists included)


def _expired(error: BaseException) -> bool:
    return isinstance(error, ApiError) and (
        isinstance(error, Gone) or error.reason in ("Expired", "Gone")
    )


def _retry_after(error: BaseException | None) -> float:
    if isinstance(error, ApiError) and error.retry_after is not None:
        return min(error.retry_after, MAX_RETRY_AFTER)
    return 0.0


class Reflector:
    """Lists and watches one collection into a :class:`Store`; see the module rules.

    Driving it (h11 style, every time argument a monotonic ``now``):

    1. ``request = r.next_request(now)``; when None, wait until ``r.next_deadline()``.
    2. A non-streaming request (a LIST page): perform it and give the complete response to
       :meth:`receive_response`, or report a transport failure with :meth:`request_failed`.
    3. A streaming request (``request.stream``): give the head to
       :meth:`receive_watch_head`, every chunk of the body to :meth:`receive_watch_data`,
       and call :meth:`poll` whenever ``next_deadline()`` passes; when ``poll`` returns
       True, close the connection. Finally report the end, clean or not, exactly once with
       :meth:`watch_ended`.

    The changes returned by ``receive_response`` and ``receive_watch_data`` are the work a
    controller should see; they are already applied to :attr:`store`. ``watch_timeout`` is
    the range ``timeoutSeconds`` is drawn from (client-go: 300 to 600 s).
    """

    TRANSITIONS = _Deprecated(MappingProxyType(_TRANSITIONS), "Reflector.transitions()")

    @classmethod
    def transitions(cls) -> TransitionTable[ReflectorState, ReflectorInput]:
        """The reflector's transition table: every ``(state, input)`` move it makes."""
        return _TABLE

    def __init__(
        self,
        resource: GroupVersionResource | APIResource,
        *,
        rng: random.Random,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        store: Store | None = None,
        page_size: int = 500,
        streaming_list: bool = False,
        backoff: Backoff | None = None,
        stall_margin: float = 30.0,
        max_line_length: int = DEFAULT_MAX_LINE_LENGTH,
        watch_timeout: tuple[int, int] = (MIN_WATCH_TIMEOUT, MAX_WATCH_TIMEOUT),
        metadata_only: bool = False,
        shard_selector: ShardSelector | None = None,
    ) -> None:
        self._metadata_only = metadata_only
        if not isinstance(rng, random.Random):
            raise LocalProtocolError("rng must be a random.Random")
        if isinstance(page_size, bool) or not isinstance(page_size, int) or page_size < 1:
            raise LocalProtocolError("page_size must be a positive int")
        if stall_margin < 0:
            raise LocalProtocolError("stall_margin must not be negative")
        low, high = watch_timeout
        if not all(isinstance(t, int) and not isinstance(t, bool) for t in (low, high)) or not (
            0 <= low <= high
        ):
            raise LocalProtocolError(
                f"watch_timeout must be ints 0 <= low <= high, got {watch_timeout!r}"
            )
        # Build once so bad selectors fail here, and every request shares the validation.
        ListOptions(
            label_selector=label_selector,
            field_selector=field_selector,
            shard_selector=shard_selector,
        )
        list_request(resource, namespace=namespace)
        WatchDecoder(max_line_length=max_line_length)
        self._resource = resource
        self._namespace = namespace
        self._label_selector = label_selector
        self._field_selector = field_selector
        self._shard = shard_selector
        self._rng = rng
        self._store = store if store is not None else Store()
        self._page_size = page_size
        # The limit of the LIST in progress: halved after a page too large for the client
        # (down to 1), back to page_size when the next list starts.
        self._page_limit = page_size
        self._streaming = streaming_list
        self._backoff = backoff if backoff is not None else Backoff(rng)
        self._stall_margin = float(stall_margin)
        self._max_line_length = max_line_length
        self._watch_timeout = (low, high)

        self._state = ReflectorState.SYNC_DUE
        self._ready_at = float("-inf")
        self._rv = ""  # the resume point: last list, event or bookmark resourceVersion
        self._synced = False
        self._sync_rv: str | None = None  # resourceVersion the next sync asks for
        self._stream_fallback = False  # the next sync is a LIST after a failed stream
        # The LIST in progress.
        self._page_rv: str | None = None
        self._continue: str | None = None
        # The watch or stream connection in progress.
        self._decoder = WatchDecoder(max_line_length=max_line_length)
        self._timeout = low
        self._started_at = 0.0
        self._stall_at = 0.0
        self._received = 0  # events and bookmarks on this connection
        self._stream_rv = ""  # the resourceVersion a streaming list asked for
        self._head: tuple[int, tuple[tuple[str, str], ...]] = (0, ())
        self._error_body = bytearray()
        self._closing_error: BaseException | None = None
        # Counters.
        self._last_error: BaseException | None = None
        self._syncs = 0
        self._relists = 0
        self._reasons: dict[RelistReason, int] = {}
        self._last_reason: RelistReason | None = None
        self._watch_restarts = 0
        self._stalls = 0
        self._failures = 0
        self._events = 0
        self._bookmarks = 0
        self._out_of_shard = 0
        self._page_shrinks = 0
        # Objects kept out of the store: those of the last complete sync and watch events
        # since (_kept_out), those of the sync in progress (_epoch_kept); _kept_seq counts
        # every record noted, so a reader knows when to look again.
        self._kept_out: dict[Any, KeptOut] = {}
        self._epoch_kept: dict[Any, KeptOut] = {}
        self._page_kept: list[KeptOut] = []
        self._kept_seq = 0
        self._list_bytes = 0
        self._watch_bytes = 0

    def __repr__(self) -> str:
        resource = (
            self._resource.gvr if isinstance(self._resource, APIResource) else (self._resource)
        )
        return (
            f"<Reflector {resource} {self._state.name} rv={self._rv!r} objects={len(self._store)}>"
        )

    # -- what the adapter reads -------------------------------------------------------------

    @property
    def state(self) -> ReflectorState:
        """The current state."""
        return self._state

    @property
    def store(self) -> Store:
        """The store this reflector keeps in sync."""
        return self._store

    @property
    def has_synced(self) -> bool:
        """True once the first complete list has been applied (and from then on)."""
        return self._synced

    @property
    def resource_version(self) -> str:
        """The resume point: the last resourceVersion listed, watched or bookmarked."""
        return self._rv

    @property
    def streaming_list(self) -> bool:
        """Whether syncs use streaming lists (false after the server refused one)."""
        return self._streaming

    @property
    def out_of_shard(self) -> int:
        """Objects received outside the shard selector and dropped (cheap; see stats)."""
        return self._out_of_shard

    @property
    def kept_out(self) -> Mapping[Any, KeptOut]:
        """The objects the server holds that are kept out of the store now (too deeply
        nested to decode, or not storable), by key; each produces no change. Read-only."""
        return MappingProxyType(self._kept_out)

    @property
    def kept_out_seq(self) -> int:
        """How many kept-out records were noted so far (it grows when one is added)."""
        return self._kept_seq

    @property
    def shard_selector(self) -> ShardSelector | None:
        """The shard this reflector lists and watches, or None for the whole collection."""
        return self._shard

    @property
    def last_error(self) -> BaseException | None:
        """The last failure seen (ApiError, protocol error or transport error), if any."""
        return self._last_error

    @property
    def stats(self) -> ReflectorStats:
        """A snapshot of the counters."""
        return ReflectorStats(
            syncs=self._syncs,
            relists=self._relists,
            relist_reasons=MappingProxyType(dict(self._reasons)),
            last_relist_reason=self._last_reason,
            watch_restarts=self._watch_restarts,
            stalls=self._stalls,
            failures=self._failures,
            events=self._events,
            bookmarks=self._bookmarks,
            out_of_shard=self._out_of_shard,
            page_shrinks=self._page_shrinks,
            kept_out=len(self._kept_out),
            list_bytes=self._list_bytes,
            watch_bytes=self._watch_bytes,
        )

    @staticmethod
    def diagram() -> str:
        """Deprecated: use ``Reflector.transitions().diagram()``."""
        warnings.warn(
            "Reflector.diagram() is deprecated; use Reflector.transitions().diagram() "
            "(the old name works until KubeMoon 1.1)",
            DeprecationWarning,
            stacklevel=2,
        )
        return _TABLE.diagram()

    def next_deadline(self) -> float | None:
        """When to call back: a ``*_DUE`` state's start time, or a watch's stall deadline.

        None while a LIST page is in flight (the adapter's own timeout governs it) and
        while a connection is to be closed (:meth:`poll` already says True).
        """
        if self._state in _DUE:
            return self._ready_at
        if self._state in _READING:
            return self._stall_at
        return None

    # -- starting requests ------------------------------------------------------------------

    def next_request(self, now: float) -> Request | None:
        """The request to perform now, or None while waiting or busy."""
        state = self._state
        if state not in _DUE or now < self._ready_at:
            return None
        if state is ReflectorState.WATCH_DUE:
            self._move(ReflectorInput.START_WATCH)
            options = self._watch_options(resource_version=self._rv)
            return self._connect(
                watch_request(
                    self._resource,
                    namespace=self._namespace,
                    options=options,
                    metadata_only=self._metadata_only,
                ),
                now,
            )
        if state is ReflectorState.SYNC_DUE:
            self._store.begin_epoch()
            self._epoch_kept = {}
            if self._streaming and not self._stream_fallback:
                self._move(ReflectorInput.START_STREAM)
                self._stream_rv = self._sync_rv or ""
                options = self._watch_options(
                    resource_version=self._stream_rv,
                    resource_version_match="NotOlderThan",
                    send_initial_events=True,
                )
                return self._connect(
                    watch_request(
                        self._resource,
                        namespace=self._namespace,
                        options=options,
                        metadata_only=self._metadata_only,
                    ),
                    now,
                )
            self._move(ReflectorInput.START_LIST)
            self._stream_fallback = False
            self._page_rv = self._sync_rv
            self._continue = None
            self._page_limit = self._page_size
        else:
            self._move(ReflectorInput.REQUEST_PAGE)
        if self._continue is not None:
            options = ListOptions(
                label_selector=self._label_selector,
                field_selector=self._field_selector,
                shard_selector=self._shard,
                limit=self._page_limit,
                continue_token=self._continue,
            )
        else:
            options = ListOptions(
                label_selector=self._label_selector,
                field_selector=self._field_selector,
                shard_selector=self._shard,
                limit=self._page_limit,
                resource_version=self._page_rv,
                resource_version_match=None if self._page_rv is None else "NotOlderThan",
            )
        return list_request(
            self._resource,
            namespace=self._namespace,
            options=options,
            metadata_only=self._metadata_only,
        )

    def _watch_options(self, **kwargs: Any) -> ListOptions:
        self._timeout = self._rng.randint(*self._watch_timeout)
        return ListOptions(
            label_selector=self._label_selector,
            field_selector=self._field_selector,
            shard_selector=self._shard,
            timeout_seconds=self._timeout,
            allow_watch_bookmarks=True,
            **kwargs,
        )

    def reselect(
        self,
        now: float,
        *,
        shard_selector: ShardSelector | None,
        label_selector: str | None,
    ) -> None:
        """Switch to new selectors: the next sync, due at once, lists with them.

        Only between requests (a ``*_DUE`` state: cancel the request in flight and report
        its end first). A list in progress is abandoned; the store keeps its objects until
        the new sync commits, which reports those no longer selected as deletions.
        """
        if self._state not in _DUE:
            raise LocalProtocolError(f"reselect() is not allowed in state {self._state.name}")
        ListOptions(
            label_selector=label_selector,
            field_selector=self._field_selector,
            shard_selector=shard_selector,
        )
        self._shard = shard_selector
        self._label_selector = label_selector
        self._move(ReflectorInput.RESELECT, now)

    @property
    def label_selector(self) -> str | None:
        """The label selector this reflector lists and watches with."""
        return self._label_selector

    def _connect(self, request: Request, now: float) -> Request:
        self._decoder = WatchDecoder(max_line_length=self._max_line_length)
        self._started_at = now
        self._received = 0
        self._closing_error = None
        self._touch(now)
        return request

    # -- LIST pages -------------------------------------------------------------------------

    def receive_response(self, response: Response, now: float) -> Sequence[Change]:
        """Take the complete response to a LIST page; return the changes a last page makes."""
        self._accept("receive_response", _LIST_OUTCOMES)
        self._list_bytes += len(response.body)
        if not response.ok:
            self._list_failed(
                error_from_response(response.status_code, response.headers, response.body), now
            )
            return []
        try:
            items, _raws, rv, token = self._page(response.body)
            stage = self._store.stage
            shard = self._shard
            for item in items:
                if shard is not None and not shard.contains(item):
                    self._out_of_shard += 1
                    continue
                try:
                    stage(item)
                except LocalProtocolError as exc:  # decoded, but the store cannot encode it
                    self._note_kept(_kept_out(item, str(exc)), self._epoch_kept)
            for record in self._page_kept:
                if shard is None or shard.contains({"metadata": _stub_metadata(record)}):
                    self._note_kept(record, self._epoch_kept)
        except KubeMoonError as exc:
            self._list_failed(exc, now)
            return []
        if token:
            self._move(ReflectorInput.PAGE_MORE, now)
            self._continue = token
            return []
        self._move(ReflectorInput.PAGE_LAST, now)
        return self._synced_at(rv)

    def request_failed(
        self, now: float, error: BaseException | None = None, *, too_large: bool = False
    ) -> None:
        """Report that a LIST page request failed without a response (connection error).

        ``too_large``: the response body was larger than the client accepts. The same page
        is then asked for at once with half the ``limit`` (down to 1, which holds one
        object), for the rest of this list; the next list starts at ``page_size`` again.
        A page of one object too large is an ordinary failure (backoff and retry).
        """
        self._accept("request_failed", _LIST_OUTCOMES)
        smaller = next_page_limit(self._page_limit) if too_large else None
        if smaller is not None:
            self._last_error = error
            self._page_limit = smaller
            self._page_shrinks += 1
            self._move(ReflectorInput.PAGE_TOO_LARGE, now)
            return
        self._list_failed(error, now)

    @property
    def page_limit(self) -> int:
        """The ``limit`` LIST pages are asked for with now (smaller after a page too large)."""
        return self._page_limit

    def _page(
        self, body: bytes, keep_raw: bool = False
    ) -> tuple[list[dict[str, Any]], list[bytes] | None, str, str]:
        """A LIST page decoded by :func:`._page_scanners._decode_page`; the items kept out
        of it wait in ``_page_kept`` for :meth:`receive_response`."""
        self._page_kept = []  # a page that fails to decode keeps nothing out
        items, raws, rv, token, self._page_kept = _decode_page(body, keep_raw)
        return items, raws, rv, token

    def _list_failed(self, error: BaseException | None, now: float) -> None:
        self._last_error = error
        continued = self._continue is not None
        if error is not None and _expired(error):
            if continued:
                self._move(ReflectorInput.CONTINUE_EXPIRED, now)
                return
            if self._page_rv is not None:
                self._move(ReflectorInput.LIST_EXPIRED, now)
                return
        refused = (
            isinstance(error, ApiError)
            and error.disposition is Disposition.CALLER
            and not _expired(error)
        )
        if continued and refused:
            self._move(ReflectorInput.LIST_FAILED, now, error)
            return
        self._move(ReflectorInput.LIST_RETRY, now, error)

    def _restart(self, reason: RelistReason, now: float, delay: float) -> None:
        """Start a sync again for ``reason`` (the state is already SYNC_DUE): where it
        starts and whether it streams are the reason's rule (``_RELISTS``)."""
        rule = _RELISTS[reason]
        if self._store.epoch_open:
            self._store.abort_epoch()
        if rule.sync_from is _SyncFrom.LAST_SEEN:
            self._sync_rv = self._rv
        elif rule.sync_from is _SyncFrom.NEWEST:
            self._sync_rv = None
        if rule.stream is _Stream.LIST_ONCE:
            self._stream_fallback = True
        elif rule.stream is _Stream.NEVER:
            self._streaming = False
        elif rule.stream is _Stream.RETRY:
            self._stream_fallback = False
        # A reselect during the first sync is no relist: there was nothing to list again.
        if self._synced or reason is not RelistReason.RESELECTED:
            self._relists += 1
            self._reasons[reason] = self._reasons.get(reason, 0) + 1
            self._last_reason = reason
        self._ready_at = now + delay

    def _note_kept(self, record: KeptOut, into: dict[Any, KeptOut]) -> None:
        key: Any = record.key if record.key is not None else ("unnamed", self._kept_seq)
        into[key] = record
        self._kept_seq += 1

    def _synced_at(self, rv: str) -> Sequence[Change]:
        # The first list's changes (the whole cache) are marked for low priority, as they
        # are made: a second list of them would be a second copy at the peak.
        changes = self._store.commit_epoch(initial=not self._synced)
        self._kept_out, self._epoch_kept = self._epoch_kept, {}
        if self._kept_out:
            # A copy held before leaves the store; it is no deletion (the object exists).
            kept = self._kept_out
            changes = [c for c in changes if c.key not in kept]
        self._rv = rv
        self._synced = True
        self._syncs += 1
        return changes

    # -- watches and streams ----------------------------------------------------------------

    def receive_watch_head(
        self, status_code: int, headers: Iterable[tuple[str, str]], now: float
    ) -> None:
        """Take the status and headers of the response to a watch or streaming list."""
        self._accept("receive_watch_head", _HEADS)
        self._touch(now)
        if 200 <= status_code < 300:
            self._move(ReflectorInput.HEAD_OK)
            return
        self._move(ReflectorInput.HEAD_ERROR)
        self._head = (status_code, tuple(headers))
        self._error_body = bytearray()

    def receive_watch_data(self, data: bytes, now: float) -> list[Change]:
        """Take a chunk of a watch body; return the changes its complete events make."""
        self._accept("receive_watch_data", (ReflectorInput.DATA,))
        if not data:
            raise LocalProtocolError("empty data: report the end with watch_ended()")
        self._watch_bytes += len(data)
        self._touch(now)
        state = self._state
        if state in _CLOSING:
            return []  # the connection is being abandoned; what it says no longer counts
        if state in _REJECTED:
            room = ERROR_BODY_LIMIT - len(self._error_body)
            self._error_body += data[: max(room, 0)]
            return []
        decoder = self._decoder
        try:
            decoder.feed(data)
        except KubeMoonError as exc:
            self._broken(exc)
            return []
        # Events are decoded and applied one window at a time (WatchDecoder.next_event), so
        # a large chunk's events never all exist at once; a bad line ends the loop after the
        # events before it, as if the chunk had been cut just before it.
        changes: list[Change] = []
        next_event = decoder.next_event
        watching = state is ReflectorState.WATCHING
        while True:
            try:
                event = next_event()
                if event is None:
                    break
                if watching:
                    self._watch_event(event, changes)
                else:
                    self._stream_event(event, changes, now)
            except KubeMoonError as exc:
                self._broken(exc)
            if self._state is not state:
                state = self._state
                if state in _CLOSING:
                    break
                watching = state is ReflectorState.WATCHING
        return changes

    def _watch_event(self, event: WatchEvent, changes: list[Change]) -> None:
        kind = event.type
        if kind == "ERROR":
            self._error_event(event)
            return
        obj = event.object
        # The hot path, once per event: what a JSON decoder produced, read directly.
        metadata = obj.get("metadata")
        rv = metadata.get("resourceVersion") if type(metadata) is dict else None
        if type(rv) is not str or not rv:
            rv = self._event_rv(event)
        self._received += 1
        if kind == "BOOKMARK":
            self._bookmarks += 1
        elif self._shard is not None and not self._shard.contains(obj):
            self._events += 1
            self._out_of_shard += 1
        elif type(event) is KeptOutEvent:
            self._events += 1
            self._keep_out_event(kind, _kept_out(obj, event.reason))
        else:
            self._events += 1
            if self._kept_out:
                self._kept_out.pop(ObjectKey.of(obj), None)  # decodable again, or deleted
            try:
                change = self._store.delete(obj) if kind == "DELETED" else self._store.upsert(obj)
            except LocalProtocolError as exc:  # decoded, but the store cannot encode it
                self._keep_out_event(kind, _kept_out(obj, str(exc)))
                change = None
            if change is not None:
                changes.append(change)
        self._rv = rv

    def _keep_out_event(self, kind: str, record: KeptOut) -> None:
        """A watch event of an object kept out: a copy in the store leaves it without a
        change (it is not current, and the object is not deleted); a deletion ends it."""
        if record.key is not None:
            self._kept_out.pop(record.key, None)
            self._store.delete({"metadata": _stub_metadata(record)})
        if kind != "DELETED":
            self._note_kept(record, self._kept_out)

    def _stream_event(self, event: WatchEvent, changes: list[Change], now: float) -> None:
        kind = event.type
        if kind == "ERROR":
            self._error_event(event)
            return
        rv = self._event_rv(event)
        self._received += 1
        if kind == "BOOKMARK":
            self._bookmarks += 1
            if event.initial_events_end:
                self._move(ReflectorInput.INITIAL_EVENTS_END)
                changes.extend(self._synced_at(rv))
            return
        self._events += 1
        if self._shard is not None and not self._shard.contains(event.object):
            self._out_of_shard += 1
        elif type(event) is KeptOutEvent:
            record = _kept_out(event.object, event.reason)
            if record.key is not None:
                self._epoch_kept.pop(record.key, None)
                self._store.unstage({"metadata": _stub_metadata(record)})
            if kind != "DELETED":
                self._note_kept(record, self._epoch_kept)
        elif kind == "DELETED":
            self._store.unstage(event.object)
        else:
            try:
                self._store.stage(event.object)
            except LocalProtocolError as exc:  # decoded, but the store refuses it
                self._note_kept(_kept_out(event.object, str(exc)), self._epoch_kept)

    def _event_rv(self, event: WatchEvent) -> str:
        rv = event.resource_version
        if not rv:
            raise DecodeError(
                f"{event.type} event without a resourceVersion",
                path="object.metadata.resourceVersion",
            )
        return rv

    def _error_event(self, event: WatchEvent) -> None:
        error = event.error
        assert error is not None
        self._last_error = error
        if _expired(error) and (self._state is ReflectorState.WATCHING or self._stream_rv):
            self._move(ReflectorInput.EXPIRED)
        else:
            self._move(ReflectorInput.BROKEN)
            self._closing_error = error

    def _broken(self, error: KubeMoonError) -> None:
        self._last_error = error
        self._move(ReflectorInput.BROKEN)
        self._closing_error = error

    def poll(self, now: float) -> bool:
        """Check for a stall; True means: close the watch connection, then call watch_ended.

        Also True while the reflector waits for a connection it gave up on to be closed
        (after an ERROR event or malformed data).
        """
        state = self._state
        if state in _CLOSING:
            return True
        if state in _READING and now >= self._stall_at:
            self._stalls += 1
            self._move(ReflectorInput.STALL)
            self._closing_error = None
            return True
        return False

    def watch_ended(self, now: float, error: BaseException | None = None) -> None:
        """Report the end of a watch or streaming-list connection: clean when ``error`` is
        None, otherwise the transport error that ended it."""
        self._accept("watch_ended", _ENDS)
        state = self._state
        if error is not None:
            self._last_error = error
        if state in _REJECTED:
            self._rejected(now)
            return
        if state is ReflectorState.WATCHING and error is None:
            try:
                self._decoder.receive_data(b"")
            except KubeMoonError as exc:
                error = self._last_error = exc  # cut inside an event
        event = ReflectorInput.ENDED if error is None else ReflectorInput.DROPPED
        self._move(event, now, error or self._closing_error)

    def _rejected(self, now: float) -> None:
        status_code, headers = self._head
        error = error_from_response(status_code, headers, bytes(self._error_body))
        self._last_error = error
        self._error_body = bytearray()
        if self._state is ReflectorState.WATCH_REJECTED:
            event = ReflectorInput.EXPIRED if _expired(error) else ReflectorInput.BROKEN
        elif _expired(error) and self._stream_rv:
            event = ReflectorInput.EXPIRED
        elif status_code in STREAM_REFUSAL_CODES:
            event = ReflectorInput.REFUSED
        else:
            event = ReflectorInput.BROKEN
        self._move(event, now, error)

    # -- internals --------------------------------------------------------------------------

    def _accept(self, method: str, inputs: Iterable[ReflectorInput]) -> None:
        state = self._state
        if not any((state, event) in _TRANSITIONS for event in inputs):
            raise LocalProtocolError(f"{method}() is not allowed in state {state.name}")

    def _move(
        self, event: ReflectorInput, now: float | None = None, error: BaseException | None = None
    ) -> None:
        """Take the move on ``event`` with its action, both from the table (``_EDGES``):
        the next state, then the relist or watch resume the edge starts and when the next
        request is due. ``error`` is what caused the move (its Retry-After is honoured)."""
        _TABLE.step(self._state, event)  # AssertionError naming both if the table has none
        edge = _EDGES[(self._state, event)]
        self._state = edge.target
        if edge.delay is _Delay.NONE:
            return
        assert now is not None  # every edge that schedules a request is given the time
        delay = self._delay_for(edge.delay, now, error)
        if edge.relist is not None:
            self._restart(edge.relist, now, delay)
            return
        if edge.resume_watch:
            self._watch_restarts += 1
        self._ready_at = now + delay

    def _delay_for(self, kind: _Delay, now: float, error: BaseException | None) -> float:
        if kind is _Delay.NOW:
            return 0.0
        if kind is _Delay.RELIST_BACKOFF:
            return self._delay(now, None)
        if kind is _Delay.CLEAN_END:
            short = self._received == 0 and now - self._started_at < SHORT_WATCH
            if not short:
                return 0.0
        return self._delay(now, error)

    def _touch(self, now: float) -> None:
        self._stall_at = now + self._timeout + self._stall_margin

    def _delay(self, now: float, error: BaseException | None) -> float:
        self._failures += 1
        return max(self._backoff.next_delay(now), _retry_after(error))
