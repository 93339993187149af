"""Which provider of an upstream benchmark script runs which code: the script's syntax split
into what every provider runs (shared) and what only some providers run.

Read by `upstream_git` (harness revisions per provider, baselines per release). Nothing here
executes upstream code; it reads the syntax tree the way a reviewer reads a diff:

- **Providers** a script runs are the string constants of its `kernel_providers` list (a
  keyword, a dict entry, a `config["kernel_providers"] = [...]` or a plain assignment); where a
  script has none, the names its dispatch compares against.
- **Dispatch**: an `if` / `elif` (or a conditional expression) whose test compares something
  named `*provider*` (`provider`, `input.kernel_provider`) with string constants, by `==` or
  `in`, or an `or` of such tests. Its branch runs only for the providers it names; a final
  plain `else` runs for the script's other providers. A dict literal whose string keys include
  a provider maps each such key's value to that provider.
- **Ownership spreads to what only a provider uses**: a statement that binds names (an
  assignment, a `def`, a `class`, an import) belongs to the providers whose code loads those
  names, when no shared code loads them (`liger_lm_head_ce = LigerLMHeadCE(...)` in a bench
  function, used only in the `liger` branch, is liger's, and so is the `LigerLMHeadCE` class).
  A name nothing loads stays shared: unsure means everyone.
- **Shared** is the rest: input shapes, warm-up, the timing call, the sweep. The provider
  list itself is blanked there (adding a provider is not a change of the others' code), and
  so are the dispatch chains (an added `elif` is the new provider's code only).
- One normalization, for the common way an option is plumbed through (#830's `accum_dtype`):
  a parameter that defaults to `None` and is only forwarded as a keyword of the same value
  (`f(..., accum_dtype=accum_dtype)`) is dropped with those keywords. A caller that does not
  pass it forwards `None`, as it forwarded nothing before; a caller that passes it shows the
  value in its own (owned) code.

What this cannot see: effects that cross providers without a name, such as a provider-only
module built (and its weights drawn from the random generator) before the shared inputs are
drawn. Those change input values, not shapes or code, and are not counted.
"""

from __future__ import annotations

import ast
import copy
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

Owners = frozenset[str] | None  # None: every provider (shared code)
PROVIDER_LISTS = frozenset({"kernel_providers", "providers"})


def _string_constants(node: ast.AST) -> list[str]:
    return [
        n.value
        for n in ast.walk(node)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value
    ]


def _names_provider(node: ast.expr) -> bool:
    if isinstance(node, ast.Name):
        return "provider" in node.id.lower()
    if isinstance(node, ast.Attribute):
        return "provider" in node.attr.lower()
    return False


def _dispatch_test(test: ast.expr) -> frozenset[str] | None:
    """The providers a test selects (`provider == "liger"`, `provider in ("a", "b")`, an
    `or` of those), or None when it is not a provider dispatch."""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.Or):
        found: set[str] = set()
        for value in test.values:
            part = _dispatch_test(value)
            if part is None:
                return None
            found |= part
        return frozenset(found)
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1):
        return None
    left, op, right = test.left, test.ops[0], test.comparators[0]
    if isinstance(op, ast.Eq):
        if _names_provider(right) and not _names_provider(left):
            left, right = right, left
        if (
            _names_provider(left)
            and isinstance(right, ast.Constant)
            and isinstance(right.value, str)
        ):
            return frozenset({right.value})
        return None
    if (
        isinstance(op, ast.In)
        and _names_provider(left)
        and isinstance(right, ast.Tuple | ast.List | ast.Set)
    ):
        names = [e.value for e in right.elts if isinstance(e, ast.Constant)]
        if len(names) == len(right.elts) and all(isinstance(n, str) for n in names):
            return frozenset(str(n) for n in names)
    return None


