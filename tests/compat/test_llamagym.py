"""LlamaGym's README example and examples/blackjack.py through llmgym.compat.llamagym.

The example code below is LlamaGym's (https://github.com/KhoomeiK/LlamaGym, MIT licence),
verbatim except for the lines marked ``# changed:`` (imports, the model, the device, the episode
count, 8-bit loading, which needs a GPU).
"""

from __future__ import annotations

import re
import subprocess
import sys
import warnings

import gymnasium as gym
import pytest
import torch
from peft import LoraConfig
from tqdm import trange
from transformers import AutoTokenizer

from llmgym.compat.llamagym import (  # changed: was `from llamagym import Agent` and `from trl import ...`
    Agent,
    AutoModelForCausalLMWithValueHead,
    PPOConfig,
    generation_settings,
)
from llmgym.errors import ConfigError
from llmgym.llm.sampling import Sampling
from llmgym.testing import save_tiny_model


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(save_tiny_model(tmp_path_factory.mktemp("llamagym") / "llama", "llama"))


# ---- LlamaGym README ("Usage"), verbatim but for the marked lines -------------------------------
def test_readme_example_runs_and_trains(tiny_path: str) -> None:
    torch.manual_seed(0)
    device = "cpu"  # changed: the README leaves `device` to the reader

    class BlackjackAgent(Agent):
        def get_system_prompt(self) -> str:
            return "You are an expert blackjack player."

        def format_observation(self, observation) -> str:
            return f"Your current total is {observation[0]}"

        def extract_action(self, response: str):
            return 0 if "stay" in response else 1

    model = AutoModelForCausalLMWithValueHead.from_pretrained(tiny_path).to(device)  # changed: "Llama-2-7b"
    tokenizer = AutoTokenizer.from_pretrained(tiny_path)  # changed: "Llama-2-7b"
    agent = BlackjackAgent(model, tokenizer, device)

    before = [p.detach().clone() for p in model.pretrained_model.parameters()]
    all_stats = []
    env = gym.make("Blackjack-v1")

    for episode in trange(16):  # noqa: B007  # changed: 5000; 16 episodes hold >= 16 turns, LlamaGym's default batch
        observation, info = env.reset()
        done = False

        while not done:
            action = agent.act(observation)  # act based on observation
            observation, reward, terminated, truncated, info = env.step(action)
            agent.assign_reward(reward)  # provide reward to agent
            done = terminated or truncated

        train_stats = agent.terminate_episode()  # trains if batch is full
        all_stats.append(train_stats)

    updates = [s for s in all_stats if s]
    assert updates and all(torch.isfinite(torch.tensor(s["ppo/loss/total"])) for s in updates)
    assert agent.sampling == Sampling(
        temperature=0.9, top_k=0, top_p=0.6
    )  # LlamaGym's defaults, top_p honoured
    # TRL's adaptive KL at 0.2 against a frozen copy of the initial weights (TRL's create_reference_model)
    assert updates[0]["objective/kl_coef"] == 0.2 and agent._ppo.kl.coef != 0.2
    assert agent.policy.backend.reference_model is not None
    assert any(not torch.equal(a, b) for a, b in zip(before, model.pretrained_model.parameters()))
    assert len(agent.current_batch["queries"]) < agent.ppo_config.batch_size


# ---- LlamaGym examples/blackjack.py, verbatim but for the marked lines ---------------------------
class BlackjackAgent(Agent):
    def get_system_prompt(self) -> str:
        return """You are an expert blackjack player. Every turn, you'll see your current sum, the dealer's showing card value, and whether you have a usable ace. Win by exceeding the dealer's hand but not exceeding 21.
Decide whether to stay with your current sum by writing "Action: 0" or accept another card by writing "Action: 1". Accept a card unless very close to 21."""

    def format_observation(self, observation: gym.core.ObsType) -> str:
        return f"You: {observation[0]}. Dealer: {observation[1]}. You have {'an' if bool(observation[2]) else 'no'} ace."

    def extract_action(self, response: str) -> gym.core.ActType:
        match = re.compile(r"Action: (\d)").search(response)
        if match:
            return int(match.group(1))

        digits = [char for char in response if char.isdigit()]
        if len(digits) == 0 or digits[-1] not in ("0", "1"):
            if "stick" in response.lower():
                return 0
            elif "hit" in response.lower():
                return 1

        return 0


