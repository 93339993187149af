"""Build `history.json`, `harness.json`, `baselines.json` and `variants.json` from a
Liger-Kernel git checkout or bare mirror.

Both files are derived from upstream's git history only (shas, dates, paths, tags, and which
definitions changed), never copied code, and the same repository head gives byte-identical
output: nothing here reads the clock or the environment.

history.json
    Upstream main's first-parent commits, oldest first: full and 7-character sha (as the
    gh-pages folders `benchmarks/<sha>[-<tag>]/` name them), position 0..n-1, committer date in
    UTC, and the first release tag that contains the commit (`git tag --contains` semantics:
    the lowest release version whose tagged commit has this one as an ancestor). Computed with
    one `git rev-list <tag> --not <every lower tag>` per tag instead of one `--contains` per
    commit.

harness.json
    Per benchmark script (`benchmark/scripts/benchmark_*.py`), the first-parent commits at which
    what it times may have changed (its *harness revisions*), the kernel names it writes at each
    of them, and per kernel name the union of those positions. The rule, deliberately
    conservative (it counts a change only where the code a benchmark runs changed, and it
    never guesses at intent):

    1. The script itself: its syntax tree with docstrings dropped and its import statements
       reduced to the set of names it uses (so comments, formatting, docstrings and what a
       formatter does to imports never count; any other edit does: shapes, providers, modes,
       set-up, timing). A file named like a script that never writes a kernel name (the sweep
       helper `benchmark_model_configs.py`) is only a dependency.
    2. The repository code it imports (`from test.chunked_loss.test_dpo_loss import
       TorchLMHeadDPO`, `from utils import build_speed_bench_fn`, `from benchmark_model_configs
       import ...`): only the top-level definitions it imports, and the top-level definitions
       those refer to, followed across repository modules (a test's reference loss subclassing
       `test.utils.HFAlignmentLoss` brings that class in). A test module gaining a test never
       counts; the reference class the `torch` provider times changing does.
    3. In the shared helper `benchmark/scripts/utils.py`, definitions that only orchestrate or
       report (`run_benchmarks`, CSV writing, argument parsing, banners, the row dataclasses;
       REPORTING below) are neither counted nor followed: a new CSV column is not a new timer,
       while `_test_memory`, `run_speed_benchmark`, `QUANTILES`, ... are followed.
    4. Code under test (`liger_kernel`, installed from `src/`) and third-party modules are not
       harness: a change there is what the benchmarks exist to see.

    A script's creation is a revision (a kernel name moving to a new script starts a new
    series); its deletion is recorded for the script but is not a revision of any kernel.

    Each revision also says whose timed code it changed (`providers`): the script is split by
    provider (`script_providers`: the `if provider == ...` branches, the statements and
    definitions only those branches use, the repository definitions only they import), and
    the revision names the providers whose part differs. A change to shared code (inputs,
    warm-up, the timing call, a helper every provider goes through) or to a part every
    provider runs gives `null`: all of them, as does a script's creation or a file that does
    not parse. So #830, which added `liger-fp32-accum` to fused_linear_cross_entropy's script,
    names only that provider, and #974's change of `HFJSDLoss`, which only distill_jsd_loss's
    `torch` provider times, names only `torch`. Per kernel name, `providers` maps each such
    limited revision's position to its providers (absent: all).
    Kernel names come from the script's syntax: string constants passed as `kernel_name=...`,
    a `"kernel_name": ...` dict entry or a `kernel_name = ...` assignment; an f-string becomes
    a pattern with `*` for each formatted part (`fused_linear_grpo_loss_*`).
"""

from __future__ import annotations

import argparse
import ast
import copy
import hashlib
import json
import re
import subprocess
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import Any

from packaging.version import InvalidVersion, Version

from .script_configs import Config, dead_keys, read_keys
from .script_providers import Owners, Split, import_bindings
from .script_providers import split as split_providers

FORMAT = 1
SHORT = 7
SCRIPT = re.compile(r"^benchmark/scripts/benchmark_[^/]*\.py$")
REPORTING = frozenset(
    {
        "run_benchmarks",
        "update_benchmark_data_csv",
        "print_benchmark_data",
        "parse_benchmark_script_args",
        "get_current_file_directory",
        "get_formatted_time",
        "get_gpu_name",
        "_print_benchmarking_banner",
        "CustomEncoder",
        "BenchmarkData",
        "BenchmarkDataCSVRow",
        "SingleBenchmarkRunInput",
        "SingleBenchmarkRunOutput",
        "LIGER_KERNEL_VERSION",
    }
)
HELPER_DIR = "benchmark/scripts"


