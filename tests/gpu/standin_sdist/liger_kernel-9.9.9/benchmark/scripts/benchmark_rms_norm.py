"""STAND-IN benchmark_rms_norm.py: writes rows in the upstream schema, computes nothing."""

from standin_utils import fail_if_asked, row, upsert

if __name__ == "__main__":
    fail_if_asked("rms_norm")
    config = '{"hidden_size": 4096, "dtype": "torch.bfloat16", "eps": 1e-06}'
    rows = []
    for mode in ("forward", "backward", "full"):
        for provider in ("huggingface", "liger"):
            for i, t in enumerate((1024, 2048)):
                rows.append(
                    row(
                        "rms_norm",
                        provider,
                        mode,
                        "speed",
                        "ms",
                        "T",
                        "Sequence length",
                        t,
                        0.05 * (i + 1),
                        config,
                    )
                )
    for provider in ("huggingface", "liger"):
        for t in (1024, 2048):
            rows.append(
                row(
                    "rms_norm",
                    provider,
                    "full",
                    "memory",
                    "MB",
                    "T",
                    "Sequence length",
                    t,
                    64.0,
                    config,
                )
            )
    print(f"stand-in rms_norm: {len(rows)} rows")
    upsert(rows)
