#!/usr/bin/env python3
"""What encoding documents with the preamble visible would win back on a model trained
without block fine-tuning (issue 30's next step; bench/GPU_NOTES.md "Selected recovery on
the H200"). Teacher-forced exact match (every answer token the argmax, as train.py's
validation) of the first N test questions under three encodings of the documents:

  full   plain causal attention over preamble, documents and question (recompute)
  block  each document alone at local positions 0..L-1 (lazy / block / mepic today)
  pre    each document after the preamble at positions P..P+L-1, seeing the preamble and
         itself only: what a document cache keyed by the preamble would hold

For block and pre the context's keys are then re-rotated from their encoding positions to
their places in the request (R(delta) R(p) k = R(p + delta) k, BlockAttention's copy, which
lazy's query de-rotation equals) and the question runs over them with HF's KV cache: two
forwards per question, float32, on the CPU.

  python3 tools/demo/preamble_em.py MODEL_DIR [N=300] [MODES=full block pre]

On the ordinarily-trained model of bench/results/causal_h200_e18dc7b (not shipped; made by
tools/demo/device_causal.sh), 300 questions: full 46.3%, block 34.7%, pre 40.7%: the
preamble alone wins back half of what the block encoding loses, with nothing recomputed
per request.
"""
import os
import sys

import torch
from tokenizers import Tokenizer
from transformers import DynamicCache, LlamaForCausalLM
from transformers.models.llama.modeling_llama import rotate_half

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_data  # noqa: E402
import train  # noqa: E402

NEG = torch.finfo(torch.float32).min


@torch.no_grad()
def answer_right(model, tok, example, mode):
    t = train.tokenize_example(tok, example)
    ids, bid, isq, lab = t["ids"], t["bid"], t["isq"], t["labels"]
    n = sum(1 for q in isq if not q)  # context tokens: preamble (block 0) and documents
    n_pre = bid.count(0)
    pos, start = [], {}
    for i in range(n):
        local = i - start.setdefault(bid[i], i)
        pos.append(i if mode == "full" else local if (mode == "block" or bid[i] == 0) else n_pre + local)
    allowed = torch.zeros(n, n, dtype=torch.bool)
    for q in range(n):
        for k in range(q + 1):
            allowed[q, k] = mode == "full" or bid[k] == bid[q] or (mode == "pre" and bid[k] == 0)
    mask = torch.zeros(1, 1, n, n).masked_fill_(~allowed[None, None], NEG)
    cache = DynamicCache()
    model.model(input_ids=torch.tensor([ids[:n]]), attention_mask=mask, position_ids=torch.tensor([pos]),
                past_key_values=cache, use_cache=True)
    cos, sin = model.model.rotary_emb(torch.zeros(1, 1, 1), torch.tensor([[i - p for i, p in enumerate(pos)]]))
    for layer in cache.layers:
        layer.keys = layer.keys * cos[:, None] + rotate_half(layer.keys) * sin[:, None]
    nq = len(ids) - n
    mq = torch.zeros(1, 1, nq, n + nq)
    mq[0, 0, :, n:] = torch.triu(torch.full((nq, nq), NEG), 1)
    logits = model(input_ids=torch.tensor([ids[n:]]), attention_mask=mq,
                   position_ids=torch.arange(n, n + nq)[None], past_key_values=cache).logits[0]
    labels = torch.tensor(lab[n:])
    return bool(((logits.argmax(-1) == labels) | (labels == -100)).all())


def main():
    model_dir = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 300
    modes = sys.argv[3:] or ["full", "block", "pre"]
    tok = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
    model = LlamaForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    examples = [gen_data.format_answers(e, "plain")
                for e in train.load_jsonl(os.path.join(model_dir, "eval", "test.jsonl"), n)]
    for mode in modes:
        em = sum(answer_right(model, tok, e, mode) for e in examples) / len(examples)
        print(f"{mode:6s} {100 * em:.1f}% of {len(examples)}", flush=True)


if __name__ == "__main__":
    main()
