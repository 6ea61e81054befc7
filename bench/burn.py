"""A fixed CPU-bound workload shaped like a cook (zstd, sha256, protobuf-free Python), for the ceiling
of what running two processes at once can gain on this machine.

``python -m bench.burn SCALE`` does the work and exits; the caller times one copy alone against two
copies started together. Two real cores finish two copies in the time of one (ceiling 2.0).
"""

from __future__ import annotations

import hashlib
import sys

import numpy as np
import zstandard


def burn(scale: int) -> int:
    weights = np.random.default_rng(7).random(scale * (1 << 18), dtype=np.float32).tobytes()
    total = 0
    for _ in range(3):
        total += len(zstandard.ZstdCompressor(level=10).compress(weights))
        total += hashlib.sha256(weights).digest()[0]
        total += sum(i * i for i in range(scale * 50_000))
    return total


if __name__ == "__main__":
    burn(int(sys.argv[1]))
