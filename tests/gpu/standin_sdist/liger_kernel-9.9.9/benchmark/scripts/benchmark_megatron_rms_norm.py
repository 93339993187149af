"""STAND-IN benchmark_megatron_rms_norm.py: writes rows in the upstream schema, computes nothing."""

from standin_utils import fail_if_asked, row, upsert

if __name__ == "__main__":
    fail_if_asked("megatron_rms_norm")
    config = '{"S": 4096, "B": 1}'
    rows = []
    for mode in ("forward", "backward", "full"):
        for provider in ("liger", "torch"):
            for h in (1024, 2048):
                rows.append(
                    row(
                        "megatron_rms_norm",
                        provider,
                        mode,
                        "speed",
                        "ms",
                        "H",
                        "hidden size",
                        h,
                        h / 20000,
                        config,
                    )
                )
    for provider in ("liger", "torch"):
        for h in (1024, 2048):
            rows.append(
                row(
                    "megatron_rms_norm",
                    provider,
                    "full",
                    "memory",
                    "MB",
                    "H",
                    "hidden size",
                    h,
                    h / 64,
                    config,
                )
            )
    print(f"stand-in megatron_rms_norm: {len(rows)} rows")
    upsert(rows)
