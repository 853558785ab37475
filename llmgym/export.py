"""Export a run's checkpoint as a PEFT adapter or a transformers model that loads without llmgym.

``llmgym export RUN`` calls :func:`export_run`. The folder it writes holds

- a LoRA run: ``adapter_config.json`` and ``adapter_model.safetensors`` (written by PEFT's
  ``save_pretrained``; ``base_model_name_or_path`` names the base model llmgym loaded), or with
  ``merge=True`` the adapter merged into the base (``config.json``, ``model.safetensors``...);
- a run without LoRA (full fine-tuning): the full model, with or without ``merge``;
- the tokenizer;
- ``llmgym_heads.safetensors``: the heads' weights (the value head, and the action head of scoring
  agents), keys ``"<head>.<parameter>"``; ``llmgym_heads.json`` names each head's class and keys,
  and :func:`load_heads` rebuilds them;
- ``llmgym_config.yaml``: the run's resolved config;
- ``README.md``: a model card naming llmgym, the env, the checkpoint and how to load the folder;
- ``llmgym_export.json``: the list of every file the export wrote (itself included), so ``--force``
  replaces a folder only when it holds nothing else.

The folder is written under a temporary name next to its place and renamed into it, so a failed
export leaves nothing half-written. See ``docs/export.md``.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llmgym.checkpoint import (
    CHECKPOINTS,
    CONFIG,
    is_checkpoint_name,
    latest_checkpoint,
    load_trainer_state,
    read_latest_checkpoint,
    verify_manifest,
)
from llmgym.errors import CheckpointError, ConfigError, ExportError

if TYPE_CHECKING:
    from llmgym.config import Config, ModelConfig
    from llmgym.llm.local import LocalLLM
    from llmgym.llm.modules import ModuleFunction

__all__ = [
    "Export",
    "export_run",
    "is_export",
    "foreign_entries",
    "load_heads",
    "HEADS_WEIGHTS",
    "HEADS_META",
    "CONFIG_COPY",
    "FILES_LIST",
]

HEADS_WEIGHTS = "llmgym_heads.safetensors"
HEADS_META = "llmgym_heads.json"
CONFIG_COPY = "llmgym_config.yaml"
#: The list of the files an export wrote (paths relative to the folder, itself included).
FILES_LIST = "llmgym_export.json"
_HEADS_FORMAT = 1


@dataclass(frozen=True)
class Export:
    """What :func:`export_run` wrote.

    Attributes:
        path: The export folder.
        kind: ``"adapter"`` (a PEFT adapter), ``"merged"`` (LoRA merged into the base model) or
            ``"full"`` (the fully fine-tuned model of a run without LoRA).
        checkpoint: The checkpoint folder exported.
        base_model: The base model's hub id or folder (an adapter's ``base_model_name_or_path``).
        pushed_to: The Hugging Face Hub repo id it was uploaded to, or ``None``.
    """

    path: Path
    kind: str
    checkpoint: Path
    base_model: str
    pushed_to: str | None = None


def _checkpoint(run_dir: Path, name: str | None) -> Path:
    """The checkpoint to export, verified against its manifest: ``name`` (a name, not a path) or the latest."""
    if name is None:
        return latest_checkpoint(run_dir)
    root = run_dir / CHECKPOINTS
    available = sorted(p.name for p in root.glob("step-*") if p.is_dir()) if root.is_dir() else []
    if not is_checkpoint_name(name):
        raise CheckpointError(
            f"--checkpoint {name!r} is not a checkpoint name of {run_dir} (a folder name under {root}: "
            f"{available or 'none there'}); pass one of those names, not a path, or omit it to export the latest."
        )
    folder = root / name
    if not folder.is_dir():
        raise CheckpointError(
            f"checkpoint {name!r} is not in '{root}' (it holds {available or 'no checkpoint'}); pass one of those "
            "names to --checkpoint, or omit it to export the latest."
        )
    verify_manifest(folder)
    return folder


def is_export(folder: str | os.PathLike[str]) -> bool:
    """Whether ``folder`` was written by :func:`export_run` (it holds the heads' description and the run's config).

    Args:
        folder: Any folder.
    """
    root = Path(folder)
    return (root / HEADS_META).is_file() and (root / CONFIG_COPY).is_file()


def _written_files(folder: Path) -> set[str] | None:
    """The files :data:`FILES_LIST` says an export wrote in ``folder``; ``None`` when it is absent or unreadable."""
    try:
        data = json.loads((folder / FILES_LIST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    files = data.get("files") if isinstance(data, dict) else None
    if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
        return None
    return set(files)


def foreign_entries(folder: str | os.PathLike[str]) -> list[str] | None:
    """What ``folder`` holds that an export did not write (paths relative to it, sorted).

    Every file below ``folder`` must be listed in its :data:`FILES_LIST`; a folder, symlink or
    other entry not on the way to a listed file is foreign too (a ``.git`` folder, notes, a model).

    Args:
        folder: A folder.

    Returns:
        The foreign entries (empty for a pure export), or ``None`` when ``folder`` holds no readable
        :data:`FILES_LIST` (not an export, or one written before llmgym listed its files).
    """
    root = Path(folder)
    listed = _written_files(root)
    if listed is None:
        return None
    parents = {str(p) for f in listed for p in Path(f).parents if str(p) != "."}
    foreign = []
    for top, dirs, files in os.walk(root):
        here = Path(top)
        for name in list(dirs):
            relative = str((here / name).relative_to(root))
            if (here / name).is_symlink() or relative not in parents:
                foreign.append(relative)  # a foreign folder counts once, its content with it
                dirs.remove(name)
        for name in files:
            relative = str((here / name).relative_to(root))
            if (here / name).is_symlink() or relative not in listed:
                foreign.append(relative)
    return sorted(foreign)


def _check_target(target: Path, run: Path, force: bool) -> None:
    """Refuse an ``--out`` that would destroy what is not a previous export.

    That is a file, the current folder, the run or a folder above it, a folder in its checkpoints,
    and a non-empty folder unless ``force`` is set and it holds a previous export and nothing else
    (:func:`foreign_entries`).
    """
    if target.is_file() or target.is_symlink():
        raise ExportError(f"--out {target} is a file; give a folder that does not exist or is empty.")
    place = target.resolve()
    here = Path.cwd().resolve()
    if place == here or place in here.parents:
        raise ExportError(
            f"--out {target} is the current folder{'' if place == here else ' or one above it'}, which an export "
            f"cannot replace; give the name of a new folder, e.g. --out {run.resolve().name}-export."
        )
    run_place = run.resolve()
    checkpoints = run_place / CHECKPOINTS
    if place == run_place or place in run_place.parents:
        raise ExportError(
            f"--out {target} holds the run {run}, which is what is exported; give a folder outside it (or the default "
            f"{run / 'export'})."
        )
    if place == checkpoints or checkpoints in place.parents:
        raise ExportError(
            f"--out {target} lies inside {run / CHECKPOINTS}, which is what is exported; give a folder outside it (or "
            f"the default {run / 'export'})."
        )
    if target.is_dir() and any(target.iterdir()):
        if not force:
            raise ExportError(
                f"--out {target} already exists and is not empty; give another folder, or pass --force to replace it "
                "if it is a previous export."
            )
        foreign = foreign_entries(target)
        if foreign is None:
            raise ExportError(
                f"--out {target} is not empty and is not a previous export (it lacks {FILES_LIST}, the list of the "
                "files an export writes); --force replaces only a folder written by llmgym export. Give another "
                "folder, or empty it yourself."
            )
        if foreign:
            shown = ", ".join(foreign[:5]) + (", ..." if len(foreign) > 5 else "")
            raise ExportError(
                f"--out {target} holds a previous export and {len(foreign)} entr{'y' if len(foreign) == 1 else 'ies'} "
                f"it did not write ({shown}); --force replaces only a folder that holds nothing else, so nothing was "
                "touched. Export into another folder (and copy the files where you need them), or move those "
                "entries out first."
            )


def _check_export(config: Config, merge: bool) -> None:
    model = config.model
    if merge and model.lora is not None and model.load_in_4bit:
        raise ConfigError(
            "--merge with model.load_in_4bit=true would merge the adapter into 4-bit base weights; export the adapter "
            "(without --merge) and merge it into a full-precision copy of the base model yourself."
        )
    if not merge and model.lora is not None and not model.pretrained:
        raise ConfigError(
            "the run trained LoRA on a freshly initialised base (model.pretrained=false), which nobody can load "
            "again; export with --merge to write the whole model."
        )


def _base_model(config: ModelConfig, model: Any) -> tuple[str, str]:
    """The base model's hub id (a hub model), else the absolute folder its weights were loaded from.

    For a GGUF model that folder is llmgym's dequantised safetensors copy under ``$LLMGYM_CACHE``.

    Returns:
        ``(name, source kind)``, the kind as in :class:`~llmgym.llm.models.ModelSource`.
    """
    from llmgym.llm.adapters import base_model
    from llmgym.llm.models import DEFAULT_MODEL_ALIASES, DEFAULT_MODEL_HUB_ID, resolve_model

    kind = resolve_model(config).kind
    if kind in ("hub", "hub-cache"):
        return (DEFAULT_MODEL_HUB_ID if config.name in DEFAULT_MODEL_ALIASES else config.name), kind
    return str(Path(base_model(model).name_or_path).resolve()), kind


def _load_llm(config: Config, checkpoint: Path) -> LocalLLM:
    """The checkpoint's model and heads in this process, on the CPU unless the base is 4-bit (CUDA)."""
    from llmgym.llm.local import LocalLLM
    from llmgym.run.build import build_heads

    model_config = (
        config.model if config.model.load_in_4bit else dataclasses.replace(config.model, device="cpu")
    )
    llm = LocalLLM(model_config, module_functions=build_heads(config))
    try:
        llm.load(checkpoint / "llm")
    except BaseException:
        llm.close()
        raise
    return llm


