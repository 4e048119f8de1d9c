"""Watch decoding speed against a bare ``json.loads`` loop and the official client, in one process.

50,000 ConfigMap events of about 1 KB, decoded by ``WatchDecoder`` in 16 KiB and in 8 MiB
chunks, with the standard library, with orjson (``use_fast_json()``) and with msgspec
(``use_msgspec_json()``), and with ``keep_raw=True`` (each event's object bytes kept too).
Every figure is the best of several interleaved rounds (the machine is shared, the minimum
is the least disturbed run), in CPU time of this process.

**The reference** for each chunk size is a bare ``json.loads`` loop doing the same work on
the same chunks: the start of a line left from the previous chunk is joined to the chunk's
first line, the chunk's other complete lines are decoded to text in one call and split,
each line is parsed, and the chunk's results are built as one list and dropped, as the
decoder's caller drops each call's list here. At 8 MiB that list holds about 7,300
ConfigMaps: the cost of creating, then freeing, that much memory at once (page faults,
cyclic-GC passes over the live objects) is part of both figures. A second figure, the
``json.loads`` loop over lines split in advance with each result dropped at once (the
old reference), is ``json.loads`` alone with nothing kept: the "floor"; every ratio is
also given against it. (The decoder's stdlib path runs the scanner that ``json.loads``
runs, without its Python layers, so it can beat the floor.)

Also measured: the pull side (``WatchDecoder.events(chunk)``, which decodes one
``PULL_WINDOW`` of lines at a time, each event dropped at once) at both chunk sizes, with
both backends; the decoder at 8 MiB with its GC pause off (``WatchDecoder(gc_pause=False)``,
see ``kubemoon_core._watch``),
the 8 MiB / 16 KiB cost with a caller that keeps every event in a dict by name as a
store does (the memory is then kept, not freed and faulted in again for every chunk),
and 2,000 events fed in 1-byte chunks.

**Where the time goes.** The stdlib decoder runs the standard library's C scanner on each
line; that scanner alone, on the lines decoded to text in advance with each result dropped
(nothing else: no line finding, no events), is the least any decoder built on the
standard library can cost, so the official client's time over it is the most the stdlib
backend can be faster. For the 8 MiB/16 KiB ratio of ``receive_data`` the minor page
faults and the system CPU time of one run at each size are counted (``getrusage``): a call
returns every event of its chunk at once, about 7,300 at 8 MiB, and when the caller drops
them the allocator hands the emptied memory back to the system, so the next call faults
it in again.

**The official client.** ``kubernetes.watch.Watch().stream(func, ...)`` runs its real code
path over the same chunks: ``func`` is a stand-in for ``CoreV1Api.list_namespaced_config_map``
(its return annotation ``V1ConfigMapList`` is how ``Watch`` finds the event type
``V1ConfigMap``) that returns, for ``_preload_content=False``, a stand-in for the urllib3
response whose ``stream(amt=None, decode_content=False)`` yields the chunks, as urllib3's
``read_chunked`` yields HTTP chunks. ``Watch`` then splits lines with its
``iter_resp_lines`` and decodes each event: typed (the default: ``json.loads``, then
``json.dumps`` and ``ApiClient.deserialize`` into a ``V1ConfigMap``) or, with
``deserialize=False``, ``json.loads`` only. ``timeout_seconds`` is passed, as a caller
that wants the stream to end does (without it ``Watch`` reconnects at the end of the
body). ``iter_resp_lines`` copies the rest of its buffer after every line, so its cost per
line grows with the chunk size; at 8 MiB it is measured on the first two chunks' events
only (to keep each run to seconds), and the cost per event is what is compared.
"""

from __future__ import annotations

import inspect
import json
import resource
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from _table import Row

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kubemoon_core._watch import WatchDecoder
from kubemoon_core._watch_lines import _SCAN
from kubemoon_core.json_backends import use_fast_json, use_msgspec_json, use_standard_json
from kubemoon_core.lowlevel import PULL_WINDOW
from kubemoon_io import paused_gc

EVENTS = 50_000
SMALL = 16 * 1024
LARGE = 8 * 1024 * 1024
ROUNDS = 5
# KubeMoon's stdlib decoder against the official client's typed Watch.stream (issue 16).
TYPED_TARGET = 10
OFFICIAL_ROUNDS = 3
# A measurement is repeated only while its runs so far took less than this (CPU seconds).
BUDGET = 20.0


