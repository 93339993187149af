"""Trigger: react to liger_versions that are new to the warehouse (see rules.py)."""

from .rerun import on_new_versions

__all__ = ["on_new_versions"]
