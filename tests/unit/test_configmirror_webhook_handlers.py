"""ConfigMirror's webhook handlers, as the server calls them (no apiserver needed here:
the access reviews are covered end to end in tests/e2e/test_configmirror_webhooks.py;
here an in-memory authorizer answers them, to count what is sent)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import pytest
import trio

from configmirror import (
    CONVERT_PATH,
    MUTATE_PATH,
    VALIDATE_PATH,
    ConfigMirrorWebhooks,
)
from configmirror._convert import SELECTOR_ANNOTATION
from configmirror._webhooks import mutate
from kubemoon_core import GroupVersionKind, GroupVersionResource
from kubemoon_core.errors import LocalProtocolError
from kubemoon_core.kubeconfig import ClientConfig
from kubemoon_core.objects import apply_json_patch
from kubemoon_core.webhooks import AdmissionRequest, Operation, UserInfo, WebhookKind
from kubemoon_trio import Client

# Nothing listens on port 1: every access review fails to connect at once.
UNREACHABLE = ClientConfig(server="https://127.0.0.1:1")


def request(
    obj: Any, operation: Operation = Operation.CREATE, old: Any = None, user: str = "alice"
) -> AdmissionRequest:
    return AdmissionRequest(
        uid="1",
        kind=GroupVersionKind("kubemoon.dev", "v1alpha1", "ConfigMirror"),
        resource=GroupVersionResource("kubemoon.dev", "v1alpha1", "configmirrors"),
        operation=operation,
        user_info=UserInfo(user),
        name="m",
        namespace="home",
        object=obj,
        old_object=old,
    )


def mutated(*args: Any, **kwargs: Any) -> AdmissionRequest:
    """:func:`request` with the mutating webhook's patch applied, as the apiserver sends
    it to the validating webhook."""
    raw = request(*args, **kwargs)
    if raw.object is None:
        return raw
    patch = [dict(op) for op in mutate(raw).patch]
    return dataclasses.replace(raw, object=apply_json_patch(raw.object, patch))


def mirror(*targets: str) -> dict[str, Any]:
    return {
        "apiVersion": "kubemoon.dev/v1alpha1",
        "kind": "ConfigMirror",
        "metadata": {"name": "m", "namespace": "home"},
        "spec": {"source": "settings", "targetNamespaces": list(targets)},
    }


def test_the_app_serves_three_webhooks() -> None:
    app = ConfigMirrorWebhooks(Client(UNREACHABLE)).app()
    assert {path: kind for path, (_, kind) in app.routes.items()} == {
        VALIDATE_PATH: WebhookKind.VALIDATING,
        MUTATE_PATH: WebhookKind.MUTATING,
        CONVERT_PATH: WebhookKind.CONVERSION,
    }


async def test_an_invalid_mirror_is_denied_before_any_access_review() -> None:
    async with Client(UNREACHABLE) as client:
        verdict = await ConfigMirrorWebhooks(client).validate(mutated(mirror("home")))
    assert not verdict.allowed
    assert verdict.code == 422
    assert "invalid ConfigMirror m: target namespace 'home'" in verdict.message


async def test_an_access_review_that_cannot_be_made_denies() -> None:
    async with Client(UNREACHABLE) as client:
        verdict = await ConfigMirrorWebhooks(client).validate(mutated(mirror("a", "b")))
    assert not verdict.allowed
    assert verdict.message.startswith(
        "cannot check whether the user may get ConfigMap home/settings"
    )
    assert "cannot check whether the user may create ConfigMaps in namespace 'a': " in (
        verdict.message
    )
    assert "cannot check whether the user may create ConfigMaps in namespace 'b': " in (
        verdict.message
    )


async def test_what_needs_no_review_is_allowed() -> None:
    async with Client(UNREACHABLE) as client:
        hooks = ConfigMirrorWebhooks(client)
        # Only metadata changed: nobody's access is in question, nothing is sent.
        same = await hooks.validate(mutated(mirror("a"), Operation.UPDATE, mirror("a")))
        assert same.allowed
        deleted = await hooks.validate(mutated(None, Operation.DELETE, mirror("a")))
        assert deleted.allowed


def test_mutate_patches_in_the_defaults() -> None:
    original = mirror("b", "a")
    verdict = mutate(request(original))
    assert verdict.allowed
    patched = apply_json_patch(original, [dict(op) for op in verdict.patch])
    assert patched["spec"]["targetNamespaces"] == ["a", "b"]
    assert patched["metadata"]["labels"] == {"kubemoon.dev/mirror-source": "settings"}
    assert mutate(request(None, Operation.DELETE)).patch == ()


class Authorizer:
    """Answers SubjectAccessReviews from a set of (user, verb, namespace) it allows, and
    records every review it was sent; ``gate`` holds answers back until set."""

    def __init__(self, allowed: set[tuple[str, str, str]]) -> None:
        self.allowed = allowed
        self.asked: list[tuple[str, str, str, str]] = []
        self.gate: trio.Event | None = None
        self.in_flight = self.most_in_flight = 0

    async def create(
        self, resource: GroupVersionResource, obj: Mapping[str, Any], /
    ) -> dict[str, Any]:
        assert resource.resource == "subjectaccessreviews"
        spec = obj["spec"]
        attrs = spec["resourceAttributes"]
        asked = (spec["user"], attrs["verb"], attrs["namespace"], attrs.get("name", ""))
        self.asked.append(asked)
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            if self.gate is not None:
                await self.gate.wait()
            await trio.sleep(0)
        finally:
            self.in_flight -= 1
        return {"status": {"allowed": asked[:3] in self.allowed}}


def hooks(authorizer: Authorizer, **options: Any) -> ConfigMirrorWebhooks:
    return ConfigMirrorWebhooks(Client(UNREACHABLE), review_client=authorizer, **options)


ALICE_READS = ("alice", "get", "home")


async def test_the_source_must_be_readable_by_the_author() -> None:
    authorizer = Authorizer({("alice", "create", "a")})
    verdict = await hooks(authorizer).validate(mutated(mirror("a")))
    assert not verdict.allowed
    assert verdict.message.startswith("user 'alice' may not get ConfigMap home/settings")
    assert ("alice", "get", "home", "settings") in authorizer.asked
    authorizer.allowed.add(ALICE_READS)
    assert (await hooks(authorizer).validate(mutated(mirror("a")))).allowed


async def test_a_v1alpha1_annotation_is_reviewed_as_the_selector_it_becomes() -> None:
    authorizer = Authorizer({ALICE_READS, ("alice", "create", "a")})
    plain = mirror("a")
    selecting = mirror("a")
    selecting["metadata"]["annotations"] = {SELECTOR_ANNOTATION: '{"matchLabels":{"t":"b"}}'}
    verdict = await hooks(authorizer).validate(mutated(selecting, Operation.UPDATE, plain))
    assert not verdict.allowed
    assert "may not create ConfigMaps in all namespaces" in verdict.message
    empty = mirror("a")
    empty["metadata"]["annotations"] = {SELECTOR_ANNOTATION: "{}"}
    refused = await hooks(authorizer).validate(mutated(empty, Operation.UPDATE, plain))
    assert refused.code == 422 and "must name at least one label" in refused.message


async def test_an_update_of_a_mirror_being_deleted_passes_whatever_its_spec() -> None:
    authorizer = Authorizer(set())
    stale = mirror("home")  # the webhook refuses this spec now
    stale["metadata"]["finalizers"] = ["kubemoon.dev/cleanup"]
    stale["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    done = {**stale, "metadata": {**stale["metadata"], "finalizers": []}}
    verdict = await hooks(authorizer).validate(mutated(done, Operation.UPDATE, stale))
    assert verdict.allowed
    assert authorizer.asked == []
    # The same update on a mirror not being deleted is judged on its spec.
    del stale["metadata"]["deletionTimestamp"]
    alive = {**stale, "metadata": {**stale["metadata"], "finalizers": []}}
    assert not (await hooks(authorizer).validate(mutated(alive, Operation.UPDATE, stale))).allowed


async def test_reviews_per_request_are_capped_with_a_clear_denial() -> None:
    targets = [f"t{i:02d}" for i in range(30)]
    authorizer = Authorizer({ALICE_READS, *(("alice", "create", t) for t in targets)})
    hook = hooks(authorizer, max_access_reviews=20)
    verdict = await hook.validate(mutated(mirror(*targets)))
    assert not verdict.allowed
    assert "needs 31 access reviews, more than the 20 one admission request may cause" in (
        verdict.message
    )
    # Only the source and the one review that could cover every target were sent.
    assert sorted(a[1:3] for a in authorizer.asked) == [("create", ""), ("get", "home")]
    # Within the cap: one review each (the source's answer is reused from the cache).
    authorizer.asked.clear()
    assert (await hook.validate(mutated(mirror(*targets[:19])))).allowed
    assert sorted(a[2] for a in authorizer.asked) == targets[:19]
    # Someone who may create ConfigMaps everywhere is not limited by the cap.
    admin = Authorizer({("admin", "get", "home"), ("admin", "create", "")})
    assert (
        await hooks(admin, max_access_reviews=20).validate(mutated(mirror(*targets), user="admin"))
    ).allowed
    assert len(admin.asked) == 2
    with pytest.raises(LocalProtocolError, match="at least 2"):
        hooks(admin, max_access_reviews=1)
    with pytest.raises(LocalProtocolError, match="review_connections must be at least 1"):
        hooks(admin, review_connections=0)


async def test_decisions_are_cached_and_identical_reviews_in_flight_sent_once() -> None:
    authorizer = Authorizer({ALICE_READS, ("alice", "create", "a")})
    hook = hooks(authorizer)
    authorizer.gate = trio.Event()
    verdicts = []

    async def validate() -> None:
        verdicts.append(await hook.validate(mutated(mirror("a"))))

    async with trio.open_nursery() as nursery:
        for _ in range(10):
            nursery.start_soon(validate)
        await trio.testing.wait_all_tasks_blocked()
        authorizer.gate.set()
    assert [v.allowed for v in verdicts] == [True] * 10
    assert len(authorizer.asked) == 2  # the source and the target, once for ten requests
    assert (await hook.validate(mutated(mirror("a")))).allowed
    assert len(authorizer.asked) == 2  # from the cache
    # Another user asks again.
    assert not (await hook.validate(mutated(mirror("a"), user="bob"))).allowed
    assert len(authorizer.asked) == 4
    assert hook.reviews_sent == 4


async def test_without_a_cache_every_request_asks() -> None:
    authorizer = Authorizer({ALICE_READS, ("alice", "create", "a")})
    hook = hooks(authorizer, decision_ttl=0)
    for _ in range(3):
        assert (await hook.validate(mutated(mirror("a")))).allowed
    assert len(authorizer.asked) == 6


async def test_reviews_go_out_on_a_pool_of_their_own() -> None:
    async with Client(UNREACHABLE) as client, ConfigMirrorWebhooks(client) as hook:
        assert isinstance(hook.review_client, Client)
        assert hook.review_client is not client
        assert hook.review_client.config is client.config


async def test_a_review_cancelled_in_flight_denies_whoever_waited_for_it() -> None:
    authorizer = Authorizer({ALICE_READS, ("alice", "create", "a")})
    authorizer.gate = trio.Event()  # never set: the first request's reviews hang
    hook = hooks(authorizer)
    verdicts = []
    scope = trio.CancelScope()

    async def first() -> None:
        with scope:
            await hook.validate(mutated(mirror("a")))

    async def second() -> None:
        verdicts.append(await hook.validate(mutated(mirror("a"))))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(first)
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(second)
        await trio.testing.wait_all_tasks_blocked()
        scope.cancel()
    # The first request was cancelled (its sender timed out); the second, which waited
    # on the same reviews, is denied rather than allowed by an answer never received.
    (verdict,) = verdicts
    assert not verdict.allowed
    assert "the access review was not answered" in verdict.message
    assert len(authorizer.asked) == 2


async def test_at_most_review_connections_reviews_are_in_flight() -> None:
    targets = [f"t{i}" for i in range(12)]
    authorizer = Authorizer({ALICE_READS, *(("alice", "create", t) for t in targets)})
    hook = hooks(authorizer, review_connections=3)
    assert (await hook.validate(mutated(mirror(*targets)))).allowed
    assert len(authorizer.asked) == 13
    assert authorizer.most_in_flight == 3
