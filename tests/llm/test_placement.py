"""Every index and head input is built on the device of the tensor it meets (model parallelism).

A model sharded with Accelerate leaves the last hidden state on its last GPU while the input
embeddings sit on the first. On CPU that is shown with the ``meta`` device standing in for the
last GPU, under a mode that refuses any torch call mixing devices.
"""

from __future__ import annotations

import pytest
import torch
from transformers.cache_utils import DynamicLayer

from llmgym.errors import ConfigError
from llmgym.llm.generation import PreallocatedLayer, gather_cache_rows
from llmgym.llm.layout import ItemSpec
from llmgym.llm.local import LocalLLM
from llmgym.llm.models import quantized_device_map
from llmgym.llm.modules import ValueHead
from llmgym.llm.sampling import Sampling
from llmgym.llm.scoring import forward_items, split_causal_lm
from llmgym.testing import tiny_causal_lm
from tests._devices import StrictDevices

META = torch.device("meta")


def _split_over_two_devices(model):
    """The backbone's output and the LM head on ``meta`` (the 'last GPU'), the embeddings on the CPU."""
    backbone, head = split_causal_lm(model)

    def to_last(module, args, output):
        output.last_hidden_state = output.last_hidden_state.to(META)
        return output

    backbone.register_forward_hook(to_last)
    head.to(META)
    return model


@pytest.mark.parametrize("token_mode", [False, True])
@pytest.mark.parametrize("row_tokens", [0, 64])
def test_scoring_builds_indices_on_the_hidden_states_device(token_mode, row_tokens):
    model, _ = tiny_causal_lm()
    _split_over_two_devices(model)
    items = [ItemSpec([5, 6, 7], [[8, 9], [10]], [0, 0]), ItemSpec([5, 6], [[11, 12, 13]], [0])]
    sampling = Sampling(temperature=0.7, top_k=5) if token_mode else None
    with torch.no_grad(), StrictDevices():
        outputs, input_ids, _ = forward_items(
            model, items, 0, is_seq2seq=False, token_mode=token_mode, row_tokens=row_tokens, sampling=sampling
        )
    assert input_ids.device.type == "cpu"  # inputs go where the embeddings are
    assert {t.device for t in (outputs.context_hidden, outputs.candidate_hidden, outputs.token_logprobs)} == {
        META
    }
    assert outputs.token_logprobs.shape == (6,) and outputs.candidate_hidden.shape[0] == 3


def test_heads_live_where_the_hidden_states_land():
    model, tok = tiny_causal_lm()
    _split_over_two_devices(model)
    llm = LocalLLM(model=model, tokenizer=tok, module_functions={"value": ValueHead(hidden_sizes=(8,))})
    assert llm.device.type == "cpu" and llm.head_device == META
    assert next(llm.module_functions["value"].parameters()).device == META
    with StrictDevices():
        results = llm.forward(
            ["value", "score"], ["go to the ball", "a"], [[" left", " right"], ["b"]], require_grad=True
        )
    assert [r["value"].device for r in results] == [META, META]
    assert [r["score"].shape for r in results] == [(2,), (1,)]


def test_prefill_cache_gather_moves_its_index_to_each_layer_device():
    layers = []
    for device in ("cpu", "meta"):
        layer = DynamicLayer()
        states = torch.arange(2 * 2 * 5 * 3, dtype=torch.float32).reshape(2, 2, 5, 3).to(device)
        layer.update(states, states + 1)
        layers.append(layer)
    gather = torch.tensor([[0, 1, 2], [5, 6, 9]])  # flat row positions: row 1's position p is 5 + p
    with StrictDevices():
        gather_cache_rows(layers, gather, spare=4)
    assert all(isinstance(layer, PreallocatedLayer) for layer in layers)
    assert layers[1].keys.device == META and layers[1].keys.shape == (2, 2, 3, 3)
    expected = torch.arange(60, dtype=torch.float32).reshape(2, 2, 5, 3)
    assert torch.equal(layers[0].keys[1], expected[1][:, [0, 1, 4]])
    assert torch.equal(layers[0].values[0], expected[0][:, :3] + 1)


def test_4bit_models_load_on_the_configured_gpu():
    assert quantized_device_map(torch.device("cuda:1"), shard=False) == {"": 1}
    assert quantized_device_map(torch.device("cuda"), shard=False) == {"": 0}
    assert quantized_device_map(torch.device("cuda:1"), shard=True) == "auto"
    with pytest.raises(ConfigError, match="cuda:N"):
        quantized_device_map(torch.device("cpu"), shard=False)
