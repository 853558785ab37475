"""llmgym export: PEFT adapters and merged models that load without llmgym, and their heads."""

import json
import shutil
from pathlib import Path

import pytest
import torch
from peft import PeftModel
from transformers import AutoModelForCausalLM, AutoTokenizer

from llmgym.checkpoint import latest_checkpoint
from llmgym.cli import main
from llmgym.config import load_config
from llmgym.errors import CheckpointError, ExportError
from llmgym.export import CONFIG_COPY, HEADS_META, HEADS_WEIGHTS, export_run, load_heads
from llmgym.llm.modules import ActionHead, ValueHead
from llmgym.run.build import build_llm
from llmgym.run.trainer import Trainer
from tests.algorithms.helpers import tiny_config

RUN = [
    "env.kwargs.length=2",
    "algorithm.rollout_steps=4",
    "env.num_envs=2",
    "train.total_env_steps=16",
    "train.checkpoint_every=8",
]
CONTEXTS = [
    "You see a red ball 2 steps left and 1 step forward. Action:",
    "Your hand: 14. Dealer shows: 10. Do you",
]
CANDIDATES = [[" go forward", " turn left", " pick up"], [" hit", " stay"]]


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tiny_model_dir):
    """Two 16-step runs of the tiny model saved on disk: ``lora`` (evaluated) and ``full`` (no LoRA)."""
    root = tmp_path_factory.mktemp("runs")
    for name, extra in {"lora": ["model.lora.r=4", "train.eval_episodes=2"], "full": []}.items():
        config = tiny_config(
            root,
            "llmgym/Countdown-v0",
            *RUN,
            f"model.name={tiny_model_dir}",
            f"train.run_name={name}",
            *extra,
        )
        trainer = Trainer(config)
        trainer.train()
        trainer.close()
    return root


@pytest.fixture(scope="module")
def trained(runs):
    """The LLM of each run's latest checkpoint, loaded by llmgym as ``llmgym eval`` does."""
    llms = {}
    for name in ("lora", "full"):
        folder = latest_checkpoint(runs / name)
        llms[name] = build_llm(load_config(folder / "config.yaml"))
        llms[name].load(folder / "llm")
    yield llms
    for llm in llms.values():
        llm.close()


def _copy(run, tmp_path):
    return Path(shutil.copytree(run, tmp_path / "run"))


@torch.no_grad()
def plain_pass(model, tokenizer, context, candidates):
    """Candidate log-probs, candidate last hidden states and the context's last hidden state, by plain forwards."""
    context_ids = tokenizer(context)["input_ids"]
    context_hidden = model(input_ids=torch.tensor([context_ids]), output_hidden_states=True).hidden_states[
        -1
    ][0, -1]
    scores, hidden = [], []
    for candidate in candidates:
        ids = tokenizer(context + candidate)["input_ids"]
        assert (
            ids[: len(context_ids)] == context_ids
        )  # the candidate's tokens are the ones after the context's
        out = model(input_ids=torch.tensor([ids]), output_hidden_states=True)
        logprobs = torch.log_softmax(out.logits[0].float(), dim=-1)
        scores.append(sum(logprobs[t - 1, ids[t]] for t in range(len(context_ids), len(ids))))
        hidden.append(out.hidden_states[-1][0, -1])
    return torch.stack(scores), torch.stack(hidden), context_hidden


def assert_scores_match(model, tokenizer, llm):
    for context, candidates, expected in zip(CONTEXTS, CANDIDATES, llm.score(CONTEXTS, CANDIDATES)):
        scores, _, _ = plain_pass(model, tokenizer, context, candidates)
        torch.testing.assert_close(scores, expected, atol=1e-4, rtol=0)


