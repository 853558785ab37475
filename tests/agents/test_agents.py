"""Agents: hooks, decisions, invalid actions, token budget, LlamaGym's loop, vector use."""

import gymnasium as gym
import numpy as np
import pytest
import torch

import llmgym
from llmgym.agents import Agent, GenerativeAgent, ScoringAgent
from llmgym.config import AgentConfig, AlgorithmConfig, ModelConfig
from llmgym.errors import InputError, InvalidActionError
from llmgym.llm.generation import Generation
from llmgym.llm.modules import ValueHead
from llmgym.testing import tiny_causal_lm, tiny_tokenizer

PLAIN = {"use_chat_template": False, "history_length": 2}


def _llm(updater=None):
    model, tok = tiny_causal_lm("llama", seed=0)
    return llmgym.LLM(ModelConfig(name="tiny"), {"value": ValueHead()}, updater, model=model, tokenizer=tok)


class FakeLLM:
    """Answers every prompt with a fixed text; records what it was given."""

    module_function_keys: list[str] = []

    def __init__(self, reply):
        self.tokenizer = tiny_tokenizer()
        self.reply = reply
        self.prompts = []

    def generate(self, contexts, **kwargs):
        self.prompts.extend(contexts)
        ids = self.tokenizer(self.reply, add_special_tokens=False)["input_ids"]
        return [
            [
                Generation(
                    self.reply,
                    ids,
                    torch.full((len(ids),), -0.5),
                    torch.full((len(ids),), -0.5),
                    self.tokenizer(c, add_special_tokens=False)["input_ids"],
                )
            ]
            for c in contexts
        ]


def test_scoring_agent_hooks_and_decisions():
    calls = []

    class Recording(ScoringAgent):
        def get_system_prompt(self):
            return "SYSTEM"

        def format_observation(self, observation):
            calls.append(observation)
            return f"obs={observation}"

    llm = _llm()
    agent = Recording(llm, AgentConfig(**PLAIN), num_envs=2)
    actions = agent.act_batch(
        ["a", "b"], [{"valid_actions": ["dog", "cat"]}, {"valid_actions": ["left", "right", "go"]}]
    )
    assert calls == ["a", "b"]
    assert actions[0] in ("dog", "cat") and actions[1] in ("left", "right", "go")
    for decision, options in zip(agent.last_decisions, (["dog", "cat"], ["left", "right", "go"])):
        assert decision.prompt.startswith("SYSTEM") and decision.prompt.endswith("Action:")
        assert decision.choice.candidates == [" " + o for o in options]  # a space after "Action:"
        assert decision.action == options[decision.choice.index]
        assert decision.log_prob <= 0.0
        enc = llm.tokenizer(decision.prompt)["input_ids"]
        assert decision.prompt_ids == enc
    # the log-prob is that of the softmax over the candidates' scores
    scores = llm.score([agent.last_decisions[0].prompt], [agent.last_decisions[0].choice.candidates])[0]
    expected = torch.log_softmax(scores, -1)[agent.last_decisions[0].choice.index]
    assert agent.last_decisions[0].log_prob == pytest.approx(float(expected), abs=1e-5)
    # the next prompt carries the previous turn
    agent.observe([0.0, 0.0], [False, False], [False, False])
    agent.act_batch(["c", "d"], [{"valid_actions": ["dog", "cat"]}] * 2)
    assert f"obs=a\nAction: {actions[0]}" in agent.last_decisions[0].prompt


def test_scoring_agent_greedy_is_argmax_and_needs_candidates():
    llm = _llm()
    agent = ScoringAgent(llm, AgentConfig(**PLAIN))
    agent.act_batch(["x"], [{"valid_actions": ["dog", "cat", "left"]}], greedy=True)
    decision = agent.last_decisions[0]
    scores = llm.score([decision.prompt], [decision.choice.candidates])[0]
    assert decision.choice.index == int(torch.argmax(scores))
    agent.observe([0.0], [True], [False])
    with pytest.raises(InputError, match="no candidate actions"):
        agent.act_batch(["x"], [{}])
    with pytest.raises(InputError, match="num_envs"):
        agent.act_batch(["x", "y"], [{}, {}])


