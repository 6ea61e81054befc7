"""Check and normalize (steps 1-2 of a cook): load the source model, fix what onnxruntime mishandles."""

from __future__ import annotations

import hashlib
import heapq
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import onnx
from onnx import external_data_helper

from onnx_cooker.cook.facts import default_opset
from onnx_cooker.cook.large import is_large
from onnx_cooker.errors import ModelError
from onnx_cooker.runtime.compat import RUNTIME_LIMITS
from onnx_cooker.settings.assets import AssetModel

# Initializers listed as graph inputs became optional with IR 4; below that, onnxruntime's
# basic-level ConstantSharing leaves required inputs with no data behind (docs/design.md, "Old models").
FIRST_IR_WITHOUT_INITIALIZER_INPUTS = 4
# A model that imports no default-domain opset (e.g. ai.onnx.ml only) gets one: onnxruntime would
# otherwise import its own newest when cooking, and the cooked model would need that runtime. The
# newest opset of the oldest supported runtime loads everywhere.
DEFAULT_OPSET_FOR_MODELS_WITHOUT_ONE = RUNTIME_LIMITS[0][1]


@dataclass(frozen=True)
class SourceRead:
    """The bytes of a model's source files, each read once, and what they were when read."""

    data: Mapping[Path, bytes]
    stamps: Mapping[str, list[Any]]  # path -> [size, mtime_ns, ctime_ns, sha256] (onnx_cooker.build.stamps)

    def sha256(self, path: Path) -> str:
        return str(self.stamps[str(path)][3])

    def size(self, path: Path) -> int:
        return int(self.stamps[str(path)][0])

    def release(self, paths: Iterable[Path]) -> None:
        """Let go of the bytes of ``paths`` (the model's files, once parsed: a 2 GB model's bytes
        would otherwise stay in memory for the whole cook); their stamps stay."""
        assert isinstance(self.data, dict)
        for path in paths:
            self.data.pop(path, None)


def read_sources(asset: AssetModel, known: Mapping[str, list[Any]] | None = None) -> SourceRead:
    """Read every source file of ``asset`` once: the cook uses exactly these bytes, and records their
    sha256 and the file state it read them in, so that a file changed while it is cooked is cooked
    again by the next ``doit cook`` (never taken as up to date). ``known``: digests just computed for
    the cache lookup, by path, with the file state they were computed in: a file still in that
    state (size and times, before and after the read) is not hashed again."""
    data, stamps = {}, {}
    for path in asset.source_files:
        with path.open("rb") as stream:
            info = os.fstat(stream.fileno())
            content = stream.read()
            after = os.fstat(stream.fileno())
        data[path] = content
        state = [info.st_size, info.st_mtime_ns, info.st_ctime_ns]
        earlier = (known or {}).get(str(path))
        unchanged = earlier is not None and list(earlier[:3]) == state == _state(after)
        stamps[str(path)] = [*state, earlier[3] if unchanged else hashlib.sha256(content).hexdigest()]
    return SourceRead(data, stamps)


def _state(info: os.stat_result) -> list[int]:
    return [info.st_size, info.st_mtime_ns, info.st_ctime_ns]


def load_source(asset: AssetModel, read: SourceRead | None = None) -> onnx.ModelProto:
    """Load, check and normalize ``asset``; external data is loaded into the returned proto.

    Errors carry the model file and name; with ``read``, the model is made from those bytes, not read
    from disk again.
    """
    try:
        return _load_source(asset, read or read_sources(asset))
    except ModelError as exc:
        raise exc.in_context(model_path=asset.path, model_name=asset.name) from None


# The first line of a Git LFS pointer file, what a checkout without `git lfs pull` holds
LFS_POINTER = b"version https://git-lfs.github.com/spec/"