class Git:
    """A git repository read through one long-lived `git cat-file --batch` process."""

    def __init__(self, repo: Path) -> None:
        self.repo = repo
        self._batch: subprocess.Popen[bytes] | None = None

    def run(self, *args: str) -> str:
        return subprocess.run(
            ["git", "--git-dir", str(self._git_dir()), *args],
            check=True,
            capture_output=True,
            text=True,
        ).stdout

    def _git_dir(self) -> Path:
        dot = self.repo / ".git"
        return dot if dot.exists() else self.repo

    def blob(self, commit: str, path: str) -> tuple[str, bytes] | None:
        """(object id, content) of `path` at `commit`, or None where it does not exist."""
        if self._batch is None:
            self._batch = subprocess.Popen(
                ["git", "--git-dir", str(self._git_dir()), "cat-file", "--batch"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
            )
        assert self._batch.stdin is not None and self._batch.stdout is not None
        self._batch.stdin.write(f"{commit}:{path}\n".encode())
        self._batch.stdin.flush()
        header = self._batch.stdout.readline().decode().split()
        if len(header) != 3:
            return None
        oid, kind, size = header
        data = self._batch.stdout.read(int(size))
        self._batch.stdout.read(1)
        return (oid, data) if kind == "blob" else None

    def close(self) -> None:
        if self._batch is not None:
            assert self._batch.stdin is not None
            self._batch.stdin.close()
            self._batch.wait()
            self._batch = None


# ---------------------------------------------------------------- history


@dataclass(frozen=True)
class Commit:
    sha: str
    position: int
    date: str
    release: str | None
    changed: tuple[str, ...] = ()


def _release_version(tag: str) -> Version | None:
    try:
        return Version(tag.removeprefix("v"))
    except InvalidVersion:
        return None


def release_tags(git: Git) -> list[tuple[str, str]]:
    """(tag, peeled commit) of every release tag, lowest version first."""
    rows = git.run(
        "for-each-ref", "refs/tags", "--format=%(refname:short) %(objectname) %(*objectname)"
    )
    tags: list[tuple[Version, str, str]] = []
    for line in rows.splitlines():
        name, obj, *peeled = line.split()
        version = _release_version(name)
        if version is not None:
            tags.append((version, name, peeled[0] if peeled else obj))
    tags.sort()
    return [(name, sha) for _, name, sha in tags]


def first_parent_commits(git: Git, ref: str) -> list[Commit]:
    """Main's first-parent line, oldest first, each with the files it changed."""
    out = git.run(
        "log",
        "--first-parent",
        "--reverse",
        "--diff-merges=first-parent",
        "--no-renames",
        "--name-only",
        "--format=%x00%H %ct",
        ref,
    )
    commits: list[Commit] = []
    for chunk in out.split("\x00")[1:]:
        lines = [line for line in chunk.splitlines() if line]
        sha, stamp = lines[0].split()
        date = datetime.fromtimestamp(int(stamp), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        commits.append(Commit(sha, len(commits), date, None, tuple(lines[1:])))
    return commits


def first_releases(git: Git, tags: Sequence[tuple[str, str]]) -> dict[str, str]:
    """Commit -> the lowest release tag that contains it."""
    found: dict[str, str] = {}
    for i, (tag, sha) in enumerate(tags):
        lower = [s for _, s in tags[:i]]
        args = ["rev-list", sha] + (["--not", *lower] if lower else [])
        for commit in git.run(*args).split():
            found.setdefault(commit, tag)
    return found


def build_history(git: Git, ref: str, repository: str) -> tuple[dict[str, Any], list[Commit]]:
    tags = release_tags(git)
    releases = first_releases(git, tags)
    commits = [
        Commit(c.sha, c.position, c.date, releases.get(c.sha), c.changed)
        for c in first_parent_commits(git, ref)
    ]
    where = {c.sha: c.position for c in commits}
    doc = {
        "format": FORMAT,
        "source": {"repository": repository, "ref": ref, "head": commits[-1].sha},
        "releases": [{"tag": t, "sha": s, "position": where.get(s)} for t, s in tags],
        "commits": [
            {
                "position": c.position,
                "short": c.sha[:SHORT],
                "sha": c.sha,
                "date": c.date,
                "release": c.release,
            }
            for c in commits
        ],
    }
    return doc, commits


# ---------------------------------------------------------------- harness


def _strip_docstrings(tree: ast.Module) -> ast.Module:
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if (
                body
                and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)
            ):
                node.body = body[1:] or [ast.Pass()]
    return tree


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass
class Module:
    """What the harness rule needs of one Python file: its top-level names and imports."""

    path: str
    digest: str
    definitions: dict[str, str] = field(default_factory=dict)  # name -> digest of its AST
    references: dict[str, set[str]] = field(default_factory=dict)  # name -> names it uses
    imports: dict[str, tuple[str, int, str]] = field(default_factory=dict)  # local -> source
    all_imports: list[tuple[str, int, str, str]] = field(default_factory=list)
    kernel_names: tuple[str, ...] = ()
    # Benchmark scripts only: the code split by provider (`script_providers`); None where the
    # file does not parse (then every revision touches every provider).
    split: Split | None = None
    # Constant keys the file reads from a mapping (`script_configs.read_keys`), and for a
    # script each config it writes with the keys the script itself never reads.
    read_keys: frozenset[str] = frozenset()
    unread: tuple[tuple[Config, frozenset[str]], ...] = ()


def _kernel_name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(
            str(part.value) if isinstance(part, ast.Constant) else "*" for part in node.values
        )
    return None


def _kernel_names(tree: ast.AST) -> tuple[str, ...]:
    found: set[str] = set()
    for node in ast.walk(tree):
        values: list[ast.expr] = []
        if isinstance(node, ast.keyword) and node.arg == "kernel_name":
            values.append(node.value)
        elif isinstance(node, ast.Dict):
            values += [
                v
                for k, v in zip(node.keys, node.values, strict=True)
                if isinstance(k, ast.Constant) and k.value == "kernel_name"
            ]
        elif isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "kernel_name" for t in node.targets
        ):
            values.append(node.value)
        found.update(n for n in map(_kernel_name, values) if n)
    return tuple(sorted(found))


