"""The reflector's states, the inputs that move it, and its transition table, as data.

Rules: every move of a :class:`~kubemoon_core.lowlevel.Reflector` is one entry of
``_EDGES``: ``(state, input) -> _Edge``, the next state and the action taken with the move
(the relist it starts, the watch it resumes, when the next request is due). The machine in
:mod:`._reflector` takes each move and its action from there, and from nowhere else. What a
relist does besides counting (where its sync starts, streaming or not) is ``_RELISTS``, by
reason. The table is published as ``_TABLE`` (a
:class:`~kubemoon_core.lowlevel.TransitionTable`, ``Reflector.transitions()``, each edge's
action in words); a call the current state has no entry for is the caller's mistake,
refused by the machine. The frozensets and tuples below group states and inputs the
machine asks about together (is a connection open, which inputs may a method report), so
the table stays the single source of which moves exist. Pure data: no I/O, no time.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from ._transitions import TransitionTable

__all__ = ["ReflectorInput", "ReflectorState", "RelistReason"]


class ReflectorState(enum.Enum):
    """Where the reflector is. ``*_DUE`` states wait for a time, then issue a request."""

    SYNC_DUE = "sync due"  # a full sync (LIST or streaming list) is to start
    PAGE_DUE = "page due"  # the next LIST page, or a retry of one, is to be requested
    LISTING = "listing"  # a LIST page request is in flight
    STREAM_CONNECTING = "stream connecting"  # streaming list sent; no head yet
    STREAMING = "streaming"  # receiving the initial events of a streaming list
    STREAM_REJECTED = "stream rejected"  # non-2xx head; reading the error body
    STREAM_CLOSING = "stream closing"  # gave up on the stream; waiting for its end
    STREAM_EXPIRED = "stream expired"  # the stream answered 410; waiting for its end
    WATCH_DUE = "watch due"  # a watch is to start from the resume point
    WATCH_CONNECTING = "watch connecting"  # watch sent; no head yet
    WATCHING = "watching"  # receiving events
    WATCH_REJECTED = "watch rejected"  # non-2xx head; reading the error body
    WATCH_CLOSING = "watch closing"  # gave up on the watch; waiting for its end
    WATCH_EXPIRED = "watch expired"  # the watch answered 410; waiting for its end


class ReflectorInput(enum.Enum):
    """What happened: the labels of the transition table's edges."""

    START_LIST = "start list"
    START_STREAM = "start stream"
    REQUEST_PAGE = "request page"
    PAGE_MORE = "page with continue"
    PAGE_LAST = "last page"
    LIST_EXPIRED = "list 410"
    CONTINUE_EXPIRED = "continue 410"
    LIST_RETRY = "list retryable failure"
    PAGE_TOO_LARGE = "page too large"
    LIST_FAILED = "list failure"
    START_WATCH = "start watch"
    HEAD_OK = "2xx head"
    HEAD_ERROR = "error head"
    DATA = "data"
    INITIAL_EVENTS_END = "initial-events-end bookmark"
    EXPIRED = "410"
    BROKEN = "failure"
    REFUSED = "refused"
    STALL = "stall"
    ENDED = "ended"
    DROPPED = "dropped"
    RESELECT = "selectors changed"


class RelistReason(enum.Enum):
    """Why a sync was started again."""

    WATCH_EXPIRED = "a watch answered 410: relist at the last resourceVersion"
    LIST_EXPIRED = "a LIST at the last resourceVersion answered 410: list the newest state"
    CONTINUE_EXPIRED = "a continue token expired (410): list again from the start"
    LIST_FAILED = "a later LIST page was refused: list again from the start"
    STREAM_EXPIRED = "a streaming list answered 410: stream the newest state"
    STREAM_FAILED = "a streaming list failed before its initial events ended: LIST once"
    STREAM_REFUSED = "the server refused streaming lists: LIST from now on"
    RESELECTED = "the shard or label selector changed: list the newest state with it"


