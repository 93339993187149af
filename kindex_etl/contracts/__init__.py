"""The contracts every stage shares: the upstream CSV's columns, the warehouse's table schemas,
the document models and their digests, and release order. Implementations import these; these
import no implementation.
"""