def _code_digest(tree: ast.Module) -> str:
    """A script's code without its import statements, plus the set of imports it uses.

    Sorting, splitting, moving or dropping an unused import (what a formatter or linter does)
    changes nothing; binding a name to another module does.
    """
    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    imports: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            for local, binding in import_bindings(node):
                if local in used or binding.endswith("* as *"):
                    imports.add(binding)
        for name in ("body", "orelse", "finalbody"):
            block = getattr(node, name, None)
            if isinstance(block, list) and any(
                isinstance(b, ast.Import | ast.ImportFrom) for b in block
            ):
                kept = [b for b in block if not isinstance(b, ast.Import | ast.ImportFrom)]
                setattr(node, name, kept or ([ast.Pass()] if name == "body" else []))
    return _digest(ast.dump(tree) + "\n" + "\n".join(sorted(imports)))


def parse_module(path: str, source: bytes) -> Module:
    try:
        tree = _strip_docstrings(ast.parse(source))
    except (SyntaxError, ValueError):
        # Unparseable here (other Python syntax): the text stands for all of it.
        return Module(path, hashlib.sha256(source).hexdigest()[:16])
    module = Module(path, _code_digest(copy.deepcopy(tree)), kernel_names=_kernel_names(tree))
    module.read_keys = read_keys(tree)
    if SCRIPT.match(path):
        module.split = split_providers(tree)
        module.unread = tuple(dead_keys(tree))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                module.all_imports.append(
                    (node.module or "", node.level, alias.name, alias.asname or alias.name)
                )
    body = tree.body if isinstance(tree, ast.Module) else []
    dumps: dict[str, list[str]] = {}
    for stmt in body:
        names: list[str] = []
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names = [stmt.name]
        elif isinstance(stmt, ast.Assign):
            names = [t.id for t in stmt.targets if isinstance(t, ast.Name)]
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            names = [stmt.target.id]
        elif isinstance(stmt, ast.ImportFrom):
            for alias in stmt.names:
                local = alias.asname or alias.name
                module.imports[local] = (stmt.module or "", stmt.level, alias.name)
            continue
        used = {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name)}
        for name in names:
            dumps.setdefault(name, []).append(ast.dump(stmt))
            module.references.setdefault(name, set()).update(used - {name})
    module.definitions = {name: _digest("\n".join(d)) for name, d in dumps.items()}
    return module


