"""The build layer: what ``doit cook`` runs. The doit tasks (``tasks``; what to cook: ``plan``; their
actions: ``actions``; the ``COOK_*`` settings: ``config``), one cook job run top to bottom
(``run_job``: cache lookup, cook on a miss, upload, commit), outputs put in place (``outputs``),
manifests and publishing, the up-to-date stamps, the build lock, the live progress and the runtime
check in each target onnxruntime (``target_check``).

The top layer: it may import every other part of ``onnx_cooker``; nothing else imports it
(docs/architecture.md; the contract in pyproject.toml).
"""
