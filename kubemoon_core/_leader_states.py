"""The leader elector's states, the inputs that move it, and its transition table, as data.

Rules: every move of a :class:`~kubemoon_core.lowlevel.LeaderElector` is one entry of
``_TRANSITIONS`` (``(state, input) -> (next state, when the next request is due)``),
published as ``_TABLE`` (``LeaderElector.transitions()``, the wait as each edge's action).
``_REQUESTS`` says what each state asks for, ``_STOP_REASONS`` why a leadership ends. Pure
data: no I/O, no time.
"""

from __future__ import annotations

import enum

from ._transitions import TransitionTable

__all__ = ["LeaderInput", "LeaderState"]


class LeaderState(enum.Enum):
    """Where a :class:`LeaderElector` stands, and what it will ask for next."""

    FOLLOWING = "following"  # next: GET the lease at the jittered retry time
    CREATING = "creating"  # next: CREATE the lease, which does not exist
    ACQUIRING = "acquiring"  # next: UPDATE taking the lease
    LEADING = "leading"  # leader; next: the renewing UPDATE every retry_period
    CONFIRMING = "confirming"  # leader whose renew conflicted; next: GET to see why
    DEPOSED = "deposed"  # stopped leading with a request in flight; its answer only informs
    RELEASE_PENDING = "release_pending"  # release asked while a request is in flight
    RELEASE_CHECKING = "release_checking"  # next: GET to see whether the lease is still ours
    RELEASING = "releasing"  # next: the UPDATE that clears the holder
    STOPPED = "stopped"  # released or shut down: nothing more to do
    DUPLICATE = "duplicate"  # another live process has this identity: nothing more to do


_LEADING_STATES = frozenset({LeaderState.LEADING, LeaderState.CONFIRMING})


class LeaderInput(enum.Enum):
    """What moves a :class:`~kubemoon_core.lowlevel.LeaderElector`: the labels of its
    transition table's edges."""

    ABSENT = "the lease does not exist"
    MINE = "the lease names this candidate"
    FREE = "the lease has no holder or it expired"
    HELD = "another candidate holds the lease"
    WRITTEN = "a write succeeded"
    CONFLICT = "a write lost a race"
    FAILED = "a request failed"
    EXPIRED = "the renew deadline passed"
    EXPIRED_BUSY = "the renew deadline passed with a request in flight"
    RELEASE = "release was asked"
    RELEASE_BUSY = "release was asked with a request in flight"
    DUPLICATE = "another process writes the lease under this identity"


class _Wait(enum.Enum):
    NOW = "now"  # the next request is due at once
    RETRY = "retry"  # after retry_period
    JITTER = "jitter"  # after retry_period, jittered


class _Op(enum.Enum):
    GET = "GET"
    CREATE = "CREATE"
    UPDATE = "UPDATE"


_S, _I, _W = LeaderState, LeaderInput, _Wait