def _load_source(asset: AssetModel, read: SourceRead) -> onnx.ModelProto:
    data = read.data[asset.path]
    if not data:
        raise ModelError(
            "the file is empty (0 bytes), not a model; re-export it from its training framework or "
            "restore it from source control"
        )
    if data.startswith(LFS_POINTER):
        raise ModelError(
            f"the file is a Git LFS pointer ({len(data)} bytes), not the model: fetch it with "
            "`git lfs pull` (on a build machine, `git lfs install` before the checkout)"
        )
    try:
        model = onnx.load_model_from_string(data)
    except Exception as exc:  # protobuf's DecodeError, OSError, ValueError... all mean the same here
        raise ModelError(
            f"the file is not a readable ONNX model ({type(exc).__name__}: {exc}); re-export it from its "
            "training framework or restore it from source control"
        ) from None
    if not model.HasField("graph"):  # bytes protobuf reads as a model of unknown fields, or none
        raise ModelError(
            f"the file holds no ONNX graph ({len(data):,} bytes that read as a model without one): not "
            "an ONNX model; re-export it from its training framework or restore it from source control"
        )
    _check_external_data(model, asset)
    try:
        _load_external_data(model, {path.name: read.data[path] for path in asset.external_data})
    except (OSError, ValueError) as exc:
        raise ModelError(f"cannot read its external data ({exc})") from None
    # Before the checker: an IR<4 model whose initializers are not all listed as inputs breaks an
    # IR-3 rule the checker enforces, yet onnxruntime runs it; as IR 4 it is valid.
    normalize(model)
    sort_nodes(model.graph)
    _check(model, asset)
    _check_loadable(model)
    import_default_opset(model)
    return model


def _load_external_data(model: onnx.ModelProto, files: Mapping[str, bytes]) -> None:
    """``onnx.external_data_helper.load_external_data_for_model``, from bytes already read."""
    for tensor in external_data_helper._get_all_tensors(model):
        if not external_data_helper.uses_external_data(tensor):
            continue
        info = external_data_helper.ExternalDataInfo(tensor)
        content = files[info.location]
        end = info.offset + info.length if info.length else len(content)
        if end > len(content):
            raise ValueError(
                f"tensor {tensor.name!r} reads bytes {info.offset:,}..{end:,} of {info.location}, which has "
                f"{len(content):,}"
            )
        tensor.raw_data = content[info.offset : end]
        tensor.data_location = onnx.TensorProto.DEFAULT
        del tensor.external_data[:]


def _check_external_data(model: onnx.ModelProto, asset: AssetModel) -> None:
    """External data must be one of the model's tracked sidecar files, inside the assets folder."""
    allowed = {path.name for path in asset.external_data}
    for tensor in external_data_helper._get_all_tensors(model):
        if not external_data_helper.uses_external_data(tensor):
            continue
        try:
            location = external_data_helper.ExternalDataInfo(tensor).location
        except ValueError as exc:  # a negative or non-numeric offset/length
            raise ModelError(
                f"tensor {tensor.name!r} has malformed external data fields ({exc}); re-save the "
                "model with its data beside it"
            ) from None
        resave = f"re-save it with its weights beside it in one tracked file: {resave_command(asset.path)}"
        if os.path.isabs(location) or os.path.normpath(location) != os.path.basename(location):
            where = "outside the model's folder" if _leaves(location) else "in a subfolder"
            raise ModelError(
                f"tensor {tensor.name!r} points at external data {location!r} {where}; the cook reads a "
                f"model's weights only from <stem>.onnx.data, <stem>.data or <stem>.onnx_data beside it: "
                + resave
            )
        if location not in allowed and not (asset.path.parent / location).exists():
            raise ModelError(
                f"tensor {tensor.name!r} keeps its weights in {location!r}, which is missing beside the "
                "model; copy the data file that came with the model next to it"
            )
        if location not in allowed:
            raise ModelError(
                f"tensor {tensor.name!r} keeps its weights in {location!r}, which is not tracked (the cook "
                "tracks <stem>.onnx.data, <stem>.data and <stem>.onnx_data beside the model, so that edits "
                "to the data re-cook it); " + resave
            )
        if (asset.path.parent / location).resolve().parent != asset.path.parent.resolve():
            raise ModelError(f"external data {location!r} is a link out of the model's folder")


