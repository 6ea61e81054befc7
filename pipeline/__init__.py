"""onnx-cooker: cook ONNX models into per-platform bundles.

This package root stays empty on purpose: ``import pipeline.runtime`` must not pull in the
cooking side (onnx, yaml, doit).
"""
