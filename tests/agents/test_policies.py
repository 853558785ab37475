"""The policy re-scores what it drew: at unchanged weights ``evaluate`` gives the stored log-probs and values."""

from __future__ import annotations

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from llmgym.agents import GenerativeAgent, ScoringAgent, TokenAgent
from llmgym.agents.generative import DecoderHistory
from llmgym.agents.policies import CandidatePolicy, TokenPolicy
from llmgym.config import AgentConfig, LoRAConfig, ModelConfig
from llmgym.errors import ConfigError, InputError
from llmgym.llm.local import LocalLLM
from llmgym.llm.modules import POLICY_KEY, VALUE_KEY, ActionHead, ValueHead
from llmgym.llm.sampling import Sampling
from llmgym.testing import tiny_causal_lm, tiny_seq2seq_lm

PROMPTS = ["Goal: go to the", "You see a red ball 2 steps left and", "héllo"]
CANDIDATES = [
    ["go forward", "turn left", "pick up the ball"],
    ["turn right", "go forward"],
    ["toggle", "drop", "done"],
]
_LLMS: dict[bool, LocalLLM] = {}


def _llm(action_head: bool) -> LocalLLM:
    """One tiny LLM per head configuration, built once (the weights never change here)."""
    if action_head not in _LLMS:
        model, tokenizer = tiny_causal_lm("llama", seed=0)
        heads = {VALUE_KEY: ValueHead()}
        if action_head:
            heads[POLICY_KEY] = ActionHead(prior_weight=0.5)
        _LLMS[action_head] = LocalLLM(ModelConfig(name="tiny"), heads, model=model, tokenizer=tokenizer)
    return _LLMS[action_head]


@settings(max_examples=12, deadline=None)
@given(
    action_head=st.booleans(),
    temperature=st.floats(0.3, 3.0),
    normalize=st.sampled_from(["sum", "mean"]),
    greedy=st.booleans(),
    seed=st.integers(0, 1000),
)
def test_candidate_policy_evaluate_reproduces_what_act_stored(
    action_head, temperature, normalize, greedy, seed
):
    llm = _llm(action_head)
    agent = ScoringAgent(
        llm,
        AgentConfig(use_chat_template=False, temperature=temperature, score_normalize=normalize),
        num_envs=len(PROMPTS),
        seed=seed,
    )
    assert agent.policy == CandidatePolicy(temperature, normalize)
    agent.act_batch(PROMPTS, [{"valid_actions": c} for c in CANDIDATES], greedy=greedy)
    decisions = agent.last_decisions
    outputs = agent.policy.evaluate(
        llm, [d.prompt for d in decisions], agent.policy.actions(decisions), require_grad=False
    )
    torch.testing.assert_close(
        outputs.log_probs, torch.tensor([d.log_prob for d in decisions]), atol=1e-5, rtol=0
    )
    torch.testing.assert_close(outputs.values, torch.tensor([d.value for d in decisions]), atol=1e-5, rtol=0)
    assert outputs.candidate_log_probs is not None and outputs.candidate_mask is not None
    probs = outputs.candidate_log_probs.exp() * outputs.candidate_mask
    torch.testing.assert_close(probs.sum(-1), torch.ones(len(PROMPTS)))
    torch.testing.assert_close(
        agent.policy.kl(outputs, outputs), torch.zeros(len(PROMPTS)), atol=1e-6, rtol=0
    )


