"""The ``onnx-cooker`` command (``main``): a studio's project file (``project``), ``init``, and the
cook's doit tasks run through doit's own ``DoitMain`` on that project; output into a pipe whose reader
left (``pipes``).

The top layer: it may import every other part of ``onnx_cooker``; nothing in ``onnx_cooker`` imports it.
"""
