"""Liger against the baseline its script ran at each release (issue 54 item 8): dpo_loss ran
`huggingface` until upstream's #1223 and `torch` after, and the report compares liger with
whichever the release measured (`kindex_etl.catalog.baselines`)."""

from __future__ import annotations

import re
from html import unescape
from pathlib import Path

from kindex_etl.analysis.run import run_regressions
from kindex_etl.catalog.baselines import baseline_for
from tests.analysis.helpers import build_warehouse
from tests.helpers import row

DPO_CONFIG = (
    '{"T": 512, "H": 1024, "V": 128256, "mode": "forward", "dtype": "torch.bfloat16", '
    '"bias": true, "beta": 0.1, "ignore_index": 42}'
)


def _dpo_rows(version: str, day: int, times: dict[str, float]) -> list[dict[str, str]]:
    out = []
    for provider, ms in times.items():
        for mode, factor in (("forward", 1.0), ("backward", 2.0), ("full", 3.0)):
            for i, b in enumerate((2, 4, 8)):
                value = ms * factor * 2**i
                out.append(
                    row(
                        kernel_name="dpo_loss",
                        kernel_provider=provider,
                        kernel_operation_mode=mode,
                        x_name="B",
                        x_label="Batch Size (B)",
                        x_value=str(b),
                        y_value_50=repr(value),
                        y_value_20=repr(value * 0.99),
                        y_value_80=repr(value * 1.01),
                        extra_benchmark_config_str=DPO_CONFIG,
                        timestamp=f"2025-{day:02d}-10 10:00:00",
                        liger_version=version,
                    )
                )
    return out


def _cell(index: str, kernel: str, release: str) -> tuple[str, str]:
    """(shown value, hover text) of the release matrix's cell for `kernel` at `release`."""
    for title, shown in re.findall(r'<td class="cell"[^>]*title="([^"]*)"><a [^>]*>([^<]*)', index):
        title = unescape(title)
        if title.startswith(f"{kernel} at {release}\n") or title == f"{kernel} at {release}":
            return unescape(shown), title
    raise AssertionError(f"no cell for {kernel} at {release}")


def test_dpo_loss_baseline_follows_the_release_script() -> None:
    assert baseline_for("dpo_loss", "0.6.4") == ("huggingface",)
    assert baseline_for("dpo_loss", "0.8.1") == ("torch",)
    # 0.8.0's span holds #1223: runs labelled 0.8.0 measured either.
    assert baseline_for("dpo_loss", "0.8.0") == ("huggingface", "torch")
    assert baseline_for("poly_norm", "0.6.4") == ("huggingface",)
    for kernel in ("mhc_pre", "mhc_coeffs", "mhc_post_res", "mhc_llama_like_lm"):
        assert baseline_for(kernel, "0.8.1") == ("torch",), kernel


def test_dpo_loss_liger_versus_baseline_appears_for_0_6_x(tmp_path: Path) -> None:
    wh = build_warehouse(
        tmp_path,
        [
            _dpo_rows("0.6.3", 1, {"liger": 2.0, "huggingface": 4.0}),
            _dpo_rows("0.6.4", 2, {"liger": 2.0, "huggingface": 4.0}),
            _dpo_rows("0.8.1", 3, {"liger": 2.0, "torch": 3.0}),
        ],
    )
    report = run_regressions(wh).report
    assert report is not None
    index = Path(report).read_text()
    shown, hover = _cell(index, "dpo_loss", "0.6.4")
    assert shown.startswith("2.00×"), (shown, hover)
    assert "vs huggingface" in hover and "vs torch" not in hover
    shown, hover = _cell(index, "dpo_loss", "0.8.1")
    assert shown.startswith("1.50×"), (shown, hover)
    assert "vs torch" in hover and "vs huggingface" not in hover
