"""generate(): batched, token ids and log-probs kept, stops at EOS / stop strings."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from llmgym.config import ModelConfig
from llmgym.errors import InputError
from llmgym.llm.generation import generated_length
from llmgym.llm.local import LocalLLM

PROMPTS = ["Goal: go to the", "You see a red ball 2 steps left and", "héllo"]


@pytest.fixture(params=["tiny_llama", "tiny_gpt2", "tiny_t5"])
def llm(request):
    model, tok = request.getfixturevalue(request.param)
    return LocalLLM(ModelConfig(name="tiny"), model=model, tokenizer=tok)


def test_raw_logprobs_equal_rescoring(llm):
    torch.manual_seed(0)
    gens = llm.generate(
        PROMPTS, max_new_tokens=6, do_sample=True, temperature=0.7, top_p=0.9, num_return_sequences=2
    )
    assert [len(g) for g in gens] == [2, 2, 2]
    flat = [g for group in gens for g in group]
    rescored = llm.token_logprobs(
        [g.prompt_ids for g in flat], [g.token_ids for g in flat], require_grad=False
    )
    for g, r in zip(flat, rescored):
        assert len(g.token_ids) == g.logprobs.shape[0] == g.raw_logprobs.shape[0] > 0
        assert torch.allclose(g.raw_logprobs, r["logprobs"], atol=1e-4)
        assert torch.all(torch.isfinite(g.logprobs)) and torch.all(g.logprobs <= 0)
        assert g.text == llm.tokenizer.decode(g.token_ids, skip_special_tokens=True)


def test_greedy_processed_equals_raw(tiny_llama):
    model, tok = tiny_llama
    llm = LocalLLM(ModelConfig(name="tiny"), model=model, tokenizer=tok)
    gens = llm.generate(PROMPTS[:2], max_new_tokens=4, do_sample=False)
    for group in gens:
        assert torch.allclose(group[0].logprobs, group[0].raw_logprobs, atol=1e-6)
    single = llm.generate(PROMPTS[1:2], max_new_tokens=4, do_sample=False)[0][0]
    assert single.token_ids == gens[1][0].token_ids  # left padding changes nothing


def test_untempered_sampling_logprobs_equal_raw(tiny_gpt2):
    model, tok = tiny_gpt2
    llm = LocalLLM(ModelConfig(name="tiny"), model=model, tokenizer=tok)
    gens = llm.generate(PROMPTS, max_new_tokens=5, do_sample=True, temperature=1.0, top_k=0, top_p=1.0)
    for group in gens:
        assert torch.allclose(group[0].logprobs, group[0].raw_logprobs, atol=1e-5)
    tempered = llm.generate(PROMPTS[:1], max_new_tokens=5, do_sample=True, temperature=0.5, top_k=0)[0][0]
    assert not torch.allclose(tempered.logprobs, tempered.raw_logprobs)


def test_stops_at_eos_and_stop_strings(tiny_llama):
    model, tok = tiny_llama
    llm = LocalLLM(ModelConfig(name="tiny"), model=model, tokenizer=tok)
    free = llm.generate(PROMPTS[:1], max_new_tokens=8, do_sample=False)[0][0]
    eos_id = free.token_ids[2]
    stopped = llm.generate(PROMPTS[:1], max_new_tokens=8, do_sample=False, eos_token_id=eos_id)[0][0]
    assert stopped.token_ids == free.token_ids[:3]
    stop = tok.decode(free.token_ids[:2])[-1]
    by_string = llm.generate(PROMPTS, max_new_tokens=8, do_sample=False, stop_strings=[stop])[0][0]
    assert stop in by_string.text and len(by_string.token_ids) <= 2


def test_generated_length():
    decode = lambda ids: "".join(chr(97 + i) for i in ids)  # noqa: E731
    assert generated_length([1, 2, 9, 0, 0], {9}, 0, [], decode) == 3
    assert generated_length([1, 2, 0, 0], {9}, 0, ["bc"], decode) == 2
    assert generated_length([1, 2, 3, 4], {9}, 0, ["bc"], decode) == 4  # kept: tokens follow the stop
    assert generated_length([1, 2, 3], set(), None, [], decode) == 3


def test_generation_errors(tiny_llama):
    model, tok = tiny_llama
    llm = LocalLLM(ModelConfig(name="tiny"), model=model, tokenizer=tok)
    with pytest.raises(InputError, match="num_beams"):
        llm.generate(PROMPTS, num_beams=2)
    with pytest.raises(InputError, match="output_scores"):
        llm.generate(PROMPTS, output_scores=False)
    with pytest.raises(InputError, match="single string"):
        llm.generate("a prompt")
    assert llm.generate([]) == []


SHARED = "Possible actions of the agent: turn left, turn right, go forward.\nGoal of the agent: go to the red ball\n"
SHARED_PROMPTS = [
    SHARED + "You see a wall 2 steps forward\nAction:",
    SHARED + "You see a red ball 1 step left\nAction:",
    SHARED + "Action:",
]


@pytest.mark.parametrize("arch", ["tiny_llama", "tiny_gpt2"])
def test_packed_prefill_computes_each_prefix_once_and_changes_nothing(arch, request, monkeypatch):
    from llmgym.llm import generation

    model, tok = request.getfixturevalue(arch)
    llm = LocalLLM(ModelConfig(name="tiny"), model=model, tokenizer=tok)
    prompts = [tok(p)["input_ids"] for p in SHARED_PROMPTS]
    assert len({len(p) for p in prompts}) == 3  # the cache is left-padded
    computed = []
    original = generation.collate_rows
    monkeypatch.setattr(
        generation,
        "collate_rows",
        lambda rows, *a: computed.append(sum(len(r.input_ids) for r in rows)) or original(rows, *a),
    )
    batched = llm.generate(SHARED_PROMPTS, max_new_tokens=6, do_sample=False)
    distinct = {tuple(p[: i + 1]) for p in prompts for i in range(len(p) - 1)}
    assert computed == [len(distinct)] and len(distinct) < sum(len(p) - 1 for p in prompts)
    for prompt, group in zip(SHARED_PROMPTS, batched):
        plain = generation.generate(
            model, tok, llm.encoder, [prompt], packed_prefill=False, max_new_tokens=6, do_sample=False
        )[0][0]
        assert group[0].token_ids == plain.token_ids and group[0].prompt_ids == plain.prompt_ids
        assert torch.allclose(group[0].raw_logprobs, plain.raw_logprobs, atol=1e-5)
    torch.manual_seed(0)
    samples = llm.generate(SHARED_PROMPTS[:2], max_new_tokens=5, do_sample=True, num_return_sequences=3)
    assert len(computed) == 2 and all(len(group) == 3 for group in samples)
    flat = [g for group in samples for g in group]
    rescored = llm.token_logprobs(
        [g.prompt_ids for g in flat], [g.token_ids for g in flat], require_grad=False
    )
    for g, r in zip(flat, rescored):
        assert torch.allclose(g.raw_logprobs, r["logprobs"], atol=1e-4)


def test_packed_prefill_skips_one_token_prompts(tiny_llama):
    from llmgym.llm import generation

    model, tok = tiny_llama
    assert generation.packed_prompt_cache(model, [[5], [7]], pad_token_id=0) is None
    llm = LocalLLM(ModelConfig(name="tiny"), model=model, tokenizer=tok)
    prompts = ["a", "a b c d"]
    packed = generation.generate(model, tok, llm.encoder, prompts, max_new_tokens=3, do_sample=False)
    plain = generation.generate(
        model, tok, llm.encoder, prompts, packed_prefill=False, max_new_tokens=3, do_sample=False
    )
    assert [g[0].token_ids for g in packed] == [g[0].token_ids for g in plain]


def test_preallocated_layer_matches_a_dynamic_layer_through_every_cache_operation():
    from transformers.cache_utils import DynamicLayer

    from llmgym.llm.generation import PreallocatedLayer

    gen = torch.Generator().manual_seed(0)

    def states(batch: int, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.randn(batch, 2, n, 4, generator=gen), torch.randn(batch, 2, n, 4, generator=gen)

    start = states(3, 5)
    plain, grown = DynamicLayer(), PreallocatedLayer(*start, spare=2)
    plain.update(*start)
    steps = [
        lambda layer: layer.update(*new),  # within the spare positions
        lambda layer: layer.update(*new),  # past them: the buffer grows
        lambda layer: layer.crop(-3),
        lambda layer: layer.update(*new),  # writes over the cropped positions
        lambda layer: layer.batch_repeat_interleave(2),
        lambda layer: layer.batch_select_indices(torch.tensor([0, 3, 5])),
    ]
    for step in steps:
        new = states(plain.keys.shape[0], 2)
        step(plain)
        step(grown)
        assert torch.equal(grown.keys, plain.keys) and torch.equal(grown.values, plain.values)
        assert grown.get_seq_length() == plain.get_seq_length()
    new = states(3, 1)
    keys, values = grown.update(*new)
    expected = plain.update(*new)
    assert torch.equal(keys, expected[0]) and torch.equal(values, expected[1])
    assert grown._owns_states()  # decoding writes in place again after the batch was rebuilt


@pytest.mark.parametrize(
    ("kwargs", "pattern"),
    [
        ({"num_return_sequences": 0}, r"num_return_sequences=0 is invalid; expected an integer >= 1"),
        ({"max_new_tokens": 0}, r"max_new_tokens=0 is invalid"),
        ({"max_new_tokens": 2.5}, r"max_new_tokens=2\.5 is invalid"),
        ({"top_p": 2.0}, r"top_p=2\.0 is invalid; expected a number in \(0, 1\]"),
        ({"top_p": 0.0}, r"top_p=0\.0 is invalid"),
        ({"top_k": -1}, r"top_k=-1 is invalid; expected an integer >= 0"),
        ({"temperature": 0.0}, r"temperature=0\.0 is invalid; expected a finite number > 0"),
        ({"temperature": float("nan")}, r"temperature=nan is invalid"),
        ({"temperature": float("inf")}, r"temperature=inf is invalid"),
        ({"min_p": 1.5}, r"min_p=1\.5 is invalid"),
        ({"repetition_penalty": -1.0}, r"repetition_penalty=-1\.0 is invalid"),
    ],
)
def test_sampling_arguments_out_of_range_are_input_errors(tiny_gpt2, kwargs, pattern):
    model, tok = tiny_gpt2
    llm = LocalLLM(ModelConfig(name="tiny"), model=model, tokenizer=tok)
    with pytest.raises(InputError, match=pattern):
        llm.generate(PROMPTS[:1], **kwargs)


@given(
    top_p=st.floats(allow_nan=True, allow_infinity=True),
    temperature=st.floats(allow_nan=True, allow_infinity=True),
)
def test_check_generation_kwargs_accepts_exactly_the_valid_ranges(top_p, temperature):
    from llmgym.llm.validation import check_generation_kwargs

    valid = 0 < top_p <= 1 and math.isfinite(temperature) and temperature > 0
    if valid:
        check_generation_kwargs({"top_p": top_p, "temperature": temperature})
    else:
        with pytest.raises(InputError):
            check_generation_kwargs({"top_p": top_p, "temperature": temperature})


@pytest.mark.parametrize("arch", ["tiny_llama", "tiny_gpt2"])
def test_prompt_plus_new_tokens_past_the_window_is_refused_before_allocating(arch, request):
    model, tok = request.getfixturevalue(arch)
    llm = LocalLLM(ModelConfig(name="tiny"), model=model, tokenizer=tok)
    window = llm.window
    with pytest.raises(
        InputError, match=rf"context window of {window} tokens\. Fix: set max_new_tokens to at most"
    ):
        llm.generate(PROMPTS[:1], max_new_tokens=10**9)  # would reserve a cache of 10**9 positions
    length = len(llm.encoder.encode_contexts(PROMPTS[1:2])[0])
    with pytest.raises(
        InputError, match=rf"contexts\[0\] has {length} tokens.*at most {window - length}.*max_context_tokens"
    ):
        llm.generate(PROMPTS[1:2], max_new_tokens=window - length + 1)
    assert (
        len(
            llm.generate(PROMPTS[1:2], max_new_tokens=window - length, do_sample=False, eos_token_id=-1)[0][
                0
            ].token_ids
        )
        == window - length
    )


def test_empty_context_and_lone_surrogate_are_input_errors(tiny_gpt2):
    model, tok = tiny_gpt2
    llm = LocalLLM(ModelConfig(name="tiny"), model=model, tokenizer=tok)
    with pytest.raises(InputError, match=r"contexts\[1\] encodes to no tokens"):
        llm.generate(["a", ""], max_new_tokens=2)
    with pytest.raises(InputError, match=r"contexts\[0\] holds the lone surrogate '\\ud800' at character 1"):
        llm.generate(["a\ud800b"], max_new_tokens=2)
    with pytest.raises(InputError, match=r"contexts\[0\] holds the lone surrogate"):
        llm.score(["\udfff"], [["a"]])
    with pytest.raises(InputError, match=r"candidates\[0\]\[1\] holds the lone surrogate '\\udfff'"):
        llm.score(["a"], [["b", "c\udfff"]])


@given(
    st.lists(
        st.text(alphabet=st.characters(codec=None, min_codepoint=0xD700, max_codepoint=0xE100)), max_size=4
    )
)
def test_check_contexts_refuses_exactly_the_texts_with_surrogates(contexts):
    from llmgym.llm.validation import check_contexts

    bad = [i for i, text in enumerate(contexts) if any(0xD800 <= ord(c) <= 0xDFFF for c in text)]
    if bad:
        with pytest.raises(InputError, match=rf"contexts\[{bad[0]}\] holds the lone surrogate"):
            check_contexts(contexts)
    else:
        assert check_contexts(contexts) == contexts
