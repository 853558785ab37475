"""Bounds on what a YAML config may expand to, checked before anything expands it.

A few hundred bytes of YAML can stand for billions of values: anchors and aliases nest (``b: [*a, *a,
...]``, the "billion laughs"), and OmegaConf interpolations chain (``a2: ${a1}${a1}``). PyYAML
shares an aliased node instead of copying it, but OmegaConf copies every alias when it builds its
tree and resolves every interpolation again each time it is used, so such a file hangs
``llmgym config`` and ``llmgym train`` (or fills the memory). Both are measured here on the parsed
structure, where they cost no more than the text, and a file over the bounds is a ``ConfigError``.
llmgym's shipped configs use neither aliases nor interpolations; a hand-written config that shares a
section through an alias or reads ``${train.seed}`` stays far below the bounds.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from llmgym.errors import ConfigError

__all__ = [
    "MAX_EXPANDED_NODES",
    "MAX_INTERPOLATION_DEPTH",
    "MAX_INTERPOLATION_STEPS",
    "check_interpolations",
    "check_yaml_aliases",
]

#: The most YAML nodes (mappings, lists and scalars) a file may stand for once its aliases are expanded.
MAX_EXPANDED_NODES = 100_000
#: The most interpolations that resolving a config may evaluate, counted along every chain.
MAX_INTERPOLATION_STEPS = 10_000
#: The longest chain of interpolations (``a: ${b}``, ``b: ${c}``...); OmegaConf resolves each link recursively.
MAX_INTERPOLATION_DEPTH = 32

_WORD = re.compile(r"\.*[A-Za-z_][\w\-]*(?:\.[A-Za-z_][\w\-]*|\[\d+\])*")


def check_yaml_aliases(text: str, source: str) -> None:
    """Refuse YAML whose aliases expand to more than :data:`MAX_EXPANDED_NODES` nodes, or refer to themselves.

    Args:
        text: The YAML text (a file, or an override's value).
        source: Where it came from, for the message.

    Raises:
        ConfigError: Naming the source, the bound and the fix. Invalid YAML is left to the loader's own error.
    """
    import yaml

    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return  # the loader reports it with its own message
    except RecursionError:
        raise _too_deep(source) from None
    if root is None:
        return
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()

    def size(node: yaml.Node) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in open_nodes:
            raise ConfigError(
                f"{source} holds a YAML alias that contains itself (a recursive anchor); a config must be a tree. "
                "Fix: write the section out instead of the alias."
            )
        open_nodes.add(key)
        total = 1
        if isinstance(node, yaml.SequenceNode):
            children: list[yaml.Node] = list(node.value)
        elif isinstance(node, yaml.MappingNode):
            children = [part for pair in node.value for part in pair]
        else:
            children = []
        for child in children:
            total += size(child)
            if total > MAX_EXPANDED_NODES:
                raise ConfigError(
                    f"{source} expands to more than {MAX_EXPANDED_NODES:,} YAML values through nested aliases "
                    "(&anchor / *alias), which would hang loading it. Fix: write the config without nested aliases."
                )
        open_nodes.discard(key)
        sizes[key] = total
        return total

    try:
        size(root)
    except RecursionError:
        raise _too_deep(source) from None


def _too_deep(source: str) -> ConfigError:
    return ConfigError(
        f"{source} nests its values (or its interpolations) too deeply to be read. Fix: write a flatter config."
    )


def check_interpolations(tree: Mapping[str, Any], source: str) -> None:
    """Refuse a config whose interpolations (``${key}``) chain into more than :data:`MAX_INTERPOLATION_STEPS`.

    Every ``${...}`` is taken to use each key it names (absolute, ``a.b``, or relative, ``.b``,
    ``..b``); using a section uses all the values under it. The count is what resolving the whole
    config would evaluate without caching, as OmegaConf does; a cycle is refused too.

    Args:
        tree: The config as nested plain containers, interpolations unresolved
            (``OmegaConf.to_container(config, resolve=False)``).
        source: Where it came from, for the message.

    Raises:
        ConfigError: Naming the source, the first key on the chain, the bound and the fix.
    """
    children: dict[str, list[str]] = {}
    uses: dict[str, list[str]] = {}

    def walk(node: Any, path: str) -> None:
        items: list[tuple[str, Any]] = []
        if isinstance(node, Mapping):
            items = [(f"{path}.{k}" if path else str(k), v) for k, v in node.items()]
        elif isinstance(node, list):
            items = [(f"{path}[{i}]", v) for i, v in enumerate(node)]
        children[path] = [p for p, _ in items]
        for child, value in items:
            walk(value, child)
        if isinstance(node, str) and "${" in node:
            uses[path] = _referenced(node, path)

    try:
        walk(tree, "")
    except RecursionError:
        raise _too_deep(source) from None
    known = set(children)
    costs: dict[str, tuple[int, int]] = {}
    open_keys: set[str] = set()

    def cost(key: str) -> tuple[int, int]:
        """Interpolations evaluated to resolve ``key``, and the longest chain of them."""
        if key in costs:
            return costs[key]
        if key in open_keys:
            raise ConfigError(
                f"{source}: the interpolation of '{key}' refers back to itself. Fix: give '{key}' a value."
            )
        open_keys.add(key)
        total, depth = 1, 0
        used = [t for t in uses.get(key, []) if t in known]
        for target in used + children.get(key, []):
            steps, chain = cost(target)
            total += steps
            depth = max(depth, chain + (target in used))
            if depth > MAX_INTERPOLATION_DEPTH:
                raise ConfigError(
                    f"{source}: resolving '{key}' follows a chain of more than {MAX_INTERPOLATION_DEPTH} "
                    "interpolations (${...} referring to a value that interpolates in turn...). Fix: write the "
                    "values out instead of chaining interpolations."
                )
            if total > MAX_INTERPOLATION_STEPS:
                raise ConfigError(
                    f"{source}: resolving '{key}' evaluates more than {MAX_INTERPOLATION_STEPS:,} interpolations "
                    "(${...} chains that refer to each other repeatedly), which would hang loading the config. "
                    "Fix: write the values out instead of chaining interpolations."
                )
        open_keys.discard(key)
        costs[key] = (total, depth)
        return total, depth

    try:
        for key in uses:
            cost(key)
    except RecursionError:
        raise _too_deep(source) from None


def _referenced(text: str, path: str) -> list[str]:
    """The keys an interpolating string may use: each word inside its ``${...}``, absolute or relative to ``path``."""
    parent = path.rsplit(".", 1)[0] if "." in path else ""
    keys: list[str] = []
    for chunk in re.findall(r"\$\{([^}]*)", text):
        for word in _WORD.findall(chunk):
            dots = len(word) - len(word.lstrip("."))
            if dots == 0:
                keys.append(word)
                continue
            base = parent
            for _ in range(dots - 1):
                base = base.rsplit(".", 1)[0] if "." in base else ""
            rest = word[dots:]
            keys.append(f"{base}.{rest}" if base else rest)
    return keys
