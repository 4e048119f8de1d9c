"""Webhooks declared for a kind: handlers get typed objects (``request.object: ConfigMap``),
sync or async; an object that is no such kind is denied with 400 before the handler runs;
the dict form keeps handing out mappings."""

from __future__ import annotations

import base64
import dataclasses
import json
from typing import Any

import pytest
from test_admission import CONFIGMAP, review
from test_webhook_async_handlers import run

from kubemoon_core.builtin import CONFIGMAPS, ConfigMap
from kubemoon_core.errors import LocalProtocolError
from kubemoon_core.objects import apply_json_patch
from kubemoon_core.webhooks import (
    AdmissionRequest,
    AdmissionResponse,
    PendingAdmission,
    WebhookDeclarations,
)

JSON_HEADERS = [("Content-Type", "application/json")]
seen: list[Any] = []


def declarations() -> WebhookDeclarations:
    hooks = WebhookDeclarations("typed")

    @hooks.validating("/typed", ConfigMap)
    def typed(request: AdmissionRequest[ConfigMap]) -> AdmissionResponse:
        seen.append(request)
        assert request.object is not None
        if not request.object.data:
            return AdmissionResponse.deny("data must not be empty")
        return AdmissionResponse.allow()

    @hooks.mutating("/label", ConfigMap)
    async def label(request: AdmissionRequest[ConfigMap]) -> AdmissionResponse:
        assert request.object is not None
        metadata = request.object.metadata
        labels = {**(metadata.labels or {}), "typed": "yes"}
        mutated = dataclasses.replace(
            request.object, metadata=dataclasses.replace(metadata, labels=labels)
        )
        return AdmissionResponse.patched(request.object, mutated)

    @hooks.validating("/dynamic", CONFIGMAPS)
    def dynamic(request: AdmissionRequest) -> AdmissionResponse:
        seen.append(request)
        return AdmissionResponse.allow()

    return hooks


def post(path: str, doc: Any) -> Any:
    return declarations().app().dispatch("POST", path, JSON_HEADERS, json.dumps(doc).encode())


def answer(reply: Any) -> dict[str, Any]:
    assert reply.status == 200, reply.message
    result: dict[str, Any] = json.loads(reply.body)["response"]
    return result


def test_a_handler_of_a_kind_gets_typed_objects() -> None:
    seen.clear()
    old = {**CONFIGMAP, "data": {"a": "0"}}
    reply = post("/typed", review(object={**CONFIGMAP, "data": {"a": "b"}}, oldObject=old))
    assert answer(reply)["allowed"] is True
    (request,) = seen
    assert isinstance(request.object, ConfigMap) and request.object.data == {"a": "b"}
    assert isinstance(request.old_object, ConfigMap) and request.old_object.data == {"a": "0"}
    assert request.user_info.username == "alice"  # the rest as it came
    assert answer(post("/typed", review()))["status"]["message"] == "data must not be empty"
    # The declaration names the kind's resource.
    (declared, *_) = declarations().declarations
    assert declared.resources == (CONFIGMAPS,)


def test_an_object_that_is_no_such_kind_is_denied_before_the_handler() -> None:
    seen.clear()
    reply = post("/typed", review(object={**CONFIGMAP, "data": {"a": 1}}))
    status = answer(reply)["status"]
    assert status["code"] == 400 and status["reason"] == "BadRequest"
    assert status["message"] == "object is no ConfigMap: .data.a: expected str, got int"
    assert seen == []


def test_an_async_handler_of_a_kind_stays_async_and_patches_from_typed_objects() -> None:
    pending = post("/label", review())
    assert isinstance(pending, PendingAdmission)
    reply = pending.reply(run(pending.verdict))
    assert reply.outcome == "patched"
    patch = json.loads(base64.b64decode(answer(reply)["patch"]))
    assert apply_json_patch(CONFIGMAP, patch)["metadata"]["labels"] == {"typed": "yes"}
    undecodable = post("/label", review(object={**CONFIGMAP, "data": {"a": 1}}))
    assert isinstance(undecodable, PendingAdmission)
    refused = undecodable.reply(run(undecodable.verdict))
    assert answer(refused)["status"]["code"] == 400


def test_owner_references_and_managed_fields_with_a_newer_field_are_admitted_and_kept() -> None:
    # A newer apiserver's field in an ownerReferences or managedFields entry (on nearly
    # every object) must not make a typed webhook deny every write with 400.
    seen.clear()
    metadata = {
        "name": "c",
        "ownerReferences": [
            {"apiVersion": "v1", "kind": "K", "name": "o", "uid": "u", "futureRef": True}
        ],
        "managedFields": [{"manager": "m", "operation": "Update", "futureEntry": {"a": 1}}],
    }
    created = {**CONFIGMAP, "metadata": metadata, "data": {"a": "b"}}
    assert answer(post("/typed", review(object=created)))["allowed"] is True
    (request,) = seen
    assert request.object.metadata.owner_references[0].unknown_fields == {"futureRef": True}
    pending = post("/label", review(object=created))
    assert isinstance(pending, PendingAdmission)
    patch = json.loads(base64.b64decode(answer(pending.reply(run(pending.verdict)))["patch"]))
    assert apply_json_patch(created, patch) == {
        **created,
        "metadata": {**metadata, "labels": {"typed": "yes"}},
    }


def test_the_dict_form_still_hands_out_mappings() -> None:
    seen.clear()
    assert answer(post("/dynamic", review()))["allowed"] is True
    (request,) = seen
    assert request.object == CONFIGMAP


def test_a_kind_is_declared_alone() -> None:
    hooks = WebhookDeclarations("mixed")
    with pytest.raises(LocalProtocolError, match="a kind \\(ConfigMap\\) is declared alone"):
        hooks.validating("/mixed", ConfigMap, CONFIGMAPS)
