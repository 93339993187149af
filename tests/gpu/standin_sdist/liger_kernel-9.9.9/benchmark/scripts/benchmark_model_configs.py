"""STAND-IN helper module named like a script: no __main__, so never run."""

MODELS = {"tiny": 1}
