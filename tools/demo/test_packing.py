#!/usr/bin/env python3
"""Check that packing several questions onto one encoding of the documents (training)
trains each question exactly as if it were alone: for a random-initialised model in
float32, the logits at every answer position of a packed example equal those of the
same question in its own single-question example, under the block mask and under full
attention. Runs on the CPU in a few seconds:

  python3 tools/demo/test_packing.py [--tokenizer models/rag-tiny]
"""
import argparse
import os
import sys

import torch
from tokenizers import Tokenizer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_data  # noqa: E402
from train import attn_mask, build_model, collate, model_config, tokenize_example  # noqa: E402


def logits_at_labels(model, d, block):
    m = attn_mask(d["bid"], d["isq"], block, torch.float32)
    h = model.model(input_ids=d["ids"], attention_mask=m, position_ids=d["pos"]).last_hidden_state
    sel = d["labels"] != -100
    return model.lm_head(h[sel]), d["labels"][sel]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokenizer", default=os.path.join(os.path.dirname(__file__), "../../models/rag-tiny"))
    a = ap.parse_args()
    tok = Tokenizer.from_file(os.path.join(a.tokenizer, "tokenizer.json"))
    pad = tok.token_to_id("<|pad|>")
    args = argparse.Namespace(hidden=128, ffn=256, layers=2, heads=4, kv_heads=2)
    torch.manual_seed(0)
    model = build_model(model_config(tok, args)).eval()
    worst = 0.0
    n_q = 0
    with torch.no_grad():
        for i in range(4):
            ex = gen_data.make_example("train", i, n_docs=6, fresh_names=True, n_questions=5)
            qs = ex["questions"]
            assert len(qs) >= 2, "expected several questions"
            packed = [tokenize_example(tok, ex), tokenize_example(tok, dict(ex, questions=qs[:1]))]
            dp = collate(packed, pad)  # two rows: padding is exercised too
            for block in (True, False):
                lp, tp = logits_at_labels(model, dp, block)
                off = 0
                n_first = sum(1 for x in packed[0]["labels"] if x != -100)
                for q in qs:
                    ds = collate([tokenize_example(tok, dict(ex, questions=[q]))], pad)
                    ls, ts = logits_at_labels(model, ds, block)
                    assert torch.equal(tp[off:off + len(ts)], ts), "targets differ"
                    worst = max(worst, (lp[off:off + len(ts)] - ls).abs().max().item())
                    off += len(ts)
                    n_q += 1
                assert off == n_first
                # the second row (one question) is the single example, padded
                l1 = lp[n_first:]
                ds = collate([tokenize_example(tok, dict(ex, questions=qs[:1]))], pad)
                worst = max(worst, (l1 - logits_at_labels(model, ds, block)[0]).abs().max().item())
    print(f"packed vs alone: {n_q} questions, answer logits max abs diff {worst:.2e}")
    assert worst < 1e-4, worst
    # the single-question path is what evaluation uses: val/test records are unchanged
    ex = gen_data.make_example("test", 0)
    x = tokenize_example(tok, ex)
    assert x["isq"].count(True) > 0 and "questions" not in ex
    print("test_packing: OK")


if __name__ == "__main__":
    main()