def configmap_lines(count: int) -> list[bytes]:
    """``count`` watch lines of about 1 KB, each a MODIFIED ConfigMap."""
    lines = []
    for i in range(count):
        obj = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": f"settings-{i:06d}",
                "namespace": f"team-{i % 20:02d}",
                "uid": f"6f1c2a0e-8f1b-4c1e-9a55-{i:012d}",
                "resourceVersion": str(1_000_000 + i),
                "creationTimestamp": "2025-01-01T00:00:00Z",
                "labels": {"app.kubernetes.io/name": "demo", "tier": "backend"},
            },
            "data": {f"key-{j}": f"value {i} {j} " + "x" * 90 for j in range(7)},
        }
        lines.append(json.dumps({"type": "MODIFIED", "object": obj}).encode())
    return lines


def chunked(stream: bytes, size: int) -> list[bytes]:
    return [stream[i : i + size] for i in range(0, len(stream), size)]


def decode_all(
    chunks: list[bytes], *, gc_pause: bool = True, keep_raw: bool = False
) -> Callable[[], int]:
    def run() -> int:
        decoder = WatchDecoder(gc_pause=paused_gc if gc_pause else None, keep_raw=keep_raw)
        count = 0
        for chunk in chunks:
            count += len(decoder.receive_data(chunk))
        decoder.receive_data(b"")
        return count

    return run


def pull_all(chunks: list[bytes]) -> Callable[[], int]:
    """The pull side: ``events(chunk)`` for every chunk, each event dropped at once."""

    def run() -> int:
        decoder = WatchDecoder()
        count = 0
        for chunk in chunks:
            for _event in decoder.events(chunk):
                count += 1
        decoder.feed(b"")
        return count

    return run


def decode_keeping(chunks: list[bytes]) -> Callable[[], int]:
    """Decode, keeping every event in a dict by name, as a store does."""

    def run() -> int:
        decoder = WatchDecoder()
        store = {}
        for chunk in chunks:
            for event in decoder.receive_data(chunk):
                store[event.object["metadata"]["name"]] = event
        decoder.receive_data(b"")
        return len(store)

    return run


def presplit(lines: list[bytes]) -> Callable[[], int]:
    """``json.loads`` over lines split in advance, each result dropped at once."""
    loads = json.loads

    def run() -> int:
        for line in lines:
            loads(line)
        return len(lines)

    return run


def scanner_alone(lines: list[bytes]) -> Callable[[], int]:
    """The stdlib decoder's own C scanner on each line, decoded to text in advance."""
    texts = [line.decode() for line in lines]
    scan = _SCAN

    def run() -> int:
        for text in texts:
            scan(text, 0)
        return len(texts)

    return run


def faults_and_system_time(run: Callable[[], int], events: int) -> tuple[float, float]:
    """Minor page faults and system CPU µs per event of one run."""
    before = resource.getrusage(resource.RUSAGE_SELF)
    run()
    after = resource.getrusage(resource.RUSAGE_SELF)
    return (
        (after.ru_minflt - before.ru_minflt) / events,
        1e6 * (after.ru_stime - before.ru_stime) / events,
    )


def reference(chunks: list[bytes]) -> Callable[[], int]:
    """A bare ``json.loads`` loop doing the decoder's work on the same chunks."""
    loads = json.loads

    def run() -> int:
        count = 0
        tail = b""
        for chunk in chunks:
            end = chunk.rfind(b"\n")
            if end < 0:
                tail += chunk
                continue
            first = chunk.find(b"\n")
            view = memoryview(chunk)
            lines = [str(tail + view[:first], "utf-8")]
            if first < end:
                lines += str(view[first + 1 : end], "utf-8").split("\n")
            tail = chunk[end + 1 :]
            count += len([loads(line) for line in lines])
        return count

    return run


class FakeResponse:
    """What ``Watch.stream`` uses of a urllib3 ``HTTPResponse`` (``_preload_content=False``)."""

    status = 200

    def __init__(self, chunks: list[bytes]) -> None:
        self._chunks = chunks

    def stream(self, amt: int | None = None, decode_content: bool | None = None) -> Iterator[bytes]:
        assert amt is None
        yield from self._chunks

    def close(self) -> None:
        pass

    def release_conn(self) -> None:
        pass