def blackjack_main(model_name: str) -> list[dict]:  # changed: was `if __name__ == "__main__":`
    import os

    import wandb  # WANDB_MODE=disabled in tests/conftest.py

    hyperparams = {
        "model_name": model_name,  # changed: "meta-llama/Llama-2-7b-chat-hf"
        "env": "Blackjack-v1",
        "lora/r": 16,
        "lora/lora_alpha": 32,
        "lora/lora_dropout": 0.05,
        "lora/bias": "none",
        "lora/task_type": "CAUSAL_LM",
        "load_in_8bit": False,  # changed: True (bitsandbytes 8-bit needs a CUDA GPU)
        "batch_size": 8,
        "seed": 42069,
        "episodes": 10,  # changed: 5000; 10 episodes hold >= 10 turns, more than the batch of 8
        "generate/max_new_tokens": 32,
        "generate/do_sample": True,
        "generate/top_p": 0.6,
        "generate/top_k": 0,
        "generate/temperature": 0.9,
    }
    wandb_run = wandb.init(project=os.environ.get("WANDB_PROJECT"), config=hyperparams)  # noqa: F841
    device = "cpu"  # changed: "cuda:0"
    HF_TOKEN = os.environ.get("HF_TOKEN")

    lora_config = LoraConfig(
        **{key.split("/")[-1]: value for key, value in hyperparams.items() if key.startswith("lora/")}
    )
    model = AutoModelForCausalLMWithValueHead.from_pretrained(
        pretrained_model_name_or_path=hyperparams["model_name"],
        peft_config=lora_config,
        load_in_8bit=hyperparams["load_in_8bit"],
        token=HF_TOKEN,
    ).to(device)
    tokenizer = AutoTokenizer.from_pretrained(hyperparams["model_name"], token=HF_TOKEN)
    tokenizer.add_special_tokens({"pad_token": "<pad>"})
    model.pretrained_model.resize_token_embeddings(len(tokenizer))

    agent = BlackjackAgent(
        model,
        tokenizer,
        device,
        {key: value for key, value in hyperparams.items() if key.startswith("generate/")},
        {
            "batch_size": hyperparams["batch_size"],
            "mini_batch_size": hyperparams["batch_size"],
        },
    )
    env = gym.make(hyperparams["env"], natural=False, sab=False)

    logged = []  # changed: added, to check what the example logs
    for episode in trange(hyperparams["episodes"]):
        observation, info = env.reset()
        done = False

        while not done:
            action = agent.act(observation)
            wandb.log({"action": action})
            observation, reward, terminated, truncated, info = env.step(action)
            agent.assign_reward(reward)
            done = terminated or truncated

        episode_stats = {
            "episode": episode,
            "total_return": sum(agent.current_episode_rewards),
            "message_ct": len(agent.current_episode_messages),
            "episode_messages": agent.current_episode_messages,
        }
        train_stats = agent.terminate_episode()
        episode_stats.update(train_stats)
        wandb.log(episode_stats)
        logged.append(episode_stats)  # changed: added
    return logged


def test_blackjack_example_runs_and_trains_lora(tiny_path: str) -> None:
    torch.manual_seed(0)
    logged = blackjack_main(tiny_path)
    assert len(logged) == 10 and all(s["message_ct"] >= 3 for s in logged)  # system, user, assistant at least
    updates = [s for s in logged if "ppo/loss/total" in s]
    assert updates, "8 turns were collected but no update ran"
    assert {"ppo/loss/policy", "ppo/loss/value", "ppo/mean_scores", "ppo/std_scores"} <= updates[0].keys()
    # LlamaGym's users had TRL's adaptive KL at 0.2 in the reward (reference: the adapter disabled)
    assert updates[0]["objective/kl_coef"] == 0.2 and torch.isfinite(torch.tensor(updates[0]["objective/kl"]))


