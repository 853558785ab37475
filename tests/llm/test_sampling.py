"""Sampling: log-probs under temperature / top-k / top-p equal generate's, and PPO trains on them."""

from __future__ import annotations

import pytest
import torch

from llmgym.agents import GenerativeAgent, TokenPolicy
from llmgym.agents.learning import Episode
from llmgym.algorithms import PPO
from llmgym.config import AgentConfig, AlgorithmConfig, ModelConfig
from llmgym.errors import InputError
from llmgym.llm.local import LocalLLM
from llmgym.llm.modules import ValueHead
from llmgym.llm.sampling import Sampling, sampled_logprobs

PROMPTS = ["Goal: go to the", "You see a red ball 2 steps left and", "héllo"]


@pytest.mark.parametrize("fixture", ["tiny_llama", "tiny_gpt2", "tiny_t5"])
@pytest.mark.parametrize("sampling", [Sampling(0.7, 20, 0.8), Sampling(1.3, 0, 0.6), Sampling(1.0, 5, 1.0)])
def test_token_logprobs_under_sampling_equal_generation_logprobs(request, fixture, sampling):
    model, tok = request.getfixturevalue(fixture)
    llm = LocalLLM(ModelConfig(name="tiny"), model=model, tokenizer=tok)
    torch.manual_seed(0)
    gens = [
        g
        for group in llm.generate(
            PROMPTS, max_new_tokens=6, num_return_sequences=2, **sampling.generation_kwargs()
        )
        for g in group
    ]
    prompts, completions = [g.prompt_ids for g in gens], [g.token_ids for g in gens]
    processed = llm.token_logprobs(prompts, completions, require_grad=False, sampling=sampling)
    raw = llm.token_logprobs(prompts, completions, require_grad=False)
    for g, p, r in zip(gens, processed, raw):
        assert torch.allclose(p["logprobs"], g.logprobs, atol=1e-4)
        assert torch.allclose(r["logprobs"], g.raw_logprobs, atol=1e-4)
    assert not all(torch.allclose(g.logprobs, g.raw_logprobs, atol=1e-3) for g in gens)


def test_sampled_logprobs_keep_the_target_and_pass_gradients():
    logits = torch.tensor([[4.0, 3.0, 0.0, -1.0]], requires_grad=True)
    top2 = Sampling(top_k=2)
    kept = sampled_logprobs(logits, torch.tensor([0]), top2)
    assert float(kept.detach()) == pytest.approx(
        float(torch.log_softmax(torch.tensor([4.0, 3.0]), -1)[0]), abs=1e-6
    )
    cut = sampled_logprobs(
        logits, torch.tensor([3]), top2
    )  # outside the top 2: scored against them and itself
    assert float(cut.detach()) == pytest.approx(
        float(torch.log_softmax(torch.tensor([4.0, 3.0, -1.0]), -1)[2]), abs=1e-6
    )
    cut.backward()
    assert torch.isfinite(logits.grad).all() and logits.grad[0, 2] == 0.0
    plain = sampled_logprobs(logits, torch.tensor([1]), None)
    assert float(plain) == pytest.approx(float(torch.log_softmax(logits.detach(), -1)[0, 1]), abs=1e-6)


def test_sampling_checks_its_values():
    with pytest.raises(InputError, match="top_p=1.5"):
        Sampling(top_p=1.5)
    with pytest.raises(InputError, match="None"):
        Sampling(temperature=None)  # type: ignore[arg-type]
    assert Sampling(temperature=2, top_p=1).temperature == 2.0 and Sampling().is_plain


def test_generative_agent_trains_on_the_distribution_it_samples_from(tiny_llama):
    class Nucleus(GenerativeAgent):
        def make_policy(self) -> TokenPolicy:
            return TokenPolicy(Sampling(temperature=0.8, top_k=0, top_p=0.7), self.config.max_new_tokens)

    model, tok = tiny_llama
    ppo = PPO(
        config=AlgorithmConfig(learning_rate=1e-9, head_learning_rate=1e-9, epochs=1, minibatch_size=64)
    )
    llm = LocalLLM(
        ModelConfig(name="tiny"), {"value": ValueHead()}, ppo.updater(), model=model, tokenizer=tok
    )
    agent = Nucleus(llm, AgentConfig(use_chat_template=False, max_new_tokens=5))
    torch.manual_seed(0)
    episodes = []
    for obs in PROMPTS:
        agent.act_batch([obs], [{}])
        decision = agent.last_decisions[0]
        rescored = llm.token_logprobs(
            [decision.prompt_ids],
            [decision.choice.token_ids],
            require_grad=False,
            sampling=agent.policy.sampling,
        )[0]["logprobs"]
        assert decision.log_prob == pytest.approx(float(rescored.sum()), abs=1e-4)
        episodes.append(Episode([decision], [1.0]))
        agent.observe([1.0], [True], [False])
    stats = ppo.learn_from_episodes(agent, episodes)
    assert stats["ratio_mean"] == pytest.approx(1.0, abs=1e-4)  # one minibatch: evaluated before the step


