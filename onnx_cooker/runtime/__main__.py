"""``python -m onnx_cooker.runtime inspect <blob or bundle dir>``: print what a blob or bundle holds;
``python -m onnx_cooker.runtime unpack <blob> <folder>``: write the model file (and its weights file)."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import sys
from pathlib import Path

from .blob import unpack_blob
from .bundle import open_bundle
from .constants import MANIFEST_NAME, Precision
from .errors import BundleError, CorruptBlobError, ManifestError
from .frames import Frame
from .header import BlobHeader, read_header_from_file
from .hints import near_bundle
from .sections import plain_file_name


def inspect(path: Path) -> str:
    """A readable description of a blob file or a bundle folder (or its manifest.json, which
    open_bundle takes for its folder)."""
    if path.is_dir() or path.name == MANIFEST_NAME:
        bundle = open_bundle(path)
        lines = [f"bundle {path} (platform {bundle.platform}): {len(bundle.names)} model(s)"]
        for name in bundle.names:
            info = bundle.info(name)
            try:
                lines.append(
                    f"  {name}: {info['format']}, {info['file']}, {info['blob_size']:,} B"
                    f" (model {info.get('model_size', 0):,} B){_precision(info)}"
                )
                lines += _signature(info)
                lines += _placement(info)
            except (KeyError, TypeError, ValueError, AttributeError) as exc:  # fields the loader never reads
                raise ManifestError(
                    f"{path / 'manifest.json'}: the entry of model {name!r} has a field of the wrong type "
                    f"({type(exc).__name__}: {exc}); re-run `onnx-cooker cook` to write it again"
                ) from None
        return "\n".join(lines)
    with path.open("rb") as stream:
        header = read_header_from_file(stream)
    text = json.dumps({"file": str(path), **header.to_dict()}, indent=2)
    return "\n".join([text, "# unpack with stock tools:", *stock_unpack_commands(header, str(path))])


def _signature(info: dict) -> list[str]:
    """The model's inputs and outputs (name, type, shape) and the tools its cook key was made with."""
    lines = []
    for kind, label in (("inputs", "in "), ("outputs", "out")):
        for value in info.get(kind) or []:
            shape = value.get("shape")
            dims = (
                "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"
                if shape is not None
                else ""
            )
            lines.append(f"    {label} {value.get('name')}: {value.get('type')} {dims}".rstrip())
    tools = info.get("cooked_with") or {}
    if tools:
        lines.append(
            "    cooked with " + ", ".join(f"{tool} {version}" for tool, version in sorted(tools.items()))
        )
    return lines


def placement_text(placement: dict) -> str:
    """Where the runtime check found a model's nodes to run, in one line (manifest ``placement``)."""
    ep = placement.get("preferred", "?")
    if not placement.get("measured"):
        return f"on {ep}: not measured ({placement.get('reason', 'no reason recorded')})"
    nodes = ", ".join(f"{name} {count}" for name, count in placement.get("nodes", {}).items())
    cpu = f", CPU: {', '.join(placement['cpu_ops'])}" if placement.get("cpu_ops") else ""
    time = f", {placement['time_share']:.0%} of kernel time" if "time_share" in placement else ""
    return (
        f"{placement.get('coverage', 0):.0%} of nodes on {ep}{time} ({nodes}{cpu}; "
        f"{placement.get('measured_with', '?')}, {placement.get('method', '?')})"
    )


def _placement(info: dict) -> list[str]:
    placement = info.get("placement")
    return [f"    placement: {placement_text(placement)}"] if isinstance(placement, dict) else []


def _precision(info: dict) -> str:
    """``, fp16 by <converter>, worst cosine 0.9998 vs fp32`` for a variant; nothing for fp32."""
    precision = info.get("precision") or {}
    if precision.get("precision", Precision.FP32.value) == Precision.FP32:
        return ""
    outputs = (precision.get("accuracy") or {}).get("outputs", [])
    cosines = [row["cosine"] for row in outputs if row.get("cosine") is not None]
    worst = f", worst cosine {min(cosines):.6f} vs fp32" if cosines else ""
    return f", {precision['precision']} by {precision.get('converter', '?')}{worst}"


def model_file_name(header: BlobHeader) -> str:
    return f"{header.name.rsplit('/', 1)[-1]}.{header.model_format}"


def stock_unpack_commands(header: BlobHeader, blob: str) -> list[str]:
    """Shell commands (zstd, head, tail) that write the model file, and its weights file, from ``blob``."""
    model, blob = shlex.quote(model_file_name(header)), shlex.quote(blob)
    data_file = shlex.quote(header.weights.file) if header.weights is not None else ""
    graph = [f for f in header.frames if f.section == "graph"]
    weights = [f for f in header.frames if f.section == "weights"]
    if header.version >= 3:  # each section: its raw extent cut out, or its zstd frames decoded
        return _frame_commands(graph, blob, model) + (
            _frame_commands(weights, blob, data_file) if weights else []
        )
    if header.version < 2 or (not weights and all(f.codec == "zstd" for f in graph)):
        return [f"zstd -d {blob} -o {model}"]
    if all(f.codec == "zstd" for f in graph) and all(f.codec == "raw" for f in weights):
        # zstd writes the graph (it skips the header and raw frames); the weights are cut out
        return [f"zstd -d {blob} -o {model}", *_frame_commands(weights, blob, data_file)]
    if all(f.codec == "zstd" for f in (*graph, *weights)):  # zstd writes graph then weights
        both = shlex.quote(f"{model_file_name(header)}.both")
        return [
            f"zstd -d {blob} -o {both}",
            f"head -c {header.graph_size} {both} > {model}",
            f"tail -c +{(header.graph_size or 0) + 1} {both} > {data_file}",
            f"rm {both}",
        ]
    # Raw frames among the graph's (an ORT file's weights): every frame, in order.
    return _frame_commands(graph, blob, model) + (
        _frame_commands(weights, blob, data_file) if weights else []
    )


