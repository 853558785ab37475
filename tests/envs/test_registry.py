"""One registry serves datapools, rewards and text metrics: the same API and the same typed errors."""

from __future__ import annotations

import re

import pytest

from llmgym.envs import get_reward, load_datapool, register_datapool, register_reward
from llmgym.envs.registry import Registry
from llmgym.errors import ConfigError
from llmgym.text_metrics import get_metric, register_metric


def test_register_as_a_call_or_a_decorator_and_list_sorted():
    registry: Registry[tuple[str, object]] = Registry("thing", "Fix: register it.")

    def first() -> None:
        """A registered function."""

    assert registry.register("b", first, lambda fn: ("b", fn)) is first

    @registry.register("a", None, lambda fn: ("a", fn))
    def second() -> None:
        """Another one."""

    assert registry.names() == ["a", "b"] and "a" in registry and "c" not in registry
    assert registry.get("b") == ("b", first) and registry.get("a") == ("a", second)
    with pytest.raises(ConfigError, match=r"thing name='a' is already registered.*overwrite=True"):
        registry.register("a", first, lambda fn: ("a", fn))
    registry.register("a", first, lambda fn: ("a", fn), overwrite=True)
    assert registry.get("a") == ("a", first)


def test_an_unknown_name_is_named_with_the_registered_ones_the_close_ones_and_the_fix():
    registry: Registry[int] = Registry("thing", "Fix: register it.")
    registry.register("apple", lambda: None, lambda fn: 1)
    registry.register("banana", lambda: None, lambda fn: 2)
    message = str(registry.unknown("appel"))
    assert message == (
        "thing='appel' is not a registered thing; expected one of ['apple', 'banana']. "
        "Did you mean ['apple']? Fix: register it."
    )
    with pytest.raises(ConfigError, match=re.escape(message)):
        registry.get("appel")


@pytest.mark.parametrize(
    ("register", "lookup", "kind", "known", "module"),
    [
        (register_datapool, load_datapool, "datapool", "review_openings", "llmgym.envs.register_datapool"),
        (register_reward, get_reward, "reward", "exact_match", "llmgym.envs.register_reward"),
        (register_metric, get_metric, "metric", "bleu", "llmgym.text_metrics.register_metric"),
    ],
)
def test_the_three_registries_refuse_a_taken_and_an_unknown_name_alike(register, lookup, kind, known, module):
    with pytest.raises(ConfigError, match=rf"^{kind} name='{known}' is already registered"):
        register(known, lambda *args, **kwargs: None)
    typo = known[:-1]
    with pytest.raises(ConfigError) as error:
        lookup(typo)
    assert str(error.value).startswith(f"{kind}='{typo}' is not a registered {kind}; expected one of [")
    assert f"Did you mean ['{known}'" in str(error.value) and module in str(error.value)