@pytest.mark.parametrize("normalize", ["sum", "mean"])
def test_scoring_agent_policy_uses_the_configured_score(normalize):
    llm = _llm()
    agent = ScoringAgent(llm, AgentConfig(**PLAIN, temperature=2.0, score_normalize=normalize))
    options = ["dog", "banana split", "go forward now"]  # candidates of different token counts
    agent.act_batch(["x"], [{"valid_actions": options}])
    decision = agent.last_decisions[0]
    scores = llm.score([decision.prompt], [decision.choice.candidates], normalize=normalize)[0]
    other = llm.score(
        [decision.prompt], [decision.choice.candidates], normalize="mean" if normalize == "sum" else "sum"
    )[0]
    expected = torch.log_softmax(scores / 2.0, -1)[decision.choice.index]
    assert decision.log_prob == pytest.approx(float(expected), abs=1e-5)
    assert float(torch.log_softmax(other / 2.0, -1)[decision.choice.index]) != pytest.approx(
        decision.log_prob, abs=1e-3
    )


def test_unparsable_generation_gets_penalty_and_fallback():
    fake = FakeLLM("I am not sure")
    agent = GenerativeAgent(fake, AgentConfig(**PLAIN, invalid_action_penalty=-0.5))
    action = agent.act_batch(["obs"], [{"valid_actions": ["hit", "stay"]}])[0]
    decision = agent.last_decisions[0]
    assert action == "hit" and decision.parse_failed
    assert decision.choice.token_ids == fake.tokenizer("I am not sure", add_special_tokens=False)["input_ids"]
    rewards, _ = agent.observe([1.0], [True], [False])
    assert rewards[0] == pytest.approx(0.5)
    strict = GenerativeAgent(FakeLLM("nope"), AgentConfig(**PLAIN, invalid_action="error"))
    with pytest.raises(InvalidActionError, match="could not be parsed"):
        strict.act_batch(["obs"], [{"valid_actions": ["hit", "stay"]}])


def test_generation_is_parsed_onto_valid_actions():
    agent = GenerativeAgent(FakeLLM("  I will STAY now"), AgentConfig(**PLAIN))
    assert agent.act_batch(["obs"], [{"valid_actions": ["hit", "stay"]}]) == ["stay"]
    assert not agent.last_decisions[0].parse_failed


def test_token_budget_is_respected_and_ids_match_the_text():
    fake = FakeLLM("stay")
    agent = GenerativeAgent(
        fake,
        AgentConfig(use_chat_template=False, history_length=10, max_prompt_tokens=40, system_prompt="Play."),
    )
    tok = fake.tokenizer
    for step in range(12):
        agent.act_batch([f"observation number {step} with some words"], [{"valid_actions": ["hit", "stay"]}])
        agent.observe([0.0], [False], [False])
        decision = agent.last_decisions[0]
        assert len(decision.prompt_ids) <= 40
        assert decision.prompt_ids == tok(decision.prompt)["input_ids"]  # the ids fed are those of the text
        assert f"observation number {step} " in decision.prompt  # the newest observation is always kept
    assert "observation number 0 " not in fake.prompts[-1]  # the oldest turns were dropped


def test_truncated_episode_is_valued_for_bootstrapping():
    llm = _llm()
    agent = ScoringAgent(llm, AgentConfig(**PLAIN), num_envs=2)
    agent.act_batch(["a", "b"], [{"valid_actions": ["dog", "cat"]}] * 2)
    rewards, truncation_values = agent.observe(
        np.array([1.0, 1.0]),
        np.array([False, True]),
        np.array([True, True]),
        [{"final_observation": "end-a"}, {"final_observation": "end-b"}],
    )
    assert truncation_values[1] == 0.0  # terminated wins: no bootstrap
    assert truncation_values[0] != 0.0
    first = agent.last_decisions[0]
    expected = llm.forward(["value"], [f"{first.prompt} {first.response}\nend-a\nAction:"])
    assert truncation_values[0] == pytest.approx(float(expected[0]["value"]), abs=1e-5)
    assert agent.histories[0].turns == [] and agent.histories[1].turns == []


class BlackjackAgent(Agent):
    """LlamaGym's README example, with only the import changed."""

    def get_system_prompt(self) -> str:
        return (
            "You are an expert blackjack player. Every turn, you'll see your current sum, the dealer's "
            "showing card value, and whether you have a usable ace. Win by exceeding the dealer's hand "
            'but not exceeding 21.\nDecide whether to stay with your current sum by writing "Action: 0" '
            'or accept another card by writing "Action: 1". Accept a card unless very close to 21.'
        )

    def format_observation(self, observation) -> str:
        return f"You: {observation[0]}. Dealer: {observation[1]}. You have {'an' if bool(observation[2]) else 'no'} ace."

    def extract_action(self, response: str):
        import re

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


