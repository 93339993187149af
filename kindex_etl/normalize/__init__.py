"""Normalize: upstream rows to kernelindex.dev documents (descriptors, columnar build, dedup)."""
