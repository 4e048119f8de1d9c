"""Who a ConfigMirror acts for: recorded at admission, checked, re-reviewed by the operator."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

from configmirror import MANAGED_BY_LABEL, MANAGED_BY_VALUE, OWNER_UID_ANNOTATION
from configmirror._admission import (
    AUTHOR_ANNOTATION,
    MAX_AUTHOR_LENGTH,
    author_value,
    expected_author,
    parse_author,
)
from configmirror._authority import author_refusals, copy_deletes, copy_writes
from configmirror._memory import MadeCopies
from configmirror._plan import FINALIZER, plan_reconcile
from configmirror._webhooks import AccessReviews, ConfigMirrorWebhooks, mutate
from kubemoon_core import GroupVersionKind, GroupVersionResource
from kubemoon_core.kubeconfig import ClientConfig
from kubemoon_core.objects import apply_json_patch
from kubemoon_core.webhooks import AdmissionRequest, Operation, UserInfo
from kubemoon_trio import Client

ALICE = UserInfo("alice", "u-1", ("devs", "system:authenticated"), {"scopes": ("a",)})
BOB = UserInfo("bob", "u-2", ("system:authenticated",))


def mirror(*targets: str, author: str | None = None, **meta: Any) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "m", "namespace": "home", "uid": "m-uid", **meta}
    if author is not None:
        metadata["annotations"] = {AUTHOR_ANNOTATION: author}
    return {
        "apiVersion": "kubemoon.dev/v1beta1",
        "kind": "ConfigMirror",
        "metadata": metadata,
        "spec": {"source": "settings", "targets": {"namespaces": list(targets)}},
    }


def request(
    obj: Any, old: Any = None, user: UserInfo = ALICE, operation: Operation | None = None
) -> AdmissionRequest:
    return AdmissionRequest(
        uid="1",
        kind=GroupVersionKind("kubemoon.dev", "v1beta1", "ConfigMirror"),
        resource=GroupVersionResource("kubemoon.dev", "v1beta1", "configmirrors"),
        operation=operation or (Operation.UPDATE if old is not None else Operation.CREATE),
        user_info=user,
        name="m",
        namespace="home",
        object=obj,
        old_object=old,
    )


def test_the_author_value_round_trips_and_is_canonical() -> None:
    value = author_value(ALICE)
    assert parse_author(value) == ALICE
    assert author_value(dataclasses.replace(ALICE)) == value
    assert json.loads(value)["groups"] == ["devs", "system:authenticated"]


def test_an_unreadable_author_is_none() -> None:
    good = json.loads(author_value(ALICE))
    for bad in (
        None,
        7,
        "not json",
        "[]",
        json.dumps({**good, "more": 1}),
        json.dumps({**good, "username": ""}),
        json.dumps({**good, "groups": "devs"}),
        json.dumps({**good, "extra": {"scopes": "a"}}),
        json.dumps({**good, "uid": " " * MAX_AUTHOR_LENGTH}),
    ):
        assert parse_author(bad) is None, bad


def test_the_requesting_user_is_recorded_on_create_and_on_a_widening_update() -> None:
    assert expected_author(request(mirror("a"))) == author_value(ALICE)
    stored = mirror("a", author=author_value(ALICE))
    # Bob adds a target: Bob is reviewed, so Bob is recorded.
    assert expected_author(request(mirror("a", "b"), stored, BOB)) == author_value(BOB)
    # Bob removes one, or the operator adds its finalizer: Alice stays.
    assert expected_author(request(mirror(), stored, BOB)) == author_value(ALICE)
    finalized = mirror("a", finalizers=[FINALIZER])
    assert expected_author(request(finalized, stored, BOB)) == author_value(ALICE)
    # A mirror recorded without an author keeps none until its reach widens.
    assert expected_author(request(mirror("a"), mirror("a"), BOB)) is None


def test_the_mutating_webhook_sets_the_author_over_a_forged_one() -> None:
    forged = mirror("a", author=author_value(BOB))
    verdict = mutate(request(forged))
    patched = apply_json_patch(forged, [dict(op) for op in verdict.patch])
    assert patched["metadata"]["annotations"][AUTHOR_ANNOTATION] == author_value(ALICE)
    # Not widened and none stored: a forged one is removed.
    verdict = mutate(request(forged, mirror("a"), BOB))
    patched = apply_json_patch(forged, [dict(op) for op in verdict.patch])
    assert AUTHOR_ANNOTATION not in (patched["metadata"].get("annotations") or {})


class Allow:
    """An authorizer allowing what ``allowed`` lists as (user, verb, namespace)."""

    def __init__(self, allowed: set[tuple[str, str, str]]) -> None:
        self.allowed = allowed
        self.asked: list[tuple[str, str, str]] = []

    async def create(
        self, resource: GroupVersionResource, obj: Mapping[str, Any]
    ) -> dict[str, Any]:
        spec = obj["spec"]
        attributes = spec["resourceAttributes"]
        asked = (spec["user"], attributes["verb"], attributes["namespace"])
        self.asked.append(asked)
        return {"status": {"allowed": asked in self.allowed}}


async def test_a_forged_author_is_refused_by_the_validating_webhook() -> None:
    hooks = ConfigMirrorWebhooks(
        Client(ClientConfig(server="https://127.0.0.1:1")),
        review_client=Allow({("alice", "get", "home"), ("alice", "create", "a")}),
    )
    forged = await hooks.validate(request(mirror("a", author=author_value(BOB))))
    assert not forged.allowed
    assert AUTHOR_ANNOTATION in forged.message
    assert (await hooks.validate(request(mirror("a", author=author_value(ALICE))))).allowed
    stored = mirror("a", author=author_value(ALICE))
    changed = await hooks.validate(request(mirror("a", author=author_value(BOB)), stored, BOB))
    assert not changed.allowed


async def test_the_operator_refuses_the_writes_its_author_may_no_longer_make() -> None:
    author = author_value(ALICE)
    authorizer = Allow({("alice", "get", "home"), ("alice", "create", "a")})
    reviews = AccessReviews(authorizer, cache_allowed=False)
    stored = mirror("a", "b", author=author)
    writes = {"a": "create", "b": "create"}
    refusals = await author_refusals(reviews, stored, writes)
    assert list(refusals) == ["b"]
    assert "may not create ConfigMaps in namespace 'b'" in refusals["b"]
    # An update needs update: never granted, so refused.
    assert list(await author_refusals(reviews, stored, {"a": "update"})) == ["a"]
    # An allowance is not reused by a later reconcile: the right is asked again.
    asked = len(authorizer.asked)
    authorizer.allowed.discard(("alice", "create", "a"))
    assert list(await author_refusals(reviews, stored, {"a": "create"})) == ["a"]
    assert len(authorizer.asked) > asked
    # The source unreadable: every write refused.
    authorizer.allowed.discard(("alice", "get", "home"))
    assert (
        "may not get ConfigMap home/settings"
        in (await author_refusals(AccessReviews(authorizer), stored, {"a": "create"}))["a"]
    )
    # Unreadable author: nothing written, nothing asked.
    asked = len(authorizer.asked)
    bad = await author_refusals(reviews, mirror("a", author="{"), {"a": "create"})
    assert "cannot be read" in bad["a"] and len(authorizer.asked) == asked
    # No writes: no review.
    assert await author_refusals(reviews, stored, {}) == {}
    assert len(authorizer.asked) == asked


def test_refused_targets_get_no_write_and_a_not_ready_status() -> None:
    live = mirror("a", "b", finalizers=[FINALIZER])
    source = {"metadata": {"name": "settings", "namespace": "home"}, "data": {"k": "v"}}
    args: Any = (live, source, {}, [], "2026-01-01T00:00:00Z")
    plan = plan_reconcile(*args, allowed_namespaces={"a", "b"})
    assert copy_writes(plan) == {"a": "create", "b": "create"}
    plan = plan_reconcile(*args, allowed_namespaces={"a", "b"}, unauthorized={"b": "no right"})
    assert copy_writes(plan) == {"a": "create"}
    status = json.loads(plan.mirror[0].body)
    ready = status["status"]["conditions"][0]
    assert (ready["status"], ready["reason"]) == ("False", "AuthorNotAllowed")
    assert {"namespace": "b", "state": "NotAllowed", "message": "no right"} in status["status"][
        "targets"
    ]


def test_copy_writes_ignore_deletes_and_other_paths() -> None:
    recorded = {"targets": [{"namespace": "x", "state": "Synced", "uid": "copy-in-x"}]}
    plan = plan_reconcile(
        {**mirror("a", finalizers=[FINALIZER]), "status": recorded},
        None,
        {},
        [
            {
                "metadata": {
                    "name": "settings",
                    "namespace": "x",
                    "uid": "copy-in-x",  # recorded by the status: the operator's own copy
                    "labels": {MANAGED_BY_LABEL: MANAGED_BY_VALUE},
                    "annotations": {OWNER_UID_ANNOTATION: "m-uid"},
                }
            }
        ],
        "2026-01-01T00:00:00Z",
        allowed_namespaces={"a"},
    )
    assert [r.method for r in plan.copies] == ["DELETE"]
    assert copy_writes(plan) == {}
    # The deletes are listed apart, with the UID each is conditional on.
    assert copy_deletes(plan) == {"x": "copy-in-x"}


async def test_a_delete_is_reviewed_for_the_delete_right_only() -> None:
    """A copy the operator did not create is deleted only where the author may delete:
    the review asks ``delete`` there and not ``get`` on the source (a delete copies
    nothing)."""
    authorizer = Allow({("alice", "delete", "a")})
    reviews = AccessReviews(authorizer, cache_allowed=False)
    stored = mirror("a", "b", author=author_value(ALICE))
    verbs = {"a": "delete", "b": "delete"}
    refusals = await author_refusals(reviews, stored, verbs, read_source=False)
    assert list(refusals) == ["b"]
    assert "may not delete ConfigMaps in namespace 'b'" in refusals["b"]
    assert "did not create" in refusals["b"]
    assert all(verb == "delete" for _, verb, _ in authorizer.asked)


def test_made_copies_are_bounded_and_forget_the_oldest() -> None:
    made = MadeCopies(max_entries=2)
    for uid in ("u1", "u2", "u1", "u3"):
        made.add(uid)
    assert len(made) == 2 and "u1" in made and "u3" in made and "u2" not in made