class Harness:
    """Fingerprints of what each benchmark script times, per commit."""

    def __init__(self, git: Git) -> None:
        self.git = git
        self._modules: dict[str, Module] = {}

    def module(self, commit: str, path: str) -> Module | None:
        found = self.git.blob(commit, path)
        if found is None:
            return None
        oid, data = found
        key = f"{oid}:{path}"
        if key not in self._modules:
            self._modules[key] = parse_module(path, data)
        return self._modules[key]

    def resolve(self, commit: str, importer: str, module: str, level: int) -> Module | None:
        """The repository file a `from module import ...` in `importer` reads, if any."""
        parts = [p for p in module.split(".") if p]
        candidates: list[PurePosixPath] = []
        if level:
            base = PurePosixPath(importer).parent
            for _ in range(level - 1):
                base = base.parent
            candidates.append(base.joinpath(*parts) if parts else base)
        else:
            if not parts or parts[0] == "liger_kernel":
                return None
            if len(parts) == 1:
                candidates.append(PurePosixPath(importer).parent / parts[0])
            candidates.append(PurePosixPath(*parts))
        for candidate in candidates:
            for path in (f"{candidate}.py", f"{candidate}/__init__.py"):
                found = self.module(commit, path)
                if found is not None:
                    return found
        return None

    def fingerprint(self, commit: str, script: str) -> Fingerprint | None:
        """Digest per harness part ("script", "path:name"), the files they were read from, and
        per provider what it runs (`Fingerprint.by_provider`)."""
        top = self.module(commit, script)
        if top is None:
            return None
        parts = {"script": top.digest}
        files = {script}
        loads = top.split.loads if top.split is not None else {}
        owners: dict[str, Owners] = {}
        # (module, name, providers whose code reaches it); a name reached again by more
        # providers is walked again, so every part ends with the union of its readers.
        todo: list[tuple[Module, str, Owners]] = []
        for mod, level, name, local in top.all_imports:
            target = self.resolve(commit, script, mod, level)
            if target is not None:
                todo.append((target, name, loads.get(local)))
        seen: dict[tuple[str, str], Owners] = {}
        while todo:
            module, name, who = todo.pop()
            key = (module.path, name)
            if key in seen:
                merged = _union_owners(seen[key], who)
                if merged == seen[key]:
                    continue
                who = merged
            seen[key] = who
            if module.path.startswith(f"{HELPER_DIR}/") and name in REPORTING:
                continue
            files.add(module.path)
            if name in module.definitions:
                parts[f"{module.path}:{name}"] = module.definitions[name]
                owners[f"{module.path}:{name}"] = who
                for used in module.references.get(name, ()):
                    if used in module.definitions:
                        todo.append((module, used, who))
                    elif used in module.imports:
                        src, level, orig = module.imports[used]
                        target = self.resolve(commit, module.path, src, level)
                        if target is not None:
                            todo.append((target, orig, who))
            elif name in module.imports:
                src, level, orig = module.imports[name]
                target = self.resolve(commit, module.path, src, level)
                if target is not None:
                    todo.append((target, orig, who))
        by_provider: dict[str, tuple[str, Owners]] | None = None
        if top.split is not None:
            by_provider = {"shared": (_digest(top.split.shared), None)}
            for provider, dumps in top.split.owned.items():
                by_provider[f"provider:{provider}"] = (
                    _digest("\n".join(dumps)),
                    frozenset({provider}),
                )
            for part, digest in parts.items():
                if part != "script":
                    by_provider[part] = (digest, owners[part])
        return Fingerprint(parts, files, by_provider)


@dataclass(frozen=True)
class ScriptState:
    """A benchmark script as it stood from one of its revisions on: the kernel names it
    writes, the providers it runs other than Liger's own code, and per config it writes the
    keys nothing reads. A deletion has none of them."""

    position: int
    kernel_names: tuple[str, ...] = ()
    providers: tuple[str, ...] = ()
    dead: tuple[tuple[Config, frozenset[str]], ...] = ()


@dataclass(frozen=True)
class Fingerprint:
    parts: dict[str, str]  # "script" or "path:name" -> digest: what counts as a revision
    files: set[str]
    # The same split by provider: "shared", "provider:<name>", "path:name" -> (digest, the
    # providers that run it; None: all). None where the script does not parse.
    by_provider: dict[str, tuple[str, Owners]] | None


