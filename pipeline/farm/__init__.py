"""The build farm: a shared cook cache in a folder or an S3 bucket (``COOK_CACHE``: ``store``,
``folder_store``, ``s3_store``, ``entry_check``, ``cache``), its housekeeping command
``python -m pipeline.farm stats|prune`` (``housekeeping``, ``admin``) and the split of a cook across
agents (``shard``, ``COOK_SHARD``). It may import ``pipeline.errors``, ``pipeline.fsutil`` and
``pipeline.runtime`` (the blob layout, onnxruntime versions), and numpy only inside a function; never
``pipeline.settings``, ``pipeline.build`` or ``pipeline.cook``, which use it. What the housekeeping
command loads (``admin``, ``housekeeping``, ``store``) stays standard library only, for a file server
with a bare Python.
"""
