"""Benchmarks of onnx-cooker (issue 5): load time, size, cook throughput, no-op rebuilds, peak memory.

``python -m bench`` (from the repository root) builds its own inputs in a temporary folder, cooks them
with the real ``doit`` on a temporary copy of the project, measures every variant side by side and
writes ``bench/results.md``; ``python -m bench --quick`` is the seconds-long smoke run CI uses.
"""
