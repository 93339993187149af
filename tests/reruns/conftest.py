"""The GPU tests' stand-ins (harness, torch, index) serve the hand-off tests here too."""

from tests.gpu.conftest import (  # noqa: F401 - fixtures, re-exported for this folder
    baseline_sdist,
    fake_pypi,
    standin_device,
    standin_gpus,
    standin_sdist,
)
