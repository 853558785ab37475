import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llmgym.agents.history import History, PlainTemplate, Prompt
from llmgym.config import AgentConfig
from llmgym.errors import ConfigError, InputError
from llmgym.testing import tiny_tokenizer

TOK = tiny_tokenizer()


def play(history, turns, pending):
    for obs, action in turns:
        history.add_observation(obs)
        history.add_action(action)
    history.add_observation(pending)


def test_chat_template_render_keeps_last_turns():
    h = History(TOK, system_prompt="sys", max_turns=2)
    play(h, [("o1", "a1"), ("o2", "a2"), ("o3", "a3")], "o4")
    p = h.render()
    expected = TOK.apply_chat_template(
        [
            {"role": "system", "content": "sys"},
            {"role": "user", "content": "o2"},
            {"role": "assistant", "content": "a2"},
            {"role": "user", "content": "o3"},
            {"role": "assistant", "content": "a3"},
            {"role": "user", "content": "o4"},
        ],
        tokenize=False,
        add_generation_prompt=True,
    )
    assert p.text == expected
    assert p.token_ids == TOK(expected, add_special_tokens=False)["input_ids"]
    assert (p.first_turn, p.num_turns, p.observation_truncated) == (1, 2, False)


def test_plain_template_and_whole_conversation():
    h = History(TOK, system_prompt="Goal: red ball", max_turns=None, use_chat_template=False)
    play(h, [("see wall", "turn left"), ("see ball", "go forward")], "ball in front")
    p = h.render()
    assert (
        p.text
        == "Goal: red ball\nsee wall\nAction: turn left\nsee ball\nAction: go forward\nball in front\nAction:"
    )
    assert p.token_ids == TOK(p.text, add_special_tokens=True)["input_ids"]
    custom = History(
        TOK, max_turns=0, template=PlainTemplate(query="Obs: {observation}\n>"), use_chat_template=False
    )
    play(custom, [("x", "y")], "z")
    assert custom.render().text == "Obs: z\n>"


def test_budget_drops_oldest_turns_first():
    h = History(TOK, system_prompt="sys", max_turns=None)
    turns = [(f"observation number {i}", f"action {i}") for i in range(6)]
    play(h, turns, "now")
    full = h.render()
    budget = len(full.token_ids) - 5
    h.max_prompt_tokens = budget
    p = h.render()
    assert len(p.token_ids) <= budget and p.num_turns < 6 and p.first_turn + p.num_turns == 6
    assert "now" in p.text and "sys" in p.text
    assert "observation number 5" in p.text and "observation number 0" not in p.text


def test_overflow_error_and_truncate_left():
    long_obs = "You see a wall 3 steps forward. " * 10
    h = History(TOK, system_prompt="sys", max_prompt_tokens=40)
    play(h, [("o", "a")], long_obs)
    with pytest.raises(InputError, match="max_prompt_tokens=40"):
        h.render()
    t = History(TOK, system_prompt="sys", max_prompt_tokens=40, overflow="truncate_left")
    play(t, [("o", "a")], long_obs)
    p = t.render()
    assert p.observation_truncated and p.num_turns == 0 and len(p.token_ids) <= 40
    assert p.token_ids == t.encode(p.text) and "forward. <|im_end|>" in p.text
    tiny = History(
        TOK, system_prompt="a very long system prompt " * 5, max_prompt_tokens=5, overflow="truncate_left"
    )
    tiny.add_observation("x")
    with pytest.raises(InputError, match="system prompt and template alone"):
        tiny.render()


def test_prefix_stability():
    h = History(TOK, system_prompt="sys", max_turns=2)
    h.add_observation("o1")
    first = h.render()
    h.add_action("go forward")
    h.add_observation("o2")
    assert h.check_prefix_stable(first)
    second = h.render()
    h.add_action("turn left")
    h.add_observation("o3")
    h.render()
    h.add_action("pick up")
    h.add_observation("o4")
    assert h.render().first_turn == 1  # the window slid, yet the old prompts still re-render stably
    assert h.check_prefix_stable(first) and h.check_prefix_stable(second)
    # a prompt that is not what this history renders is drift
    forged = Prompt(second.text, second.token_ids[:-1] + [0], second.first_turn, second.num_turns, False)
    assert not h.check_prefix_stable(forged)
    h.reset()
    with pytest.raises(InputError, match="current episode"):
        h.check_prefix_stable(second)