def _union_owners(a: Owners, b: Owners) -> Owners:
    return None if a is None or b is None else a | b


def touched_providers(before: Fingerprint | None, after: Fingerprint) -> list[str] | None:
    """The providers whose timed code differs between two fingerprints of one script; None
    when shared code changed (or either side could not be split): then all of them."""
    if before is None or before.by_provider is None or after.by_provider is None:
        return None
    old, new = before.by_provider, after.by_provider
    found: set[str] = set()
    for part in old.keys() | new.keys():
        if old.get(part, ("",))[0] == new.get(part, ("",))[0]:
            continue
        who: Owners = frozenset()
        for side in (old, new):
            if part in side:
                who = _union_owners(who, side[part][1])
        if who is None:
            return None
        found |= who
    # Code that every provider runs (an input every branch reads) is shared code in effect.
    everyone = {p.removeprefix("provider:") for p in new if p.startswith("provider:")}
    return None if everyone and everyone <= found else sorted(found)


def build_harness(
    git: Git,
    commits: Sequence[Commit],
    repository: str,
    runs: dict[str, list[ScriptState]] | None = None,
) -> dict[str, Any]:
    """harness.json's document; `runs`, where given, receives per script its state at every
    revision (for `build_baselines` and `build_variants`)."""
    harness = Harness(git)
    state: dict[str, tuple[Fingerprint, tuple[str, ...]]] = {}
    scripts: dict[str, list[dict[str, Any]]] = {}
    for commit in commits:
        changed = set(commit.changed)
        candidates = {p for p in changed if SCRIPT.match(p)}
        candidates |= {s for s, (fp, _) in state.items() if fp.files & changed}
        for script in sorted(candidates):
            before = state.get(script)
            found = harness.fingerprint(commit.sha, script)
            if found is None:
                if before is not None:
                    del state[script]
                    scripts[script].append(
                        {
                            "position": commit.position,
                            "sha": commit.sha[:SHORT],
                            "removed": True,
                            "kernel_names": [],
                            "changed": [],
                            "providers": None,
                        }
                    )
                    if runs is not None:
                        runs.setdefault(script, []).append(ScriptState(commit.position))
                continue
            module = harness.module(commit.sha, script)
            names = module.kernel_names if module is not None else ()
            if before is not None and before[0].parts == found.parts:
                state[script] = (found, names)
                continue
            old = before[0].parts if before is not None else {}
            parts = found.parts
            what = sorted(k for k in parts.keys() | old.keys() if parts.get(k) != old.get(k))
            scripts.setdefault(script, []).append(
                {
                    "position": commit.position,
                    "sha": commit.sha[:SHORT],
                    "kernel_names": list(names),
                    "changed": ["created"] if before is None else what,
                    # Whose timed code changed; None: everyone's (shared code, or created).
                    "providers": touched_providers(before[0] if before else None, found),
                }
            )
            state[script] = (found, names)
            if runs is not None:
                split = module.split if module is not None else None
                run = (
                    tuple(p for p in split.providers if p not in split.runs_liger)
                    if split is not None
                    else ()
                )
                # A key a helper the script imports reads (the sweep helper's `bsz`) is read.
                helpers: set[str] = set()
                for path in found.files - {script}:
                    helper = harness.module(commit.sha, path)
                    if helper is not None:
                        helpers |= helper.read_keys
                dead = tuple(
                    (config, unread - helpers)
                    for config, unread in (module.unread if module is not None else ())
                )
                runs.setdefault(script, []).append(
                    ScriptState(commit.position, tuple(names), run, dead)
                )
    # A file that matches the name but never writes a row (the shared sweep helper
    # `benchmark_model_configs.py`) is a dependency, not a benchmark.
    scripts = {s: revs for s, revs in scripts.items() if any(r["kernel_names"] for r in revs)}
    kernels: dict[str, dict[str, Any]] = {}
    for script, revisions in scripts.items():
        previous: list[str] = []
        for rev in revisions:
            if rev.get("removed"):
                previous = []
                continue
            for name in sorted(set(previous) | set(rev["kernel_names"])):
                entry = kernels.setdefault(name, {"scripts": [], "revisions": [], "touched": {}})
                if script not in entry["scripts"]:
                    entry["scripts"].append(script)
                entry["revisions"].append(rev["position"])
                at = str(rev["position"])
                who = rev["providers"]
                # Two scripts revised at one commit: the union; anyone's "all" wins.
                held = entry["touched"].get(at, [])
                entry["touched"][at] = (
                    None if who is None or held is None else sorted(set(held) | set(who))
                )
            previous = rev["kernel_names"]
    for entry in kernels.values():
        entry["scripts"].sort()
        entry["revisions"] = sorted(set(entry["revisions"]))
        # Only the revisions that spare some providers are listed: absent means all.
        limited = {k: v for k, v in entry.pop("touched").items() if v is not None}
        if limited:
            entry["providers"] = dict(sorted(limited.items(), key=lambda kv: int(kv[0])))
    return {
        "format": FORMAT,
        "source": {"repository": repository, "head": commits[-1].sha if commits else None},
        "scripts": dict(sorted(scripts.items())),
        "kernels": dict(sorted(kernels.items())),
    }