@settings(max_examples=10, deadline=None)
@given(
    temperature=st.floats(0.5, 2.0),
    top_k=st.sampled_from([0, 5]),
    top_p=st.floats(0.5, 1.0),
    mask_top_p=st.sampled_from([1.0, 0.9, 0.5]),
    seed=st.integers(0, 1000),
)
def test_token_policy_evaluate_reproduces_what_act_stored(temperature, top_k, top_p, mask_top_p, seed):
    llm = _llm(action_head=False)
    agent = GenerativeAgent(
        llm, AgentConfig(use_chat_template=False, max_new_tokens=4), num_envs=len(PROMPTS)
    )
    agent.policy = TokenPolicy(Sampling(temperature=temperature, top_k=top_k, top_p=top_p), max_new_tokens=4)
    if mask_top_p < 1.0:
        agent.policy = agent.policy.masked(mask_top_p)  # NLPO: every token from the mask policy's top-p set
        llm.refresh_mask_policy()
    torch.manual_seed(seed)
    agent.act_batch(PROMPTS, [{} for _ in PROMPTS])
    decisions = agent.last_decisions
    outputs = agent.policy.evaluate(
        llm, [d.prompt for d in decisions], agent.policy.actions(decisions), require_grad=False
    )
    torch.testing.assert_close(
        outputs.log_probs, torch.tensor([d.log_prob for d in decisions]), atol=1e-4, rtol=0
    )
    torch.testing.assert_close(outputs.values, torch.tensor([d.value for d in decisions]), atol=1e-5, rtol=0)
    torch.testing.assert_close(
        agent.policy.kl(outputs, outputs), torch.zeros(len(PROMPTS)), atol=1e-6, rtol=0
    )


def test_masking_is_a_token_policy_s_and_the_kinds_do_not_mix():
    token = TokenPolicy(Sampling(temperature=0.7), max_new_tokens=3)
    assert token.masked(0.9) == TokenPolicy(Sampling(temperature=0.7, mask_top_p=0.9), max_new_tokens=3)
    with pytest.raises(InputError, match="mask_top_p=1.5"):
        token.masked(1.5)
    with pytest.raises(ConfigError, match="generates no tokens"):
        CandidatePolicy().masked(0.9)
    with pytest.raises(InputError, match="must be > 0"):
        CandidatePolicy(temperature=0.0)
    llm = _llm(action_head=False)
    agent = ScoringAgent(llm, AgentConfig(use_chat_template=False), num_envs=1)
    agent.act_batch(PROMPTS[:1], [{"valid_actions": CANDIDATES[0]}])
    with pytest.raises(InputError, match="re-scores generated token sequences"):
        token.evaluate(llm, PROMPTS[:1], agent.policy.actions(agent.last_decisions))


_T5: dict[str, LocalLLM] = {}


def _t5() -> LocalLLM:
    """A tiny T5 with a LoRA adapter (the KL reference is the base) and a value head, built once."""
    if "llm" not in _T5:
        model, tokenizer = tiny_seq2seq_lm(seed=0)
        _T5["llm"] = LocalLLM(
            ModelConfig(name="tiny-t5", lora=LoRAConfig(r=4, alpha=8)),
            {VALUE_KEY: ValueHead()},
            model=model,
            tokenizer=tokenizer,
        )
    return _T5["llm"]


# Encoder-decoder: the prompt goes to the encoder, the generated tokens to the decoder, and evaluate re-scores
# them there, under the same cut and (NLPO) the same mask, with the value of the same decoder state.
@settings(max_examples=6, deadline=None)
@given(
    temperature=st.floats(0.5, 2.0),
    top_p=st.floats(0.5, 1.0),
    mask_top_p=st.sampled_from([1.0, 0.5]),
    seed=st.integers(0, 1000),
)
@example(temperature=1.3, top_p=1.0, mask_top_p=1.0, seed=0)
def test_seq2seq_token_policy_evaluate_reproduces_what_act_stored(temperature, top_p, mask_top_p, seed):
    llm = _t5()
    agent = GenerativeAgent(
        llm, AgentConfig(use_chat_template=False, max_new_tokens=4), num_envs=len(PROMPTS)
    )
    agent.policy = TokenPolicy(Sampling(temperature=temperature, top_p=top_p), max_new_tokens=4)
    if mask_top_p < 1.0:
        agent.policy = agent.policy.masked(mask_top_p)
        llm.refresh_mask_policy()
    torch.manual_seed(seed)
    agent.act_batch(PROMPTS, [{} for _ in PROMPTS])
    decisions = agent.last_decisions
    outputs = agent.policy.evaluate(
        llm,
        [d.prompt for d in decisions],
        agent.policy.actions(decisions),
        require_grad=False,
        with_reference=True,
    )
    torch.testing.assert_close(
        outputs.log_probs, torch.tensor([d.log_prob for d in decisions]), atol=1e-4, rtol=0
    )
    torch.testing.assert_close(outputs.values, torch.tensor([d.value for d in decisions]), atol=1e-5, rtol=0)
    if (
        mask_top_p == 1.0
    ):  # the LoRA adapter starts at zero: the policy is its (uncut) reference, cut by top-p
        assert (outputs.ref_kl >= -1e-5).all()
        if top_p == 1.0:
            torch.testing.assert_close(outputs.ref_kl, torch.zeros(len(PROMPTS)), atol=1e-5, rtol=0)


