"""The ``onnx-cooker`` command (``main``): a studio's project file (``project``), ``init``, and the
cook's doit tasks run through doit's own ``DoitMain`` on that project; output into a pipe whose reader
left (``pipes``).

The top layer: it may import every other part of ``pipeline``; nothing in ``pipeline`` imports it.
"""
