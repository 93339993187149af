"""Digests of documents and descriptors: sha256 over RFC 8785 canonical JSON.

Only apiVersion, kind and spec are hashed (metadata is presentation), so two documents that
describe the same thing under different names share a digest.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import rfc8785


def canonical_json(value: Any) -> bytes:
    return rfc8785.dumps(value)


def hashed_part(doc: Mapping[str, Any]) -> dict[str, Any]:
    return {"apiVersion": doc["apiVersion"], "kind": doc["kind"], "spec": doc["spec"]}


def digest(doc: Mapping[str, Any]) -> str:
    """`sha256:<hex>` of the canonical {apiVersion, kind, spec} of a document or descriptor."""
    return "sha256:" + hashlib.sha256(canonical_json(hashed_part(doc))).hexdigest()
