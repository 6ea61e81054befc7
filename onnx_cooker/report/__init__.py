"""The cook report: ``<build>/report.html`` from what a build wrote (manifests, step times, failures)
and the release diff between two builds (``python -m onnx_cooker.report``). Standard library only.

Reads files; may import the package basics and ``onnx_cooker.runtime``'s constants, never the build,
cook, farm or settings layers.
"""
