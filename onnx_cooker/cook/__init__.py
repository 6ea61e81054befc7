"""The cook of one (platform, model), one module per step: read the sources (``source``), check and
fix shapes, make the precision variant and gate it (``precision``, ``checking``), repair for the
target (``downgrade``), optimize with the CPU EP only (``optimize``, ``large``), guard (``guard``,
``facts``), split and compress (``weights``), verify through the shipped loader (``verify``), and
the usability and operator reports. ``run.cook_sources`` runs them in order: a pure function from a
job to the files it would write.

May import ``onnx_cooker.settings``, ``onnx_cooker.runtime`` and the package basics (errors, fsutil,
layout, steptimes); never ``onnx_cooker.build``, ``onnx_cooker.farm`` or ``onnx_cooker.report``.
"""
