"""STAND-IN benchmark_swiglu.py: writes rows in the upstream schema, computes nothing."""

from standin_utils import generic

if __name__ == "__main__":
    generic("swiglu")