def test_drift_detected_when_template_rewrites_history():
    tok = tiny_tokenizer()
    tok.chat_template = (
        "{% for m in messages %}{% if m['role'] == 'assistant' and not loop.last %}<|im_start|>assistant\n"
        "[{{ loop.length }}] {{ m['content'] }}<|im_end|>\n{% else %}<|im_start|>{{ m['role'] }}\n"
        "{{ m['content'] }}<|im_end|>\n{% endif %}{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    h = History(tok, max_turns=None)
    play(h, [("o1", "a1")], "o2")
    prev = h.render()
    h.add_action("a2")
    h.add_observation("o3")
    assert not h.check_prefix_stable(prev)


def test_usage_errors_and_config():
    h = History(TOK)
    with pytest.raises(InputError, match="pending observation"):
        h.render()
    with pytest.raises(InputError, match="add_observation"):
        h.add_action("a")
    h.add_observation("o")
    with pytest.raises(InputError, match="twice"):
        h.add_observation("o")
    with pytest.raises(InputError, match="int"):
        h.add_action(3)  # type: ignore[arg-type]
    with pytest.raises(InputError, match="observation is a dict"):
        History(TOK).add_observation({"text": "x"})  # type: ignore[arg-type]
    for kwargs, match in (
        ({"max_turns": -1}, "max_turns=-1"),
        ({"max_prompt_tokens": 0}, "max_prompt_tokens=0"),
        ({"overflow": "drop"}, "overflow='drop'"),
    ):
        with pytest.raises(ConfigError, match=match):
            History(TOK, **kwargs)
    with pytest.raises(ConfigError, match="PlainTemplate.turn"):
        PlainTemplate(turn="{obs} {action}")
    cfg = AgentConfig(history_length=1, max_prompt_tokens=64, use_chat_template=False)
    built = History.from_config(TOK, cfg, system_prompt="default")
    assert (built.max_turns, built.max_prompt_tokens, built.uses_chat_template, built.system_prompt) == (
        1,
        64,
        False,
        "default",
    )
    no_template = tiny_tokenizer()
    no_template.chat_template = None
    assert not History(no_template).uses_chat_template


WORDS = st.sampled_from(
    ["red", "ball", "wall", "go", "forward", "turn left", "héllo", "✓", "3 steps", "Action:", " "]
)
TEXT = st.lists(WORDS, min_size=0, max_size=8).map(" ".join)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    turns=st.lists(st.tuples(TEXT, TEXT), max_size=7),
    pending=TEXT,
    max_turns=st.one_of(st.none(), st.integers(0, 4)),
    budget=st.integers(1, 120),
    chat=st.booleans(),
    system=st.one_of(st.none(), TEXT),
)
def test_budget_respected_newest_kept_ids_exact(turns, pending, max_turns, budget, chat, system):
    h = History(
        TOK, system_prompt=system, max_turns=max_turns, max_prompt_tokens=budget, use_chat_template=chat
    )
    play(h, turns, pending)
    try:
        p = h.render()
    except InputError:
        bare = History(TOK, system_prompt=system, max_turns=0, use_chat_template=chat)
        bare.add_observation(pending)
        assert len(bare.render().token_ids) > budget
        return
    assert len(p.token_ids) <= budget
    assert p.token_ids == TOK(p.text, add_special_tokens=not chat)["input_ids"]
    assert p.first_turn + p.num_turns == len(turns)  # kept turns are the newest ones
    if max_turns is not None:
        assert p.num_turns <= max_turns
    # one more turn would not fit (or is beyond max_turns)
    allowed = len(turns) if max_turns is None else min(max_turns, len(turns))
    if p.num_turns < allowed:
        wider = History(TOK, system_prompt=system, max_turns=p.num_turns + 1, use_chat_template=chat)
        play(wider, turns, pending)
        assert len(wider.render().token_ids) > budget
    assert h.check_prefix_stable(p)


def test_truncate_right_keeps_the_start_of_the_observation():
    # RL4LMs' prompt_truncation_side: right (CNN/DM, NarrativeQA, IWSLT, CommonGen T5 configs): the start is kept
    obs = "question: who met bob? context: " + "alice met bob in town. " * 20
    h = History(
        TOK,
        max_turns=0,
        max_prompt_tokens=12,
        use_chat_template=False,
        template=PlainTemplate(query="{observation}"),
        overflow="truncate_right",
    )
    h.add_observation(obs)
    p = h.render()
    assert p.observation_truncated and 0 < len(p.token_ids) <= 12 and obs.startswith(p.text)
    assert p.text.startswith("question: who")
    with pytest.raises(ConfigError, match="prompt_truncation_side=right applies to agent.type=token"):
        AgentConfig(type="generative", prompt_truncation_side="right")
    with pytest.raises(ConfigError, match="prompt_truncation_side"):
        AgentConfig(type="token", prompt_truncation_side="middle")