def test_seq2seq_token_agent_feeds_the_prompt_to_the_encoder_and_its_tokens_to_the_decoder():
    llm = _t5()
    agent = TokenAgent(
        llm, AgentConfig(use_chat_template=False, temperature=0.9, top_p=0.8), num_envs=2, seed=3
    )
    assert all(isinstance(h, DecoderHistory) for h in agent.histories)
    texts = PROMPTS[:2]
    steps = []
    for _ in range(3):
        actions = agent.act_batch(texts, [{}, {}])
        steps.append(agent.last_decisions)
        texts = [
            t + a for t, a in zip(texts, actions)
        ]  # what a token-level env shows next: never re-tokenized
    first, last = steps[0], steps[-1]
    assert [d.prompt_ids for d in last] == [
        d.prompt_ids for d in first
    ]  # the encoder keeps the episode's prompt
    for env in range(2):
        generated = [ids for step in steps[:-1] for ids in step[env].choice.token_ids]
        assert last[env].choice.decoder_prefix == generated and len(last[env].choice.token_ids) == 1
    decisions = [d for step in steps for d in step]
    actions = agent.policy.actions(decisions)
    assert actions.decoder_prefixes is not None and actions.decoder_prefixes[0] == []
    outputs = agent.policy.evaluate(llm, [d.prompt for d in decisions], actions, require_grad=False)
    torch.testing.assert_close(
        outputs.log_probs, torch.tensor([d.log_prob for d in decisions]), atol=1e-4, rtol=0
    )
    torch.testing.assert_close(outputs.values, torch.tensor([d.value for d in decisions]), atol=1e-5, rtol=0)
    # The bootstrap value of an episode under way is the decoder's state after its tokens: the next step's value.
    values = agent.values_of({0: texts[0]})
    agent.act_batch(texts, [{}, {}])
    assert values[0] == pytest.approx(agent.last_decisions[0].value, abs=1e-5)
    agent.observe([0.0, 0.0], [True, False], [False, False])
    assert agent.histories[0].decoder_ids == [] and len(agent.histories[1].decoder_ids) == 4


def test_a_seq2seq_token_agent_cuts_an_overlong_prompt_on_the_configured_side():
    llm = _t5()
    long_prompt = "question: who met bob? context: " + "alice met bob in town. " * 30
    prompts = {}
    for side in ("left", "right"):
        config = AgentConfig(
            type="token", use_chat_template=False, max_prompt_tokens=10, prompt_truncation_side=side
        )
        agent = TokenAgent(llm, config, num_envs=1, seed=0)
        agent.act_batch([long_prompt], [{}])
        prompts[side] = agent.last_decisions[0].prompt
    assert long_prompt.startswith(prompts["right"]) and long_prompt.endswith(prompts["left"])
    with pytest.raises(ConfigError, match="prompt_truncation_side=right cuts the end of an encoder-decoder"):
        TokenAgent(
            _llm(False), AgentConfig(type="token", use_chat_template=False, prompt_truncation_side="right")
        )
