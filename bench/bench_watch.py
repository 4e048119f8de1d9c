"""Watch decoding speed against a bare ``json.loads`` loop, in one process.

50,000 ConfigMap events of about 1 KB, decoded by ``WatchDecoder`` in 16 KiB and in 8 MiB
chunks, with the standard library and with orjson (``use_fast_json()``), side by side with
the reference: ``json.loads`` over the same lines already split, results thrown away.
Every figure is the best of several interleaved rounds (the machine is shared, the
minimum is the least disturbed run). Also: 2,000 events in 1-byte chunks, and the per-line
cost at 8 MiB against 16 KiB.

A second reference, ``json.loads`` over each 8 MiB chunk's lines *keeping* the results, has
the shape the decoder's contract imposes (all events of a chunk returned together); it
shows how much of the 8 MiB cost is the memory of 8,000 live objects rather than the
decoder.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

from _table import Row

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kubemoon_core import use_fast_json, use_standard_json
from kubemoon_core._watch import WatchDecoder

EVENTS = 50_000
SMALL = 16 * 1024
LARGE = 8 * 1024 * 1024
ROUNDS = 5


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


def decode_all(chunks: list[bytes]) -> Callable[[], int]:
    def run() -> int:
        decoder = WatchDecoder()
        count = 0
        for chunk in chunks:
            count += len(decoder.receive_data(chunk))
        decoder.receive_data(b"")
        return count

    return run


def bare(lines: list[bytes]) -> Callable[[], int]:
    loads = json.loads

    def run() -> int:
        for line in lines:
            loads(line)
        return len(lines)

    return run


def bare_keeping(lines: list[bytes], per_chunk: int) -> Callable[[], int]:
    loads = json.loads
    groups = [lines[i : i + per_chunk] for i in range(0, len(lines), per_chunk)]

    def run() -> int:
        count = 0
        for group in groups:
            count += len([loads(line) for line in group])
        return count

    return run


def timed(run: Callable[[], int], expected: int) -> float:
    start = time.process_time()
    count = run()
    elapsed = time.process_time() - start
    assert count == expected, (count, expected)
    return elapsed


def best_of(runs: dict[str, Callable[[], int]], expected: int, rounds: int) -> dict[str, float]:
    """The minimum time of each run over ``rounds`` interleaved rounds."""
    best = {name: float("inf") for name in runs}
    for _ in range(rounds):
        for name, run in runs.items():
            best[name] = min(best[name], timed(run, expected))
    return best


def rows() -> list[Row]:
    """Measure and return the table rows."""
    lines = configmap_lines(EVENTS)
    stream = b"".join(line + b"\n" for line in lines)
    average = len(stream) / EVENTS
    small, large = chunked(stream, SMALL), chunked(stream, LARGE)
    per_large_chunk = LARGE // int(average)
    inputs = f"{EVENTS:,} ConfigMap events, {average:.0f} B each"

    use_standard_json()
    runs = {
        "bare": bare(lines),
        "keep8M": bare_keeping(lines, per_large_chunk),
        "std16K": decode_all(small),
        "std8M": decode_all(large),
    }
    best = best_of(runs, EVENTS, ROUNDS)
    fast = use_fast_json()
    try:
        if fast:
            best.update(
                best_of(
                    {"orjson16K": decode_all(small), "orjson8M": decode_all(large)},
                    EVENTS,
                    ROUNDS,
                )
            )
    finally:
        use_standard_json()

    tiny_lines = lines[:2000]
    tiny_stream = b"".join(line + b"\n" for line in tiny_lines)
    tiny = best_of({"bare": bare(tiny_lines), "1B": decode_all(chunked(tiny_stream, 1))}, 2000, 2)

    base = best["bare"]
    us = 1e6 / EVENTS
    out = [
        Row(
            "watch: bare json.loads loop (reference)",
            inputs + ", pre-split lines",
            f"{base * us:.2f} µs/event",
        ),
    ]
    for label, key in (("16 KiB", "std16K"), ("8 MiB", "std8M")):
        ratio = best[key] / base
        out.append(
            Row(
                f"watch: WatchDecoder, stdlib json, {label} chunks",
                inputs,
                f"{ratio:.3f}x the reference ({best[key] * us:.2f} µs/event)",
                "≤ 1.1x",
                ratio <= 1.1,
            )
        )
    keep = best["keep8M"] / base
    out.append(
        Row(
            "watch: json.loads keeping each 8 MiB chunk's results (2nd reference)",
            inputs + f", {per_large_chunk:,} per chunk",
            f"{keep:.3f}x the reference; decoder at 8 MiB = "
            f"{best['std8M'] / best['keep8M']:.3f}x this",
        )
    )
    if fast:
        for label, key in (("16 KiB", "orjson16K"), ("8 MiB", "orjson8M")):
            ratio = best[key] / base
            out.append(
                Row(
                    f"watch: WatchDecoder, orjson, {label} chunks",
                    inputs,
                    f"{ratio:.3f}x the stdlib reference",
                    "≤ 0.6x",
                    ratio <= 0.6,
                )
            )
    else:
        out.append(
            Row("watch: WatchDecoder, orjson", inputs, "orjson not installed", "≤ 0.6x", False)
        )
    per_line = best["std8M"] / best["std16K"]
    out.append(
        Row(
            "watch: per-event cost, 8 MiB vs 16 KiB chunks (stdlib)",
            inputs,
            f"{per_line:.3f}x",
            "≤ 1.3x",
            per_line <= 1.3,
        )
    )
    one = tiny["1B"]
    out.append(
        Row(
            "watch: WatchDecoder, 1-byte chunks (stdlib)",
            f"2,000 events, {len(tiny_stream):,} calls",
            f"{one / len(tiny_stream) * 1e9:.0f} ns/byte, {one / tiny['bare']:.1f}x the reference",
        )
    )
    return out


if __name__ == "__main__":
    from _table import render

    print(render(rows(), "bench_watch alone"))
