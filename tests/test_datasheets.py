"""d2l_ext.datasheets: the names GPUs report map to their datasheet rows, and the rows hold
the dense figures the datasheets give (sparsity-doubled rates halved)."""

from __future__ import annotations

import pytest

from d2l_ext import datasheets


@pytest.mark.parametrize("reported, row", [
    ("NVIDIA H100 80GB HBM3", "H100 SXM"), ("NVIDIA H100 PCIe", "H100 PCIe"),
    ("NVIDIA H200", "H200 SXM"), ("NVIDIA A100-SXM4-80GB", "A100 SXM 80GB"),
    ("NVIDIA A100-SXM4-40GB", "A100 SXM 40GB"), ("NVIDIA A100 80GB PCIe", "A100 PCIe 80GB"),
    ("NVIDIA A100-PCIE-40GB", "A100 PCIe 40GB"), ("NVIDIA L4", "L4"),
    ("Tesla V100-SXM2-16GB", "V100 SXM2"), ("Tesla T4", "T4"),
    ("NVIDIA A100-PG509-200", None), ("NVIDIA H100 NVL", None), ("NVIDIA H200 NVL", None),
    ("NVIDIA L40S", None), ("Tesla V100-DGXS-32GB", None), ("", None),
    ("NVIDIA H100 SXM5 80GB", "H100 SXM"), ("NVIDIA H100 80GB HBM3 MIG 1g.10gb", None),
    ("NVIDIA H200 MIG 1g.18gb", None),
])
def test_reported_names_find_their_row_and_no_other(reported, row):
    sheet = datasheets.for_gpu(reported)
    assert (sheet.name if sheet else None) == row


def test_dense_rates_are_half_the_sparsity_figures_printed_for_hopper():
    h100 = datasheets.SHEETS["H100 SXM"]
    assert h100.bf16 == pytest.approx(989.5e12) and h100.tf32 == pytest.approx(494.5e12)
    assert h100.fp32 == 67e12 and h100.memory == 3.35e12 and h100.pcie == 64e9
    assert h100.peak("fp8") == pytest.approx(1979e12)
    assert h100.ridge["bf16"] == pytest.approx(989.5e12 / 3.35e12)
    a100 = datasheets.SHEETS["A100 SXM 80GB"]
    assert a100.tf32 == 156e12 and a100.bf16 == 312e12 and a100.fp8 is None
    with pytest.raises(ValueError, match="unknown precision"):
        h100.peak("int8")


def test_every_row_is_complete_and_cited():
    for key, sheet in datasheets.SHEETS.items():
        assert sheet.name == key and sheet.source.startswith("https://")
        assert sheet.fp32 > 0 and sheet.fp16 >= sheet.fp32 and sheet.memory > 0
        for precision in ("tf32", "bf16", "fp8"):
            value = sheet.peak(precision)
            assert value is None or value > sheet.fp32
