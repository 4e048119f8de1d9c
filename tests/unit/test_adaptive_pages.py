"""Adaptive LIST pages: a page too large for the client is asked for again in halves.

Regression for issue 31, defect 2 (a tenant's 1 MB ConfigMaps push a 500-item page past the
client's body cap; the informer and ``Client.list`` never got past it).
"""

from __future__ import annotations

import json
import random
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from kubemoon_core import GroupVersionResource, Response
from kubemoon_core._reflector import Reflector
from kubemoon_core._reflector_states import ReflectorState
from kubemoon_core._request import next_page_limit

CM = GroupVersionResource("", "v1", "configmaps")


class TooLarge(Exception):
    """Stands for the adapter's ResponseTooLarge (the core only hears ``too_large``)."""


def page(names: list[str], rv: str, token: str | None = None) -> Response:
    metadata: dict[str, Any] = {"resourceVersion": rv}
    if token is not None:
        metadata["continue"] = token
    items = [{"metadata": {"name": n, "namespace": "ns", "resourceVersion": rv}} for n in names]
    body = {"kind": "ConfigMapList", "apiVersion": "v1", "metadata": metadata, "items": items}
    return Response(200, (), json.dumps(body).encode())


def test_next_page_limit_halves_down_to_one() -> None:
    assert next_page_limit(500) == 250
    assert next_page_limit(3) == 1
    assert next_page_limit(2) == 1
    assert next_page_limit(1) is None


@given(st.integers(min_value=1, max_value=10_000))
def test_halving_reaches_one_in_log2_steps(limit: int) -> None:
    steps = 0
    current: int | None = limit
    while current is not None:
        assert current >= 1
        last = current
        current = next_page_limit(current)
        steps += 1
    assert last == 1
    assert steps == limit.bit_length()


def test_a_too_large_page_is_asked_again_in_halves_for_the_rest_of_the_list() -> None:
    r = Reflector(CM, rng=random.Random(1), namespace="ns")
    first = r.next_request(0.0)
    assert first is not None and first.query_value("limit") == "500"
    limits = []
    for _ in range(3):  # 500 -> 250 -> 125 -> 62
        r.request_failed(0.0, TooLarge(), too_large=True)
        assert r.state is ReflectorState.PAGE_DUE
        assert r.next_deadline() == 0.0  # at once: no backoff, the server did nothing wrong
        req = r.next_request(0.0)
        assert req is not None
        limits.append(req.query_value("limit"))
    assert limits == ["250", "125", "62"]
    assert r.stats.page_shrinks == 3 and r.stats.failures == 0
    r.receive_response(page(["a"], "5", token="t1"), 0.0)
    more = r.next_request(0.0)
    assert more is not None
    assert more.query_value("limit") == "62" and more.query_value("continue") == "t1"
    changes = r.receive_response(page(["b"], "5"), 0.0)
    assert {c.key.name for c in changes} == {"a", "b"} and r.has_synced


def test_the_next_list_starts_at_the_page_size_again() -> None:
    r = Reflector(CM, rng=random.Random(1), namespace="ns", page_size=8)
    r.next_request(0.0)
    r.request_failed(0.0, TooLarge(), too_large=True)
    req = r.next_request(0.0)
    assert req is not None and req.query_value("limit") == "4"
    r.receive_response(page(["a"], "5"), 0.0)
    assert r.page_limit == 4
    # A watch 410 relists: the new list asks for page_size again.
    r.next_request(0.0)
    r.receive_watch_head(410, (), 0.0)
    r.receive_watch_data(b'{"kind":"Status","code":410,"reason":"Expired"}', 0.0)
    r.watch_ended(0.0)
    deadline = r.next_deadline()
    assert deadline is not None
    relist = r.next_request(deadline)
    assert relist is not None and relist.query_value("limit") == "8"


def test_a_page_of_one_too_large_backs_off_like_any_failure() -> None:
    r = Reflector(CM, rng=random.Random(1), namespace="ns", page_size=1)
    r.next_request(0.0)
    error = TooLarge()
    r.request_failed(0.0, error, too_large=True)
    assert r.state is ReflectorState.PAGE_DUE
    deadline = r.next_deadline()
    assert deadline is not None and deadline > 0.0  # a backoff
    assert r.stats.failures == 1 and r.stats.page_shrinks == 0
    assert r.last_error is error
