"""Compatibility layers that let code written for other libraries run on llmgym.

:mod:`llmgym.compat.llamagym` runs LlamaGym scripts (``Agent`` and TRL's
``AutoModelForCausalLMWithValueHead``, without TRL) and :mod:`llmgym.compat.lamorel` runs Lamorel
scripts (``Caller``, ``BaseModuleFunction``, ``BaseUpdater``, ``lamorel_init`` and Lamorel's YAML
schema) after changing only the imports.
"""