# ---------------------------------------------------------------- baselines


def is_liger_provider(provider: str) -> bool:
    """Liger's own implementations by name (`liger`, `liger-fp32-accum`,
    `liger_fused_add_rms_norm`, ...), as the analysis' `controls.is_liger` counts them. With
    the providers whose own code calls `liger_kernel` (`Split.runs_liger`), these are not
    baselines; every other provider a script runs is."""
    return provider.startswith("liger")


def _spans(history: dict[str, Any]) -> list[tuple[int, int, str]]:
    """(first, last + 1, tag) of each release whose tag is on main's first-parent line: the
    positions whose package reports that release (main between two tags reports the older)."""
    positions = sorted(
        (r["position"], r["tag"]) for r in history["releases"] if r["position"] is not None
    )
    end = len(history["commits"])
    return [
        (start, positions[i + 1][0] if i + 1 < len(positions) else end, tag)
        for i, (start, tag) in enumerate(positions)
    ]


def _states_in(revisions: Sequence[ScriptState], start: int, stop: int) -> list[ScriptState]:
    """The script as it stood at `start`, then every revision inside the span."""
    current = [r for r in revisions if r.position <= start][-1:]
    return current + [r for r in revisions if start < r.position < stop]


def build_baselines(
    history: dict[str, Any], runs: dict[str, list[ScriptState]], repository: str
) -> dict[str, Any]:
    """baselines.json: per kernel name and release tag, the providers other than liger's that
    the kernel's script ran while the package reported that release (`runs` holds only the
    providers that do not call `liger_kernel` in their own code).

    Upstream stamps rows with the installed package's version, and main between two tags
    still reports the older one, so a release's span runs from its tag's commit up to the next
    tag's (exclusive): a script revision inside the span (dpo_loss's switch from `huggingface`
    to `torch` in #1223, inside 0.8.0's span) adds its providers to that release. A release
    whose tag is not on main's first-parent line has no span and no entry.
    """
    spans = _spans(history)
    kernels: dict[str, dict[str, list[str]]] = {}
    for start, stop, tag in spans:
        for revisions in runs.values():
            for state in _states_in(revisions, start, stop):
                for name in state.kernel_names:
                    found = kernels.setdefault(name, {}).setdefault(tag, [])
                    found += [
                        p for p in state.providers if not is_liger_provider(p) and p not in found
                    ]
    return {
        "format": FORMAT,
        "source": {"repository": repository, "head": history["source"]["head"]},
        # Releases in order, oldest first (a mapping would sort v0.5.10 before v0.5.2).
        "kernels": {
            name: [
                {"release": tag, "baselines": by_tag[tag]} for _, _, tag in spans if tag in by_tag
            ]
            for name, by_tag in sorted(kernels.items())
        },
    }


