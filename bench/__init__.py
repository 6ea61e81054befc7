"""Benchmarks of onnx-cooker: session-ready time, inference time, decompression,
size, cook throughput, no-op rebuilds, peak memory, and a model over 2 GB (``--huge``).

``python -m bench`` (from the repository root) builds its own inputs in a temporary folder (a set of
generated models, see ``bench/models.py``, plus the example assets), cooks them with the real ``doit``
on a temporary copy of the project, measures every variant side by side and writes
``bench/results.md``; ``python -m bench --quick`` is the seconds-long smoke run CI uses.
"""
