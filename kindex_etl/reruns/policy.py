"""Which liger_versions new to the warehouse are *releases* that deserve a GPU re-run.

The rule (documented in docs/reruns.md), applied after each committed ingest to the versions
that the ingest added to the warehouse:

1. History never triggers. When the warehouse held no (orderable) version before this ingest,
   nothing triggers: a first load of an empty warehouse is all history. A backfill does not
   call the trigger at all unless asked (`trigger=True`), and then this same rule applies.
2. A new version triggers only when it is newer, by PEP 440 order (`packaging.version`), than
   every version the warehouse held before the ingest. A version older than that maximum
   (a late-arriving old file, or a patch release of an older line) is treated as history.
3. Only versions PyPI can serve trigger: a version string that is not valid PEP 440, a
   development release (`0.9.0.dev3`, a nightly) or one with a local part (`0.8.5+cu130`)
   never does, since the re-run fetches the release's sdist from PyPI. Pre-releases
   (`0.9.0rc1`) do trigger; `0.9.0` after `0.9.0rc1` is newer and triggers again.
4. Several new versions in one ingest each trigger, each on its own (exactly once per version:
   see rerun.py).

Anything the rule leaves out can still be asked for by hand: `kindex-etl reruns --request V`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from kindex_etl.contracts.versions import parse_version

# What may appear in a record key: PEP 440's own alphabet, nothing path-like.
_SAFE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+!-]*$")


@dataclass(frozen=True)
class Decision:
    version: str
    trigger: bool
    reason: str


def is_requestable(version: str) -> bool:
    """A version a re-run can be asked for: valid PEP 440, safe as a key, on PyPI's terms."""
    v = parse_version(version)
    return v is not None and bool(_SAFE.match(version)) and not v.is_devrelease and not v.local


def decide(versions_before: Iterable[str], new_versions: Iterable[str]) -> list[Decision]:
    """One Decision per new version, in the order given (see the module doc for the rule)."""
    before = [v for v in (parse_version(x) for x in versions_before) if v is not None]
    newest = max(before) if before else None
    out = []
    for version in new_versions:
        v = parse_version(version)
        if v is None:
            out.append(Decision(version, False, "not a PEP 440 version"))
        elif newest is None:
            out.append(Decision(version, False, "first load: the warehouse had no versions"))
        elif v <= newest:
            out.append(Decision(version, False, f"history: not newer than {newest}"))
        elif not is_requestable(version):
            out.append(Decision(version, False, "a development or local version (not on PyPI)"))
        else:
            out.append(Decision(version, True, f"new liger_version {version}, newer than {newest}"))
    return out


def to_trigger(versions_before: Iterable[str], new_versions: Iterable[str]) -> list[Decision]:
    return [d for d in decide(versions_before, new_versions) if d.trigger]