def fake_list_configmaps(chunks: list[bytes], return_type: type) -> Callable[..., FakeResponse]:
    """A stand-in for ``CoreV1Api.list_namespaced_config_map``: one watch response."""
    calls = []

    def list_namespaced_config_map(namespace: str, **kwargs: Any) -> Any:
        assert kwargs["watch"] is True
        assert kwargs["_preload_content"] is False
        calls.append(namespace)
        assert len(calls) == 1, "Watch.stream reconnected"
        return FakeResponse(chunks)

    # Watch finds the event type from the return annotation, as for the real method.
    list_namespaced_config_map.__annotations__["return"] = return_type
    return list_namespaced_config_map


def official(chunks: list[bytes], **kwargs: Any) -> Callable[[], int]:
    from kubernetes import watch
    from kubernetes.client.models import V1ConfigMapList

    def run() -> int:
        func = fake_list_configmaps(chunks, V1ConfigMapList)
        count = 0
        for _event in watch.Watch().stream(func, "default", timeout_seconds=300, **kwargs):
            count += 1
        return count

    return run


def check_official(chunks: list[bytes], **kwargs: Any) -> None:
    """The official pipeline really decodes the events (outside the timings)."""
    from kubernetes import watch
    from kubernetes.client.models import V1ConfigMap, V1ConfigMapList

    func = fake_list_configmaps(chunks, V1ConfigMapList)
    events = list(watch.Watch().stream(func, "default", timeout_seconds=300, **kwargs))
    last = events[-1]
    assert last["type"] == "MODIFIED"
    if kwargs.get("deserialize", True):
        assert isinstance(last["object"], V1ConfigMap)
        assert last["object"].data["key-6"].startswith("value")
    else:
        assert last["object"]["data"]["key-6"].startswith("value")


def timed(run: Callable[[], int], expected: int) -> float:
    start = time.process_time()
    count = run()
    elapsed = time.process_time() - start
    assert count == expected, (count, expected)
    return elapsed


def best_of(runs: dict[str, tuple[Callable[[], int], int, int]]) -> dict[str, float]:
    """The minimum time of each ``name: (run, expected events, rounds)``, over interleaved
    rounds; a measurement stops repeating once its runs took ``BUDGET`` seconds."""
    best = {name: float("inf") for name in runs}
    spent = dict.fromkeys(runs, 0.0)
    for round_ in range(max(rounds for _, _, rounds in runs.values())):
        for name, (run, expected, rounds) in runs.items():
            if round_ < rounds and spent[name] < BUDGET:
                elapsed = timed(run, expected)
                spent[name] += elapsed
                best[name] = min(best[name], elapsed)
    return best


def official_version() -> str | None:
    try:
        from kubernetes import __version__
    except ImportError:
        return None
    return str(__version__)