class _Delay(enum.Enum):
    """When the request after a move is due: part of each edge's action."""

    NONE = ""  # a request is in flight or a connection is open: nothing to schedule
    NOW = "at once"
    BACKOFF = "after backoff or Retry-After"
    # A relist after a 410: client-go's relist backoff, Retry-After not consulted.
    RELIST_BACKOFF = "after backoff"
    # A watch's clean end: at once, unless it ended within SHORT_WATCH having delivered
    # nothing (then a failure, backed off), which protects against hot loops.
    CLEAN_END = "at once, after backoff if short and empty"


class _SyncFrom(enum.Enum):
    """What the sync after a relist asks for: part of each relist reason's rule."""

    LAST_SEEN = "at the last resourceVersion seen"
    NEWEST = "the newest state"
    SAME = "what the abandoned sync asked for"


class _Stream(enum.Enum):
    """What a relist does to the choice between streaming list and LIST."""

    KEEP = ""
    LIST_ONCE = "LIST once, then stream again"
    NEVER = "LIST from now on"
    RETRY = "stream again"


@dataclass(frozen=True, slots=True)
class _Relist:
    """What a relist reason does besides counting: where the sync starts, and streaming."""

    sync_from: _SyncFrom
    stream: _Stream = _Stream.KEEP


_R = RelistReason
_RELISTS: dict[RelistReason, _Relist] = {
    _R.WATCH_EXPIRED: _Relist(_SyncFrom.LAST_SEEN),
    _R.LIST_EXPIRED: _Relist(_SyncFrom.NEWEST),
    _R.CONTINUE_EXPIRED: _Relist(_SyncFrom.NEWEST),
    _R.LIST_FAILED: _Relist(_SyncFrom.SAME),
    _R.STREAM_EXPIRED: _Relist(_SyncFrom.NEWEST),
    _R.STREAM_FAILED: _Relist(_SyncFrom.SAME, _Stream.LIST_ONCE),
    _R.STREAM_REFUSED: _Relist(_SyncFrom.SAME, _Stream.NEVER),
    # During the first sync a reselect is no relist (not counted); the rest holds.
    _R.RESELECTED: _Relist(_SyncFrom.NEWEST, _Stream.RETRY),
}
del _R


@dataclass(frozen=True, slots=True)
class _Edge:
    """One move: the next state, and the action the machine takes with it (the relist it
    starts, the watch it resumes, when its next request is due)."""

    target: ReflectorState
    delay: _Delay = _Delay.NONE
    relist: RelistReason | None = None
    resume_watch: bool = False  # a watch restart without a relist (counted)

    @property
    def action(self) -> str:
        """The action in words: the edge's label in the diagram, after the input."""
        parts = []
        if self.relist is not None:
            parts.append(f"relist {self.relist.name}")
        if self.resume_watch:
            parts.append("resume watch")
        if self.delay is not _Delay.NONE:
            parts.append(self.delay.value)
        return " ".join(parts)


