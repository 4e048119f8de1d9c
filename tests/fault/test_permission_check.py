"""The start-up permission check against a scripted apiserver: batched and bounded, every
missing rule in one answer, and a review the server refuses or never answers reported
as the check failing: a 403 or 404 starts the Manager unchecked (one WARNING), anything
else is retried until the deadline and then refuses to work (PermissionCheckFailed)."""

from __future__ import annotations

import logging
from typing import Any

import pytest
import trio

from kubemoon_core import ApiError
from kubemoon_core._rbac import Permission, PolicyRule
from kubemoon_core.errors import LocalProtocolError, PermissionCheckFailed
from kubemoon_io import TransportTimeout
from kubemoon_testing import RecordedRequest, Reply, ScriptedServer
from kubemoon_trio import Client
from kubemoon_trio import _permissions as permissions
from kubemoon_trio._permissions import missing_permissions

SSAR_PATH = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
RULES = [
    PolicyRule("", "configmaps", frozenset({"get", "list", "watch", "create", "delete"})),
    PolicyRule("coordination.k8s.io", "leases", frozenset({"get", "update"}), "ops"),
]


def answer(denied: set[str]) -> Any:
    def handler(request: RecordedRequest) -> Reply:
        assert (request.method, request.path) == ("POST", SSAR_PATH)
        review = request.json()
        verb = review["spec"]["resourceAttributes"]["verb"]
        return Reply.json({**review, "status": {"allowed": verb not in denied}}, 201)

    return handler


async def test_every_missing_permission_at_once_on_at_most_four_connections() -> None:
    async with ScriptedServer(answer({"delete", "update"})) as server:
        async with Client(server.client_config()) as client:
            missing = await missing_permissions(client, RULES)
        assert missing == [
            Permission("delete", "", "configmaps"),
            Permission("update", "coordination.k8s.io", "leases", "ops"),
        ]
        assert len(server.requests) == 7  # one review per verb
        assert server.connections_opened <= 4  # batches of four reviews in flight