def _frame_commands(frames: list[Frame], blob: str, output: str) -> list[str]:
    """One command per raw frame (its content cut out) or run of adjacent zstd frames (decoded in
    one go: zstd reads concatenated frames), appending to ``output`` in order.

    ``head`` cuts the end and ``tail`` the start, in that order: every command of the pipe reads
    its input to the end, so none dies of SIGPIPE and the recipe holds in a ``set -o pipefail``
    script (``tail | head`` exits 141 there whenever ``head`` stops reading first)."""
    runs: list[list[Frame]] = []
    for frame in frames:
        if (
            runs
            and frame.codec == "zstd" == runs[-1][-1].codec
            and runs[-1][-1].offset + runs[-1][-1].size == frame.offset
        ):
            runs[-1].append(frame)
        else:
            runs.append([frame])
    lines = []
    for index, run in enumerate(runs):
        redirect = ">" if index == 0 else ">>"
        first = run[0]
        if first.codec == "raw":
            end = first.data_offset + first.content_size
            lines.append(f"head -c {end} {blob} | tail -c +{first.data_offset + 1} {redirect} {output}")
        else:
            end = first.offset + sum(f.size for f in run)
            cut = f"head -c {end} {blob} | tail -c +{first.offset + 1}"
            lines.append(f"{cut} | zstd -dcq {redirect} {output}")
    return lines


class OutputError(Exception):
    """The unpacked files cannot be written where the command was told to write them."""


def unpack(blob: Path, folder: Path) -> str:
    """Write the model file of ``blob`` (and its weights file) into ``folder``; returns what it wrote."""
    if blob.is_dir():
        blobs = sorted(
            str(path.relative_to(blob)) for path in blob.rglob("*.ocb") if ".entries" not in path.parts
        )
        example = f", e.g. {blob / blobs[0]}" if blobs else ""
        raise BundleError(
            f"{blob} is a folder; unpack takes one blob file (.ocb){example} (`inspect {blob}` names each "
            "model's blob)"
        )
    unpacked = unpack_blob(blob.read_bytes(), max_model_size=1 << 62)
    if not plain_file_name(model_file_name(unpacked.header)):  # the weights file's is checked on reading
        raise CorruptBlobError(
            f"{blob}: its header's model name {unpacked.header.name!r} makes no plain file name to "
            "write; the blob is damaged or crafted (re-cook the model)"
        )
    try:
        if folder.exists() and not folder.is_dir():
            raise OutputError(
                f"{folder} is a file, not a folder; give the folder to write the model file into"
            )
        folder.mkdir(parents=True, exist_ok=True)
        written = [folder / model_file_name(unpacked.header)]
        written[0].write_bytes(unpacked.model)
        if unpacked.header.weights is not None:
            written.append(folder / unpacked.header.weights.file)
            with written[1].open("wb") as stream:
                for _, view in unpacked.segments:
                    stream.write(view)
    except OSError as exc:
        where = exc.filename or folder
        raise OutputError(
            f"cannot write into the output folder {folder}: {where}: {exc.strerror or exc}; give a folder "
            "this user can create and write"
        ) from None
    return "\n".join(str(path) for path in written)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m onnx_cooker.runtime",
        description="Inspect a cooked blob or bundle, or unpack a blob into its model file and weights file.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    inspect_parser = commands.add_parser("inspect", help="print a blob's header or a bundle's models")
    inspect_parser.add_argument("path", type=Path)
    unpack_parser = commands.add_parser("unpack", help="write a blob's model file and its weights file")
    unpack_parser.add_argument("blob", type=Path)
    unpack_parser.add_argument("folder", type=Path)
    args = parser.parse_args(argv)
    try:
        print(inspect(args.path) if args.command == "inspect" else unpack(args.blob, args.folder))
        sys.stdout.flush()  # here, where a closed pipe can be told apart from an error
    except BrokenPipeError:
        return _pipe_closed()
    except OutputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except FileNotFoundError as exc:
        given = args.path if args.command == "inspect" else args.blob
        given = Path(exc.filename) if exc.filename else given
        near = near_bundle(given)
        wanted = (
            "a blob (.ocb) or a bundle folder (build/<platform>)"
            if args.command == "inspect"
            else "a blob (.ocb)"
        )
        fix = f"did you mean {near}?" if near else f"give {wanted}"
        print(f"error: {given}: no such file or folder; {fix}", file=sys.stderr)
        return 1
    except (BundleError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


def _pipe_closed() -> int:
    """The reader of our output went away (``inspect ... | head``): stop quietly, as a command killed
    by SIGPIPE does (status 141 in a shell), with nothing left to flush into the closed pipe."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except OSError:
        pass
    return 128 + getattr(signal, "SIGPIPE", 13)


if __name__ == "__main__":
    sys.exit(main())
