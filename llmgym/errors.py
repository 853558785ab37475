"""Exception hierarchy of llmgym.

Every error raised on bad user input derives from :class:`LLMGymError` and from the builtin
exception a caller would expect (``ConfigError`` is a ``ValueError``, ``BackendError`` a
``RuntimeError``...), so ``except ValueError`` keeps working for users who do not know llmgym.
"""

from __future__ import annotations

__all__ = [
    "LLMGymError",
    "ConfigError",
    "InvalidActionError",
    "InputError",
    "ModelNotFoundError",
    "BackendError",
    "BackendTimeoutError",
    "AuthenticationError",
    "PlacementError",
    "CheckpointError",
    "DiskFullError",
    "RunLockedError",
    "RunFileError",
    "ExportError",
    "MissingDependencyError",
    "SourceCheckoutError",
    "GenerationError",
    "NonFiniteError",
    "require",
    "require_installed",
]


class LLMGymError(Exception):
    """Base class of every error raised by llmgym."""


class ConfigError(LLMGymError, ValueError):
    """A configuration value is missing, unknown, of the wrong type or out of range."""


class InputError(LLMGymError, ValueError):
    """Arguments passed to a public function have the wrong type or shape."""


class InvalidActionError(LLMGymError, ValueError):
    """An environment received an action that is not among its valid actions."""


class ModelNotFoundError(ConfigError, FileNotFoundError):
    """No model could be found under the given name; the message lists what was tried."""


class BackendError(LLMGymError, RuntimeError):
    """An LLM server failed; the message carries the server rank and its traceback."""


class BackendTimeoutError(BackendError, TimeoutError):
    """An LLM server did not answer within the configured timeout."""


class AuthenticationError(BackendError):
    """A control-plane peer did not prove it knows the job's secret, or a message failed its check."""


class PlacementError(BackendError):
    """The LLM servers' resources (CPUs, GPUs) cannot be found on the Ray cluster."""


class CheckpointError(LLMGymError, RuntimeError):
    """A checkpoint is missing, incomplete or incompatible with the current config."""


class DiskFullError(CheckpointError, OSError):
    """A checkpoint could not be written because the disk (or the user's quota) is full; the previous one is intact."""


class RunLockedError(LLMGymError, RuntimeError):
    """A run folder is locked by another live process (``llmgym train`` writing it); the message names its pid."""


class RunFileError(LLMGymError, ValueError):
    """A file of a run or sweep folder (``metrics.jsonl``, ``episodes.jsonl``, ``sweep.json``) cannot be read back.

    The message names the file, the line and what was expected there.
    """


class ExportError(LLMGymError, OSError):
    """An export folder cannot be written (its place is taken) or uploaded to the Hugging Face Hub."""


class MissingDependencyError(LLMGymError, ImportError):
    """An optional dependency is needed for the requested feature; the message names the extra."""


class SourceCheckoutError(LLMGymError, FileNotFoundError):
    """A command needs files of llmgym's source checkout (e.g. ``benchmarks/``) that an installed wheel lacks."""


class GenerationError(LLMGymError, RuntimeError):
    """An external generator of an env's games (TextWorld's tw-make) failed; the message carries its output."""


class NonFiniteError(LLMGymError, ArithmeticError):
    """A loss, gradient or weight became NaN or infinite; the message names the step and the setting to change.

    Raised before anything holding the non-finite values is written (a checkpoint, an export, an SFT model).
    """


def require(module: str, extra: str, feature: str) -> object:
    """Import an optional dependency or raise a helpful error.

    Args:
        module: Importable module name, e.g. ``"minigrid"``.
        extra: The llmgym extra that installs it, e.g. ``"babyai"``.
        feature: What needs it, used in the message.

    Returns:
        The imported module.

    Raises:
        MissingDependencyError: If the module cannot be imported.
    """
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise _missing(module, extra, feature) from exc


def require_installed(module: str, extra: str, feature: str) -> None:
    """Raise the error of :func:`require` if a top-level module is not installed, without importing it.

    For checks that must stay fast, e.g. before a model loads.

    Args:
        module: Top-level module name, e.g. ``"minigrid"``.
        extra: The llmgym extra that installs it.
        feature: What needs it, used in the message.

    Raises:
        MissingDependencyError: If no such module can be found.
    """
    import importlib.util

    if importlib.util.find_spec(module) is None:
        raise _missing(module, extra, feature)


def _missing(module: str, extra: str, feature: str) -> MissingDependencyError:
    return MissingDependencyError(
        f"{feature} needs the optional package '{module}', which is not installed. "
        f"Install it with: pip install 'llmgym[{extra}]'"
    )
