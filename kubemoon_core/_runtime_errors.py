"""Errors of the runtime: waits that timed out, and a lease that was lost.

Rules: a wait that gives up carries what went wrong last (``last_error``), so the cause of a
missing RBAC rule or CRD is in the exception itself, not only in a log.
"""

from __future__ import annotations

from ._errors import KubeMoonError

__all__ = [
    "CacheSyncTimeout",
    "LeaderElectionTimeout",
    "LeadershipLost",
    "MissingPermissions",
    "PermissionCheckFailed",
]


class CacheSyncTimeout(KubeMoonError):
    """A cache did not complete its first list in time; ``last_error`` says why, if known."""

    def __init__(self, message: str, *, last_error: BaseException | None = None) -> None:
        detail = f": {last_error}" if last_error is not None else ""
        super().__init__(f"{message}{detail}")
        self.last_error = last_error


class LeaderElectionTimeout(KubeMoonError):
    """This candidate did not become the leader in time; ``last_error`` says why, if known."""

    def __init__(self, message: str, *, last_error: BaseException | None = None) -> None:
        detail = f": {last_error}" if last_error is not None else ""
        super().__init__(f"{message}{detail}")
        self.last_error = last_error


class LeadershipLost(KubeMoonError):
    """This process stopped leading; it stops its controllers and exits, to restart as a
    follower (as controller-runtime's managers do)."""


class MissingPermissions(KubeMoonError):
    """The start-up permission check found RBAC rules missing: the replica does not lead or
    reconcile. The message names every missing rule (verb, resource, namespace)."""


class PermissionCheckFailed(KubeMoonError):
    """The start-up permission check could not be made: the reviews went unanswered (timed
    out, 5xx, 429, a broken connection) until the check's deadline, or there were more of
    them than the check asks. The replica does not lead or reconcile, as with
    :class:`MissingPermissions`; ``last_error`` is the last failure, if any."""

    def __init__(self, message: str, *, last_error: BaseException | None = None) -> None:
        detail = f": {last_error}" if last_error is not None else ""
        super().__init__(f"{message}{detail}")
        self.last_error = last_error
