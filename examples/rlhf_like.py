"""Token-level PPO where each token is an action (Lamorel's RLHF-like example, RL4LMs' setup).

``llmgym/TextGen-v0`` in ``mode="token"`` gives a review opening as the prompt; every step the
``TokenAgent`` samples one token (the action), the env appends it, and the episode ends at EOS or
after 16 tokens with a lexicon sentiment reward. A per-token KL penalty to the reference policy
(the LLM with its LoRA adapter disabled) keeps the text fluent, and a value head on each token's
state gives the per-token advantages (see ``llmgym/configs/rlhf_like_token.yaml``, which this loads).

Run::

    python examples/rlhf_like.py                         # SmolLM2-135M-Instruct + LoRA, 8192 tokens
    python examples/rlhf_like.py --steps 1024 --eval-episodes 10
"""

from __future__ import annotations

from babyai_ppo import main  # the same script, run on another config (examples/ is on sys.path when run)

CONFIG = "rlhf_like_token"  # a shipped config (llmgym/configs/rlhf_like_token.yaml)

if __name__ == "__main__":
    main(config_path=CONFIG, description=__doc__, metric="episode_return")
