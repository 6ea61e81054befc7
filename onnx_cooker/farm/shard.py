"""Split a cook across build agents: ``COOK_SHARD=i/N`` picks agent i's share of the cook tasks.

Every agent computes the same split from the same checkout (no coordination): the (platform, model)
pairs are weighed by their source size, a proxy for cook time, and dealt heaviest first to the
lightest shard so far. Standard library only (task-loading time).
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass

from onnx_cooker.errors import CookError

SHARD_ENV = "COOK_SHARD"
_SHARD = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")


@dataclass(frozen=True)
class Shard:
    index: int  # 0-based
    count: int

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def shard_from_env(env: Mapping[str, str]) -> Shard | None:
    text = env.get(SHARD_ENV, "").strip()
    if not text:
        return None
    match = _SHARD.match(text)
    if match is None or not 0 <= int(match[1]) < int(match[2]):
        raise CookError(
            f"{SHARD_ENV}={text!r}: use i/N with 0 <= i < N, e.g. {SHARD_ENV}=0/4 on the first of four agents"
        )
    return Shard(int(match[1]), int(match[2]))


def assign(weights: Iterable[tuple[Hashable, int]], count: int) -> dict[Hashable, int]:
    """Each item's shard: heaviest first onto the lightest shard (ties: the lower index); items of
    equal weight in the order given, so the result depends only on the items, not on the agent."""
    loads = [0] * count
    shards: dict[Hashable, int] = {}
    for item, weight in sorted(weights, key=lambda pair: -pair[1]):  # stable: equal weights keep order
        lightest = min(range(count), key=lambda i: (loads[i], i))
        shards[item] = lightest
        loads[lightest] += max(weight, 1)
    return shards
