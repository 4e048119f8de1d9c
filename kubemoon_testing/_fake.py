"""A strict fake transport: a script of expected requests and canned responses.

Rules: requests must arrive in script order and match what the script expects; anything
unexpected, and any script step left unconsumed, fails the test. Pure: no sockets.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kubemoon_core import Request, Response
from kubemoon_core._json import dumps

__all__ = ["Exchange", "FakeTransport", "FakeTransportError", "json_response"]


class FakeTransportError(AssertionError):
    """A request did not match the script, or the script was not consumed to its end."""


def json_response(
    status_code: int, document: Any, headers: Iterable[tuple[str, str]] = ()
) -> Response:
    """A Response with a JSON body."""
    return Response(status_code, (("Content-Type", "application/json"), *headers), dumps(document))


@dataclass(frozen=True)
class Exchange:
    """One scripted step: what the next request must look like, and the answer.

    ``query`` lists parameters that must be present with these values (others may be
    present too); ``check`` is an extra predicate for bodies and headers.
    """

    method: str
    path: str
    response: Response
    query: Mapping[str, str] = field(default_factory=dict)
    check: Callable[[Request], bool] | None = None

    def mismatch(self, request: Request) -> str | None:
        """Why ``request`` does not match this step, or None if it does."""
        if (request.method, request.path) != (self.method, self.path):
            return f"expected {self.method} {self.path}, got {request.method} {request.path}"
        for name, value in self.query.items():
            if request.query_value(name) != value:
                got = request.query_value(name)
                return f"query {name}: expected {value!r}, got {got!r} in {request.target}"
        if self.check is not None and not self.check(request):
            return f"the check of step {self.method} {self.path} refused {request.target}"
        return None


class FakeTransport:
    """Serves a script of :class:`Exchange` steps, strictly in order."""

    def __init__(self, script: Iterable[Exchange] = ()) -> None:
        self._script = list(script)
        self._position = 0
        self.requests: list[Request] = []

    def expect(
        self,
        method: str,
        path: str,
        response: Response,
        *,
        query: Mapping[str, str] | None = None,
        check: Callable[[Request], bool] | None = None,
    ) -> FakeTransport:
        """Append a step; returns self so steps can be chained."""
        self._script.append(Exchange(method, path, response, dict(query or {}), check))
        return self

    def handle(self, request: Request) -> Response:
        """Answer ``request`` with the next step, or fail if it does not match."""
        self.requests.append(request)
        if self._position >= len(self._script):
            raise FakeTransportError(f"unexpected request {request.method} {request.target}")
        step = self._script[self._position]
        problem = step.mismatch(request)
        if problem is not None:
            raise FakeTransportError(problem)
        self._position += 1
        return step.response

    @property
    def remaining(self) -> int:
        """How many steps are still unconsumed."""
        return len(self._script) - self._position

    def assert_done(self) -> None:
        """Fail if any scripted step was not consumed."""
        if self.remaining:
            step = self._script[self._position]
            raise FakeTransportError(
                f"{self.remaining} scripted request(s) never came; next: {step.method} {step.path}"
            )

    def __enter__(self) -> FakeTransport:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            self.assert_done()