def _check_finite(llm: LocalLLM, checkpoint: Path) -> None:
    """Refuse to export a checkpoint whose trainable weights or heads hold a NaN or an infinity."""
    from llmgym.errors import NonFiniteError
    from llmgym.llm.finite import nonfinite_names

    named = [(n, p) for n, p in llm.model.named_parameters() if p.requires_grad]
    named += [
        (f"{key}.{n}", p) for key, head in llm.module_functions.items() for n, p in head.named_parameters()
    ]
    bad = nonfinite_names(named)
    if bad:
        raise NonFiniteError(
            f"checkpoint {checkpoint} holds NaN or infinite weights ({len(bad)} tensors, first: {bad[0]}); an export "
            "of it would be a broken model, so nothing was written. Fix: export an earlier checkpoint "
            "(--checkpoint NAME, see RUN/checkpoints), or retrain with a lower algorithm.learning_rate."
        )


def _save_model(llm: LocalLLM, folder: Path, kind: str, base: str) -> None:
    """Write the adapter (PEFT's layout), the merged model or the full model, and the tokenizer."""
    model = llm.model
    if kind == "adapter":
        adapter = model.peft_config["default"]
        adapter.base_model_name_or_path = base
        adapter.revision = llm.config.revision
        # llmgym never resizes the vocabulary: no embedding matrix to save (and no hub lookup to decide).
        model.save_pretrained(folder, save_embedding_layers=False)
    else:
        (model.merge_and_unload() if kind == "merged" else model).save_pretrained(folder)
    llm.tokenizer.save_pretrained(folder)


