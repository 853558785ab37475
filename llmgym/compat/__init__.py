"""Compatibility layers that let code written for other libraries run on llmgym.

:mod:`llmgym.compat.lamorel` runs Lamorel scripts (``Caller``, ``BaseModuleFunction``,
``BaseUpdater``, ``lamorel_init`` and Lamorel's YAML schema) after changing only the import.
"""
