"""``python -m pipeline.runtime inspect <blob or bundle dir>``: print what a blob or bundle holds."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .blob import read_header
from .bundle import open_bundle
from .errors import BundleError


def inspect(path: Path) -> str:
    """A readable description of a blob file or a bundle folder."""
    if path.is_dir():
        bundle = open_bundle(path)
        lines = [f"bundle {path} (platform {bundle.platform}): {len(bundle.names)} model(s)"]
        for name in bundle.names:
            info = bundle.info(name)
            lines.append(
                f"  {name}: {info['format']}, {info['file']}, {info['blob_size']:,} B"
                f" (model {info.get('model_size', 0):,} B)"
            )
        return "\n".join(lines)
    with path.open("rb") as stream:
        head = stream.read(1 << 21)
    header, _ = read_header(head)
    return json.dumps({"file": str(path), **header.to_dict()}, indent=2)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipeline.runtime", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    inspect_parser = commands.add_parser("inspect", help="print a blob's header or a bundle's models")
    inspect_parser.add_argument("path", type=Path)
    args = parser.parse_args(argv)
    try:
        print(inspect(args.path))
    except (BundleError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