# The repetition penalty and min_new_tokens depend on the tokens before each one: re-scoring rebuilds that
# history per token, and generate's penalty skips each row's left padding (the PROMPTS differ in length).
@pytest.mark.parametrize("fixture", ["tiny_llama", "tiny_gpt2"])
@pytest.mark.parametrize(
    "sampling",
    [
        Sampling(0.8, 0, 0.9, repetition_penalty=2.0),
        Sampling(min_new_tokens=5),
        Sampling(1.2, 10, 1.0, repetition_penalty=0.7, min_new_tokens=2),
    ],
)
def test_history_dependent_sampling_is_rescored_exactly(request, fixture, sampling):
    model, tok = request.getfixturevalue(fixture)
    llm = LocalLLM(ModelConfig(name="tiny"), model=model, tokenizer=tok)
    torch.manual_seed(0)
    gens = [
        g
        for group in llm.generate(
            PROMPTS, max_new_tokens=6, num_return_sequences=2, **sampling.generation_kwargs()
        )
        for g in group
    ]
    rescored = llm.token_logprobs(
        [g.prompt_ids for g in gens], [g.token_ids for g in gens], require_grad=False, sampling=sampling
    )
    for g, r in zip(gens, rescored):
        assert torch.allclose(r["logprobs"], g.logprobs, atol=1e-4)
    plain = llm.token_logprobs(
        [g.prompt_ids for g in gens],
        [g.token_ids for g in gens],
        require_grad=False,
        sampling=Sampling(sampling.temperature, sampling.top_k, sampling.top_p),
    )
    assert not all(torch.allclose(p["logprobs"], g.logprobs, atol=1e-3) for g, p in zip(gens, plain))


def test_repetition_penalty_is_transformers_on_a_row_without_padding_and_skips_left_padding():
    from transformers.generation.logits_process import RepetitionPenaltyLogitsProcessor

    from llmgym.llm.sampling import RepetitionPenaltyProcessor, history_masks

    scores = torch.tensor([[2.0, -1.0, 0.5, 3.0, -2.0], [2.0, -1.0, 0.5, 3.0, -2.0]])
    ids = torch.tensor([[1, 3, 1], [0, 0, 1]])  # row 1: two left pads of id 0, then token 1
    ours = RepetitionPenaltyProcessor(2.0, [0, 2])(ids, scores.clone())
    assert torch.equal(ours[0], RepetitionPenaltyLogitsProcessor(2.0)(ids[:1], scores[:1].clone())[0])
    assert ours[1].tolist() == [2.0, -2.0, 0.5, 3.0, -2.0]  # the pads' id 0 is not penalised
    seen, keep = history_masks(
        [1], [3, 1, 4], 5, Sampling(repetition_penalty=2.0, min_new_tokens=2), {4}, torch.device("cpu")
    )
    assert seen.tolist() == [
        [False, True, False, False, False],
        [False, True, False, True, False],
        [False, True, False, True, False],
    ]
    assert keep[:, 4].tolist() == [False, False, True] and keep[:, :4].all()


@pytest.mark.parametrize("prefixed", [False, True])
def test_min_new_tokens_of_a_seq2seq_is_rescored_exactly_after_its_decoder_prefix(prefixed):
    # generate's min_new_tokens counts the tokens after the decoder prefix; re-scoring bans EOS on the same ones
    from llmgym.testing import tiny_seq2seq_lm

    model, tok = tiny_seq2seq_lm()
    eos = tok.eos_token_id
    bias = torch.zeros(model.config.vocab_size)
    bias[eos] = 8.0  # EOS the most likely token: without the ban it would end most completions at once
    model.lm_head.register_forward_hook(lambda module, inputs, output: output + bias.to(output.dtype))
    llm = LocalLLM(ModelConfig(name="tiny"), model=model, tokenizer=tok)
    sampling = Sampling(min_new_tokens=3)
    prefixes = [[5, 6], [7]] if prefixed else None
    extra = {} if prefixes is None else {"decoder_prefixes": prefixes}
    torch.manual_seed(0)
    gens = [
        g[0] for g in llm.generate(PROMPTS[:2], max_new_tokens=5, **extra, **sampling.generation_kwargs())
    ]
    assert all(len(g.token_ids) >= 4 and eos not in g.token_ids[:3] for g in gens)
    assert any(g.token_ids[3] == eos for g in gens)  # allowed from the 4th token on, and likely
    rescored = llm.token_logprobs(
        [g.prompt_ids for g in gens],
        [g.token_ids for g in gens],
        require_grad=False,
        sampling=sampling,
        **extra,
    )
    for g, r in zip(gens, rescored):
        assert torch.allclose(r["logprobs"], g.logprobs, atol=1e-4)
    with pytest.raises(InputError, match="repetition_penalty is re-scored for causal LMs only"):
        llm.token_logprobs(
            [g.prompt_ids for g in gens],
            [g.token_ids for g in gens],
            sampling=Sampling(repetition_penalty=2.0),
        )
