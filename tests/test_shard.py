"""Splitting a cook across agents (onnx_cooker.farm.shard, COOK_SHARD): a deterministic, balanced share."""

from __future__ import annotations

from pathlib import Path

from onnx_cooker.build.plan import _passes, _shard_share
from onnx_cooker.farm.shard import Shard, assign
from onnx_cooker.farm.store import CacheConfig
from tests.models import mlp_model
from tests.test_cook import job_for, save, shipped_settings


def test_heaviest_first_onto_the_lightest_shard_whatever_the_order() -> None:
    weights = [("a", 9), ("b", 7), ("c", 5), ("d", 4), ("e", 3)]
    split = assign(weights, 2)
    assert split == assign(list(reversed(weights)), 2)
    assert split == {"a": 0, "b": 1, "c": 1, "d": 0, "e": 1}  # 9+4 against 7+5+3
    loads = [sum(w for item, w in weights if split[item] == shard) for shard in (0, 1)]
    assert sorted(loads) == [13, 15]


def test_a_cook_is_weighed_by_its_size_times_its_passes_over_the_model(tmp_path: Path) -> None:
    """A runtime-style reduced-build cook with a usability report (android, ios) goes over the model
    more often than a fixed-style one (console, windows-dml): the two heavy ones land on different
    shards, where sizes alone put both on one (measured: 16 s and 15 s against 10 s and 8 s)."""
    passes = {name: _passes(shipped_settings(name)) for name in ("android", "ios", "console", "windows-dml")}
    assert passes["android"] > passes["console"] and passes["ios"] > passes["windows-dml"]
    assert _passes(shipped_settings("console", precision="fp16")) == passes["console"] + 1

    save(mlp_model(), tmp_path / "assets", "big")
    jobs = [
        job_for(tmp_path / "assets", "big", shipped_settings(name), tmp_path / "build")
        for name in ("android", "ios", "console", "windows-dml")
    ]
    plans = [(None, [job]) for job in jobs]
    cache = CacheConfig(url=str(tmp_path / "cache"), mode="readwrite", required=False)
    shares = [_shard_share(plans, Shard(index, 2), cache) for index in (0, 1)]
    heavy = {id(jobs[0]), id(jobs[1])}
    assert all(len(share & heavy) == 1 for share in shares)
    assert shares[0] | shares[1] == {id(job) for job in jobs} and not shares[0] & shares[1]
