"""The ``onnx-cooker`` command (``main``): a studio's project file (``project``), ``init``, and the
cook's doit tasks run through doit's own ``DoitMain`` on that project.

The top layer: it may import every other part of ``pipeline``; nothing in ``pipeline`` imports it.
"""