def rows() -> list[Row]:
    """Measure and return the table rows."""
    lines = configmap_lines(EVENTS)
    stream = b"".join(line + b"\n" for line in lines)
    average = len(stream) / EVENTS
    small, large = chunked(stream, SMALL), chunked(stream, LARGE)
    per_large_chunk = LARGE // int(average)
    inputs = f"{EVENTS:,} ConfigMap events, {average:.0f} B each"

    use_standard_json()
    runs: dict[str, tuple[Callable[[], int], int, int]] = {
        "presplit": (presplit(lines), EVENTS, ROUNDS),
        "scan": (scanner_alone(lines), EVENTS, ROUNDS),
        "ref16K": (reference(small), EVENTS, ROUNDS),
        "ref8M": (reference(large), EVENTS, ROUNDS),
        "std16K": (decode_all(small), EVENTS, ROUNDS),
        "std8M": (decode_all(large), EVENTS, ROUNDS),
        "stdraw16K": (decode_all(small, keep_raw=True), EVENTS, ROUNDS),
        "std8Mnopause": (decode_all(large, gc_pause=False), EVENTS, ROUNDS),
        "pull16K": (pull_all(small), EVENTS, ROUNDS),
        "pull8M": (pull_all(large), EVENTS, ROUNDS),
        "keep16K": (decode_keeping(small), EVENTS, OFFICIAL_ROUNDS),
        "keep8M": (decode_keeping(large), EVENTS, OFFICIAL_ROUNDS),
    }
    version = official_version()
    deserialize_kwarg = False
    # The official client at 8 MiB: the events that end in the first two chunks.
    large_events = stream.count(b"\n", 0, 2 * LARGE)
    large_official = chunked(stream[: stream.rfind(b"\n", 0, 2 * LARGE) + 1], LARGE)
    if version is not None:
        from kubernetes import watch

        deserialize_kwarg = "deserialize" in inspect.getsource(watch.Watch.stream)
        check_official(small[:20])
        runs["k8s16K"] = (official(small), EVENTS, OFFICIAL_ROUNDS)
        runs["k8s8M"] = (official(large_official), large_events, OFFICIAL_ROUNDS)
        if deserialize_kwarg:
            check_official(small[:20], deserialize=False)
            runs["k8sraw16K"] = (official(small, deserialize=False), EVENTS, OFFICIAL_ROUNDS)
            runs["k8sraw8M"] = (
                official(large_official, deserialize=False),
                large_events,
                OFFICIAL_ROUNDS,
            )
    best = best_of(runs)
    fast = use_fast_json()
    try:
        if fast:
            best.update(
                best_of(
                    {
                        "orjson16K": (decode_all(small), EVENTS, ROUNDS),
                        "orjson8M": (decode_all(large), EVENTS, ROUNDS),
                        "orjsonpull16K": (pull_all(small), EVENTS, ROUNDS),
                        "orjsonpull8M": (pull_all(large), EVENTS, ROUNDS),
                    }
                )
            )
    finally:
        use_standard_json()
    msgspec = use_msgspec_json()
    try:
        if msgspec:
            best.update(
                best_of(
                    {
                        "msgspec16K": (decode_all(small), EVENTS, ROUNDS),
                        "msgspec8M": (decode_all(large), EVENTS, ROUNDS),
                        "msgspecraw16K": (decode_all(small, keep_raw=True), EVENTS, ROUNDS),
                    }
                )
            )
    finally:
        use_standard_json()
    faults = {
        label: faults_and_system_time(decode_all(chunks), EVENTS)
        for label, chunks in (("16 KiB", small), ("8 MiB", large))
    }

    tiny_lines = lines[:2000]
    tiny_stream = b"".join(line + b"\n" for line in tiny_lines)
    tiny = best_of(
        {
            "presplit": (presplit(tiny_lines), 2000, 2),
            "1B": (decode_all(chunked(tiny_stream, 1)), 2000, 2),
        }
    )

    us = {name: 1e6 * seconds / EVENTS for name, seconds in best.items()}
    for name in ("k8s8M", "k8sraw8M"):
        if name in best:
            us[name] = 1e6 * best[name] / large_events
    floor = us["presplit"]
    refs = {"16 KiB": us["ref16K"], "8 MiB": us["ref8M"]}
    out = [
        Row(
            "watch: bare json.loads loop, lines split in advance (floor)",
            inputs + ", each result dropped at once",
            f"{floor:.2f} µs/event",
        ),
    ]
    for label, key in (("16 KiB", "ref16K"), ("8 MiB", "ref8M")):
        out.append(
            Row(
                f"watch: bare json.loads loop, same work, {label} chunks (reference)",
                inputs + ", each chunk's results built as one list",
                f"{us[key]:.2f} µs/event ({us[key] / floor:.3f}x the floor)",
            )
        )
    # Targets are judged against the floor: the bare loop over pre-split lines.
    for label, key in (("16 KiB", "std16K"), ("8 MiB", "std8M")):
        ratio = us[key] / floor
        out.append(
            Row(
                f"watch: WatchDecoder, stdlib json, {label} chunks",
                inputs,
                f"{ratio:.3f}x the floor ({us[key]:.2f} µs/event; "
                f"{us[key] / refs[label]:.3f}x the same-work reference)",
                "≤ 1.1x the floor",
                ratio <= 1.1,
            )
        )
    if fast:
        for label, key in (("16 KiB", "orjson16K"), ("8 MiB", "orjson8M")):
            ratio = us[key] / floor
            out.append(
                Row(
                    f"watch: WatchDecoder, orjson, {label} chunks",
                    inputs,
                    f"{ratio:.3f}x the floor ({us[key]:.2f} µs/event; "
                    f"{us[key] / refs[label]:.3f}x the same-work reference)",
                    "≤ 0.6x the floor",
                    ratio <= 0.6,
                )
            )
    else:
        out.append(
            Row("watch: WatchDecoder, orjson", inputs, "orjson not installed", "≤ 0.6x", False)
        )
    if msgspec:
        for label, key in (("16 KiB", "msgspec16K"), ("8 MiB", "msgspec8M")):
            out.append(
                Row(
                    f"watch: WatchDecoder, msgspec, {label} chunks",
                    inputs,
                    f"{us[key] / floor:.3f}x the floor ({us[key]:.2f} µs/event; "
                    f"{us[key] / refs[label]:.3f}x the same-work reference)",
                )
            )
    raw = [f"stdlib {us['stdraw16K']:.2f} vs {us['std16K']:.2f} µs/event"]
    if msgspec:
        raw.append(f"msgspec {us['msgspecraw16K']:.2f} vs {us['msgspec16K']:.2f} µs/event")
    out.append(
        Row(
            "watch: WatchDecoder(keep_raw=True), each object's bytes kept too, 16 KiB chunks",
            inputs + ", every line of the apiserver's compact shape",
            "; ".join(raw),
        )
    )
    per_line = us["std8M"] / us["std16K"]
    out.append(
        Row(
            "watch: per-event cost, 8 MiB vs 16 KiB chunks (stdlib)",
            inputs + f", {per_large_chunk:,} events per 8 MiB chunk",
            f"{per_line:.3f}x (the reference: {us['ref8M'] / us['ref16K']:.3f}x)",
            "≤ 1.3x",
            per_line <= 1.3,
        )
    )
    (small_faults, small_sys), (large_faults, large_sys) = faults["16 KiB"], faults["8 MiB"]
    out.append(
        Row(
            "watch: per-event cost, 8 MiB vs 16 KiB chunks (stdlib): where the extra goes",
            inputs + ", one run each, getrusage",
            f"minor page faults {large_faults:.2f} vs {small_faults:.2f} per event; system CPU "
            f"{large_sys:.2f} vs {small_sys:.2f} µs/event, of an extra "
            f"{us['std8M'] - us['std16K']:.2f} µs/event",
        )
    )
    pull = us["pull8M"] / us["pull16K"]
    out.append(
        Row(
            "watch: per-event cost, 8 MiB vs 16 KiB chunks, pull side (stdlib, events())",
            inputs + f", {PULL_WINDOW // 1024} KiB windows, each event dropped at once",
            f"{pull:.3f}x ({us['pull16K']:.2f} and {us['pull8M']:.2f} µs/event; 8 MiB pulled "
            f"vs 16 KiB receive_data: {us['pull8M'] / us['std16K']:.3f}x)",
            "≤ 1.3x",
            pull <= 1.3,
        )
    )
    if fast:
        out.append(
            Row(
                "watch: per-event cost, 8 MiB vs 16 KiB chunks, pull side (orjson, events())",
                inputs,
                f"{us['orjsonpull8M'] / us['orjsonpull16K']:.3f}x ({us['orjsonpull16K']:.2f} "
                f"and {us['orjsonpull8M']:.2f} µs/event; receive_data: "
                f"{us['orjson8M'] / us['orjson16K']:.3f}x)",
            )
        )
    out.append(
        Row(
            "watch: per-event cost, 8 MiB vs 16 KiB chunks, GC pause off (stdlib, gc_pause=False)",
            inputs,
            f"{us['std8Mnopause'] / us['std16K']:.3f}x ({us['std8Mnopause']:.2f} µs/event; "
            f"the pause saves {us['std8Mnopause'] - us['std8M']:.2f} µs/event)",
        )
    )
    out.append(
        Row(
            "watch: per-event cost, 8 MiB vs 16 KiB chunks, every event kept (stdlib)",
            inputs + ", each event kept in a dict by name, as a store does",
            f"{us['keep8M'] / us['keep16K']:.3f}x ({us['keep16K']:.2f} and "
            f"{us['keep8M']:.2f} µs/event)",
        )
    )
    one = tiny["1B"]
    out.append(
        Row(
            "watch: WatchDecoder, 1-byte chunks (stdlib)",
            f"2,000 events, {len(tiny_stream):,} calls",
            f"{one / len(tiny_stream) * 1e9:.0f} ns/byte, {one / tiny['presplit']:.1f}x the floor",
        )
    )
    out += official_rows(us, version, deserialize_kwarg, inputs, large_events)
    if version is not None:
        reach = us["k8s16K"] / us["scan"]
        out.append(
            Row(
                "watch: the stdlib's C scanner alone (the least a stdlib decoder can cost), "
                "against the official typed client, 16 KiB chunks",
                inputs + ", lines decoded to text in advance, each result dropped at once",
                f"{us['scan']:.2f} µs/event: the official client's {us['k8s16K']:.1f} µs/event "
                f"is {reach:.1f}x it, so no stdlib decoder can be {TYPED_TARGET}x faster "
                f"({'reachable' if reach >= TYPED_TARGET else 'not reachable'} on this run); "
                f"the decoder is {us['std16K'] / us['scan']:.2f}x the scanner alone",
            )
        )
    return out