def test_8bit_loading_needs_a_gpu(tiny_path: str) -> None:
    if torch.cuda.is_available():
        pytest.skip("CUDA is available: 8-bit loading is possible here")
    with pytest.raises(ConfigError, match=r"load_in_8bit=True needs a CUDA GPU .* set load_in_8bit=False"):
        AutoModelForCausalLMWithValueHead.from_pretrained(tiny_path, load_in_8bit=True)


def test_lora_task_type_and_unsupported_arguments(tiny_path: str) -> None:
    with pytest.raises(ConfigError, match="task_type='CAUSAL_LM'"):
        AutoModelForCausalLMWithValueHead.from_pretrained(
            tiny_path, peft_config={"r": 4, "task_type": "SEQ_2_SEQ_LM"}
        )
    with pytest.raises(ConfigError, match=r"unsupported arguments \['summary_dropout_prob'\]"):
        AutoModelForCausalLMWithValueHead.from_pretrained(tiny_path, summary_dropout_prob=0.1)
    wrapped = AutoModelForCausalLMWithValueHead.from_pretrained(
        tiny_path, peft_config={"r": 4, "bias": "none"}
    )
    assert sum(p.requires_grad for p in wrapped.pretrained_model.parameters()) > 0
    assert not all(p.requires_grad for p in wrapped.pretrained_model.parameters())


def test_ppo_config_maps_trl_names() -> None:
    config = PPOConfig.from_dict(
        {
            "batch_size": 8,
            "mini_batch_size": 4,
            "learning_rate": 1e-4,
            "ppo_epochs": 2,
            "cliprange": 0.1,
            "vf_coef": 0.5,
            "log_with": "wandb",
            "early_stopping": True,
            "target_kl": 0.5,
        }
    )
    algorithm = config.algorithm()
    assert (algorithm.minibatch_size, algorithm.learning_rate, algorithm.epochs) == (4, 1e-4, 2)
    assert (
        algorithm.ppo.clip_range,
        algorithm.value_coef,
        algorithm.ppo.target_kl,
        algorithm.entropy_coef,
    ) == (
        0.1,
        0.5,
        0.5,
        0.0,
    )
    assert PPOConfig.from_dict({"batch_size": 8}).algorithm().ppo.target_kl is None
    with pytest.raises(ConfigError, match=r"unsupported keys \['batch_sise'\]"):
        PPOConfig.from_dict({"batch_sise": 8})
    # TRL's KL control: beta 0.2, adaptive towards 6 nats per response over a horizon of 10000 turns, in the reward
    kl = PPOConfig.from_dict({"batch_size": 8}).algorithm().kl
    assert (kl.coef, kl.controller, kl.target, kl.horizon, kl.unit, kl.penalty, kl.estimator) == (
        0.2,
        "adaptive",
        6.0,
        10000,
        "completion",
        "reward",
        "k1",
    )
    kl = (
        PPOConfig.from_dict({"adap_kl_ctrl": False, "init_kl_coef": 0.05, "kl_penalty": "mse"}).algorithm().kl
    )
    assert (kl.coef, kl.controller, kl.estimator) == (0.05, "fixed", "k2")
    assert PPOConfig.from_dict({"init_kl_coef": 0.0}).algorithm().kl.coef == 0.0
    kl = PPOConfig.from_dict({"target": 1.0, "horizon": 100}).algorithm().kl
    assert (kl.target, kl.horizon) == (1.0, 100)
    with pytest.raises(ConfigError, match="kl_penalty.*'abs'"):
        PPOConfig.from_dict({"kl_penalty": "abs"})
    with pytest.raises(ConfigError, match="whiten_rewards"):
        PPOConfig.from_dict({"whiten_rewards": True})


