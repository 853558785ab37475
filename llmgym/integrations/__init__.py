"""Bridges between llmgym and other training libraries (:mod:`llmgym.integrations.trl`: TRL)."""
