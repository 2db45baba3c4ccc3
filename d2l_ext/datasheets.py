"""GPU peaks from NVIDIA's datasheets: one cited table for every chapter.

A measured rate means little alone: 52 TFLOP/s is most of an H100's float32 peak and a
twentieth of its bf16 peak. The chapters read measurements against these figures, so they
live in one place, each GPU with the datasheet it comes from. Matrix rates are *dense*:
NVIDIA's Ampere and later datasheets print the tensor-core rates "with sparsity" (2:4
structured sparsity, which ordinary training does not use), twice the dense rate; the table
holds the halved figures. Bandwidths are per direction for PCIe (the datasheets print both
directions together) and as printed for NVLink (both directions together) and memory.

:func:`for_gpu` maps the name that ``torch.cuda.get_device_name`` (or ``nvidia-smi``)
reports to its row; a GPU not in the table gives ``None``, and callers then say that no
datasheet figure is known rather than guess.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

TERA, GIGA = 1e12, 1e9


@dataclass(frozen=True)
class Datasheet:
    """One GPU's datasheet peaks (FLOP/s and bytes/s; ``None`` where the sheet has none)."""

    name: str  # e.g. "H100 SXM"
    fp32: float  # float32 on the CUDA cores (not tensor cores)
    tf32: float | None  # TensorFloat-32 on tensor cores, dense
    bf16: float | None  # bfloat16 on tensor cores, dense
    fp16: float  # float16 on tensor cores, dense
    fp8: float | None  # FP8 on tensor cores, dense
    memory: float  # memory bandwidth, bytes/s
    pcie: float  # one direction of the host link, bytes/s
    nvlink: float | None  # NVLink, both directions together, bytes/s
    source: str  # the datasheet's address

    def peak(self, precision: str) -> float | None:
        """The dense matrix peak for ``"fp32"``, ``"tf32"``, ``"bf16"``, ``"fp16"``, ``"fp8"``."""
        if precision not in ("fp32", "tf32", "bf16", "fp16", "fp8"):
            raise ValueError(f"unknown precision {precision!r}; one of fp32, tf32, bf16, "
                             "fp16, fp8")
        return getattr(self, precision)

    @property
    def ridge(self) -> dict[str, float]:
        """FLOP per byte of memory traffic at which each precision's peak meets the memory
        roof (the roofline's ridge point), for the precisions the sheet has."""
        return {p: v / self.memory for p in ("fp32", "tf32", "bf16", "fp16", "fp8")
                if (v := self.peak(p)) is not None}


_H100 = ("https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet")
_A100 = ("https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/"
         "nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf")

#: The GPUs the book meets, from their datasheets (sparsity-doubled figures halved).
SHEETS = {
    "H200 SXM": Datasheet("H200 SXM", 67 * TERA, 989 / 2 * TERA, 1979 / 2 * TERA,
                          1979 / 2 * TERA, 3958 / 2 * TERA, 4.8 * TERA, 64 * GIGA, 900 * GIGA,
                          "https://www.nvidia.com/en-us/data-center/h200/"),
    "H100 SXM": Datasheet("H100 SXM", 67 * TERA, 989 / 2 * TERA, 1979 / 2 * TERA,
                          1979 / 2 * TERA, 3958 / 2 * TERA, 3.35 * TERA, 64 * GIGA,
                          900 * GIGA, _H100),
    "H100 PCIe": Datasheet("H100 PCIe", 51 * TERA, 756 / 2 * TERA, 1513 / 2 * TERA,
                           1513 / 2 * TERA, 3026 / 2 * TERA, 2.0 * TERA, 64 * GIGA,
                           600 * GIGA,  # NVIDIA's H100 PCIe product brief, PB-11133-001
                           "https://www.nvidia.com/content/dam/en-zz/Solutions/gtcs22/"
                           "data-center/h100/PB-11133-001_v01.pdf"),
    "A100 SXM 80GB": Datasheet("A100 SXM 80GB", 19.5 * TERA, 156 * TERA, 312 * TERA,
                               312 * TERA, None, 2.039 * TERA, 32 * GIGA, 600 * GIGA, _A100),
    "A100 SXM 40GB": Datasheet("A100 SXM 40GB", 19.5 * TERA, 156 * TERA, 312 * TERA,
                               312 * TERA, None, 1.555 * TERA, 32 * GIGA, 600 * GIGA, _A100),
    "A100 PCIe 80GB": Datasheet("A100 PCIe 80GB", 19.5 * TERA, 156 * TERA, 312 * TERA,
                                312 * TERA, None, 1.935 * TERA, 32 * GIGA, 600 * GIGA, _A100),
    "A100 PCIe 40GB": Datasheet("A100 PCIe 40GB", 19.5 * TERA, 156 * TERA, 312 * TERA,
                                312 * TERA, None, 1.555 * TERA, 32 * GIGA, 600 * GIGA, _A100),
    "L4": Datasheet("L4", 30.3 * TERA, 120 / 2 * TERA, 242 / 2 * TERA, 242 / 2 * TERA,
                    485 / 2 * TERA, 300 * GIGA, 32 * GIGA, None,
                    "https://www.nvidia.com/en-us/data-center/l4/"),
    # the V100 sheet's 32 GB/s PCIe figure is the PCIe card's; an SXM2 module's host link
    # is the same PCIe 3.0 x16 (16 GB/s a direction)
    "V100 SXM2": Datasheet("V100 SXM2", 15.7 * TERA, None, None, 125 * TERA, None,
                           900 * GIGA, 16 * GIGA, 300 * GIGA,
                           "https://images.nvidia.com/content/technologies/volta/pdf/"
                           "volta-v100-datasheet-update-us-1165301-r5.pdf"),
    "T4": Datasheet("T4", 8.1 * TERA, None, None, 65 * TERA, None, 320 * GIGA, 16 * GIGA, None,
                    "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/tesla-t4/"
                    "t4-tensor-core-datasheet-951643.pdf"),
}

#: How reported names map to rows (first match wins; NVL and other variants are not here).
_PATTERNS = [
    (r"\bH200\b(?!.*\bNVL\b)", "H200 SXM"),
    (r"\bH100\b.*\bPCIe\b", "H100 PCIe"),
    (r"\bH100\b.*\b(?:SXM\d*|HBM3)\b", "H100 SXM"),
    (r"\bA100\b.*\bSXM.*80\s?GB", "A100 SXM 80GB"),
    (r"\bA100\b.*\bSXM", "A100 SXM 40GB"),
    (r"\bA100\b.*80\s?GB.*\bPCIe\b|\bA100\b.*\bPCIe\b.*80\s?GB", "A100 PCIe 80GB"),
    (r"\bA100\b.*\bPCIE?\b", "A100 PCIe 40GB"),
    (r"\bL4\b", "L4"),
    (r"\bV100\b.*\bSXM2\b", "V100 SXM2"),
    (r"\bT4\b", "T4"),
]


def for_gpu(name: str) -> Datasheet | None:
    """The datasheet row of a GPU by the name it reports (``"NVIDIA H100 80GB HBM3"``,
    ``"NVIDIA A100-SXM4-80GB"``, ``"Tesla T4"``), or ``None`` if the table lacks it; also
    ``None`` for a MIG slice (``"... MIG 1g.10gb"``), which has a fraction of the GPU."""
    if re.search(r"\bMIG\b", name):
        return None  # a MIG slice has a fraction of the GPU's units and bandwidth
    for pattern, key in _PATTERNS:
        if re.search(pattern, name, re.I):
            return SHEETS[key]
    return None
