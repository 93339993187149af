"""STAND-IN: a script for another GPU architecture (skipped on the stand-in's 9.0)."""

from standin_utils import generic

if __name__ == "__main__":
    generic("fast_sm100")
