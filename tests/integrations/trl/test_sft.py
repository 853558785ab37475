"""llmgym sft: TRL's SFTTrainer on a datapool's references, then an RL run that starts from the written folder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from llmgym.cli import main
from llmgym.config import load_config
from llmgym.envs.datapools import load_datapool
from llmgym.errors import ConfigError
from llmgym.integrations.trl.sft import SFT_META, SFTSettings, run_sft, sft_examples
from llmgym.testing import save_tiny_model, tiny_causal_lm

TINY = ["model.dtype=float32", "model.device=cpu", "model.lora.layers=null", "train.seed=0"]


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_model(tmp_path_factory.mktemp("sft") / "tiny")


def _first_decision(config):
    """The first sampled completion of an RL run of ``config`` (its LLM, agent and env, as the trainer builds them)."""
    import gymnasium as gym

    from llmgym.run.build import build_agent, build_llm, env_instructions

    llm = build_llm(config)
    try:
        agent = build_agent(config, llm, 1, env_instructions(config))
        env = gym.make(config.env.id, **dict(config.env.kwargs))
        obs, info = env.reset(seed=0)
        agent.act_batch([obs], [info])
        return agent.last_decisions[0]
    finally:
        llm.close()


def _log_probs(model, prompt_ids: list[int], ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt_ids + ids])).logits[0, len(prompt_ids) - 1 : -1]
    return torch.log_softmax(logits.float(), -1).gather(1, torch.tensor(ids)[:, None])[:, 0]


def test_review_openings_ship_positive_references():
    from llmgym.envs.rewards import sentiment

    samples = load_datapool("review_openings")
    assert all(len(s.references) == 2 for s in samples)
    assert min(sentiment(s.prompt, ref, ()) for s in samples for ref in s.references) > 0


def test_examples_are_the_agents_prompts_then_a_reference_and_eos(tiny_folder):
    config = load_config("textgen_ppo", [f"model.name={tiny_folder}", *TINY])
    _, tokenizer = tiny_causal_lm()
    examples = sft_examples(config, tokenizer)
    assert len(examples) == 24
    first = examples[0]
    prompt_len = first.completion_mask.index(1)
    assert tokenizer.decode(first.input_ids[:prompt_len]) == "This movie was\nAction:"
    assert first.input_ids[-1] == tokenizer.eos_token_id
    assert tokenizer.decode(first.input_ids[prompt_len:-1]).startswith(" a delightful surprise")


def test_full_fine_tuning_lowers_the_loss_and_the_rl_run_starts_from_the_written_model(tiny_folder, tmp_path):
    config = load_config("textgen_ppo", [f"model.name={tiny_folder}", *TINY, "model.lora=null"])
    model, tokenizer = tiny_causal_lm()
    base, _ = tiny_causal_lm()
    result = run_sft(
        config,
        SFTSettings(tmp_path / "sft", max_steps=6, learning_rate=3e-3),
        model=model,
        tokenizer=tokenizer,
    )
    assert len(result.losses) == 6 and result.losses[-1] < result.losses[0] and not result.lora
    assert json.loads((result.folder / SFT_META).read_text())["losses"] == result.losses

    # The RL run (with its own fresh LoRA adapters, as textgen_ppo trains) loads the folder by model.name.
    rl_config = load_config("textgen_ppo", [f"model.name={result.folder}", *TINY])
    decision = _first_decision(rl_config)
    ids, logged = decision.choice.token_ids, torch.tensor(decision.choice.token_log_probs)
    assert torch.allclose(logged, _log_probs(model.eval(), decision.prompt_ids, ids), atol=1e-4)
    assert not torch.allclose(logged, _log_probs(base, decision.prompt_ids, ids), atol=1e-3)


def test_llmgym_sft_trains_lora_and_writes_the_merged_model(tiny_folder, tmp_path, capsys):
    out = tmp_path / "sft-lora"
    code = main(
        [
            "sft",
            "textgen_ppo",
            f"model.name={tiny_folder}",
            *TINY,
            "--out",
            str(out),
            "--steps",
            "4",
            "--learning-rate",
            "1e-2",
            "--batch-size",
            "8",
        ]
    )
    assert code == 0, capsys.readouterr().err
    meta = json.loads((out / SFT_META).read_text())
    assert meta["lora"] and meta["examples"] == 24 and meta["losses"][-1] < meta["losses"][0]
    assert not (out / "adapter_config.json").exists()  # merged into full weights
    from transformers import AutoModelForCausalLM

    merged = AutoModelForCausalLM.from_pretrained(out)
    base = AutoModelForCausalLM.from_pretrained(tiny_folder)
    moved = [n for n, p in merged.named_parameters() if not torch.equal(p, dict(base.named_parameters())[n])]
    assert moved and all("proj" in n for n in moved)  # only the adapted linear layers changed
    assert "model.name=" in capsys.readouterr().out


def test_refusals(tiny_folder, tmp_path):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    config = load_config("textgen_ppo", [f"model.name={tiny_folder}", *TINY])
    with pytest.raises(ConfigError, match="not empty"):
        run_sft(config, SFTSettings(tmp_path / "full"))
    no_refs = load_config("textgen_ppo", [f"model.name={tiny_folder}", *TINY, "env.kwargs.datapool=[a, b]"])
    with pytest.raises(ConfigError, match="no references"):
        run_sft(no_refs, SFTSettings(tmp_path / "new"))
    with pytest.raises(ConfigError, match="not a text-generation env"):
        run_sft(
            load_config("quickstart", [f"model.name={tiny_folder}", *TINY[:2], "agent.type=generative"]),
            SFTSettings(tmp_path / "new"),
        )
    with pytest.raises(ConfigError, match="max_steps"):
        SFTSettings(tmp_path / "new", max_steps=0)


@pytest.fixture(scope="module")
def t5_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_model(tmp_path_factory.mktemp("sft") / "t5", kind="t5")


def test_seq2seq_examples_are_the_encoder_prompt_the_rl_run_feeds_then_the_reference_and_eos(t5_folder):
    from llmgym.testing import tiny_seq2seq_lm

    config = load_config("textgen_ppo", [f"model.name={t5_folder}", *TINY])
    _, tokenizer = tiny_seq2seq_lm()
    examples = sft_examples(config, tokenizer, seq2seq=True)
    assert len(examples) == 24
    first = examples[0]
    # the encoder ids of the RL run's first prompt are those of its sample's examples
    assert _first_decision(config).prompt_ids in [e.prompt_ids for e in examples]
    assert tokenizer.decode(first.prompt_ids) == "This movie was\nAction:"
    # the decoder's text on its own (no space put before it), then EOS
    reference = load_datapool("review_openings")[0].references[0]
    assert reference.startswith("a delightful surprise")
    assert first.completion_ids == [
        *tokenizer(reference, add_special_tokens=False)["input_ids"],
        tokenizer.eos_token_id,
    ]


def test_a_t5_trains_on_the_references_and_the_written_model_loads_and_generates(t5_folder, tmp_path):
    from transformers import AutoModelForSeq2SeqLM

    from llmgym.testing import tiny_seq2seq_lm

    config = load_config("textgen_ppo", [f"model.name={t5_folder}", *TINY, "model.lora=null"])
    model, tokenizer = tiny_seq2seq_lm()
    base, _ = tiny_seq2seq_lm()
    result = run_sft(
        config,
        SFTSettings(tmp_path / "sft", max_steps=8, learning_rate=3e-3),
        model=model,
        tokenizer=tokenizer,
    )
    assert len(result.losses) == 8 and result.losses[-1] < result.losses[0] - 0.3
    meta = json.loads((result.folder / SFT_META).read_text())
    assert meta["trainer"] == "Seq2SeqTrainer" and meta["losses"] == result.losses

    # The loss is the decoder's on the reference given the prompt: recomputed from the written model, it is lower
    # than the base model's on the same pairs.
    written = AutoModelForSeq2SeqLM.from_pretrained(result.folder).eval()
    examples = sft_examples(config, tokenizer, seq2seq=True)

    def loss(m) -> float:
        with torch.no_grad():
            return sum(
                float(m(input_ids=torch.tensor([e.prompt_ids]), labels=torch.tensor([e.completion_ids])).loss)
                for e in examples
            ) / len(examples)

    assert loss(written) < loss(base) - 0.3
    prompt = torch.tensor([examples[0].prompt_ids])
    generated = written.generate(input_ids=prompt, max_new_tokens=5, do_sample=False)
    assert generated.shape == (1, 6)  # the decoder start, then 5 tokens

    # The RL run loads the folder by model.name: its first sampled tokens are scored by the written weights.
    rl_config = load_config("textgen_ppo", [f"model.name={result.folder}", *TINY])  # fresh LoRA adapters
    decision = _first_decision(rl_config)
    ids, logged = decision.choice.token_ids, torch.tensor(decision.choice.token_log_probs)
    start = written.config.decoder_start_token_id
    with torch.no_grad():
        logits = written(
            input_ids=torch.tensor([decision.prompt_ids]),
            decoder_input_ids=torch.tensor([[start, *ids[:-1]]]),
        ).logits[0]
    expected = torch.log_softmax(logits.float(), -1).gather(1, torch.tensor(ids)[:, None])[:, 0]
    assert torch.allclose(logged, expected, atol=1e-4)


def test_llmgym_sft_trains_t5_lora_and_writes_the_merged_model(t5_folder, tmp_path, capsys):
    from transformers import AutoModelForSeq2SeqLM

    out = tmp_path / "sft-t5"
    overrides = [f"model.name={t5_folder}", *TINY, "model.lora.target_modules=[q, v]"]
    code = main(
        ["sft", "textgen_ppo", *overrides, "--out", str(out), "--steps", "4", "--learning-rate", "1e-2"]
    )
    assert code == 0, capsys.readouterr().err
    meta = json.loads((out / SFT_META).read_text())
    assert meta["lora"] and meta["trainer"] == "Seq2SeqTrainer" and meta["losses"][-1] < meta["losses"][0]
    assert not (out / "adapter_config.json").exists()  # merged into full weights
    merged = dict(AutoModelForSeq2SeqLM.from_pretrained(out).named_parameters())
    base = dict(AutoModelForSeq2SeqLM.from_pretrained(t5_folder).named_parameters())
    moved = [n for n, p in merged.items() if not torch.equal(p, base[n])]
    assert moved and all(n.endswith((".q.weight", ".v.weight")) for n in moved)