def test_llamagym_blackjack_loop_runs_and_trains():
    from llmgym.algorithms import PPO

    ppo = PPO(config=AlgorithmConfig(learning_rate=1e-3, minibatch_size=4, epochs=1))
    llm = _llm(ppo.updater())
    agent = BlackjackAgent(llm, AgentConfig(max_new_tokens=4), algorithm=ppo, episodes_per_update=2)
    env = gym.make("llmgym/Blackjack-Text-v0")
    stats_seen = []
    for episode in range(2):
        observation, info = env.reset(seed=episode)
        done = False
        while not done:
            action = agent.act(observation)
            observation, reward, terminated, truncated, info = env.step(action)
            agent.assign_reward(reward)
            done = terminated or truncated
        stats_seen.append(agent.terminate_episode())
    assert stats_seen[0] == {}
    assert {"loss", "policy_loss", "value_loss", "episode_return"} <= stats_seen[1].keys()


def test_scoring_agent_on_eight_babyai_envs():
    envs = llmgym.make_vec("llmgym/BabyAI-Text-GoToRedBall-v0", num_envs=8, seed=0)
    agent = ScoringAgent(_llm(), AgentConfig(**PLAIN), num_envs=8)
    observations, infos = envs.reset()
    for _ in range(3):
        actions = agent.act_batch(observations, infos)
        assert all(
            a in ("turn left", "turn right", "go forward", "pick up", "drop", "toggle") for a in actions
        )
        observations, rewards, terminated, truncated, infos = envs.step(actions)
        agent.observe(rewards, terminated, truncated, infos)
    envs.close()


def test_token_agent_sends_one_token_per_step_and_eos_ends_the_episode():
    from llmgym.agents import TokenAgent

    fake = FakeLLM("<|im_end|>")
    agent = TokenAgent(fake, AgentConfig(use_chat_template=False, history_length=0, system_prompt=""))
    env = gym.make(
        "llmgym/TextGen-v0",
        datapool=["Write:"],
        reward="length_penalty",
        mode="token",
        eos_token="<|im_end|>",
        max_tokens=5,
    )
    obs, info = env.reset(seed=0)
    action = agent.act_batch([obs], [info])[0]
    decision = agent.last_decisions[0]
    assert action == "<|im_end|>" and decision.choice.token_ids == [fake.tokenizer.eos_token_id]
    assert not decision.parse_failed and decision.prompt == "Write:"
    _, _, terminated, truncated, _ = env.step(action)
    assert terminated or truncated
    fake.reply = " good"
    agent.observe([0.0], [True], [False])
    obs, info = env.reset(seed=1)
    assert agent.act_batch([obs], [info]) == [" good"]  # the space is kept: tokens are sent verbatim


def test_the_loop_api_is_trained_by_an_algorithm_object_only():
    from llmgym.errors import ConfigError

    with pytest.raises(ConfigError, match=r"algorithm=llmgym.PPO\(config=...\)"):
        BlackjackAgent(_llm(None), algorithm=AlgorithmConfig())
    with pytest.raises(ConfigError, match="no learn_from_episodes"):
        BlackjackAgent(_llm(None), algorithm=object())
    agent = BlackjackAgent(_llm(None), AgentConfig(max_new_tokens=2), episodes_per_update=1)
    agent.act((14, 10, False))
    agent.assign_reward(1.0)
    with pytest.raises(ConfigError, match="has no algorithm"):
        agent.terminate_episode()
    assert agent.terminate_episode(train=False) == {}


def test_empty_completion_is_a_valid_free_text_action():
    """Issue 33 item 6: an empty generation in TextGen (no valid actions) is the action "", not a crash."""
    fake = FakeLLM("")
    agent = GenerativeAgent(fake, AgentConfig(use_chat_template=False, history_length=0, system_prompt=""))
    env = gym.make("llmgym/TextGen-v0", datapool=["Write:"], reward="length_penalty")
    obs, info = env.reset(seed=0)
    assert agent.act_batch([obs], [info]) == [""]
    assert not agent.last_decisions[0].parse_failed
    _, reward, terminated, _, info = env.step("")
    assert terminated and info["completion"] == "" and reward == pytest.approx(-1.0)
    # blank text too: the stripped response is the action
    fake.reply = "   "
    agent.observe([0.0], [True], [False])
    assert agent.act_batch([obs], [info]) == [""]
