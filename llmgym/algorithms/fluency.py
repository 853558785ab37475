"""The old path of :mod:`llmgym.run.fluency` (the fluency of an evaluation's completions), kept for one release.

A name read from it comes from the new module, with a DeprecationWarning
(:func:`llmgym.import_path.moved_module`; no import arrow from algorithms/ to run/).
"""

from llmgym.import_path import moved_module

__getattr__ = moved_module(__name__, "llmgym.run.fluency")
