"""Status decoding, the ApiError family and its dispositions."""

import json

import pytest

from kubemoon_core import ApiError
from kubemoon_core.errors import (
    AlreadyExists,
    BadRequest,
    Conflict,
    Expired,
    Forbidden,
    Gone,
    InternalError,
    Invalid,
    MethodNotAllowed,
    NotFound,
    ServerTimeout,
    ServiceUnavailable,
    Status,
    StatusCause,
    TooManyRequests,
    Unauthorized,
)
from kubemoon_core.lowlevel import (
    Disposition,
    decode_status,
    error_from_response,
    error_from_status,
)


def status(code: int, reason: str = "", **extra: object) -> bytes:
    doc = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code}
    if reason:
        doc["reason"] = reason
    doc.update(extra)
    return json.dumps(doc).encode()


@pytest.mark.parametrize(
    ("code", "reason", "cls", "disposition"),
    [
        (400, "BadRequest", BadRequest, Disposition.CALLER),
        (401, "Unauthorized", Unauthorized, Disposition.CALLER),
        (403, "Forbidden", Forbidden, Disposition.CALLER),
        (404, "NotFound", NotFound, Disposition.CALLER),
        (405, "MethodNotAllowed", MethodNotAllowed, Disposition.CALLER),
        (409, "Conflict", Conflict, Disposition.CALLER),
        (409, "AlreadyExists", AlreadyExists, Disposition.CALLER),
        (410, "Gone", Gone, Disposition.RELIST),
        (410, "Expired", Expired, Disposition.RELIST),
        (422, "Invalid", Invalid, Disposition.CALLER),
        (429, "TooManyRequests", TooManyRequests, Disposition.RETRY),
        (500, "InternalError", InternalError, Disposition.RETRY),
        (500, "ServerTimeout", ServerTimeout, Disposition.RETRY),
        (503, "ServiceUnavailable", ServiceUnavailable, Disposition.RETRY),
        (504, "Timeout", ServerTimeout, Disposition.RETRY),
        (502, "", ApiError, Disposition.RETRY),
        (418, "Teapot", ApiError, Disposition.CALLER),
    ],
)
def test_errors_are_chosen_by_code_and_reason(
    code: int, reason: str, cls: type[ApiError], disposition: Disposition
) -> None:
    err = error_from_response(code, [], status(code, reason, message="it failed"))
    assert type(err) is cls or (cls is ApiError and isinstance(err, ApiError))
    assert err.disposition is disposition
    assert err.code == code
    assert err.reason == reason
    assert "it failed" in str(err)


def test_expired_is_a_gone_and_already_exists_a_conflict() -> None:
    assert issubclass(Expired, Gone)
    assert issubclass(AlreadyExists, Conflict)


def test_invalid_keeps_field_causes() -> None:
    body = status(
        422,
        "Invalid",
        details={
            "name": "x",
            "kind": "ConfigMap",
            "causes": [
                {"reason": "FieldValueInvalid", "message": "bad", "field": "metadata.name"},
                {"reason": "FieldValueRequired"},
                "junk",
            ],
        },
    )
    err = error_from_response(422, [], body)
    assert isinstance(err, Invalid)
    assert err.causes == (
        StatusCause("FieldValueInvalid", "bad", "metadata.name"),
        StatusCause("FieldValueRequired", "", ""),
    )
    assert err.status.details["name"] == "x"


def test_retry_after_from_header_then_details() -> None:
    header = error_from_response(429, [("Retry-After", " 7 ")], status(429, "TooManyRequests"))
    assert header.retry_after == 7.0
    details = error_from_response(
        429, [], status(429, "TooManyRequests", details={"retryAfterSeconds": 3})
    )
    assert details.retry_after == 3.0
    assert details.status.retry_after_seconds == 3
    http_date = error_from_response(
        503, [("retry-after", "Wed, 21 Oct 2015 07:28:00 GMT")], status(503)
    )
    assert http_date.retry_after is None
    negative = error_from_response(503, [("Retry-After", "-1")], b"")
    assert negative.retry_after is None
    assert error_from_response(503, [("Other", "1")], b"").retry_after is None


def test_a_body_that_is_not_a_status_keeps_a_bounded_excerpt() -> None:
    body = b"<html>" + b"x" * 10_000
    err = error_from_response(502, [], body)
    assert err.code == 502
    assert len(err.body_excerpt) == 512
    assert len(err.status.message) == 512
    assert error_from_response(500, [], b'{"kind":"ConfigMap"}').code == 500
    assert error_from_response(500, [], b"\xff\xfe").code == 500


def test_the_http_code_wins_over_the_status_code() -> None:
    err = error_from_response(404, [], status(500, "NotFound"))
    assert isinstance(err, NotFound)
    assert err.code == 404


