"""The build farm: a shared cook cache in a folder or an S3 bucket (``COOK_CACHE``: ``store``,
``folder_store``, ``s3_store``, ``entry_check``, ``cache``), its housekeeping command
``python -m onnx_cooker.farm stats|prune`` (``housekeeping``, ``admin``) and the split of a cook across
agents (``shard``, ``COOK_SHARD``). It may import ``onnx_cooker.errors``, ``onnx_cooker.fsutil`` and
``onnx_cooker.runtime`` (the blob layout, onnxruntime versions), and numpy only inside a function; never
``onnx_cooker.settings``, ``onnx_cooker.build`` or ``onnx_cooker.cook``, which use it. What the housekeeping
command loads (``admin``, ``housekeeping``, ``store``) stays standard library only, for a file server
with a bare Python.
"""
