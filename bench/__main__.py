"""``python -m bench [--quick] [--output PATH]``: run the benchmarks and write bench/results.md."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .project import REPO, BenchError
from .run import FULL, QUICK, main


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description="Benchmark onnx-cooker side by side: load time, inference time, decompression, size, "
        "cook throughput, no-op rebuilds, peak memory. Run from the repository root.",
    )
    parser.add_argument(
        "--quick", action="store_true", help="tiny inputs and few repeats: a smoke test in seconds (CI)"
    )
    parser.add_argument(
        "--output",
        type=Path,
        default=REPO / "bench" / "results.md",
        help="report path (default: %(default)s)",
    )
    parser.add_argument(
        "--huge",
        action="store_true",
        help="also generate a model over 2 GB and record whether each platform cooks it and the loader "
        "loads it (needs ~8 GB of memory and ~6 GB of disk; never in --quick)",
    )
    parser.add_argument("--workdir", type=Path, help="where to create the temporary folder (needs ~3 GB)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder (logs, builds)")
    parser.add_argument(
        "--runtimes-dir",
        type=Path,
        default=REPO / "build" / ".runtimes",
        help="cache of the runtime check's onnxruntime environments, shared with `doit cook` "
        "(COOK_RUNTIMES_DIR; default: %(default)s)",
    )
    args = parser.parse_args(argv)
    if args.quick and args.huge:
        parser.error("--huge cannot be combined with --quick (the smoke run stays small)")
    return args


if __name__ == "__main__":
    args = parse(sys.argv[1:])
    try:
        config = QUICK if args.quick else FULL
        sys.exit(main(config, args.output, args.workdir, args.keep, args.runtimes_dir, huge=args.huge))
    except BenchError as exc:
        print(f"bench failed: {exc}", file=sys.stderr)
        sys.exit(1)