def build_variants(
    history: dict[str, Any], runs: dict[str, list[ScriptState]], repository: str
) -> dict[str, Any]:
    """variants.json: workload variant rules for the config keys a release's script writes
    and nothing reads (`script_configs`), one rule per kernel name, x name, exact key set and
    dead keys over consecutive releases, in `workloads.json`'s variant format.

    A key is dead for a release when every state of the script in the release's span (as in
    `build_baselines`) that writes that config leaves it unread. Only plain kernel names (not
    a formatted `*` pattern) get rules. `load_catalog` appends them after `workloads.json`'s
    own rules, so a hand rule for the same rows wins.
    """
    spans = _spans(history)
    order = {tag: i for i, (_, _, tag) in enumerate(spans)}
    # (kernel, x name, keys) -> release -> (dead keys, evidence paths)
    found: dict[tuple[str, str, frozenset[str]], dict[str, tuple[frozenset[str], set[str]]]] = {}
    for script, revisions in sorted(runs.items()):
        for start, stop, tag in spans:
            for state in _states_in(revisions, start, stop):
                plain = [n for n in state.kernel_names if "*" not in n]
                for config, dead in state.dead:
                    names = [config.kernel_name] if config.kernel_name else plain
                    if config.x_name is None:
                        continue
                    for name in names:
                        if name is None or "*" in name:
                            continue
                        key = (name, config.x_name, config.keys)
                        held = found.setdefault(key, {}).get(tag)
                        if held is None:
                            found[key][tag] = (dead, {script})
                        else:
                            found[key][tag] = (held[0] & dead, held[1] | {script})
    variants: list[dict[str, Any]] = []
    for (name, x_name, keys), by_tag in sorted(
        found.items(), key=lambda kv: (kv[0][0], kv[0][1], sorted(kv[0][2]))
    ):
        tags = sorted(by_tag, key=order.__getitem__)
        run: list[str] = []
        for tag in [*tags, ""]:
            same = (
                run
                and tag
                and order[tag] == order[run[-1]] + 1
                and by_tag[tag][0] == by_tag[run[0]][0]
            )
            if same:
                run.append(tag)
                continue
            if run and by_tag[run[0]][0]:
                dead = by_tag[run[0]][0]
                first, last = run[0].removeprefix("v"), run[-1].removeprefix("v")
                variants.append(
                    {
                        "id": f"derived:{name}/{x_name}:{first}-{last}",
                        "kernels": [name],
                        "x_name": x_name,
                        "keys": sorted(keys),
                        "dead": sorted(dead),
                        "versions": f">={first},<={last}",
                        "evidence": sorted(f"{run[-1]}:{path}" for path in by_tag[run[-1]][1]),
                    }
                )
            run = [tag] if tag else []
    return {
        "format": FORMAT,
        "source": {"repository": repository, "head": history["source"]["head"]},
        "variants": variants,
    }


# ---------------------------------------------------------------- output


def dump(doc: dict[str, Any]) -> str:
    """JSON with one element per line of each list or mapping at the top: diffs stay small."""
    out = []
    for key, value in doc.items():
        if isinstance(value, list) and value and isinstance(value[0], dict):
            rows = [f"  {json.dumps(v, sort_keys=True)}" for v in value]
            text = "[\n" + ",\n".join(rows) + "\n ]"
        elif (
            isinstance(value, dict)
            and value
            and all(isinstance(v, dict | list) for v in value.values())
        ):
            rows = [f"  {json.dumps(k)}: {json.dumps(v, sort_keys=True)}" for k, v in value.items()]
            text = "{\n" + ",\n".join(rows) + "\n }"
        else:
            text = json.dumps(value, sort_keys=True)
        out.append(f" {json.dumps(key)}: {text}")
    return "{\n" + ",\n".join(out) + "\n}\n"


def generate(
    repo: Path, out: Path, ref: str = "main", repository: str = "linkedin/Liger-Kernel"
) -> tuple[Path, ...]:
    git = Git(repo)
    runs: dict[str, list[ScriptState]] = {}
    try:
        history, commits = build_history(git, ref, repository)
        harness = build_harness(git, commits, repository, runs)
    finally:
        git.close()
    docs = {
        "history.json": history,
        "harness.json": harness,
        "baselines.json": build_baselines(history, runs, repository),
        "variants.json": build_variants(history, runs, repository),
    }
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, doc in docs.items():
        (out / name).write_text(dump(doc))
        paths.append(out / name)
    return tuple(paths)


def main(argv: Iterable[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Write kindex_etl/catalog/history.json, harness.json, baselines.json and "
        "variants.json from a Liger-Kernel "
        "git checkout or bare mirror."
    )
    parser.add_argument("repo", type=Path, help="the checkout (or bare repository) to read")
    parser.add_argument("--ref", default="main", help="the branch whose first parents count")
    parser.add_argument("--repository", default="linkedin/Liger-Kernel", help="recorded name")
    parser.add_argument(
        "--out",
        type=Path,
        default=Path(__file__).resolve().parent,
        help="folder to write into (default: the package's catalog)",
    )
    args = parser.parse_args(None if argv is None else list(argv))
    for path in generate(args.repo, args.out, args.ref, args.repository):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