def resave_command(path: Path) -> str:
    """The shell command, run in the model's folder, that re-saves it with every weight in
    ``<stem>.onnx.data`` beside it. It loads every weight first and removes an older
    ``<stem>.onnx.data`` before writing: ``onnx.save`` refuses to write into an existing data file
    (FileExistsError), and part of the weights may live there already."""
    model, data = path.name, path.with_suffix(".onnx.data").name
    script = (
        f"import onnx, os; m = onnx.load({model!r}); os.path.exists({data!r}) and os.remove({data!r}); "
        f"onnx.save(m, {model!r}, save_as_external_data=True, all_tensors_to_one_file=True, "
        f"location={data!r})"
    )
    return f'`python -c "{script}"` in its folder'


def _leaves(location: str) -> bool:
    """Whether a relative external-data location climbs out of the model's folder (``../w.bin``)."""
    return os.path.isabs(location) or os.path.normpath(location).split(os.sep)[0] == os.pardir


def _check(model: onnx.ModelProto, asset: AssetModel) -> None:
    # Not full_check: onnx 1.23's strict shape inference rejects valid models, e.g. MeanVariance-
    # Normalization-13 without `axes` (its function body's `Constant value_ints=@axes` misses the
    # default). onnxruntime infers shapes itself when optimize() loads the model, and refuses there.
    try:
        # Over 2 GB a model cannot be serialized for the checker: it checks the file and its data.
        onnx.checker.check_model(str(asset.path) if is_large(model) else model)
    except onnx.checker.ValidationError as exc:
        said = _checker_words(exc)
        if "hard links" in said:  # onnx's guard against hardlink attacks, on large models' data
            raise ModelError(
                f"the ONNX checker refuses the model's external data: {said}; make the data file a "
                "copy of its own (one link: `cp` it, rather than a hard link from a cache or a checkout)"
            ) from None
        raise ModelError(
            f"the model fails the ONNX checker: {said}; fix the model at its source (exporter) before cooking"
        ) from None


def _checker_words(exc: Exception, limit: int = 600) -> str:
    """The checker's whole message on one line: its first line alone can stop mid-sentence ("input
    'x' of node: " then the node's name and type on the next lines, "is not output of any previous
    nodes" after them)."""
    words = " ".join(str(exc).split()) or type(exc).__name__
    return words if len(words) <= limit else words[: limit - 3] + "..."


def _check_loadable(model: onnx.ModelProto) -> None:
    """What the checker lets through but no onnxruntime can cook, with the fix."""
    if not model.graph.output:
        raise ModelError(
            "the model has no graph outputs, so it computes nothing a game could read; re-export it with "
            "its outputs listed (e.g. `output_names=` in torch.onnx.export)"
        )
    release, newest_opset, _ = RUNTIME_LIMITS[-1]
    opset = default_opset(model)
    if opset > newest_opset:
        raise ModelError(
            f"the model imports opset {opset}, newer than any onnxruntime this cooker knows runs "
            f"(onnxruntime "
            f"{'.'.join(map(str, release))}: opset {newest_opset}); convert it with "
            f"`onnx.version_converter.convert_version(model, {newest_opset})` or re-export it with "
            f"opset {newest_opset} or older"
        )