S, In, D, R = ReflectorState, ReflectorInput, _Delay, RelistReason
# The whole machine: (state, input) -> the next state and the action taken with the move.
_EDGES: dict[tuple[ReflectorState, ReflectorInput], _Edge] = {
    (S.SYNC_DUE, In.START_LIST): _Edge(S.LISTING),
    (S.SYNC_DUE, In.RESELECT): _Edge(S.SYNC_DUE, D.NOW, R.RESELECTED),
    (S.PAGE_DUE, In.RESELECT): _Edge(S.SYNC_DUE, D.NOW, R.RESELECTED),
    (S.WATCH_DUE, In.RESELECT): _Edge(S.SYNC_DUE, D.NOW, R.RESELECTED),
    (S.SYNC_DUE, In.START_STREAM): _Edge(S.STREAM_CONNECTING),
    (S.PAGE_DUE, In.REQUEST_PAGE): _Edge(S.LISTING),
    (S.LISTING, In.PAGE_MORE): _Edge(S.PAGE_DUE, D.NOW),
    (S.LISTING, In.PAGE_LAST): _Edge(S.WATCH_DUE, D.NOW),
    (S.LISTING, In.LIST_EXPIRED): _Edge(S.SYNC_DUE, D.NOW, R.LIST_EXPIRED),
    (S.LISTING, In.CONTINUE_EXPIRED): _Edge(S.SYNC_DUE, D.NOW, R.CONTINUE_EXPIRED),
    (S.LISTING, In.LIST_RETRY): _Edge(S.PAGE_DUE, D.BACKOFF),
    (S.LISTING, In.PAGE_TOO_LARGE): _Edge(S.PAGE_DUE, D.NOW),
    (S.LISTING, In.LIST_FAILED): _Edge(S.SYNC_DUE, D.BACKOFF, R.LIST_FAILED),
    (S.STREAM_CONNECTING, In.HEAD_OK): _Edge(S.STREAMING),
    (S.STREAM_CONNECTING, In.HEAD_ERROR): _Edge(S.STREAM_REJECTED),
    (S.STREAM_CONNECTING, In.STALL): _Edge(S.STREAM_CLOSING),
    (S.STREAM_CONNECTING, In.ENDED): _Edge(S.SYNC_DUE, D.BACKOFF, R.STREAM_FAILED),
    (S.STREAM_CONNECTING, In.DROPPED): _Edge(S.SYNC_DUE, D.BACKOFF, R.STREAM_FAILED),
    (S.STREAMING, In.DATA): _Edge(S.STREAMING),
    (S.STREAMING, In.INITIAL_EVENTS_END): _Edge(S.WATCHING),
    (S.STREAMING, In.EXPIRED): _Edge(S.STREAM_EXPIRED),
    (S.STREAMING, In.BROKEN): _Edge(S.STREAM_CLOSING),
    (S.STREAMING, In.STALL): _Edge(S.STREAM_CLOSING),
    # A clean end before the end bookmark is no server fault: LIST at once.
    (S.STREAMING, In.ENDED): _Edge(S.SYNC_DUE, D.NOW, R.STREAM_FAILED),
    (S.STREAMING, In.DROPPED): _Edge(S.SYNC_DUE, D.BACKOFF, R.STREAM_FAILED),
    (S.STREAM_REJECTED, In.DATA): _Edge(S.STREAM_REJECTED),
    (S.STREAM_REJECTED, In.STALL): _Edge(S.STREAM_CLOSING),
    (S.STREAM_REJECTED, In.EXPIRED): _Edge(S.SYNC_DUE, D.NOW, R.STREAM_EXPIRED),
    (S.STREAM_REJECTED, In.REFUSED): _Edge(S.SYNC_DUE, D.NOW, R.STREAM_REFUSED),
    (S.STREAM_REJECTED, In.BROKEN): _Edge(S.SYNC_DUE, D.BACKOFF, R.STREAM_FAILED),
    (S.STREAM_CLOSING, In.DATA): _Edge(S.STREAM_CLOSING),
    (S.STREAM_CLOSING, In.ENDED): _Edge(S.SYNC_DUE, D.BACKOFF, R.STREAM_FAILED),
    (S.STREAM_CLOSING, In.DROPPED): _Edge(S.SYNC_DUE, D.BACKOFF, R.STREAM_FAILED),
    (S.STREAM_EXPIRED, In.DATA): _Edge(S.STREAM_EXPIRED),
    (S.STREAM_EXPIRED, In.ENDED): _Edge(S.SYNC_DUE, D.NOW, R.STREAM_EXPIRED),
    (S.STREAM_EXPIRED, In.DROPPED): _Edge(S.SYNC_DUE, D.NOW, R.STREAM_EXPIRED),
    (S.WATCH_DUE, In.START_WATCH): _Edge(S.WATCH_CONNECTING),
    (S.WATCH_CONNECTING, In.HEAD_OK): _Edge(S.WATCHING),
    (S.WATCH_CONNECTING, In.HEAD_ERROR): _Edge(S.WATCH_REJECTED),
    (S.WATCH_CONNECTING, In.STALL): _Edge(S.WATCH_CLOSING),
    (S.WATCH_CONNECTING, In.ENDED): _Edge(S.WATCH_DUE, D.BACKOFF, resume_watch=True),
    (S.WATCH_CONNECTING, In.DROPPED): _Edge(S.WATCH_DUE, D.BACKOFF, resume_watch=True),
    (S.WATCHING, In.DATA): _Edge(S.WATCHING),
    (S.WATCHING, In.EXPIRED): _Edge(S.WATCH_EXPIRED),
    (S.WATCHING, In.BROKEN): _Edge(S.WATCH_CLOSING),
    (S.WATCHING, In.STALL): _Edge(S.WATCH_CLOSING),
    (S.WATCHING, In.ENDED): _Edge(S.WATCH_DUE, D.CLEAN_END, resume_watch=True),
    (S.WATCHING, In.DROPPED): _Edge(S.WATCH_DUE, D.BACKOFF, resume_watch=True),
    (S.WATCH_REJECTED, In.DATA): _Edge(S.WATCH_REJECTED),
    (S.WATCH_REJECTED, In.STALL): _Edge(S.WATCH_CLOSING),
    (S.WATCH_REJECTED, In.EXPIRED): _Edge(S.SYNC_DUE, D.RELIST_BACKOFF, R.WATCH_EXPIRED),
    (S.WATCH_REJECTED, In.BROKEN): _Edge(S.WATCH_DUE, D.BACKOFF, resume_watch=True),
    (S.WATCH_CLOSING, In.DATA): _Edge(S.WATCH_CLOSING),
    (S.WATCH_CLOSING, In.ENDED): _Edge(S.WATCH_DUE, D.BACKOFF, resume_watch=True),
    (S.WATCH_CLOSING, In.DROPPED): _Edge(S.WATCH_DUE, D.BACKOFF, resume_watch=True),
    (S.WATCH_EXPIRED, In.DATA): _Edge(S.WATCH_EXPIRED),
    (S.WATCH_EXPIRED, In.ENDED): _Edge(S.SYNC_DUE, D.RELIST_BACKOFF, R.WATCH_EXPIRED),
    (S.WATCH_EXPIRED, In.DROPPED): _Edge(S.SYNC_DUE, D.RELIST_BACKOFF, R.WATCH_EXPIRED),
}
del S, In, D, R
# The next states alone (the deprecated Reflector.TRANSITIONS).
_TRANSITIONS = {key: edge.target for key, edge in _EDGES.items()}
_TABLE = TransitionTable.from_targets(
    "Reflector",
    ReflectorState.SYNC_DUE,
    ReflectorInput,
    _TRANSITIONS,
    {key: edge.action for key, edge in _EDGES.items()},
)