def _save_heads(llm: LocalLLM, folder: Path) -> None:
    from safetensors.torch import save_file

    heads = dict(llm.module_functions.items())
    tensors = {
        f"{key}.{name}": value for key, head in heads.items() for name, value in head.state_dict().items()
    }
    save_file(
        {k: v.detach().contiguous().cpu().clone() for k, v in tensors.items()}, str(folder / HEADS_WEIGHTS)
    )
    meta = {
        "format": _HEADS_FORMAT,
        "hidden_size": int(llm.model.config.get_text_config().hidden_size),
        "config": CONFIG_COPY,
        "heads": {
            key: {
                "class": f"{type(head).__module__}.{type(head).__qualname__}",
                "keys": sorted(head.state_dict()),
            }
            for key, head in heads.items()
        },
    }
    (folder / HEADS_META).write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")


def _evaluation_lines(run: Path, env_steps: int) -> list[str]:
    """The model card's line on the greedy evaluation of the checkpoint's weights, from the run's metrics."""
    from llmgym.report.runs import read_metrics

    try:
        records = read_metrics(run / "metrics.jsonl")
    except (OSError, ValueError):  # no metrics copied with the run, or a line torn by a crash
        return []
    evaluations = [r for r in records if r.get("kind") == "eval" and r.get("env_steps") == env_steps]
    if not evaluations:
        return []
    last = evaluations[-1]
    return [
        f"Evaluated at this checkpoint ({env_steps} env steps): success rate {last['success_rate']:.3f}, mean return "
        f"{last['episode_return']:.3f} over {int(last['episodes'])} greedy episodes.",
        "",
    ]


