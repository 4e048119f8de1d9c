"""The start-up permission check against a scripted apiserver: batched and bounded, every
missing rule in one answer, and a review the server refuses or never answers reported
as the check failing (the Manager then starts unchecked, with one WARNING)."""

from __future__ import annotations

import logging
from typing import Any

import pytest
import trio

from kubemoon_core import ApiError
from kubemoon_core._rbac import Permission, PolicyRule
from kubemoon_core.errors import LocalProtocolError
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