_DUE = frozenset({ReflectorState.SYNC_DUE, ReflectorState.PAGE_DUE, ReflectorState.WATCH_DUE})
# A watch connection is open and the reflector still reads it.
_READING = frozenset(
    {
        ReflectorState.STREAM_CONNECTING,
        ReflectorState.STREAMING,
        ReflectorState.STREAM_REJECTED,
        ReflectorState.WATCH_CONNECTING,
        ReflectorState.WATCHING,
        ReflectorState.WATCH_REJECTED,
    }
)
# A watch connection is open and the reflector wants it closed.
_CLOSING = frozenset(
    {
        ReflectorState.STREAM_CLOSING,
        ReflectorState.STREAM_EXPIRED,
        ReflectorState.WATCH_CLOSING,
        ReflectorState.WATCH_EXPIRED,
    }
)
_REJECTED = frozenset({ReflectorState.STREAM_REJECTED, ReflectorState.WATCH_REJECTED})
_LIST_OUTCOMES = (
    ReflectorInput.PAGE_MORE,
    ReflectorInput.PAGE_LAST,
    ReflectorInput.LIST_EXPIRED,
    ReflectorInput.CONTINUE_EXPIRED,
    ReflectorInput.LIST_RETRY,
    ReflectorInput.PAGE_TOO_LARGE,
    ReflectorInput.LIST_FAILED,
)
_HEADS = (ReflectorInput.HEAD_OK, ReflectorInput.HEAD_ERROR)
_ENDS = (
    ReflectorInput.ENDED,
    ReflectorInput.DROPPED,
    ReflectorInput.EXPIRED,
    ReflectorInput.BROKEN,
    ReflectorInput.REFUSED,
)
