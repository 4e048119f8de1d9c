"""What a metadata-only cache keeps, and what one LIST page may weigh, whatever a tenant
writes (the attacker's pass of round four: 60 ConfigMaps of 14,000 labels each took an
operator past its 256 Mi limit).

- An object whose labels hold more than ``MAX_CACHED_LABEL_CHARS`` characters is refused
  by ``check_label_size`` (the transform of every metadata-only store), so the reflector
  keeps it out (named, counted) on a LIST page, a watch event and a streaming list alike.
- A paginated LIST request of several objects carries ``body_limit=PAGE_BODY_LIMIT``: a
  heavier page is refused by the client and asked for again in halves; a page of one
  object, or an unpaginated list, keeps the client's own cap.
"""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from test_kept_out import W, line, page

from kubemoon_core import GroupVersionResource, ListOptions, ObjectKey, list_request
from kubemoon_core._reflector import Reflector
from kubemoon_core.errors import LocalProtocolError
from kubemoon_core.lowlevel import (
    MAX_CACHED_LABEL_CHARS,
    PAGE_BODY_LIMIT,
    Store,
    check_label_size,
)

CM = GroupVersionResource("", "v1", "configmaps")


def labelled(name: str, rv: str, count: int) -> str:
    labels = {f"k{j:05d}": "v" * 63 for j in range(count)}
    meta = {"name": name, "namespace": "ns", "uid": f"u-{name}", "resourceVersion": rv}
    return json.dumps({"metadata": meta | {"labels": labels}})


# 14,000 labels of 6 + 63 characters: about 1 MB, as a tenant may store.
BIG = 14_000
# The most labels of that shape that stay within the bound.
FITS = MAX_CACHED_LABEL_CHARS // 69


def test_labels_past_the_bound_are_refused_and_up_to_it_accepted() -> None:
    check_label_size(json.loads(labelled("ok", "1", FITS)))
    check_label_size({"metadata": {"name": "none"}})
    check_label_size({"metadata": "not a mapping"})
    with pytest.raises(LocalProtocolError, match=r"its 950 labels hold 65550 characters"):
        check_label_size(json.loads(labelled("over", "1", FITS + 1)))


def bounded_reflector(**kwargs: Any) -> Reflector:
    store = Store(transform=lambda obj: (check_label_size(obj), obj)[1])
    return Reflector(W, rng=random.Random(1), namespace="ns", store=store, **kwargs)


def test_a_list_page_keeps_the_heavily_labelled_object_out() -> None:
    r = bounded_reflector()
    assert r.next_request(0.0) is not None
    items = [labelled("a", "5", 3), labelled("big", "6", BIG), labelled("b", "7", 3)]
    changes = r.receive_response(page(items, "10"), 0.0)
    assert r.has_synced and sorted(c.key.name for c in changes) == ["a", "b"]
    (record,) = r.kept_out.values()
    assert record.key == ObjectKey("ns", "big") and "labels hold" in record.reason
    assert r.stats.kept_out == 1 and r.stats.failures == 0


def test_a_watch_event_that_grows_the_labels_takes_the_stale_copy_out() -> None:
    r = bounded_reflector()
    assert r.next_request(0.0) is not None
    r.receive_response(page([labelled("a", "5", 3)], "10"), 0.0)
    assert r.next_request(0.0) is not None
    r.receive_watch_head(200, (), 0.0)
    changes = r.receive_watch_data(line("MODIFIED", labelled("a", "11", BIG)), 0.0)
    assert changes == [] and ObjectKey("ns", "a") not in r.store
    assert list(r.kept_out) == [ObjectKey("ns", "a")]
    r.receive_watch_data(line("MODIFIED", labelled("a", "12", 3)), 0.0)
    assert ObjectKey("ns", "a") in r.store and not r.kept_out


def test_a_streaming_list_keeps_the_heavily_labelled_object_out() -> None:
    r = bounded_reflector(streaming_list=True)
    assert r.next_request(0.0) is not None
    r.receive_watch_head(200, (), 0.0)
    end = (
        '{"kind":"ConfigMap","apiVersion":"v1","metadata":{"resourceVersion":"9",'
        '"annotations":{"k8s.io/initial-events-end":"true"}}}'
    )
    data = (
        line("ADDED", labelled("a", "5", 3))
        + line("ADDED", labelled("big", "6", BIG))
        + line("BOOKMARK", end)
    )
    changes = r.receive_watch_data(data, 0.0)
    assert r.has_synced and [c.key.name for c in changes] == ["a"]
    assert list(r.kept_out) == [ObjectKey("ns", "big")]


@pytest.mark.parametrize(
    ("limit", "expected"), [(500, PAGE_BODY_LIMIT), (2, PAGE_BODY_LIMIT), (1, None), (None, None)]
)
def test_a_page_of_several_objects_is_held_to_the_page_limit(
    limit: int | None, expected: int | None
) -> None:
    request = list_request(CM, namespace="ns", options=ListOptions(limit=limit))
    assert request.body_limit == expected
    # The reflector's pages carry it too.
    r = Reflector(CM, rng=random.Random(1), namespace="ns", store=Store())
    first = r.next_request(0.0)
    assert first is not None and first.body_limit == PAGE_BODY_LIMIT
