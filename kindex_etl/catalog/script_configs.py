"""Which keys of a benchmark script's `extra_benchmark_configs` its code never reads.

Read by `upstream_git.build_variants`. A key the script writes into a config but that no line
of the script (nor of the repository helpers it imports) reads is *dead*: it changes the CSV's
`extra_benchmark_config_str` but not what is computed (`"mode": "forward"` in the loss
benchmarks up to 0.7.0, whose setup reads `input.kernel_operation_mode` instead). Dead keys
must not split a workload.

What counts, conservatively (unsure means "read"):

- **Written**: the string keys of each dict literal in an `extra_benchmark_configs` list (a
  dict entry or a keyword), with the sibling `x_name` and `kernel_name` constants. A config with
  a non-constant key or a `**` merge is skipped.
- **Read**: a string constant used as a subscript (`cfg["T"]`), as the first argument of
  `.get` / `.pop` / `.setdefault`, or on the left of `in` (`"seq_len" in cfg`), anywhere in the
  script or in the helpers it imports.
- **Opaque**: if the script hands the config object itself to anything (a call argument, `**`,
  iteration, `.items()`), every key may be read, and none is dead. The config object is any
  expression `<...>.extra_benchmark_config` and every name assigned from one.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

CONFIG_LISTS = frozenset({"extra_benchmark_configs"})
CONFIG_ATTR = "extra_benchmark_config"
KEY_METHODS = frozenset({"get", "pop", "setdefault"})


@dataclass(frozen=True)
class Config:
    kernel_name: str | None  # the sibling `kernel_name` constant; None: not beside the list
    x_name: str | None
    keys: frozenset[str]


def read_keys(tree: ast.AST) -> frozenset[str]:
    """String keys the code reads from some mapping (see the module docstring)."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Subscript)
            and isinstance(node.slice, ast.Constant)
            and isinstance(node.slice.value, str)
        ):
            found.add(node.slice.value)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in KEY_METHODS
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            found.add(node.args[0].value)
        elif (
            isinstance(node, ast.Compare)
            and isinstance(node.left, ast.Constant)
            and isinstance(node.left.value, str)
            and any(isinstance(op, ast.In | ast.NotIn) for op in node.ops)
        ):
            found.add(node.left.value)
    return frozenset(found)


def _constant(node: ast.expr | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def written_configs(tree: ast.AST) -> list[Config]:
    out: list[Config] = []
    for node in ast.walk(tree):
        pairs: list[tuple[str, ast.expr]] = []
        if isinstance(node, ast.Dict):
            pairs = [
                (k.value, v)
                for k, v in zip(node.keys, node.values, strict=True)
                if isinstance(k, ast.Constant) and isinstance(k.value, str)
            ]
        elif isinstance(node, ast.Call):
            pairs = [(kw.arg, kw.value) for kw in node.keywords if kw.arg is not None]
        siblings = dict(pairs)
        for name in CONFIG_LISTS & siblings.keys():
            value = siblings[name]
            if not isinstance(value, ast.List):
                continue
            for element in value.elts:
                if not isinstance(element, ast.Dict) or any(k is None for k in element.keys):
                    continue
                keys = [_constant(k) for k in element.keys]
                if any(k is None for k in keys):
                    continue
                out.append(
                    Config(
                        _constant(siblings.get("kernel_name")),
                        _constant(siblings.get("x_name")),
                        frozenset(k for k in keys if k is not None),
                    )
                )
    return out


def config_is_opaque(tree: ast.AST) -> bool:
    """Whether the script uses its config object other than by constant keys."""
    parents: dict[int, ast.AST] = {}
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            parents[id(child)] = node
    aliases: set[str] = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Attribute)
            and node.value.attr == CONFIG_ATTR
        ):
            aliases |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    for node in ast.walk(tree):
        is_config = (
            isinstance(node, ast.Attribute)
            and node.attr == CONFIG_ATTR
            and isinstance(node.ctx, ast.Load)
        ) or (isinstance(node, ast.Name) and node.id in aliases and isinstance(node.ctx, ast.Load))
        if not is_config:
            continue
        parent = parents.get(id(node))
        if isinstance(parent, ast.Subscript) and parent.value is node:
            continue  # cfg["T"] (a constant or not: a computed key reads a swept name)
        if isinstance(parent, ast.Assign) and parent.value is node:
            continue  # cfg = input.extra_benchmark_config
        if isinstance(parent, ast.Compare) and node in parent.comparators:
            continue  # "seq_len" in cfg
        if (
            isinstance(parent, ast.Attribute)
            and parent.attr in KEY_METHODS
            and isinstance(parents.get(id(parent)), ast.Call)
        ):
            call = parents[id(parent)]
            assert isinstance(call, ast.Call)
            if call.args and _constant(call.args[0]) is not None:
                continue  # cfg.get("T")
        return True
    return False


def dead_keys(
    tree: ast.AST, also_read: frozenset[str] = frozenset()
) -> list[tuple[Config, frozenset[str]]]:
    """Each config the script writes with the keys of it nothing reads (`dtype` never counts:
    it is the descriptor's own field). Empty when the config object is opaque."""
    if config_is_opaque(tree):
        return []
    read = read_keys(tree) | also_read
    return [(c, frozenset(c.keys - read - {"dtype"})) for c in written_configs(tree)]