def _provider_list_values(tree: ast.AST) -> Iterator[tuple[ast.AST, ast.expr]]:
    """(holder, value) of every `kernel_providers` list the script builds."""
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg in PROVIDER_LISTS:
            yield node, node.value
        elif isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                if isinstance(key, ast.Constant) and key.value in PROVIDER_LISTS:
                    yield node, value
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if (isinstance(target, ast.Name) and target.id in PROVIDER_LISTS) or (
                    isinstance(target, ast.Subscript)
                    and isinstance(target.slice, ast.Constant)
                    and target.slice.value in PROVIDER_LISTS
                ):
                    yield node, node.value


def listed_providers(tree: ast.AST) -> list[str]:
    """The providers the script's `kernel_providers` lists name, in first-seen order."""
    seen: dict[str, None] = {}
    for _, value in _provider_list_values(tree):
        for name in _string_constants(value):
            seen.setdefault(name, None)
    return list(seen)


def dispatched_providers(tree: ast.AST) -> list[str]:
    seen: dict[str, None] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.If | ast.IfExp):
            for name in sorted(_dispatch_test(node.test) or ()):
                seen.setdefault(name, None)
    return list(seen)


def _drop_passthrough_none(tree: ast.AST) -> None:
    """The `None`-defaulted pass-through normalization (module docstring)."""
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        args = fn.args
        positional = args.posonlyargs + args.args
        tail = positional[len(positional) - len(args.defaults) :]
        defaulted = list(zip(tail, args.defaults, strict=True))
        defaulted += [
            (a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d is not None
        ]
        body = ast.Module(body=fn.body, type_ignores=[])
        for arg, default in defaulted:
            if not (isinstance(default, ast.Constant) and default.value is None):
                continue
            loads = [n for n in ast.walk(body) if isinstance(n, ast.Name) and n.id == arg.arg]
            calls = [
                (call, kw)
                for call in ast.walk(body)
                if isinstance(call, ast.Call)
                for kw in call.keywords
                if isinstance(kw.value, ast.Name) and kw.value.id == arg.arg
            ]
            if not calls or len(calls) != len(loads):
                continue
            for call, kw in calls:
                call.keywords.remove(kw)
            if arg in args.kwonlyargs:
                i = args.kwonlyargs.index(arg)
                del args.kwonlyargs[i], args.kw_defaults[i]
            else:
                i = len(positional) - len(args.defaults)
                args.defaults.pop(positional.index(arg) - i)
                (args.posonlyargs if arg in args.posonlyargs else args.args).remove(arg)
                positional = args.posonlyargs + args.args


def import_bindings(node: ast.Import | ast.ImportFrom) -> Iterator[tuple[str, str]]:
    """(local name, `module:name as local`) for each name an import statement binds: what two
    versions of a script compare, however a formatter moved or joined the statements."""
    prefix = f"{'.' * node.level}{node.module or ''}:" if isinstance(node, ast.ImportFrom) else ""
    for alias in node.names:
        local = (alias.asname or alias.name).split(".")[0]
        yield local, f"{prefix}{alias.name} as {local}"


@dataclass
class Split:
    """A script's code split by provider (see the module docstring)."""

    providers: tuple[str, ...]
    shared: str  # ast.dump of the shared code
    owned: dict[str, list[str]] = field(default_factory=dict)  # provider -> dumps, in order
    # Names the script loads (imports, mostly) -> the providers whose code loads them.
    loads: dict[str, Owners] = field(default_factory=dict)
    # Providers that run Liger's own code under another name: their own code (not code they
    # share with others) uses a name imported from `liger_kernel` (`cutedsl-sm90` calls
    # `liger_kernel.ops.cutedsl...`). Such a provider is no baseline.
    runs_liger: tuple[str, ...] = ()


def _bound_names(stmt: ast.stmt) -> set[str]:
    if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return {stmt.name}
    if isinstance(stmt, ast.Assign):
        if all(isinstance(t, ast.Name) for t in stmt.targets):
            return {t.id for t in stmt.targets if isinstance(t, ast.Name)}
        return set()
    if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
        return {stmt.target.id}
    if isinstance(stmt, ast.Import | ast.ImportFrom):
        return {(a.asname or a.name).split(".")[0] for a in stmt.names}
    return set()


def _union(owners: Iterable[Owners]) -> Owners:
    found: set[str] = set()
    for o in owners:
        if o is None:
            return None
        found |= o
    return frozenset(found)


def split(tree: ast.Module) -> Split:
    """Split a parsed script (docstrings already dropped) by provider."""
    tree = copy.deepcopy(tree)
    _drop_passthrough_none(tree)
    providers = listed_providers(tree) or dispatched_providers(tree)
    known = frozenset(providers) | frozenset(dispatched_providers(tree))
    listed = frozenset(providers)
    parents: dict[int, ast.AST] = {}
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            parents[id(child)] = node
    region: dict[int, frozenset[str]] = {}  # id(node) -> providers that run it
    chains: set[int] = set()  # dispatch `if` chains (whole), blanked in shared code
    lists: set[int] = set()  # provider-list holders, blanked in shared code

    def mark(nodes: Iterable[ast.AST], owners: frozenset[str]) -> None:
        for n in nodes:
            region[id(n)] = owners

    for node in ast.walk(tree):
        if isinstance(node, ast.If) and id(node) not in chains:
            named = _dispatch_test(node.test)
            if named is None:
                continue
            chains.add(id(node))
            taken: set[str] = set()
            link: ast.If = node
            while True:
                taken |= named
                mark(link.body, named)
                rest = link.orelse
                follow = (
                    _dispatch_test(rest[0].test)
                    if len(rest) == 1 and isinstance(rest[0], ast.If)
                    else None
                )
                if follow is None:
                    # A plain `else` runs for the providers no test named.
                    mark(rest, (listed or known) - taken)
                    break
                assert isinstance(rest[0], ast.If)
                link = rest[0]
                chains.add(id(link))
                named = follow
        elif isinstance(node, ast.IfExp):
            named = _dispatch_test(node.test)
            if named is not None:
                chains.add(id(node))
                mark([node.body], named)
                mark([node.orelse], (listed or known) - named)
        elif isinstance(node, ast.Dict):
            keys = [k.value if isinstance(k, ast.Constant) else None for k in node.keys]
            if known & {k for k in keys if isinstance(k, str)}:
                for key, value in zip(keys, node.values, strict=True):
                    if isinstance(key, str) and key in known:
                        mark([value], frozenset({key}))
    for _holder, value in _provider_list_values(tree):
        lists.add(id(value))

    def owner_of(node: ast.AST) -> Owners:
        """The providers that run `node`: its innermost owned region's, else everyone."""
        current: ast.AST | None = node
        while current is not None:
            if id(current) in region:
                return region[id(current)]
            current = parents.get(id(current))
        return None

    # Spread ownership to binding statements whose names only owned code loads, per scope
    # (the module, or a function with what it nests), until nothing moves.
    scopes: list[tuple[ast.AST, list[ast.stmt]]] = [(tree, tree.body)]
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            scopes.append((node, node.body))
    loads_in: dict[int, list[ast.Name]] = {
        id(scope): [n for n in ast.walk(scope) if isinstance(n, ast.Name)] for scope, _ in scopes
    }
    changed = True
    while changed:
        changed = False
        for scope, body in scopes:
            for stmt in body:
                if id(stmt) in region or owner_of(stmt) is not None:
                    continue
                names = _bound_names(stmt)
                if not names:
                    continue
                inside = {id(n) for n in ast.walk(stmt)}
                uses = [
                    n
                    for n in loads_in[id(scope)]
                    if n.id in names and isinstance(n.ctx, ast.Load) and id(n) not in inside
                ]
                owners = _union(owner_of(n) for n in uses) if uses else None
                if owners is not None:
                    region[id(stmt)] = owners
                    changed = True

    owned: dict[str, list[str]] = {p: [] for p in sorted(known | listed)}
    roots = [n for n in ast.walk(tree) if id(n) in region]
    # A region inside another region is part of its dump already.
    for node in roots:
        outer = parents.get(id(node))
        if outer is not None and owner_of(outer) is not None:
            continue
        text = ast.dump(node)
        for p in sorted(region[id(node)]):
            owned.setdefault(p, []).append(text)

    loads: dict[str, Owners] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            here = owner_of(node)
            loads[node.id] = _union([loads[node.id], here]) if node.id in loads else here

    # Import statements as the set of bindings each side uses (so a formatter moving or
    # joining them changes nothing, as in `upstream_git._code_digest`).
    bindings: dict[str, set[str]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom) and owner_of(node) is None:
            for local, binding in import_bindings(node):
                if local not in loads:
                    continue
                who = loads[local]
                for side in ["shared"] if who is None else sorted(who):
                    bindings.setdefault(side, set()).add(binding)
    for provider, names in bindings.items():
        if provider != "shared":
            owned.setdefault(provider, []).extend(sorted(names))
    tree_for_liger = _LigerUse(tree, owner_of)
    shared = _blank(tree, chains, lists, region)
    text = ast.dump(shared) + "\n" + "\n".join(sorted(bindings.get("shared", ())))
    return Split(tuple(providers), text, owned, loads, _runs_liger(tree_for_liger, providers))


class _LigerUse:
    """What `_runs_liger` needs, taken before `_blank` rewrites the tree: the names bound by
    imports from `liger_kernel`, and per provider the names its own regions load."""

    def __init__(self, tree: ast.Module, owner_of: Any) -> None:
        self.liger_names = {
            (alias.asname or alias.name).split(".")[0]
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom | ast.Import)
            for alias in node.names
            if (
                (node.module or "").split(".")[0] == "liger_kernel"
                if isinstance(node, ast.ImportFrom)
                else alias.name.split(".")[0] == "liger_kernel"
            )
        }
        self.single_owner_loads: dict[str, set[str]] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                who = owner_of(node)
                if who is not None and len(who) == 1:
                    self.single_owner_loads.setdefault(next(iter(who)), set()).add(node.id)


