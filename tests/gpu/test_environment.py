"""Environment facts: what nvidia-smi says per GPU, and which facts enter the digest."""

from __future__ import annotations

from typing import Any

from kindex_etl.gpu.environment import DIGEST_KEYS, SMI_FIELDS, parse_gpu_query, software_facts

# What `nvidia-smi --query-gpu=<SMI_FIELDS> --format=csv,noheader,nounits` printed on the H200.
H200_LINE = (
    "0, GPU-a969803b-5c16-d2c0-c979-d94ecead0b71, NVIDIA H200, 00000000:00:06.0, 580.159.04, "
    "345, 3201, 1980, 3201, 700.00, Enabled, Enabled, Disabled, 37"
)
PROBE: dict[str, Any] = {"torch": "2.11.0+cu130", "triton": "3.6.0", "cuda": "13.0",
                         "python": "3.12.3"}  # fmt: skip


def test_parse_gpu_query_reads_every_field_and_drops_na() -> None:
    (gpu,) = parse_gpu_query(H200_LINE + "\n\nnot, a, row\n")
    assert len(SMI_FIELDS) == 14
    assert gpu["uuid"] == "GPU-a969803b-5c16-d2c0-c979-d94ecead0b71"
    assert gpu["powerLimitW"] == "700.00" and gpu["eccMode"] == "Enabled"
    assert gpu["maxSmClockMHz"] == "1980" and gpu["smClockMHz"] == "345"
    assert gpu["persistenceMode"] == "Enabled" and gpu["migMode"] == "Disabled"
    (na,) = parse_gpu_query(H200_LINE.replace("Disabled", "[N/A]"))
    assert na["migMode"] is None


def test_only_what_changes_the_measurement_enters_the_digest() -> None:
    (gpu,) = parse_gpu_query(H200_LINE)
    facts = software_facts(PROBE, gpu)
    assert set(facts) == set(DIGEST_KEYS)
    assert facts["gpuPowerLimitW"] == "700.00" and facts["gpuMaxClocksMHz"] == "1980/3201"

    # Another card of the same configuration, read at another moment: the same environment.
    other = dict(gpu, uuid="GPU-547a9fb8", smClockMHz="1980", temperatureC="52",
                 persistenceMode="Disabled", pciBusId="00000000:00:07.0")  # fmt: skip
    assert software_facts(PROBE, other) == facts
    # A power-capped card, ECC off, a MIG slice: each is another environment.
    for key, value in (("powerLimitW", "500.00"), ("eccMode", "Disabled"), ("migMode", "Enabled")):
        assert software_facts(PROBE, dict(gpu, **{key: value})) != facts


def test_without_nvidia_smi_the_probe_facts_remain() -> None:
    facts = software_facts(PROBE, None)
    assert {"torch", "triton", "cuda", "python", "hostCpu"} <= set(facts)
    assert "gpuPowerLimitW" not in facts and "driver" not in facts