def _model_card(
    config: Config, export: Export, source: str, heads: list[str], seq2seq: bool, env_steps: int
) -> str:
    """README.md: Hub metadata, what the folder holds, where it comes from and how to load it."""
    from llmgym.version import __version__

    auto = "AutoModelForSeq2SeqLM" if seq2seq else "AutoModelForCausalLM"
    on_hub = source in ("hub", "hub-cache")
    adapter = export.kind == "adapter"
    front = ["---", f"library_name: {'peft' if adapter else 'transformers'}"]
    if on_hub:
        front.append(f"base_model: {export.base_model}")
    if not seq2seq:
        front.append("pipeline_tag: text-generation")
    tags = ["llmgym", "reinforcement-learning", *(["peft", "lora"] if adapter else [])]
    front += ["tags:", *(f"- {tag}" for tag in tags), "---", ""]
    what = {
        "adapter": "A LoRA adapter of the base model",
        "merged": "The base model with its LoRA adapter merged in, trained from",
        "full": "The fully fine-tuned model, trained from",
    }[export.kind]
    origin = ""
    if not on_hub:
        what += " in the local folder"
        notes = [f"model.name was `{config.model.name}`"] if config.model.name != export.base_model else []
        notes += ["llmgym's dequantised copy of its GGUF weights"] if source == "gguf" else []
        origin = f" ({', '.join(notes)})" if notes else ""
        if adapter:
            origin += ": the adapter applies to exactly those weights, so ship them with it or export with `--merge`"
    load = [f"from transformers import {auto}, AutoTokenizer", ""]
    if adapter:
        load = [
            "from peft import PeftModel",
            *load,
            f'base = {auto}.from_pretrained("{export.base_model}")',
            'model = PeftModel.from_pretrained(base, "THIS_FOLDER_OR_REPO")',
        ]
    else:
        load.append(f'model = {auto}.from_pretrained("THIS_FOLDER_OR_REPO")')
    load.append('tokenizer = AutoTokenizer.from_pretrained("THIS_FOLDER_OR_REPO")')
    body = [
        f"# {config.env.id.split('/')[-1]} agent trained with llmgym {__version__}",
        "",
        f"{what} `{export.base_model}`{origin}. Trained by online RL ({config.algorithm.name.upper()}) with llmgym in "
        f"the text environment `{config.env.id}` ({config.agent.type} agent); this is checkpoint "
        f"`{export.checkpoint.name}` of the run `{export.checkpoint.parent.parent.name}`. `{CONFIG_COPY}` is the "
        "run's resolved config.",
        "",
        *_evaluation_lines(export.checkpoint.parent.parent, env_steps),
        "## Load",
        "",
        "```python",
        *load,
        "```",
        "",
        "## Heads",
        "",
        f"`{HEADS_WEIGHTS}` holds the weights of the heads trained with the model ({', '.join(heads)}), keys "
        f"`<head>.<parameter>`; `{HEADS_META}` names their classes. `llmgym.export.load_heads(folder)` rebuilds "
        "them (see llmgym's docs/export.md).",
        "",
    ]
    return "\n".join(front + body)


