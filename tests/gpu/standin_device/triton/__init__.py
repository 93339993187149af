"""STAND-IN triton for the device-time protocol's CPU tests (see triton/testing.py)."""