# The whole machine: (state, input) -> (next state, when the next request is due).
_TRANSITIONS: dict[tuple[LeaderState, LeaderInput], tuple[LeaderState, _Wait]] = {
    (_S.FOLLOWING, _I.ABSENT): (_S.CREATING, _W.NOW),
    (_S.FOLLOWING, _I.MINE): (_S.ACQUIRING, _W.NOW),
    (_S.FOLLOWING, _I.FREE): (_S.ACQUIRING, _W.NOW),
    (_S.FOLLOWING, _I.HELD): (_S.FOLLOWING, _W.JITTER),
    (_S.FOLLOWING, _I.FAILED): (_S.FOLLOWING, _W.JITTER),
    (_S.FOLLOWING, _I.RELEASE): (_S.STOPPED, _W.NOW),
    (_S.FOLLOWING, _I.RELEASE_BUSY): (_S.RELEASE_PENDING, _W.NOW),
    (_S.CREATING, _I.WRITTEN): (_S.LEADING, _W.RETRY),
    (_S.CREATING, _I.CONFLICT): (_S.FOLLOWING, _W.JITTER),
    (_S.CREATING, _I.FAILED): (_S.FOLLOWING, _W.JITTER),
    (_S.CREATING, _I.RELEASE): (_S.STOPPED, _W.NOW),
    (_S.CREATING, _I.RELEASE_BUSY): (_S.RELEASE_PENDING, _W.NOW),
    (_S.ACQUIRING, _I.WRITTEN): (_S.LEADING, _W.RETRY),
    (_S.ACQUIRING, _I.CONFLICT): (_S.FOLLOWING, _W.JITTER),
    (_S.ACQUIRING, _I.FAILED): (_S.FOLLOWING, _W.JITTER),
    (_S.ACQUIRING, _I.RELEASE): (_S.STOPPED, _W.NOW),
    (_S.ACQUIRING, _I.RELEASE_BUSY): (_S.RELEASE_PENDING, _W.NOW),
    (_S.LEADING, _I.WRITTEN): (_S.LEADING, _W.RETRY),
    (_S.LEADING, _I.CONFLICT): (_S.CONFIRMING, _W.NOW),
    (_S.LEADING, _I.FAILED): (_S.LEADING, _W.RETRY),
    (_S.LEADING, _I.EXPIRED): (_S.FOLLOWING, _W.JITTER),
    (_S.LEADING, _I.EXPIRED_BUSY): (_S.DEPOSED, _W.NOW),
    (_S.LEADING, _I.RELEASE): (_S.RELEASING, _W.NOW),
    (_S.LEADING, _I.RELEASE_BUSY): (_S.RELEASE_PENDING, _W.NOW),
    (_S.CONFIRMING, _I.MINE): (_S.LEADING, _W.NOW),
    (_S.CONFIRMING, _I.ABSENT): (_S.CREATING, _W.NOW),
    (_S.CONFIRMING, _I.FREE): (_S.ACQUIRING, _W.NOW),
    (_S.CONFIRMING, _I.HELD): (_S.FOLLOWING, _W.JITTER),
    (_S.CONFIRMING, _I.FAILED): (_S.CONFIRMING, _W.RETRY),
    (_S.CONFIRMING, _I.EXPIRED): (_S.FOLLOWING, _W.JITTER),
    (_S.CONFIRMING, _I.EXPIRED_BUSY): (_S.DEPOSED, _W.NOW),
    (_S.CONFIRMING, _I.RELEASE): (_S.RELEASING, _W.NOW),
    (_S.CONFIRMING, _I.RELEASE_BUSY): (_S.RELEASE_PENDING, _W.NOW),
    (_S.DEPOSED, _I.ABSENT): (_S.FOLLOWING, _W.JITTER),
    (_S.DEPOSED, _I.MINE): (_S.FOLLOWING, _W.JITTER),
    (_S.DEPOSED, _I.FREE): (_S.FOLLOWING, _W.JITTER),
    (_S.DEPOSED, _I.HELD): (_S.FOLLOWING, _W.JITTER),
    (_S.DEPOSED, _I.WRITTEN): (_S.FOLLOWING, _W.JITTER),
    (_S.DEPOSED, _I.CONFLICT): (_S.FOLLOWING, _W.JITTER),
    (_S.DEPOSED, _I.FAILED): (_S.FOLLOWING, _W.JITTER),
    (_S.DEPOSED, _I.RELEASE_BUSY): (_S.RELEASE_PENDING, _W.NOW),
    (_S.RELEASE_PENDING, _I.MINE): (_S.RELEASING, _W.NOW),
    (_S.RELEASE_PENDING, _I.WRITTEN): (_S.RELEASING, _W.NOW),
    (_S.RELEASE_PENDING, _I.ABSENT): (_S.STOPPED, _W.NOW),
    (_S.RELEASE_PENDING, _I.FREE): (_S.STOPPED, _W.NOW),
    (_S.RELEASE_PENDING, _I.HELD): (_S.STOPPED, _W.NOW),
    (_S.RELEASE_PENDING, _I.CONFLICT): (_S.RELEASE_CHECKING, _W.NOW),
    (_S.RELEASE_PENDING, _I.FAILED): (_S.RELEASE_CHECKING, _W.NOW),
    (_S.RELEASE_PENDING, _I.RELEASE_BUSY): (_S.RELEASE_PENDING, _W.NOW),
    (_S.RELEASE_CHECKING, _I.MINE): (_S.RELEASING, _W.NOW),
    (_S.RELEASE_CHECKING, _I.ABSENT): (_S.STOPPED, _W.NOW),
    (_S.RELEASE_CHECKING, _I.FREE): (_S.STOPPED, _W.NOW),
    (_S.RELEASE_CHECKING, _I.HELD): (_S.STOPPED, _W.NOW),
    # The GET failed too: write the release blind; the resourceVersion guards it.
    (_S.RELEASE_CHECKING, _I.FAILED): (_S.RELEASING, _W.NOW),
    (_S.RELEASE_CHECKING, _I.RELEASE): (_S.RELEASE_CHECKING, _W.NOW),
    (_S.RELEASE_CHECKING, _I.RELEASE_BUSY): (_S.RELEASE_CHECKING, _W.NOW),
    (_S.RELEASING, _I.WRITTEN): (_S.STOPPED, _W.NOW),
    (_S.RELEASING, _I.CONFLICT): (_S.STOPPED, _W.NOW),
    (_S.RELEASING, _I.FAILED): (_S.STOPPED, _W.NOW),
    (_S.RELEASING, _I.RELEASE): (_S.RELEASING, _W.NOW),
    (_S.RELEASING, _I.RELEASE_BUSY): (_S.RELEASING, _W.NOW),
    (_S.STOPPED, _I.RELEASE): (_S.STOPPED, _W.NOW),
    # Two live processes with one identity: stop for good (the other one may go on).
    (_S.FOLLOWING, _I.DUPLICATE): (_S.DUPLICATE, _W.NOW),
    (_S.CONFIRMING, _I.DUPLICATE): (_S.DUPLICATE, _W.NOW),
    (_S.DEPOSED, _I.DUPLICATE): (_S.DUPLICATE, _W.NOW),
    (_S.RELEASE_PENDING, _I.DUPLICATE): (_S.DUPLICATE, _W.NOW),
    (_S.RELEASE_CHECKING, _I.DUPLICATE): (_S.DUPLICATE, _W.NOW),
    (_S.DUPLICATE, _I.RELEASE): (_S.DUPLICATE, _W.NOW),
}

