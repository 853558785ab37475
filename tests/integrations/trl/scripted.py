"""A scripted ``model.generate`` (as TRL's own tests patch it): fixed replies, so the env sees known actions."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

TOOL_CALL = '<tool_call>\n{{"name": "act", "arguments": {{"action": "{action}"}}}}\n</tool_call><|im_end|>'


def scripted_generate(tokenizer, reply: Callable[[str, int], str]) -> Callable[..., torch.Tensor]:
    """A ``generate`` appending ``reply(context_text, call_number)``'s tokens to each row (right-padded)."""
    calls = [0]

    def generate(
        input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None, **kwargs
    ) -> torch.Tensor:
        rows = []
        for ids in input_ids:
            rows.append(
                tokenizer(reply(tokenizer.decode(ids), calls[0]), add_special_tokens=False)["input_ids"]
            )
            calls[0] += 1
        out = torch.full((len(rows), max(map(len, rows))), tokenizer.pad_token_id)
        for i, row in enumerate(rows):
            out[i, : len(row)] = torch.tensor(row)
        return torch.cat([input_ids, out.to(input_ids.device)], dim=1)

    return generate


def cycle(actions: Sequence[str]) -> Callable[[int], str]:
    """The ``n``-th action of a fixed cycle."""
    return lambda n: actions[n % len(actions)]


def grpo_args(tmp_path, **overrides):
    from trl import GRPOConfig

    settings = dict(
        output_dir=str(tmp_path / "grpo"),
        max_steps=2,
        per_device_train_batch_size=4,
        num_generations=4,
        learning_rate=1e-2,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        use_cpu=True,
        disable_tqdm=True,
        seed=0,
    )
    return GRPOConfig(**{**settings, **overrides})


def changed(model, before: dict[str, torch.Tensor]) -> float:
    return sum((before[name] - p).abs().sum().item() for name, p in model.named_parameters())
