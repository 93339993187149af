"""Strict checks of deploy/prefect.yaml (Prefect itself ignores unknown keys silently).

    python deploy/validate.py [deploy/prefect.yaml]     # exit 1 and one line per problem

Checks, without importing any flow (a GPU flow's imports need not exist here):
- every key, at every level, is one Prefect's own models know (prefect.cli.deploy._models,
  the deployment trigger schemas), schedules validate with `extra="forbid"`;
- each entrypoint file exists and defines that function decorated with @flow; every parameter
  (deployment and schedule) is an argument of it;
- each work pool is one deploy/setup.py creates, and every job variable is a variable of that
  pool's base job template (a misspelled job variable would be dropped silently too);
- pull/build/push steps are single-key mappings naming an importable step function whose
  arguments they use;
- no two cron schedules fire at the same minute (the ingest and the maintenance flow write one
  warehouse: started together, one would lose the race for the next commit and redo its work).
"""

from __future__ import annotations

import ast
import inspect
import sys
import types
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, RootModel, ValidationError

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
EXTRA_TOP_LEVEL = {"definitions"}  # YAML anchors live here by Prefect convention


def _fields(model: type[BaseModel]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, field in model.model_fields.items():
        out[name] = field.annotation
        if field.alias:
            out[field.alias] = field.annotation
    return out


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The one BaseModel class an annotation allows (Optional[M], M | int, ...), else None."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        # A RootModel (e.g. a resource specification) is a free-form mapping: no fixed keys.
        return None if issubclass(annotation, RootModel) else annotation
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        models = [m for a in typing.get_args(annotation) if (m := _model_in(a)) is not None]
        return models[0] if len(models) == 1 else None
    return None


def strict_keys(model: type[BaseModel], data: Any, where: str) -> list[str]:
    """Keys of `data` (recursively) that `model` does not declare."""
    if not isinstance(data, dict):
        return []
    fields = _fields(model)
    problems = []
    for key, value in data.items():
        if key not in fields:
            known = ", ".join(sorted(k for k in fields if not k.startswith("_")))
            problems.append(f"{where}: unknown key {key!r} (known: {known})")
            continue
        nested = _model_in(fields[key])
        if nested is not None and isinstance(value, dict):
            problems += strict_keys(nested, value, f"{where}.{key}")
    return problems


def _trigger_problems(trigger: Any, where: str) -> list[str]:
    from prefect.events.schemas.deployment_triggers import (
        DeploymentCompoundTrigger,
        DeploymentEventTrigger,
        DeploymentMetricTrigger,
        DeploymentSequenceTrigger,
        DeploymentTriggerTypes,
    )
    from pydantic import TypeAdapter

    if not isinstance(trigger, dict):
        return [f"{where}: a trigger must be a mapping"]
    by_type: dict[str, type[BaseModel]] = {
        "event": DeploymentEventTrigger,
        "metric": DeploymentMetricTrigger,
        "compound": DeploymentCompoundTrigger,
        "sequence": DeploymentSequenceTrigger,
    }
    model = by_type.get(str(trigger.get("type", "event")))
    if model is None:
        return [f"{where}: unknown trigger type {trigger.get('type')!r}"]
    problems = strict_keys(model, trigger, where)
    for i, sub in enumerate(trigger.get("triggers") or []):
        problems += _trigger_problems(sub, f"{where}.triggers[{i}]")
    try:
        TypeAdapter(DeploymentTriggerTypes).validate_python(trigger)
    except ValidationError as exc:
        problems.append(f"{where}: {exc.errors()[0]['msg']} at {exc.errors()[0]['loc']}")
    return problems


def flow_arguments(path: Path, function: str) -> list[str] | None:
    """Argument names of `function` in `path` if it is decorated with @flow, else None."""
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == function:
            decorators = [d.func if isinstance(d, ast.Call) else d for d in node.decorator_list]
            names = {
                d.id if isinstance(d, ast.Name) else getattr(d, "attr", "") for d in decorators
            }
            if "flow" not in names:
                return None
            args = node.args
            return [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs]
    return None


def _step_problems(steps: Any, where: str) -> list[str]:
    from prefect.utilities.importtools import import_object

    if steps is None:
        return []
    if isinstance(steps, dict):
        steps = [steps] if steps else []
    if not isinstance(steps, list):
        return [f"{where}: must be a list of steps"]
    problems = []
    for i, step in enumerate(steps):
        if not isinstance(step, dict) or len(step) != 1:
            problems.append(f"{where}[{i}]: a step is a mapping with exactly one key")
            continue
        ((name, kwargs),) = step.items()
        try:
            fn = import_object(name)
        except (ImportError, AttributeError, ValueError):
            problems.append(f"{where}[{i}]: no step function {name!r}")
            continue
        params = inspect.signature(fn).parameters
        if not any(p.kind is p.VAR_KEYWORD for p in params.values()):
            extra = set(kwargs or {}) - set(params) - {"id", "requires"}
            if extra:
                problems.append(f"{where}[{i}]: {name} takes no {sorted(extra)}")
    return problems


def pool_variables() -> dict[str, set[str]]:
    """Job variables each work pool of deploy/setup.py accepts."""
    sys.path.insert(0, str(HERE))
    try:
        import setup as pool_setup  # deploy/setup.py
    finally:
        sys.path.remove(str(HERE))
    return {
        name: set(template["variables"]["properties"])
        for name, (_, template) in pool_setup.pool_templates({}).items()
    }


def validate(path: Path, root: Path = ROOT, *, missing_ok: Sequence[str] = ()) -> list[str]:
    """Every problem found in the prefect.yaml at `path`; entrypoints resolve from `root`.

    `missing_ok`: entrypoint files whose absence is tolerated (their other checks still run).
    """
    from prefect.cli.deploy._models import (
        ConcurrencyLimitSpec,
        DeploymentConfig,
        PrefectYamlModel,
        RawScheduleConfig,
        WorkPoolConfig,
    )
    from prefect.client.schemas.objects import ConcurrencyLimitStrategy

    raw = yaml.safe_load(path.read_text())
    if not isinstance(raw, dict):
        return [f"{path}: not a mapping"]
    problems = []
    top = set(_fields(PrefectYamlModel)) | EXTRA_TOP_LEVEL
    problems += [f"top level: unknown key {k!r}" for k in raw if k not in top]
    try:
        PrefectYamlModel.model_validate(raw)
    except ValidationError as exc:
        problems.append(f"{path}: {exc}")
    for action in ("build", "push", "pull"):
        problems += _step_problems(raw.get(action), action)
    pools = pool_variables()
    names: set[str] = set()
    for i, dep in enumerate(raw.get("deployments") or []):
        where = f"deployments[{i}]"
        if not isinstance(dep, dict):
            problems.append(f"{where}: not a mapping")
            continue
        where = f"deployments[{i}] ({dep.get('name')})"
        problems += strict_keys(DeploymentConfig, dep, where)
        if not dep.get("name"):
            problems.append(f"{where}: no name")
        elif dep["name"] in names:
            problems.append(f"{where}: duplicate name")
        names.add(str(dep.get("name")))
        # entrypoint and parameters
        entry = str(dep.get("entrypoint") or "")
        file, _, function = entry.rpartition(":")
        args: list[str] | None = None
        if not file.endswith(".py") or not function:
            problems.append(f"{where}: entrypoint must be path/to/file.py:function, got {entry!r}")
        elif not (root / file).is_file():
            if file not in missing_ok:
                problems.append(f"{where}: entrypoint file {file} does not exist")
        else:
            args = flow_arguments(root / file, function)
            if args is None:
                problems.append(f"{where}: {file} defines no @flow function {function!r}")
        params = dep.get("parameters") or {}
        if not isinstance(params, dict):
            problems.append(f"{where}.parameters: not a mapping")
            params = {}
        if args is not None:
            problems += [
                f"{where}.parameters: {function} has no argument {p!r}"
                for p in params
                if p not in args
            ]
        # schedules
        schedules = dep.get("schedules") or []
        if dep.get("schedule"):
            problems.append(f"{where}: use `schedules:` (a list), not the deprecated `schedule:`")
        for j, sched in enumerate(schedules):
            try:
                RawScheduleConfig.model_validate(sched)
            except ValidationError as exc:
                problems.append(f"{where}.schedules[{j}]: {exc.errors()[0]['msg']}")
                continue
            if args is not None:
                problems += [
                    f"{where}.schedules[{j}].parameters: {function} has no argument {p!r}"
                    for p in (sched.get("parameters") or {})
                    if p not in args
                ]
        # concurrency
        limit = dep.get("concurrency_limit")
        if isinstance(limit, dict):
            problems += strict_keys(ConcurrencyLimitSpec, limit, f"{where}.concurrency_limit")
            strategy = limit.get("collision_strategy")
            allowed = {s.value for s in ConcurrencyLimitStrategy}
            if strategy is not None and strategy not in allowed:
                problems.append(f"{where}.concurrency_limit: collision_strategy not in {allowed}")
        # work pool and job variables
        pool = dep.get("work_pool") or {}
        problems += strict_keys(WorkPoolConfig, pool, f"{where}.work_pool")
        pool_name = pool.get("name") if isinstance(pool, dict) else None
        if pool_name not in pools:
            problems.append(f"{where}.work_pool.name: {pool_name!r} is not one of {sorted(pools)}")
        else:
            for var in pool.get("job_variables") or {}:
                if var not in pools[pool_name]:
                    problems.append(
                        f"{where}.work_pool.job_variables: {pool_name} has no variable {var!r}"
                    )
        for action in ("build", "push", "pull"):
            problems += _step_problems(dep.get(action), f"{where}.{action}")
        for j, trigger in enumerate(dep.get("triggers") or []):
            problems += _trigger_problems(trigger, f"{where}.triggers[{j}]")
    problems += _cron_collisions(raw.get("deployments") or [])
    return problems


def _cron_collisions(deployments: list[Any]) -> list[str]:
    """Pairs of cron schedules whose minute fields name the same fixed minute."""
    by_minute: dict[tuple[str, str], str] = {}
    problems = []
    for dep in deployments:
        if not isinstance(dep, dict):
            continue
        for sched in dep.get("schedules") or []:
            cron = sched.get("cron") if isinstance(sched, dict) else None
            if not isinstance(cron, str) or not cron.split():
                continue
            minute = cron.split()[0]
            if not minute.isdigit():
                continue
            key = (str(sched.get("timezone") or "UTC"), str(int(minute)))
            if key in by_minute:
                problems.append(
                    f"deployments ({dep.get('name')}): cron {cron!r} starts at the same minute "
                    f"as {by_minute[key]}'s"
                )
            else:
                by_minute[key] = str(dep.get("name"))
    return problems


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    path = Path(argv[0]) if argv else HERE / "prefect.yaml"
    problems = validate(path)
    for p in problems:
        print(p)
    print(f"{path}: {'OK' if not problems else f'{len(problems)} problem(s)'}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
