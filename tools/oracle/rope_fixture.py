#!/usr/bin/env python3
"""Dump transformers' RoPE inverse frequencies for a few Llama config.json files.

The fixture checks la_rope_inv_freq (src/model/config.c) bit for bit. Each case holds
the config.json text our loader reads and the float32 bit patterns of
LlamaRotaryEmbedding(config).inv_freq, computed by transformers on CPU after loading the
same config.json with AutoConfig.from_pretrained.

Regenerate (from the repository root):
    python3 tools/oracle/rope_fixture.py > tests/fixtures/rope/inv_freq.json
"""
import json
import sys
import tempfile

import numpy as np
import torch
import transformers
from transformers import AutoConfig
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

BASE = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "vocab_size": 1000,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "rms_norm_eps": 1e-5,
    "hidden_act": "silu",
}

LLAMA3_SCALING = {"factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                  "original_max_position_embeddings": 8192}

CASES = [
    # transformers 4 spelling: top-level rope_theta, rope_scaling dict or null.
    ("llama2_default_theta1e4_dim128",
     {"hidden_size": 4096, "num_attention_heads": 32, "rope_theta": 10000.0,
      "rope_scaling": None, "max_position_embeddings": 4096}),
    ("llama3_8b_default_theta5e5_dim128",
     {"hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,
      "rope_theta": 500000.0, "max_position_embeddings": 8192}),
    ("llama3.2_1b_llama3_factor32_dim64",
     {"hidden_size": 2048, "num_attention_heads": 32, "num_key_value_heads": 8,
      "head_dim": 64, "rope_theta": 500000.0, "max_position_embeddings": 131072,
      "rope_scaling": dict(LLAMA3_SCALING, rope_type="llama3")}),
    ("llama3.1_8b_llama3_factor8_legacy_type_key",
     {"hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,
      "rope_theta": 500000.0, "max_position_embeddings": 131072,
      "rope_scaling": dict(LLAMA3_SCALING, factor=8.0, type="llama3")}),
    ("linear_factor4_legacy_type_key_dim128",
     {"hidden_size": 4096, "num_attention_heads": 32, "rope_theta": 10000.0,
      "max_position_embeddings": 16384, "rope_scaling": {"type": "linear", "factor": 4.0}}),
    # transformers 5 spelling: rope_parameters holds rope_theta too.
    ("tf5_rope_parameters_llama3_odd_factors_dim32",
     {"hidden_size": 256, "num_attention_heads": 8, "num_key_value_heads": 2,
      "max_position_embeddings": 65536,
      "rope_parameters": {"rope_type": "llama3", "rope_theta": 100000.0, "factor": 16.0,
                          "low_freq_factor": 2.0, "high_freq_factor": 8.0,
                          "original_max_position_embeddings": 4096}}),
    ("tf5_rope_parameters_linear_factor2.5_dim80",
     {"hidden_size": 640, "num_attention_heads": 8, "max_position_embeddings": 8192,
      "rope_parameters": {"rope_type": "linear", "rope_theta": 1000000.0, "factor": 2.5}}),
    ("tf5_rope_parameters_default_dim96",
     {"hidden_size": 768, "num_attention_heads": 8, "head_dim": 96,
      "max_position_embeddings": 2048,
      "rope_parameters": {"rope_type": "default", "rope_theta": 250000.0}}),
]


def inv_freq_bits(config_json):
    with tempfile.TemporaryDirectory() as d:
        with open(f"{d}/config.json", "w") as fp:
            json.dump(config_json, fp)
        cfg = AutoConfig.from_pretrained(d)
    inv = LlamaRotaryEmbedding(cfg).inv_freq
    assert inv.dtype == torch.float32
    return [int(b) for b in inv.numpy().view(np.uint32)]


def main():
    cases = []
    for name, fields in CASES:
        config_json = dict(BASE, **fields)
        bits = inv_freq_bits(config_json)
        cases.append({"name": name, "config": config_json, "inv_freq_bits": bits})
    out = {
        "_regenerate": "python3 tools/oracle/rope_fixture.py > tests/fixtures/rope/inv_freq.json",
        "_source": "transformers LlamaRotaryEmbedding(AutoConfig.from_pretrained(dir)).inv_freq "
                   "on CPU; inv_freq_bits are float32 bit patterns",
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "cases": cases,
    }
    json.dump(out, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
