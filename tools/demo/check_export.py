#!/usr/bin/env python3
"""Sanity checks of an exported demo model directory (CPU, seconds).

  python3 tools/demo/check_export.py --model models/rag-tiny --test models/rag-tiny/eval/test.jsonl

1. config.json is classic Llama-3.1 style and transformers reads its llama3 rope scaling:
   inv_freq equals the Llama-3.1 formula computed here independently.
2. Block-mask invariance (the LazyAttention premise): under the block mask, the hidden
   states of a document at positions S_d.. equal those of the document encoded alone at
   positions 0.. (RoPE is relative), and do not depend on the other documents.
3. With the block mask, the final block's logits equal those of a KV-cached run in which
   every document's K/V was computed alone at its own contiguous positions.
"""
import argparse
import json
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train import attn_mask, collate, load_jsonl, tokenize_example  # noqa: E402


def llama3_inv_freq(cfg):
    hd = cfg["head_dim"]
    base = cfg["rope_theta"]
    rs = cfg["rope_scaling"]
    inv = [1.0 / base ** (2 * i / hd) for i in range(hd // 2)]
    lo_wl = rs["original_max_position_embeddings"] / rs["low_freq_factor"]
    hi_wl = rs["original_max_position_embeddings"] / rs["high_freq_factor"]
    out = []
    for f in inv:
        wl = 2 * math.pi / f
        if wl < hi_wl:
            out.append(f)
        elif wl > lo_wl:
            out.append(f / rs["factor"])
        else:
            s = (rs["original_max_position_embeddings"] / wl - rs["low_freq_factor"]) / (
                rs["high_freq_factor"] - rs["low_freq_factor"])
            out.append((1 - s) * f / rs["factor"] + s * f)
    return torch.tensor(out, dtype=torch.float64)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--test", required=True)
    a = ap.parse_args()
    from tokenizers import Tokenizer
    from transformers import LlamaForCausalLM
    cfg = json.load(open(os.path.join(a.model, "config.json")))
    assert cfg["rope_scaling"]["rope_type"] == "llama3" and "rope_theta" in cfg
    model = LlamaForCausalLM.from_pretrained(a.model, dtype=torch.float32, attn_implementation="sdpa").eval()
    tok = Tokenizer.from_file(os.path.join(a.model, "tokenizer.json"))
    got = model.model.rotary_emb.inv_freq.double()
    want = llama3_inv_freq(cfg)
    err = (got - want).abs().max().item() / want.abs().max().item()
    print(f"rope llama3 inv_freq max rel err {err:.2e}")
    assert err < 1e-5, err

    ex = load_jsonl(a.test, 1)[0]
    d = collate([tokenize_example(tok, ex, with_answer=True)], tok.token_to_id("<|pad|>"))
    fin = int(d["bid"].max())  # the question block
    with torch.no_grad():
        m = attn_mask(d["bid"], d["isq"], True, torch.float32)
        h = model.model(input_ids=d["ids"], attention_mask=m, position_ids=d["pos"]).last_hidden_state[0]
        worst = 0.0
        for b in range(1, fin):
            idx = (d["bid"][0] == b).nonzero().flatten()
            alone = model.model(input_ids=d["ids"][:, idx],
                                position_ids=torch.arange(len(idx))[None]).last_hidden_state[0]
            worst = max(worst, (alone - h[idx]).abs().max().item())
        print(f"block invariance: doc hidden states, in place vs alone at 0..L-1: max abs diff {worst:.2e}")
        assert worst < 1e-3, worst

        # final block through a KV cache of per-document K/V at contiguous positions
        from transformers import DynamicCache
        cache = DynamicCache(config=model.config)
        start = 0
        n_final = 0
        for b in range(fin + 1):
            idx = (d["bid"][0] == b).nonzero().flatten()
            L = len(idx)
            pos = torch.arange(start, start + L)[None]
            if b < fin:
                # encode alone (own K/V only), then append to the shared cache
                c = DynamicCache(config=model.config)
                model.model(input_ids=d["ids"][:, idx], position_ids=pos, past_key_values=c, use_cache=True)
                for li in range(len(c.layers)):
                    cache.update(c.layers[li].keys, c.layers[li].values, li)
            else:
                out = model(input_ids=d["ids"][:, idx], position_ids=pos, past_key_values=cache,
                            attention_mask=torch.ones(1, start + L, dtype=torch.long), use_cache=True)
                n_final = L
            start += L
        ref = model.lm_head(h[-n_final:])
        diff = (out.logits[0] - ref).abs().max().item()
        print(f"cached per-document K/V vs block-mask forward: final-block logits max abs diff {diff:.2e}")
        assert diff < 1e-3, diff
    print("check_export: OK")


if __name__ == "__main__":
    main()