def test_adapter_loads_with_peft_on_the_recorded_base_and_scores_as_the_trained_llm(
    runs, trained, tmp_path, tiny_model_dir
):
    export = export_run(runs / "lora", tmp_path / "adapter")
    out = tmp_path / "adapter"
    assert export.kind == "adapter" and export.path == out and export.checkpoint.name == "step-0000000016"
    for name in (
        "adapter_config.json",
        "adapter_model.safetensors",
        "tokenizer.json",
        HEADS_WEIGHTS,
        HEADS_META,
        CONFIG_COPY,
        "README.md",
    ):
        assert (out / name).is_file(), name
    assert not (out / "model.safetensors").exists()
    base_path = json.loads((out / "adapter_config.json").read_text())["base_model_name_or_path"]
    assert base_path == export.base_model == str(Path(tiny_model_dir).resolve())

    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base_path), out).eval()
    tokenizer = AutoTokenizer.from_pretrained(out)
    assert_scores_match(model, tokenizer, trained["lora"])
    with model.disable_adapter():  # the adapter was trained: the base alone scores otherwise
        base_scores, _, _ = plain_pass(model, tokenizer, CONTEXTS[0], CANDIDATES[0])
    assert not torch.allclose(base_scores, trained["lora"].score(CONTEXTS[:1], CANDIDATES[:1])[0], atol=1e-4)

    card = (out / "README.md").read_text()
    assert (
        card.startswith("---\nlibrary_name: peft\n") and "base_model:" not in card
    )  # a local base is no hub id
    assert "llmgym" in card and "`llmgym/Countdown-v0`" in card and CONFIG_COPY in card
    assert "Evaluated at this checkpoint (16 env steps): success rate" in card
    assert (out / CONFIG_COPY).read_text() == (export.checkpoint / "config.yaml").read_text()


def test_merged_model_loads_with_transformers_and_scores_as_the_trained_llm(runs, trained, tmp_path):
    export = export_run(runs / "lora", tmp_path / "merged", merge=True)
    out = tmp_path / "merged"
    assert export.kind == "merged" and not (out / "adapter_config.json").exists()
    model = AutoModelForCausalLM.from_pretrained(out).eval()
    assert not any("lora" in name for name, _ in model.named_parameters())
    assert_scores_match(model, AutoTokenizer.from_pretrained(out), trained["lora"])
    assert (out / "README.md").read_text().startswith("---\nlibrary_name: transformers\n")


def test_heads_load_into_their_classes_and_give_the_trained_values(runs, trained, tmp_path):
    export_run(runs / "lora", tmp_path / "merged", merge=True)
    heads = load_heads(tmp_path / "merged")
    assert sorted(heads) == ["policy", "value"]
    assert type(heads["value"]) is ValueHead and type(heads["policy"]) is ActionHead
    meta = json.loads((tmp_path / "merged" / HEADS_META).read_text())
    assert meta["heads"]["value"]["class"] == "llmgym.llm.modules.ValueHead"
    assert meta["heads"]["policy"]["keys"] == sorted(heads["policy"].state_dict())

    model = AutoModelForCausalLM.from_pretrained(tmp_path / "merged").eval()
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "merged")
    outputs = trained["lora"].forward(["value", "policy"], CONTEXTS, CANDIDATES)
    for context, candidates, expected in zip(CONTEXTS, CANDIDATES, outputs):
        scores, candidate_hidden, context_hidden = plain_pass(model, tokenizer, context, candidates)
        with torch.no_grad():
            value = heads["value"].net(context_hidden).squeeze(-1)
            logits = heads["policy"].prior_weight * scores + heads["policy"].linear(candidate_hidden).squeeze(
                -1
            )
        torch.testing.assert_close(value, expected["value"], atol=1e-4, rtol=0)
        torch.testing.assert_close(logits, expected["policy"], atol=1e-4, rtol=0)
    assert heads["policy"].linear.weight.abs().sum() > 0  # trained away from its zero initialisation


def test_a_full_run_exports_the_full_model_with_or_without_merge(runs, trained, tmp_path):
    plain = export_run(runs / "full", tmp_path / "plain")
    merged = export_run(runs / "full", tmp_path / "merged", merge=True)
    assert plain.kind == merged.kind == "full" and not (tmp_path / "plain" / "adapter_config.json").exists()
    for out in (tmp_path / "plain", tmp_path / "merged"):
        assert_scores_match(
            AutoModelForCausalLM.from_pretrained(out).eval(),
            AutoTokenizer.from_pretrained(out),
            trained["full"],
        )
    assert sorted(load_heads(tmp_path / "plain")) == ["policy", "value"]


def test_an_older_checkpoint_is_exported_by_name(runs, trained, tmp_path):
    export = export_run(runs / "lora", tmp_path / "old", checkpoint="step-0000000008")
    assert export.checkpoint.name == "step-0000000008"
    model = PeftModel.from_pretrained(
        AutoModelForCausalLM.from_pretrained(export.base_model), tmp_path / "old"
    ).eval()
    scores, _, _ = plain_pass(
        model, AutoTokenizer.from_pretrained(tmp_path / "old"), CONTEXTS[0], CANDIDATES[0]
    )
    assert not torch.allclose(scores, trained["lora"].score(CONTEXTS[:1], CANDIDATES[:1])[0], atol=1e-4)
    with pytest.raises(
        CheckpointError, match=r"'step-9' is not in .*\['step-0000000008', 'step-0000000016'\]"
    ):
        export_run(runs / "lora", tmp_path / "x", checkpoint="step-9")