async def test_a_refused_review_fails_the_check_and_the_manager_starts_unchecked(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    def forbidden(request: RecordedRequest) -> Reply:
        return Reply.status_error(403, "Forbidden", "selfsubjectaccessreviews is forbidden")

    async with ScriptedServer(forbidden) as server, Client(server.client_config()) as client:
        with pytest.raises(ApiError):
            await missing_permissions(client, RULES)
        # The first batch's failure is the last batch: no more reviews are asked.
        assert len(server.requests) == 4

        class Declaring:  # what start_up_check reads of a Manager
            def __init__(self) -> None:
                self.client = client

        manager: Any = Declaring()
        monkeypatch.setattr(permissions, "derived_rules", lambda _manager: RULES)
        with caplog.at_level(logging.WARNING):
            assert await permissions.start_up_check(manager) is None
    (warning,) = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert warning.levelname == "WARNING"
    assert "could not check RBAC permissions at start" in warning.getMessage()
    assert "--no-permission-check" in warning.getMessage()


async def test_an_unanswered_check_ends_at_its_deadline() -> None:
    def slow(request: RecordedRequest) -> Reply:
        body = b'{"status": {"allowed": true}}'
        return Reply(201, body, (("Content-Type", "application/json"),), delay=30)

    async with ScriptedServer(slow) as server, Client(server.client_config()) as client:
        with trio.fail_after(20), pytest.raises(TransportTimeout):
            await missing_permissions(client, RULES, timeout=0.5)


async def test_more_than_the_limit_is_refused_before_any_request() -> None:
    async with ScriptedServer(answer(set())) as server:
        async with Client(server.client_config()) as client:
            with pytest.raises(LocalProtocolError, match="more than limit=3"):
                await missing_permissions(client, RULES, limit=3)
        assert server.requests == []


class _Declaring:  # what start_up_check reads of a Manager
    def __init__(self, client: Client) -> None:
        self.client = client


async def test_reviews_answered_with_5xx_are_retried_then_fail_closed(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    def unavailable(request: RecordedRequest) -> Reply:
        return Reply.status_error(503, "ServiceUnavailable", "the authorizer is restarting")

    monkeypatch.setattr(permissions, "derived_rules", lambda _manager: RULES)
    async with ScriptedServer(unavailable) as server, Client(server.client_config()) as client:
        with caplog.at_level(logging.WARNING), trio.fail_after(20):
            outcome = await permissions.start_up_check(_Declaring(client), timeout=2.0)  # type: ignore[arg-type]
        # Asked again with backoff (0.5 s, 1 s) within the deadline, not once and not forever.
        assert 2 * 4 <= len(server.requests) <= 4 * 4
    assert isinstance(outcome, PermissionCheckFailed)
    assert "not answered within 2 s" in str(outcome)
    assert isinstance(outcome.last_error, ApiError) and outcome.last_error.code == 503
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "not starting controllers" in errors[0].getMessage()


async def test_a_review_answered_after_a_5xx_passes_the_check(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    allowed = answer(set())
    failures = iter([True] * 4)

    def flaky(request: RecordedRequest) -> Reply:
        if next(failures, False):
            return Reply.status_error(500, "InternalError", "etcd leader changed")
        return allowed(request)

    monkeypatch.setattr(permissions, "derived_rules", lambda _manager: RULES)
    async with ScriptedServer(flaky) as server, Client(server.client_config()) as client:
        with trio.fail_after(20):
            assert await permissions.start_up_check(_Declaring(client), timeout=10.0) is None  # type: ignore[arg-type]


async def test_an_unanswered_check_is_made_again_until_it_passes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    allowed = answer(set())
    state = {"stalled": True}

    def stalling(request: RecordedRequest) -> Reply:
        if state["stalled"]:
            return Reply(201, b"{}", (("Content-Type", "application/json"),), delay=30)
        return allowed(request)

    monkeypatch.setattr(permissions, "derived_rules", lambda _manager: RULES)
    monkeypatch.setattr(permissions, "RECHECK_INTERVAL", 0.2)
    gate = permissions.PermissionGate()
    async with (
        ScriptedServer(stalling) as server,
        Client(server.client_config()) as client,
        trio.open_nursery() as nursery,
    ):

        async def check() -> None:
            manager: Any = _Declaring(client)
            assert await permissions.check_until_answered(manager, gate, timeout=0.5)

        nursery.start_soon(check)
        with trio.fail_after(20):
            await gate.known.wait()
        # Unanswered: refused loudly, and the replica may not work.
        assert isinstance(gate.error, PermissionCheckFailed)
        assert isinstance(gate.error.last_error, TransportTimeout)
        assert gate.problem is not None and "not answered within 0.5 s" in gate.problem
        assert not gate.permitted.is_set()
        with pytest.raises(PermissionCheckFailed):
            gate.raise_if_refused()
        state["stalled"] = False
        with trio.fail_after(20):
            await gate.permitted.wait()
    assert gate.error is None and gate.problem is None


async def test_a_big_manager_is_checked_with_one_cluster_wide_review_per_verb(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """300 namespaces (once past the old bound of 256 reviews, refused): an identity with
    the rights cluster-wide passes with one review; denied cluster-wide, every namespace
    is asked and the one missing is named with its namespace."""
    many = [PolicyRule("", "configmaps", frozenset({"get"}), f"ns-{i}") for i in range(300)]
    monkeypatch.setattr(permissions, "derived_rules", lambda _manager: many)
    gate = permissions.PermissionGate()
    async with ScriptedServer(answer(set())) as server, Client(server.client_config()) as client:
        manager: Any = _Declaring(client)
        with trio.fail_after(20):
            assert await permissions.check_until_answered(manager, gate, timeout=5.0)
        assert len(server.requests) == 1
        assert "namespace" not in server.requests[0].json()["spec"]["resourceAttributes"]
    assert gate.error is None

    def namespaced_only(request: RecordedRequest) -> Reply:
        review = request.json()
        where = review["spec"]["resourceAttributes"].get("namespace")
        return Reply.json({**review, "status": {"allowed": where not in (None, "ns-7")}}, 201)

    async with ScriptedServer(namespaced_only) as server, Client(server.client_config()) as c:
        missing = await missing_permissions(c, many, concurrency=16)
        assert missing == [Permission("get", "", "configmaps", "ns-7")]
        assert len(server.requests) == 301
