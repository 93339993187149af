"""STAND-IN liger_kernel for the CPU test suite (kindex-etl tests/rerun): no kernels at all."""
