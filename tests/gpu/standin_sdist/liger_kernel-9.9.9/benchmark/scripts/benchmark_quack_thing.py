"""STAND-IN: a script whose optional dependency is not installed (skipped, with the reason)."""

import quack_not_installed  # noqa: F401
from standin_utils import generic

if __name__ == "__main__":
    generic("quack_thing")