def _push(folder: Path, repo_id: str) -> None:
    import huggingface_hub

    try:
        huggingface_hub.create_repo(repo_id, private=True, exist_ok=True)
        huggingface_hub.upload_folder(
            repo_id=repo_id, folder_path=str(folder), commit_message="Upload llmgym export"
        )
    except (OSError, ValueError) as exc:
        raise ExportError(
            f"the export in {folder} is complete, but uploading it to the Hugging Face Hub repo {repo_id!r} failed "
            f"({(str(exc) or type(exc).__name__).splitlines()[0][:300]}); check the repo id, log in "
            f"(hf auth login, or set HF_TOKEN) and run llmgym export again with --force --push-to-hub {repo_id}."
        ) from exc


def export_run(
    run_dir: str | os.PathLike[str],
    out: str | os.PathLike[str] | None = None,
    *,
    merge: bool = False,
    checkpoint: str | None = None,
    force: bool = False,
    push_to_hub: str | None = None,
) -> Export:
    """Export a checkpoint of a run written by ``llmgym train`` (see the module docstring for the layout).

    The model is loaded on the CPU (a QLoRA run's 4-bit base on its GPU), as the run's config says.

    Args:
        run_dir: The run directory (it holds ``checkpoints/latest``).
        out: The export folder, absent or empty; default ``RUN/export``, or ``RUN/export-merged``
            with ``merge``.
        merge: Merge the LoRA adapter into the base model and write a full transformers model. A
            run without LoRA writes its full model either way.
        checkpoint: Name of the checkpoint folder under ``RUN/checkpoints`` (e.g.
            ``"step-0000004096"``); ``None`` exports the latest complete one.
        force: Replace ``out`` when it is not empty and holds a previous export and nothing else
            (:func:`foreign_entries`); a folder holding anything an export did not write is refused
            and left untouched.
        push_to_hub: Upload the folder to this Hugging Face Hub model repo (created private when
            it does not exist); ``None`` uploads nothing.

    Returns:
        What was written, and where.

    Raises:
        CheckpointError: When the run has no complete checkpoint, or ``checkpoint`` is not one.
        ExportError: When ``out`` is a file, the current folder, the run or a folder above it, inside
            the run's checkpoints, or a non-empty folder (without ``force``, or not only a previous export),
            or the upload fails (the folder is complete then).
        ConfigError: ``merge`` on a 4-bit (QLoRA) run, or an adapter of a base that was not
            pretrained (``model.pretrained=false``) without ``merge``.
        NonFiniteError: The checkpoint's weights hold a NaN or an infinity; nothing is written.
    """
    from llmgym.atomic_io import write_atomic_dir
    from llmgym.config import load_config

    run = Path(run_dir)
    target = Path(out) if out is not None else run / ("export-merged" if merge else "export")
    _check_target(target, run, force)

    def read(folder: Path) -> tuple[Config, str, int, LocalLLM]:
        """Everything the export needs from the checkpoint, read before anything is written."""
        config = load_config(folder / CONFIG)
        _check_export(config, merge)
        text = (folder / CONFIG).read_text(encoding="utf-8")
        env_steps = int(load_trainer_state(folder)[0]["algorithm"]["env_steps"])
        return config, text, env_steps, _load_llm(config, folder)

    if (
        checkpoint is None
    ):  # a run still training may replace the latest one meanwhile: then its newest is read
        folder, (config, config_text, env_steps, llm) = read_latest_checkpoint(run, read)
    else:
        folder = _checkpoint(run, checkpoint)
        config, config_text, env_steps, llm = read(folder)
    kind = "full" if config.model.lora is None else "merged" if merge else "adapter"
    try:
        _check_finite(llm, folder)
        base, source = _base_model(config.model, llm.model)
        export = Export(target, kind, folder, base)
        card = _model_card(config, export, source, llm.module_function_keys, llm.is_seq2seq, env_steps)

        def write(tmp: Path) -> None:
            _save_model(llm, tmp, kind, base)
            _save_heads(llm, tmp)
            (tmp / CONFIG_COPY).write_text(config_text, encoding="utf-8")
            (tmp / "README.md").write_text(
                card, encoding="utf-8"
            )  # replaces the card PEFT's save_pretrained writes
            files = sorted(str(p.relative_to(tmp)) for p in tmp.rglob("*") if p.is_file()) + [FILES_LIST]
            (tmp / FILES_LIST).write_text(
                json.dumps({"files": sorted(files)}, indent=1) + "\n", encoding="utf-8"
            )

        write_atomic_dir(target, write)
    finally:
        llm.close()
    if push_to_hub is not None:
        _push(target, push_to_hub)
        export = dataclasses.replace(export, pushed_to=push_to_hub)
    return export