# What each state asks for when nothing is in flight and its time has come.
_REQUESTS: dict[LeaderState, _Op] = {
    _S.FOLLOWING: _Op.GET,
    _S.CREATING: _Op.CREATE,
    _S.ACQUIRING: _Op.UPDATE,
    _S.LEADING: _Op.UPDATE,
    _S.CONFIRMING: _Op.GET,
    _S.RELEASE_CHECKING: _Op.GET,
    _S.RELEASING: _Op.UPDATE,
}

# Why a leader stops, by the input that ends its leadership.
_STOP_REASONS: dict[LeaderInput, str] = {
    _I.ABSENT: "lease deleted",
    _I.FREE: "lease lost",
    _I.HELD: "lease held by another candidate",
    _I.EXPIRED: "renew deadline passed",
    _I.EXPIRED_BUSY: "renew deadline passed",
    _I.RELEASE: "released",
    _I.RELEASE_BUSY: "released",
    _I.DUPLICATE: "another process holds the lease under this identity",
}

_WAIT_ACTIONS = {
    _Wait.NOW: "request now",
    _Wait.RETRY: "request after retry_period",
    _Wait.JITTER: "request after a jittered retry_period",
}
# The one guard: a release is written only over a record seen naming this candidate.
_GUARD = "; STOPPED instead if the lease was never seen naming this candidate"
_TABLE = TransitionTable.from_targets(
    "LeaderElector",
    LeaderState.FOLLOWING,
    LeaderInput,
    {key: target for key, (target, _) in _TRANSITIONS.items()},
    {
        key: _WAIT_ACTIONS[wait] + (_GUARD if target is LeaderState.RELEASING else "")
        for key, (target, wait) in _TRANSITIONS.items()
    },
)
