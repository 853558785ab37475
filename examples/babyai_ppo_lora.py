"""Lamorel's PPO_LoRA_finetuning as a plain script: PPO on LoRA adapters of a scoring agent on BabyAI-Text.

The policy is the softmax over the LLM's log-probs of BabyAI's 6 actions given a GLAM prompt
(goal, the last 3 observations and actions); a value head sits on the LLM's last context token
(same forward pass, reading the adapted trunk). PPO trains only the LoRA adapters (r=16) and the
head; the base weights stay frozen (see ``llmgym/configs/babyai_ppo_lora.yaml``, whose
settings this script loads; ``babyai_ppo.py`` fine-tunes the whole LLM instead).

Run::

    python examples/babyai_ppo_lora.py                    # SmolLM2-135M-Instruct + LoRA, 20k env steps
    python examples/babyai_ppo_lora.py --steps 2048 --eval-episodes 20
"""

from __future__ import annotations

from babyai_ppo import main  # the same script, run on another config (examples/ is on sys.path when run)

CONFIG = "babyai_ppo_lora"  # a shipped config (llmgym/configs/babyai_ppo_lora.yaml)

if __name__ == "__main__":
    main(config_path=CONFIG, description=__doc__)