def load_heads(folder: str | os.PathLike[str]) -> dict[str, ModuleFunction]:
    """The heads of an export, rebuilt from its config with their trained weights, in eval mode.

    A :class:`~llmgym.llm.modules.ValueHead` ``head`` gives the value of a context as
    ``head.net(h)``, where ``h`` is the model's last hidden state (``hidden_states[-1]``, after the
    final norm) at the context's last token. An :class:`~llmgym.llm.modules.ActionHead` gives a
    candidate's policy logit as ``head.prior_weight * score + head.linear(h_c)``, where ``score`` is
    the candidate's log-prob after the context (summed over its tokens, or averaged with
    ``agent.score_normalize=mean``) and ``h_c`` the last hidden state at its last token.

    Args:
        folder: A folder written by :func:`export_run`.

    Returns:
        The heads by key (``"value"``, and ``"policy"`` for a scoring agent with an action head).

    Raises:
        ExportError: When the folder holds no readable heads, or heads of other classes than its
            config builds (an export of another llmgym version).
    """
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    from llmgym.config import load_config
    from llmgym.run.build import build_heads

    root = Path(folder)
    try:
        meta = json.loads((root / HEADS_META).read_text(encoding="utf-8"))
        tensors = load_file(str(root / HEADS_WEIGHTS))
        config = load_config(root / CONFIG_COPY)
    except (OSError, ValueError, SafetensorError) as exc:
        raise ExportError(
            f"'{root}' holds no readable llmgym heads ({exc}); pass a folder written by llmgym export."
        ) from exc
    heads = build_heads(config)
    classes = {key: f"{type(head).__module__}.{type(head).__qualname__}" for key, head in heads.items()}
    entries = meta.get("heads") if isinstance(meta, dict) and meta.get("format") == _HEADS_FORMAT else None
    saved = {key: entry.get("class") for key, entry in entries.items()} if isinstance(entries, dict) else None
    if saved != classes:
        raise ExportError(
            f"'{root / HEADS_META}' lists the heads {saved}, but its config builds {classes}; load it with the llmgym "
            "version that exported it."
        )
    for key, head in heads.items():
        head.bind(None, int(meta["hidden_size"]), config.model.seed, key)
        prefix = f"{key}."
        head.load_state_dict({k[len(prefix) :]: v for k, v in tensors.items() if k.startswith(prefix)})
        head.eval()
    return heads
