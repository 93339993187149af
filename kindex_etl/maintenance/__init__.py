"""Warehouse upkeep as commits: compaction (small files into large) and vacuum (retired files)."""

from kindex_etl.maintenance.compaction import CompactResult, compact
from kindex_etl.maintenance.vacuuming import VacuumResult, vacuum

__all__ = ["CompactResult", "VacuumResult", "compact", "vacuum"]
