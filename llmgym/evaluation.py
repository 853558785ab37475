"""The old path of :mod:`llmgym.run.evaluation` (the evaluation loop), kept for one release.

A name read from it comes from the new module, with a DeprecationWarning
(:func:`llmgym.import_path.moved_module`).
"""

from llmgym.import_path import moved_module

__getattr__ = moved_module(__name__, "llmgym.run.evaluation")
