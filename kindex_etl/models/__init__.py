from .documents import (
    API_VERSION,
    DOCUMENT_KINDS,
    BenchmarkProtocol,
    BenchmarkRun,
    ExecutionEnvironment,
    Implementation,
    Workload,
    json_schemas,
)

__all__ = [
    "API_VERSION",
    "DOCUMENT_KINDS",
    "BenchmarkProtocol",
    "BenchmarkRun",
    "ExecutionEnvironment",
    "Implementation",
    "Workload",
    "json_schemas",
]