def test_missing_run_and_corrupted_checkpoints_are_checkpoint_errors(runs, tmp_path):
    with pytest.raises(
        CheckpointError, match="No checkpoint in .*pass the run directory written by llmgym train"
    ):
        export_run(tmp_path / "no-such-run")
    run = _copy(runs / "lora", tmp_path)
    for step in (8, 16):
        (run / "checkpoints" / f"step-{step:010d}" / "llm" / "weights.safetensors").write_bytes(b"corrupted")
    with pytest.raises(
        CheckpointError, match=r"(?s)step-0000000016/llm/weights.safetensors is corrupted.*step-0000000008"
    ):
        export_run(run)
    with pytest.raises(CheckpointError, match="weights.safetensors is corrupted"):
        export_run(run, checkpoint="step-0000000008")
    (run / "checkpoints" / "step-0000000008" / "manifest.json").write_text("{")
    with pytest.raises(CheckpointError, match=r"step-0000000008/manifest.json is unreadable"):
        export_run(run, checkpoint="step-0000000008")
    assert not (run / "export").exists()


def test_cli_writes_the_default_folder_and_replaces_only_a_previous_export_when_forced(
    runs, tmp_path, capsys
):
    run = _copy(runs / "lora", tmp_path)
    assert main(["export", str(run)]) == 0
    stdout = capsys.readouterr().out
    assert f"exported the PEFT adapter of checkpoint step-0000000016 to {run / 'export'}" in stdout
    assert (run / "export" / "adapter_config.json").is_file()

    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "notes.txt").write_text("mine")
    assert main(["export", str(run), "--merge", "--out", str(taken)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("llmgym export: error: --out ") and "is not empty" in err and "--force" in err
    assert (taken / "notes.txt").read_text() == "mine"
    assert main(["export", str(run), "--merge", "--out", str(taken), "--force"]) == 2  # not a previous export
    assert "not a previous export" in capsys.readouterr().err and (taken / "notes.txt").read_text() == "mine"
    assert (
        main(["export", str(run), "--merge", "--out", str(run / "export"), "--force"]) == 0
    )  # a previous export
    assert (run / "export" / "config.json").is_file() and not (
        run / "export" / "adapter_config.json"
    ).exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary folder left

    assert main(["export", str(tmp_path / "nothing")]) == 2
    assert "No checkpoint in" in capsys.readouterr().err


def test_push_to_hub_uploads_the_folder_only_when_asked(runs, tmp_path, monkeypatch):
    import huggingface_hub

    calls = []
    monkeypatch.setattr(
        huggingface_hub, "create_repo", lambda repo_id, **kw: calls.append(("create", repo_id, kw))
    )
    monkeypatch.setattr(huggingface_hub, "upload_folder", lambda **kw: calls.append(("upload", kw)))
    export_run(runs / "lora", tmp_path / "local")
    assert calls == []
    export = export_run(runs / "lora", tmp_path / "pushed", push_to_hub="me/countdown-agent")
    assert export.pushed_to == "me/countdown-agent"
    assert calls[0] == ("create", "me/countdown-agent", {"private": True, "exist_ok": True})
    assert calls[1][0] == "upload" and calls[1][1]["repo_id"] == "me/countdown-agent"
    assert calls[1][1]["folder_path"] == str(tmp_path / "pushed")

    def offline(**kwargs):
        raise huggingface_hub.errors.OfflineModeIsEnabled("offline mode is enabled")

    monkeypatch.setattr(huggingface_hub, "upload_folder", offline)
    with pytest.raises(
        ExportError, match=r"export in .*failed \(offline mode is enabled\).*--push-to-hub me/x"
    ):
        export_run(runs / "lora", tmp_path / "failed", push_to_hub="me/x")
    assert (
        tmp_path / "failed" / "adapter_model.safetensors"
    ).is_file()  # the folder is complete all the same


def test_export_help_names_the_options_and_the_loaders(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["export", "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    for text in (
        "--merge",
        "--out DIR",
        "--checkpoint NAME",
        "--force",
        "--push-to-hub REPO_ID",
        "PeftModel.from_pretrained",
        "load_heads",
        "docs/export.md",
    ):
        assert text in out, text


def test_load_heads_of_a_folder_without_heads_is_an_export_error(tmp_path):
    with pytest.raises(
        ExportError, match="holds no readable llmgym heads.*pass a folder written by llmgym export"
    ):
        load_heads(tmp_path)