def official_rows(
    us: dict[str, float],
    version: str | None,
    deserialize_kwarg: bool,
    inputs: str,
    large_events: int,
) -> list[Row]:
    """The rows comparing KubeMoon with the official ``kubernetes`` client."""
    name = f"kubernetes {version}" if version else "kubernetes"
    if version is None:
        return [
            Row(
                "watch: official client, Watch().stream typed",
                inputs,
                "kubernetes not installed (bench/requirements-watch.txt)",
                f"KubeMoon ≥ {TYPED_TARGET}x faster",
                False,
            )
        ]
    large_inputs = f"the first {large_events:,} of the events (two 8 MiB chunks), per event"
    out = []
    for label, key, ours, extra in (
        ("16 KiB", "k8s16K", "std16K", inputs),
        ("8 MiB", "k8s8M", "std8M", large_inputs),
    ):
        speedup = us[key] / us[ours]
        out.append(
            Row(
                f"watch: {name} Watch().stream typed (V1ConfigMap), {label} chunks",
                extra,
                f"{us[key]:.1f} µs/event; KubeMoon (stdlib json) {speedup:.1f}x faster",
                f"KubeMoon ≥ {TYPED_TARGET}x faster",
                speedup >= TYPED_TARGET,
            )
        )
        for backend in ("orjson", "msgspec"):
            fast = backend + ours[3:]
            if fast in us:
                faster = us[key] / us[fast]
                out.append(
                    Row(
                        f"watch: {name} Watch().stream typed (V1ConfigMap), {label} chunks, "
                        f"against KubeMoon with {backend}",
                        extra,
                        f"{us[key]:.1f} µs/event; KubeMoon ({backend}) {faster:.1f}x faster "
                        f"({us[fast]:.2f} µs/event)",
                        f"KubeMoon ≥ {TYPED_TARGET}x faster",
                        faster >= TYPED_TARGET,
                    )
                )
    if deserialize_kwarg:
        for label, key, ours, extra in (
            ("16 KiB", "k8sraw16K", "std16K", inputs),
            ("8 MiB", "k8sraw8M", "std8M", large_inputs),
        ):
            out.append(
                Row(
                    f"watch: {name} Watch().stream deserialize=False (dicts), {label} chunks",
                    extra,
                    f"{us[key]:.1f} µs/event; KubeMoon (stdlib json) "
                    f"{us[key] / us[ours]:.1f}x faster",
                )
            )
    else:
        out.append(
            Row(
                f"watch: {name} Watch().stream deserialize=False",
                inputs,
                "this version has no deserialize argument",
            )
        )
    worse = [f"typed {us['k8s8M'] / us['k8s16K']:.1f}x"]
    if deserialize_kwarg:
        worse.append(f"deserialize=False {us['k8sraw8M'] / us['k8sraw16K']:.1f}x")
    out.append(
        Row(
            f"watch: {name} per-event cost, 8 MiB vs 16 KiB chunks",
            "as above",
            ", ".join(worse) + f" (KubeMoon: {us['std8M'] / us['std16K']:.2f}x)",
        )
    )
    return out


if __name__ == "__main__":
    from _table import render

    start = time.perf_counter()
    table = render(rows(), "bench_watch alone")
    print(table)
    print(f"({time.perf_counter() - start:.0f} s)", file=sys.stderr)
