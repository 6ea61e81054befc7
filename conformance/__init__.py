"""Conformance runner: the ONNX backend test suite, cooked for every platform (docs/conformance.md)."""
