"""WebhookApp with async handlers: the awaitable goes back to the adapter, never awaited here."""

from __future__ import annotations

import json
from collections.abc import Coroutine
from typing import Any

import pytest
from test_admission import CONFIGMAP, review

from kubemoon_core.webhooks import (
    AdmissionRequest,
    AdmissionResponse,
    PendingAdmission,
    WebhookApp,
    WebhookKind,
)

JSON_HEADERS = [("Content-Type", "application/json")]


async def allow_later(request: AdmissionRequest) -> AdmissionResponse:
    return AdmissionResponse.allow()


async def deny_later(request: AdmissionRequest) -> AdmissionResponse:
    return AdmissionResponse.deny(f"no access for {request.user_info.username}")


async def label_later(request: AdmissionRequest) -> AdmissionResponse:
    assert request.object is not None
    mutated = json.loads(json.dumps(request.object))
    mutated["metadata"]["labels"] = {"checked": "yes"}
    return AdmissionResponse.patched(request.object, mutated)


def run(awaitable: Any) -> Any:
    """Drive a coroutine that never suspends, as a loop would."""
    coroutine: Coroutine[Any, Any, Any] = awaitable
    with pytest.raises(StopIteration) as stopped:
        coroutine.send(None)
    return stopped.value.value


def app() -> WebhookApp:
    a = WebhookApp()
    a.validating("/allow", allow_later)
    a.validating("/deny", deny_later, name="access")
    a.mutating("/label", label_later)
    a.validating("/sneaky", label_later)
    return a


def dispatch(path: str) -> PendingAdmission:
    body = json.dumps(review()).encode()
    pending = app().dispatch("POST", path, JSON_HEADERS, body)
    assert isinstance(pending, PendingAdmission)
    return pending


def failure(reply: Any) -> str:
    """The message of an HTTP 500 ``Status`` answer."""
    assert reply.status == 500
    status: dict[str, Any] = json.loads(reply.body)
    assert (status["kind"], status["reason"]) == ("Status", "InternalError")
    message: str = status["message"]
    return message


def answer(reply: Any) -> dict[str, Any]:
    assert reply.status == 200
    result: dict[str, Any] = json.loads(reply.body)["response"]
    return result


def test_an_async_handler_is_handed_back_with_its_request() -> None:
    pending = dispatch("/deny")
    assert pending.webhook == "access"
    assert pending.kind is WebhookKind.VALIDATING
    assert pending.request.object == CONFIGMAP
    reply = pending.reply(run(pending.verdict))
    assert reply.outcome == "denied"
    assert answer(reply)["status"]["message"] == "no access for alice"


def test_allowed_and_patched_verdicts() -> None:
    pending = dispatch("/allow")
    assert answer(pending.reply(run(pending.verdict)))["allowed"] is True
    pending = dispatch("/label")
    reply = pending.reply(run(pending.verdict))
    assert reply.outcome == "patched"
    assert answer(reply)["patchType"] == "JSONPatch"


def test_the_usual_checks_apply_to_an_awaited_verdict() -> None:
    pending = dispatch("/sneaky")
    reply = pending.reply(run(pending.verdict))
    assert "cannot patch" in failure(reply)
    pending = dispatch("/allow")
    run(pending.verdict)
    assert "returned str" in failure(pending.reply("yes"))


def test_a_failed_await_is_an_http_500() -> None:
    pending = dispatch("/allow")
    run(pending.verdict)
    reply = pending.failed(ConnectionError("apiserver unreachable"))
    assert reply.status == 500
    assert "ConnectionError: apiserver unreachable" in failure(reply)
    assert isinstance(reply.error, ConnectionError)


def test_handle_cannot_await_and_says_so() -> None:
    body = json.dumps(review()).encode()
    reply = app().handle("POST", "/allow", JSON_HEADERS, body)
    assert "asynchronous" in failure(reply)


def test_an_awaitable_without_close_is_refused_too() -> None:
    class Later:
        def __await__(self) -> Any:
            yield from ()
            return AdmissionResponse.allow()

    pending = dispatch("/allow")
    run(pending.verdict)
    assert "asynchronous" in failure(pending.reply(Later()))


def test_synchronous_handlers_still_answer_directly() -> None:
    a = WebhookApp()
    a.validating("/v", lambda request: AdmissionResponse.allow())
    reply = a.dispatch("POST", "/v", JSON_HEADERS, json.dumps(review()).encode())
    assert not isinstance(reply, PendingAdmission)
    assert reply.outcome == "allowed"
