"""Settings: the table every setting is a row of (``table``), the platform profiles and per-model
``.cook.yaml`` files (``files``, ``yamlstrict``), their checks and the cascade that resolves them into
frozen ``CookSettings`` (``checks``, ``resolve``), EP rules, precision options, asset discovery, and
the generated docs (docs/settings.md's table, JSON schema: ``python -m onnx_cooker.settings.docs``).

May import ``onnx_cooker.runtime``'s constants and ``onnx_cooker.errors``; never the cook, build, farm or
report layers.
"""
