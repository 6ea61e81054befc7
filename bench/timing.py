"""Side-by-side timing: every variant runs once per round, in a rotating order, and medians are compared.

The machine is shared and noisy, so variants that are compared are measured in the same rounds, never
in separate blocks, and only ratios of medians are reported as results.
"""

from __future__ import annotations

import gc
import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def interleaved(
    variants: Mapping[str, Callable[[], object]], repeats: int, *, warmup: bool = True, label: str = ""
) -> dict[str, list[float]]:
    """Wall times of each variant over ``repeats`` rounds; round ``i`` starts at variant ``i % n``.

    The value a variant returns is dropped after its clock stops (freeing a session is not part of
    creating it), and garbage is collected before each call.
    """
    names = list(variants)
    if warmup:  # first calls pay for lazy initialization (kernel registries, allocators, imports)
        for name in names:
            _timed(variants[name])
    times: dict[str, list[float]] = {name: [] for name in names}
    for round_ in range(repeats):
        order = names[round_ % len(names) :] + names[: round_ % len(names)]
        for name in order:
            times[name].append(_timed(variants[name]))
        if label:
            print(f"  {label}: round {round_ + 1}/{repeats}", file=sys.stderr)
    return times


def _timed(call: Callable[[], object]) -> float:
    gc.collect()
    start = time.perf_counter()
    result = call()
    elapsed = time.perf_counter() - start
    del result
    gc.collect()
    return elapsed


def interleaved_phases(
    variants: Mapping[str, Callable[[], Mapping[str, float]]],
    repeats: int,
    *,
    warmup: bool = True,
    label: str = "",
) -> dict[str, dict[str, list[float]]]:
    """``interleaved`` for variants that time their own phases (e.g. session ready, then first run).

    Each call returns {phase: seconds}; the result is {variant: {phase: [seconds per round]}}.
    """
    names = list(variants)
    if warmup:
        for name in names:
            _phases(variants[name])
    times: dict[str, dict[str, list[float]]] = {name: {} for name in names}
    for round_ in range(repeats):
        order = names[round_ % len(names) :] + names[: round_ % len(names)]
        for name in order:
            for phase, seconds in _phases(variants[name]).items():
                times[name].setdefault(phase, []).append(seconds)
        if label:
            print(f"  {label}: round {round_ + 1}/{repeats}", file=sys.stderr)
    return times


def _phases(call: Callable[[], Mapping[str, float]]) -> Mapping[str, float]:
    gc.collect()
    result = call()
    gc.collect()
    return result
