#!/usr/bin/env python3
"""Write a tiny safetensors file with Hugging Face's own `safetensors` library, so the C
reader (src/model/safetensors.c) is tested against the reference writer.

Regenerate (from the repository root):
    python3 tools/oracle/safetensors_fixture.py tests/fixtures/safetensors/hf_tiny.safetensors

Contents (tests/model/test_safetensors.c checks these exact values):
    w  F32  [2, 3]  0, 1, 2, 3, 4, 5
    h  F16  [3]     0.5, -2, 65504
    b  BF16 [2, 2]  1, -1.5, 3.140625, 0
    metadata {"format": "pt"}
"""
import sys

import torch
from safetensors.torch import save_file

tensors = {
    "w": torch.arange(6, dtype=torch.float32).reshape(2, 3),
    "h": torch.tensor([0.5, -2.0, 65504.0], dtype=torch.float16),
    "b": torch.tensor([[1.0, -1.5], [3.140625, 0.0]], dtype=torch.bfloat16),
}
save_file(tensors, sys.argv[1], metadata={"format": "pt"})