def test_generation_settings_resolve_what_sampling_uses() -> None:
    from transformers import GenerationConfig

    kwargs, sampling = generation_settings(
        {"generate/max_new_tokens": 8, "generate/do_sample": True}, GenerationConfig(top_p=0.9)
    )
    assert sampling == Sampling(
        temperature=1.0, top_k=50, top_p=0.9
    )  # the model's top_p, transformers' top_k
    assert kwargs == {"max_new_tokens": 8, "do_sample": True, "temperature": 1.0, "top_k": 50, "top_p": 0.9}
    kwargs, sampling = generation_settings({"max_new_tokens": 8}, GenerationConfig())
    assert sampling is None and kwargs["do_sample"] is False
    kwargs, sampling = generation_settings(
        {"do_sample": True, "repetition_penalty": 1.2, "min_new_tokens": 2}, GenerationConfig()
    )
    assert sampling == Sampling(
        temperature=1.0, top_k=50, top_p=1.0, repetition_penalty=1.2, min_new_tokens=2
    )
    assert (kwargs["repetition_penalty"], kwargs["min_new_tokens"]) == (1.2, 2)
    with pytest.raises(ConfigError, match=r"no_repeat_ngram_size=2 \(from generate_config_dict\)"):
        generation_settings({"do_sample": True, "no_repeat_ngram_size": 2}, GenerationConfig())
    with pytest.raises(ConfigError, match="from the model's generation_config"):
        generation_settings({"do_sample": True}, GenerationConfig(min_p=0.1))


class _Words(Agent):
    def get_system_prompt(self) -> str:
        return "Say a word."

    def format_observation(self, observation) -> str:
        return str(observation)

    def extract_action(self, response: str):
        return response


@pytest.mark.parametrize(
    "generate", [{"top_p": 0.5, "temperature": 0.7}, {"repetition_penalty": 1.5, "min_new_tokens": 3}]
)
def test_first_ppo_ratio_is_one_under_top_p(tiny_path: str, generate: dict) -> None:
    torch.manual_seed(0)
    agent = _Words(
        tiny_path,
        tiny_path,
        "cpu",
        {"max_new_tokens": 6, "do_sample": True, **generate},
        {"batch_size": 4, "mini_batch_size": 4, "ppo_epochs": 1},
    )
    stats = {}
    for turn in range(4):
        agent.act(f"word {turn}")
        agent.assign_reward(float(turn))
        stats = agent.terminate_episode()
    # old log-probs and the first minibatch's new ones are both scored under the nucleus sampled from
    assert stats["ppo/ratio_mean"] == pytest.approx(1.0, abs=1e-4)
    assert stats["ppo/mean_scores"] == pytest.approx(
        sum(t / 1.5 for t in range(4)) / 4, abs=1e-2
    )  # r / (3 / 2)


def test_llamagym_bookkeeping(tiny_path: str) -> None:
    class Picky(_Words):
        def extract_action(self, response: str):
            raise ValueError("no")

    agent = Picky(tiny_path, tiny_path, "cpu", {"max_new_tokens": 3}, {"batch_size": 100})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert agent.act("obs") is None
    assert "raised ValueError('no')" in str(caught[0].message)
    assert [m["role"] for m in agent.current_episode_messages] == [
        "system",
        "user",
    ]  # as LlamaGym: no reply kept
    assert agent.terminate_episode() == {} and agent.current_batch["queries"] == []

    words = _Words(tiny_path, tiny_path, "cpu", {"max_new_tokens": 3}, {"batch_size": 100})
    for obs in ("a", "b"):
        words.act(obs)
    words.assign_reward(0.0)
    words.assign_reward(1.0)
    messages = list(words.current_episode_messages)
    assert words.terminate_episode() == {}
    rewards = words.current_batch["rewards"]
    assert (
        rewards == [torch.tensor(1.0 / (len(messages) / 2), dtype=torch.float16)] * 2
    )  # LlamaGym's sparse split
    query, response = words.current_batch["queries"][0], words.current_batch["responses"][0]
    assert words.tokenizer.decode(query).endswith("<|im_start|>assistant\n") and response.dtype == torch.long


def test_llmgym_does_not_import_trl() -> None:
    code = "import sys, llmgym.compat.llamagym, llmgym.compat.lamorel, llmgym.algorithms; assert 'trl' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
