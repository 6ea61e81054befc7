"""Attributes the cook's onnxruntime writes at their default value on its own operators, which an
older onnxruntime's schema refuses: dropped from an ONNX graph cooked for an older target.

onnxruntime's own operators (``com.microsoft`` and its other domains) stay at version 1 while they
gain attributes. Its optimizers then write the new attribute at its default on every such node:
onnxruntime 1.32 at level ``basic`` adds ``weight_prepacked=0`` to each ``MatMulNBits`` (the 4-bit
weights of quantized LLMs), and onnxruntime 1.24.4 refuses the graph ("Unrecognized attribute:
weight_prepacked for operator MatMulNBits") although it loads the source. An attribute at its
schema's default means what its absence means (ONNX's rule for optional attributes), so dropping
it leaves the model the cook's onnxruntime verifies unchanged. The ONNX domains are left alone:
there a new attribute comes with a new opset version, which the opset guard checks.
"""

from __future__ import annotations

import functools

import onnx

from onnx_cooker.cook.facts import onnx_graphs

ONNX_DOMAINS = frozenset({"", "ai.onnx", "ai.onnx.ml", "ai.onnx.preview.training"})


@functools.cache
def _schema_defaults() -> dict[tuple[str, str], list[tuple[int, dict[str, onnx.AttributeProto]]]]:
    """(domain, op type) -> [(since_version, {attribute: its default})], newest first, for the
    installed onnxruntime's own operators (its schema table: about 0.1 s, once per process)."""
    from onnxruntime.capi import _pybind_state

    table: dict[tuple[str, str], list[tuple[int, dict[str, onnx.AttributeProto]]]] = {}
    for schema in _pybind_state.get_all_operator_schema():
        if schema.domain in ONNX_DOMAINS:
            continue
        defaults = {}
        for name, attribute in schema.attributes.items():
            raw = getattr(attribute, "_default_value", b"")
            if raw:
                default = onnx.AttributeProto()
                default.ParseFromString(raw)
                if default.type != onnx.AttributeProto.UNDEFINED:
                    defaults[name] = default
        table.setdefault((schema.domain, schema.name), []).append((schema.since_version, defaults))
    for versions in table.values():
        versions.sort(key=lambda entry: entry[0], reverse=True)
    return table


def _defaults_for(node: onnx.NodeProto, opsets: dict[str, int]) -> dict[str, onnx.AttributeProto]:
    versions = _schema_defaults().get((node.domain, node.op_type), [])
    opset = opsets.get(node.domain, 1)
    return next((defaults for since, defaults in versions if since <= opset), {})


def _same(value: onnx.AttributeProto, default: onnx.AttributeProto) -> bool:
    if value.type != default.type:
        return False
    return onnx.helper.get_attribute_value(value) == onnx.helper.get_attribute_value(default)


def drop_default_attributes(model: onnx.ModelProto) -> list[str]:
    """Drop, in place, each attribute of an onnxruntime operator that holds its schema's default
    (main graph and subgraphs). Returns ``"<op type>.<attribute>"`` of each kind dropped, sorted."""
    opsets = {o.domain: o.version for o in model.opset_import}
    dropped: set[str] = set()
    for graph in onnx_graphs(model.graph):
        for node in graph.node:
            if node.domain in ONNX_DOMAINS:
                continue
            defaults = _defaults_for(node, opsets)
            at_default = {a.name for a in node.attribute if a.name in defaults and _same(a, defaults[a.name])}
            if at_default:
                dropped.update(f"{node.op_type}.{name}" for name in at_default)
                kept = [a for a in node.attribute if a.name not in at_default]
                del node.attribute[:]
                node.attribute.extend(kept)
    return sorted(dropped)
