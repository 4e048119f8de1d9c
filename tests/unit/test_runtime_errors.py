"""The runtime's wait errors carry the last error, and say it."""

from kubemoon_core import KubeMoonError
from kubemoon_core._status import Status
from kubemoon_core.errors import CacheSyncTimeout, Forbidden, LeaderElectionTimeout, LeadershipLost


def test_a_sync_timeout_carries_and_names_its_cause() -> None:
    cause = Forbidden(Status(403, "Failure", "Forbidden", 'configmaps is forbidden: "nobody"'))
    error = CacheSyncTimeout("configmaps: not synced after 5 s", last_error=cause)
    assert error.last_error is cause
    assert str(error).startswith("configmaps: not synced after 5 s: ")
    assert "forbidden" in str(error)
    assert str(CacheSyncTimeout("configmaps: not synced")) == "configmaps: not synced"


def test_a_leader_election_timeout_carries_its_cause() -> None:
    cause = KubeMoonError("leases not found")
    error = LeaderElectionTimeout("not leading ns/lease after 2 s", last_error=cause)
    assert error.last_error is cause
    assert str(error) == "not leading ns/lease after 2 s: leases not found"
    assert LeaderElectionTimeout("not leading").last_error is None
    assert isinstance(LeadershipLost("lost"), KubeMoonError)