def _runs_liger(use: _LigerUse, providers: Iterable[str]) -> tuple[str, ...]:
    return tuple(p for p in providers if use.single_owner_loads.get(p, set()) & use.liger_names)


def _blank(
    tree: ast.Module, chains: set[int], lists: set[int], region: dict[int, frozenset[str]]
) -> ast.AST:
    """The shared code: `tree` with dispatch chains, provider lists and owned code blanked.

    Works on the original nodes' identities, so it transforms `tree` itself; callers pass a
    copy (`split` deep-copies on entry)."""

    class Blank(ast.NodeTransformer):
        def visit(self, node: ast.AST) -> ast.AST | None:
            if isinstance(node, ast.Import | ast.ImportFrom) and id(node) not in region:
                return None  # as bindings, after the dump
            if id(node) in chains:
                return ast.Pass() if isinstance(node, ast.stmt) else ast.Constant(None)
            if id(node) in lists:
                return ast.List(elts=[], ctx=ast.Load())
            if isinstance(node, ast.Dict):
                # A provider's entry of a provider -> callable dict is that provider's code.
                kept = [
                    (k, v)
                    for k, v in zip(node.keys, node.values, strict=True)
                    if id(v) not in region
                ]
                node.keys = [k for k, _ in kept]
                node.values = [v for _, v in kept]
            if id(node) in region:
                if isinstance(node, ast.stmt):
                    return None  # an owned statement leaves the shared code altogether
                return ast.Constant(None)
            return self.generic_visit(node)

    out = Blank().visit(tree)
    assert out is not None  # the module itself is never blanked
    for node in ast.walk(out):
        for name in ("body", "orelse", "finalbody"):
            block = getattr(node, name, None)
            if name == "body" and isinstance(block, list) and not block:
                setattr(node, name, [ast.Pass()])
    return out
