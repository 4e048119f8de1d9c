"""Properties of the simulated API server's model (issue 32), over generated writes:

- resourceVersions of writes strictly increase, and a no-op write moves nothing;
- LIST at an earlier resourceVersion plus the WATCH from it replays to the LIST of now
  (the contract informers rely on), for every label selector;
- a paged LIST, with writes between its pages, returns exactly the unpaged LIST at the
  first page's resourceVersion.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from kubemoon_core import GroupVersionResource
from kubemoon_testing.sim import SimApiServer, StatusError

NAMES = ("a", "b", "c", "d")
FINALIZER = "example.com/hold"

operations = st.lists(
    st.tuples(
        st.sampled_from(("create", "update", "delete", "release", "noop")),
        st.sampled_from(NAMES),
        st.integers(0, 2),  # a data value and a label value
        st.booleans(),  # with a finalizer (create)
    ),
    max_size=30,
)


def _apply(server: SimApiServer, op: tuple[str, str, int, bool], now: float) -> None:
    res = server.resource(GroupVersionResource("", "v1", "configmaps"))
    kind, name, value, hold = op
    try:
        if kind == "create":
            metadata: dict[str, Any] = {"name": name, "labels": {"v": str(value)}}
            if hold:
                metadata["finalizers"] = [FINALIZER]
            body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata}
            server.create(res, "default", {**body, "data": {"k": str(value)}}, now)
        elif kind == "update":
            current = server.get(res, "default", name)
            current["data"] = {"k": str(value)}
            current["metadata"]["labels"] = {"v": str(value)}
            server.update(res, "default", name, current, now)
        elif kind == "delete":
            server.delete(res, "default", name, now)
        elif kind == "release":
            current = server.get(res, "default", name)
            current["metadata"].pop("finalizers", None)
            server.update(res, "default", name, current, now)
        else:
            current = server.get(res, "default", name)
            before = server.resource_version
            assert server.update(res, "default", name, current, now) == current
            assert server.resource_version == before
    except StatusError as error:
        expected = (error.code, error.reason) in ((404, "NotFound"), (409, "AlreadyExists"))
        if not expected:
            raise


def _state(document: dict[str, Any]) -> dict[str, tuple[str, Any]]:
    return {
        item["metadata"]["name"]: (item["metadata"]["resourceVersion"], item.get("data"))
        for item in document["items"]
    }


@given(operations)
def test_resource_versions_strictly_increase(ops: list[Any]) -> None:
    server = SimApiServer()
    for index, op in enumerate(ops):
        rv, writes = server.resource_version, server.writes
        _apply(server, op, float(index))
        # Every write takes a new resourceVersion; nothing else moves it.
        assert server.resource_version - rv == server.writes - writes
    res = server.resource(GroupVersionResource("", "v1", "configmaps"))
    for item in server.list(res, None)["items"]:
        assert int(item["metadata"]["resourceVersion"]) <= server.resource_version


@given(operations, operations, st.sampled_from((None, "v=1", "v!=1", "v in (0, 2)")))
def test_list_then_watch_replays_to_now(
    before: list[Any], after: list[Any], selector: str | None
) -> None:
    server = SimApiServer()
    res = server.resource(GroupVersionResource("", "v1", "configmaps"))
    for index, op in enumerate(before):
        _apply(server, op, float(index))
    listed = server.list(res, "default", label_selector=selector)
    rv = listed["metadata"]["resourceVersion"]
    watch = server.watch(res, "default", 0.0, resource_version=rv, label_selector=selector)
    for index, op in enumerate(after):
        _apply(server, op, float(len(before) + index))
    cache = {
        item["metadata"]["name"]: (item["metadata"]["resourceVersion"], item.get("data"))
        for item in listed["items"]
    }
    for line in watch.take(0.0, server.resource_version):
        name = line.object["metadata"]["name"]
        if line.type == "DELETED":
            assert name in cache
            del cache[name]
        else:
            assert (line.type == "ADDED") == (name not in cache), line
            cache[name] = (line.object["metadata"]["resourceVersion"], line.object.get("data"))
    assert cache == _state(server.list(res, "default", label_selector=selector))


@given(operations, operations, st.integers(1, 3))
def test_paged_list_equals_the_snapshot(before: list[Any], between: list[Any], limit: int) -> None:
    server = SimApiServer()
    res = server.resource(GroupVersionResource("", "v1", "configmaps"))
    for name in NAMES:  # enough objects for several pages
        _apply(server, ("create", name, 0, False), 0.0)
    for index, op in enumerate(before):
        _apply(server, op, float(index))
    whole = server.list(res, "default")
    page = server.list(res, "default", limit=limit)
    items = list(page["items"])
    pending = list(between)
    while page["metadata"].get("continue"):
        if pending:
            _apply(server, pending.pop(), 100.0)  # writes between pages change nothing
        page = server.list(res, "default", limit=limit, continue_token=page["metadata"]["continue"])
        assert page["metadata"]["resourceVersion"] == whole["metadata"]["resourceVersion"]
        items.extend(page["items"])
    assert items == whole["items"]
