"""The suite of a release: every script with a main, skips with reasons, per-script timeouts."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from kindex_etl.gpu import prepare

from .conftest import STANDIN_VERSION


def test_whole_suite_by_default_with_skips_and_per_script_timeouts(
    standin_sdist: Path, standin_gpus: Callable[[int], None], tmp_path: Path
) -> None:
    standin_gpus(1)
    prep = prepare(STANDIN_VERSION, sdist=standin_sdist, workdir=tmp_path / "w", repeats=1)
    ran = {s.kernel: s for s in prep.scripts}
    assert sorted(ran) == [
        "dyt", "geglu", "layer_norm", "megatron_rms_norm", "rms_norm", "softmax", "swiglu", "tvd",
    ]  # fmt: skip
    skipped = {s.kernel: s.reason for s in prep.skipped}
    assert skipped == {
        "fast_sm100": "built for compute capability 10.0/10.3 (sm100); this GPU is 9.0",
        "quack_thing": "missing optional dependency: quack_not_installed",
    }
    assert "model_configs" not in ran and "model_configs" not in skipped  # a helper, no main
    # Sized per script from the catalog: rms_norm (17 s on an H200) gets the floor, geglu
    # (240 s) four times that, a script the catalog does not know the default's.
    assert ran["rms_norm"].timeout_s == 90
    assert ran["geglu"].timeout_s == 960
    assert ran["tvd"].timeout_s == 160
