"""onnx-cooker: cook ONNX models into per-platform bundles.

This package root stays empty on purpose: ``import onnx_cooker.runtime`` must not pull in the
cooking side (onnx, yaml, doit).
"""
