"""The reflector's states, the inputs that move it, and its transition table, as data.

Rules: every move of a :class:`~kubemoon_core.lowlevel.Reflector` is one entry of
``_TRANSITIONS`` (``(state, input) -> next state``), published as ``_TABLE`` (a
:class:`~kubemoon_core.lowlevel.TransitionTable`, ``Reflector.transitions()``); a call the
current state has no entry for is the caller's mistake, refused by the machine in
:mod:`._reflector`. The
frozensets and tuples below group states and inputs the machine asks about together
(is a connection open, which inputs may a method report), so the table stays the single
source of which moves exist. Pure data: no I/O, no time.
"""

from __future__ import annotations

import enum

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
    LIST_RETRY = "list retryable failure"
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


S, In = ReflectorState, ReflectorInput
_TRANSITIONS: dict[tuple[ReflectorState, ReflectorInput], ReflectorState] = {
    (S.SYNC_DUE, In.START_LIST): S.LISTING,
    (S.SYNC_DUE, In.RESELECT): S.SYNC_DUE,
    (S.PAGE_DUE, In.RESELECT): S.SYNC_DUE,
    (S.WATCH_DUE, In.RESELECT): S.SYNC_DUE,
    (S.SYNC_DUE, In.START_STREAM): S.STREAM_CONNECTING,
    (S.PAGE_DUE, In.REQUEST_PAGE): S.LISTING,
    (S.LISTING, In.PAGE_MORE): S.PAGE_DUE,
    (S.LISTING, In.PAGE_LAST): S.WATCH_DUE,
    (S.LISTING, In.LIST_EXPIRED): S.SYNC_DUE,
    (S.LISTING, In.LIST_RETRY): S.PAGE_DUE,
    (S.LISTING, In.LIST_FAILED): S.SYNC_DUE,
    (S.STREAM_CONNECTING, In.HEAD_OK): S.STREAMING,
    (S.STREAM_CONNECTING, In.HEAD_ERROR): S.STREAM_REJECTED,
    (S.STREAM_CONNECTING, In.STALL): S.STREAM_CLOSING,
    (S.STREAM_CONNECTING, In.ENDED): S.SYNC_DUE,
    (S.STREAM_CONNECTING, In.DROPPED): S.SYNC_DUE,
    (S.STREAMING, In.DATA): S.STREAMING,
    (S.STREAMING, In.INITIAL_EVENTS_END): S.WATCHING,
    (S.STREAMING, In.EXPIRED): S.STREAM_EXPIRED,
    (S.STREAMING, In.BROKEN): S.STREAM_CLOSING,
    (S.STREAMING, In.STALL): S.STREAM_CLOSING,
    (S.STREAMING, In.ENDED): S.SYNC_DUE,
    (S.STREAMING, In.DROPPED): S.SYNC_DUE,
    (S.STREAM_REJECTED, In.DATA): S.STREAM_REJECTED,
    (S.STREAM_REJECTED, In.STALL): S.STREAM_CLOSING,
    (S.STREAM_REJECTED, In.EXPIRED): S.SYNC_DUE,
    (S.STREAM_REJECTED, In.REFUSED): S.SYNC_DUE,
    (S.STREAM_REJECTED, In.BROKEN): S.SYNC_DUE,
    (S.STREAM_CLOSING, In.DATA): S.STREAM_CLOSING,
    (S.STREAM_CLOSING, In.ENDED): S.SYNC_DUE,
    (S.STREAM_CLOSING, In.DROPPED): S.SYNC_DUE,
    (S.STREAM_EXPIRED, In.DATA): S.STREAM_EXPIRED,
    (S.STREAM_EXPIRED, In.ENDED): S.SYNC_DUE,
    (S.STREAM_EXPIRED, In.DROPPED): S.SYNC_DUE,
    (S.WATCH_DUE, In.START_WATCH): S.WATCH_CONNECTING,
    (S.WATCH_CONNECTING, In.HEAD_OK): S.WATCHING,
    (S.WATCH_CONNECTING, In.HEAD_ERROR): S.WATCH_REJECTED,
    (S.WATCH_CONNECTING, In.STALL): S.WATCH_CLOSING,
    (S.WATCH_CONNECTING, In.ENDED): S.WATCH_DUE,
    (S.WATCH_CONNECTING, In.DROPPED): S.WATCH_DUE,
    (S.WATCHING, In.DATA): S.WATCHING,
    (S.WATCHING, In.EXPIRED): S.WATCH_EXPIRED,
    (S.WATCHING, In.BROKEN): S.WATCH_CLOSING,
    (S.WATCHING, In.STALL): S.WATCH_CLOSING,
    (S.WATCHING, In.ENDED): S.WATCH_DUE,
    (S.WATCHING, In.DROPPED): S.WATCH_DUE,
    (S.WATCH_REJECTED, In.DATA): S.WATCH_REJECTED,
    (S.WATCH_REJECTED, In.STALL): S.WATCH_CLOSING,
    (S.WATCH_REJECTED, In.EXPIRED): S.SYNC_DUE,
    (S.WATCH_REJECTED, In.BROKEN): S.WATCH_DUE,
    (S.WATCH_CLOSING, In.DATA): S.WATCH_CLOSING,
    (S.WATCH_CLOSING, In.ENDED): S.WATCH_DUE,
    (S.WATCH_CLOSING, In.DROPPED): S.WATCH_DUE,
    (S.WATCH_EXPIRED, In.DATA): S.WATCH_EXPIRED,
    (S.WATCH_EXPIRED, In.ENDED): S.SYNC_DUE,
    (S.WATCH_EXPIRED, In.DROPPED): S.SYNC_DUE,
}
del S, In
_TABLE = TransitionTable.from_targets(
    "Reflector", ReflectorState.SYNC_DUE, ReflectorInput, _TRANSITIONS
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
_STREAM = frozenset(
    {
        ReflectorState.STREAM_CONNECTING,
        ReflectorState.STREAMING,
        ReflectorState.STREAM_REJECTED,
        ReflectorState.STREAM_CLOSING,
        ReflectorState.STREAM_EXPIRED,
    }
)
_LIST_OUTCOMES = (
    ReflectorInput.PAGE_MORE,
    ReflectorInput.PAGE_LAST,
    ReflectorInput.LIST_EXPIRED,
    ReflectorInput.LIST_RETRY,
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