def test_decode_status_tolerates_odd_fields() -> None:
    assert decode_status({"kind": "ConfigMap"}) is None
    assert decode_status([1]) is None
    s = decode_status(
        {"kind": "Status", "code": True, "details": [], "message": 3}, default_code=410
    )
    assert s == Status(code=410)
    s2 = decode_status({"kind": "Status", "code": 410, "details": {"retryAfterSeconds": True}})
    assert s2 is not None and s2.retry_after_seconds is None


def test_error_from_status_for_watch_errors() -> None:
    s = decode_status({"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"})
    assert s is not None
    err = error_from_status(s)
    assert isinstance(err, Expired)
    assert err.disposition is Disposition.RELIST
    throttled = error_from_status(Status(code=429, details={}, retry_after_seconds=2))
    assert throttled.retry_after == 2.0
    assert "no message" in str(error_from_status(Status(code=500)))


def test_retry_delay_retries_only_throttling_and_server_errors_with_retry_after() -> None:
    from kubemoon_core.lowlevel import retry_delay

    throttled = error_from_response(429, [("Retry-After", "2")], status(429, "TooManyRequests"))
    assert retry_delay(throttled, 0, max_retries=3) == 2.0
    assert retry_delay(throttled, 3, max_retries=3) is None
    huge = error_from_response(503, [("Retry-After", "3600")], status(503))
    assert retry_delay(huge, 0, max_retries=1) == 60.0
    no_header = error_from_response(500, [], status(500, "InternalError"))
    assert retry_delay(no_header, 0, max_retries=3) is None
    conflict = error_from_response(409, [("Retry-After", "1")], status(409, "Conflict"))
    assert retry_delay(conflict, 0, max_retries=3) is None


@pytest.mark.parametrize("code", [301, 302, 303, 307, 308])
def test_a_redirect_is_refused_naming_where_it_pointed(code: int) -> None:
    from kubemoon_core.errors import RedirectRefused

    err = error_from_response(code, [("Location", "https://elsewhere.example/api/v1")], b"")
    assert isinstance(err, RedirectRefused)
    assert isinstance(err, ApiError)
    assert err.code == code
    assert err.location == "https://elsewhere.example/api/v1"
    assert err.disposition is Disposition.CALLER
    assert "no message" not in str(err)
    assert str(err) == (
        f"{code} redirect refused: the server redirected to "
        "'https://elsewhere.example/api/v1'; redirects are not followed"
    )


def test_a_redirect_without_location_and_a_hostile_location() -> None:
    from kubemoon_core.errors import RedirectRefused

    bare = error_from_response(302, [], b"<html>moved</html>")
    assert isinstance(bare, RedirectRefused)
    assert bare.location is None
    assert (
        str(bare) == "302 redirect refused: the server gave no Location; redirects are not followed"
    )
    # A Location with credentials, control characters and a huge length is shown bounded,
    # without the password and with the controls escaped.
    hostile = "https://user:s3cret@evil.example/\x1b[31m" + "x" * 5000
    err = error_from_response(301, [("location", hostile)], b"")
    assert isinstance(err, RedirectRefused)
    assert "s3cret" not in str(err)
    assert "\x1b" not in str(err)
    assert len(str(err)) < 400
    assert err.location == hostile  # the raw value stays available to the caller
    # A Status body in a 3xx does not change the class.
    assert isinstance(error_from_response(300, [], status(300, "MultipleChoices")), RedirectRefused)


def test_a_plain_text_error_body_loses_its_trailing_newline() -> None:
    error = error_from_response(503, [("Content-Type", "text/plain")], b"upstream is down\n")
    assert isinstance(error, ServiceUnavailable)
    assert error.status.message == "upstream is down"
    assert str(error) == "503 ServiceUnavailable: upstream is down"
    not_served = error_from_response(404, [("Content-Type", "text/plain")], b"404 page not found\n")
    assert isinstance(not_served, NotFound)
    assert not_served.status.message == "404 page not found"
    assert not str(not_served).endswith("\n")


def test_status_messages_lose_surrounding_whitespace() -> None:
    body = status(
        403,
        "Forbidden",
        message='configmaps is forbidden: User "x" cannot list\n',
        details={"causes": [{"reason": "FieldValueInvalid", "message": " bad\r\n"}]},
    )
    error = error_from_response(403, [], body)
    assert error.status.message == 'configmaps is forbidden: User "x" cannot list'
    assert error.causes[0].message == "bad"
    assert "\n" not in str(error)
    blank = error_from_response(500, [], status(500, "InternalError", message="\n"))
    assert str(blank) == "500 InternalError: InternalError"


def test_a_failure_report_of_a_newline_terminated_message_is_one_line() -> None:
    from kubemoon_core.lowlevel import FailureReporter

    reporter = FailureReporter()
    error = error_from_response(404, [], b"404 page not found\n")
    report = reporter.failed("widgets list", "list", "widgets", error, now=0.0)
    assert report is not None
    assert report.message.endswith("404 page not found")
    assert [p.message for p in reporter.current_problems()] == [report.message]