def sort_nodes(graph: onnx.GraphProto) -> bool:
    """Put the graph's nodes in topological order (stable); True if it changed anything.

    The checker refuses unsorted nodes, onnxruntime sorts them itself: onnxruntime's own fp16
    converter (`keep_io_types=True`) writes its input Casts at the end. A graph with a cycle, or a
    node reading a value nothing produces, is left as is for the checker to name. Linear in the
    graph's size (Kahn's algorithm, the earliest ready node first): graphs of many thousand nodes
    are common.
    """
    available = {value.name for value in graph.input} | {tensor.name for tensor in graph.initializer}
    available |= {tensor.values.name for tensor in graph.sparse_initializer} | {""}
    nodes = list(graph.node)
    reads = [_reads(node) for node in nodes]
    if _in_order(nodes, reads, set(available)):
        return False
    producer = {name: index for index, node in enumerate(nodes) for name in node.output}
    waiting_on = [0] * len(nodes)  # producers in the graph each node still waits for
    readers: dict[int, list[int]] = {}
    for index, names in enumerate(reads):
        for source in {producer[name] for name in names - available if name in producer}:
            waiting_on[index] += 1
            readers.setdefault(source, []).append(index)
        if any(name not in available and name not in producer for name in names):
            return False  # reads a value nothing produces: the checker names it
    ready = [index for index, count in enumerate(waiting_on) if count == 0]
    heapq.heapify(ready)
    ordered = []
    while ready:
        index = heapq.heappop(ready)
        ordered.append(index)
        for reader in readers.get(index, ()):
            waiting_on[reader] -= 1
            if waiting_on[reader] == 0:
                heapq.heappush(ready, reader)
    if len(ordered) != len(nodes):
        return False  # a cycle
    sorted_nodes = [onnx.NodeProto.FromString(nodes[index].SerializeToString()) for index in ordered]
    del graph.node[:]
    graph.node.extend(sorted_nodes)
    return True


def _in_order(nodes: list[onnx.NodeProto], reads: list[set[str]], available: set[str]) -> bool:
    for node, names in zip(nodes, reads, strict=True):
        if not names <= available:
            return False
        available.update(node.output)
    return True


def _reads(node: onnx.NodeProto) -> set[str]:
    """Every value ``node`` reads, its subgraphs' reads from the outer scope included (an
    over-approximation: names a subgraph produces itself are left out)."""
    names = set(node.input)
    for attribute in node.attribute:
        for subgraph in (*attribute.graphs, *([attribute.g] if attribute.HasField("g") else [])):
            inner = {v.name for v in subgraph.input} | {t.name for t in subgraph.initializer}
            inner |= {name for n in subgraph.node for name in n.output}
            names |= {name for n in subgraph.node for name in _reads(n)} - inner
    return names


def normalize(model: onnx.ModelProto) -> bool:
    """Drop initializers from the graph inputs of an IR<4 model (raising it to IR 4). True if changed.

    onnxruntime.tools.remove_initializer_from_input does the same but refuses IR<4 models, which are
    exactly the ones that need it.
    """
    if model.ir_version >= FIRST_IR_WITHOUT_INITIALIZER_INPUTS:
        return False
    initializers = {tensor.name for tensor in model.graph.initializer}
    kept = [value for value in model.graph.input if value.name not in initializers]
    model.ir_version = FIRST_IR_WITHOUT_INITIALIZER_INPUTS
    if len(kept) == len(model.graph.input):
        return True
    del model.graph.input[:]
    model.graph.input.extend(kept)
    return True


def drop_initializer_inputs(model: onnx.ModelProto) -> list[str]:
    """Make the initializers an IR>=4 model also lists as graph inputs (overridable: onnxruntime
    neither folds nor fuses them) plain constants; the names dropped from the inputs (the
    ``overridable_initializers`` setting, ``drop``). IR<4 models are ``normalize``'s."""
    initializers = {tensor.name for tensor in model.graph.initializer}
    dropped = [value.name for value in model.graph.input if value.name in initializers]
    if dropped:
        kept = [value for value in model.graph.input if value.name not in initializers]
        del model.graph.input[:]
        model.graph.input.extend(kept)
    return dropped


def import_default_opset(model: onnx.ModelProto) -> bool:
    """Give a model that imports no default-domain opset one (DEFAULT_OPSET_FOR_MODELS_WITHOUT_ONE).

    True if changed. Such a model has no default-domain node (the checker refuses one without its
    import), so the version chosen changes nothing it computes.
    """
    if any(opset.domain in ("", "ai.onnx") for opset in model.opset_import):
        return False
    model.opset_import.append(onnx.helper.make_opsetid("", DEFAULT_OPSET_FOR_MODELS_WITHOUT_ONE))
    return True
