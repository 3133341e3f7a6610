#!/usr/bin/env python3
"""Evaluate an exported model with HF transformers on the RAG test set (the oracle numbers).

  python3 tools/demo/eval_hf.py --model models/rag-tiny --test models/rag-tiny/eval/test.jsonl \
      --out models/rag-tiny/eval/hf_results.json [--n 1000] [--orders 3] [--device cuda]

Greedy decoding, at most 32 new tokens, stop at an eos id. Two attention masks:
  block  block-diagonal over preamble and documents, the final block (question and the
         generated tokens) attends to everything before it; positions 0..N-1, no padding
  full   plain causal attention over the same tokens and positions
Each under --orders document orders: order 0 is the file's order, order k > 0 a
permutation seeded by (k, id) (stored in the results). Exact match (EM): gold answer,
normalized (lower case, no punctuation, no articles a/an/the, single spaces), contained
in the normalized generated answer. The model runs in float32 (weights as stored).
"""
import argparse
import json
import os
import random
import re
import string
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_data import ONE_HOP  # noqa: E402
from train import attn_mask, collate, load_jsonl, safe_sdpa, tokenize_example  # noqa: E402


def normalize(s):
    s = s.lower()
    s = "".join(ch for ch in s if ch not in set(string.punctuation))
    s = re.sub(r"\b(a|an|the)\b", " ", s)
    return " ".join(s.split())


def em(pred, answers):
    p = normalize(pred)
    return any(normalize(a) in p for a in answers if normalize(a))


def permutation(k, ex_id, n):
    perm = list(range(n))
    if k > 0:
        random.Random(f"order{k}/{ex_id}").shuffle(perm)
    return perm


@torch.no_grad()
def greedy(model, tok, examples, block, dev, max_new=32, bs=128):
    """Returns list of (text, ids) per example."""
    pad = tok.token_to_id("<|pad|>")
    eos = set(model.config.eos_token_id if isinstance(model.config.eos_token_id, list)
              else [model.config.eos_token_id])
    out = [None] * len(examples)
    for s in range(0, len(examples), bs):
        chunk = examples[s:s + bs]
        base = [tokenize_example(tok, e, with_answer=False) for e in chunk]
        gen = [[] for _ in chunk]
        done = [False] * len(chunk)
        for _ in range(max_new):
            items = []
            for x, g in zip(base, gen):
                items.append({"ids": x["ids"] + g, "bid": x["bid"] + [x["bid"][-1]] * len(g),
                              "pos": x["pos"] + list(range(x["pos"][-1] + 1, x["pos"][-1] + 1 + len(g))),
                              "isq": x["isq"] + [True] * len(g), "labels": x["labels"] + [-100] * len(g)})
            d = collate(items, pad, left_pad=True)
            d = {k: v.to(dev) for k, v in d.items()}
            m = attn_mask(d["bid"], d["isq"], block, torch.float32)
            with safe_sdpa():
                h = model.model(input_ids=d["ids"], attention_mask=m, position_ids=d["pos"]).last_hidden_state
            nxt = model.lm_head(h[:, -1]).argmax(-1).tolist()
            for i, t in enumerate(nxt):
                if done[i]:
                    continue
                if t in eos:
                    done[i] = True
                else:
                    gen[i].append(t)
            if all(done):
                break
        for i, g in enumerate(gen):
            out[s + i] = (tok.decode(g, skip_special_tokens=True), g)
    return out


def summarize(rows, key):
    def rate(sel):
        sel = list(sel)
        return round(100.0 * sum(sel) / max(len(sel), 1), 2)
    r = {"em": rate(x[key] for x in rows),
         "em_1hop": rate(x[key] for x in rows if x["hops"] == 1),
         "em_2hop": rate(x[key] for x in rows if x["hops"] == 2),
         "by_type": {}}
    for t in sorted({x["type"] for x in rows}):
        r["by_type"][t] = rate(x[key] for x in rows if x["type"] == t)
    return r


def markdown(results, n):
    lines = [f"| mask | EM (n={n}) | 1-hop | 2-hop | EM per order (0 / 1 / 2) | answers unchanged over orders |",
             "|---|---|---|---|---|---|"]
    for mode in ("block", "full"):
        r = results[mode]
        lines.append(f"| {mode} | {r['em']:.1f} | {r['em_1hop']:.1f} | {r['em_2hop']:.1f} | "
                     + " / ".join(f"{x:.1f}" for x in r["em_by_order"])
                     + f" | {r['answers_unchanged_rate']:.1f} |")
    lines += ["", "| type | hops | block EM | full EM |", "|---|---|---|---|"]
    for t in results["block"]["by_type"]:
        lines.append(f"| {t} | {1 if t in ONE_HOP else 2} | {results['block']['by_type'][t]:.1f} | "
                     f"{results['full']['by_type'][t]:.1f} |")
    return "\n".join(lines)


def update_card(card, table, train_log):
    text = open(card).read()
    b, e = "<!-- eval:begin -->", "<!-- eval:end -->"
    if b not in text or e not in text:
        print(f"{card}: no eval markers, not updated")
        return
    body = table
    if os.path.exists(train_log):
        t = json.load(open(train_log))
        last = [r for r in t["log"] if "val_tf_em_block" in r]
        body = (f"Training run: {t['steps']} steps x {t['args']['batch']} examples "
                f"({t['steps'] * t['args']['batch']:,} examples) in {t['train_seconds']:.0f} s, "
                f"{t['params'] / 1e6:.2f}M parameters, {t.get('skipped_steps', 0)} updates skipped "
                f"(non-finite)" + (f"; teacher-forced validation EM at the end: block "
                f"{100 * last[-1]['val_tf_em_block']:.1f}%, full {100 * last[-1]['val_tf_em_full']:.1f}%"
                if last else "") + ".\n\n" + table)
    text = text[:text.index(b) + len(b)] + "\n" + body + "\n" + text[text.index(e):]
    with open(card, "w") as f:
        f.write(text)
    print(f"{card}: evaluation section updated")


def check_tokenizer(model_dir, tok, examples):
    """The shipped tokenizer files load in transformers and agree with tokenizers."""
    from transformers import AutoTokenizer
    from prompt import prompt_blocks
    ht = AutoTokenizer.from_pretrained(model_dir)
    for e in examples[:20]:
        for b in prompt_blocks(e["question"], e["documents"]):
            assert ht.encode(b, add_special_tokens=False) == tok.encode(b, add_special_tokens=False).ids
    ids = ht.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True)
    if hasattr(ids, "keys"):
        ids = ids["input_ids"]
    text = ht.decode(ids)
    assert text == ("<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>"
                    "<|start_header_id|>assistant<|end_header_id|>\n\n"), text
    assert ht.eos_token == "<|eot_id|>" and ht.pad_token == "<|pad|>"
    return True


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--test", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--n", type=int, default=0, help="first N questions (0 = all)")
    ap.add_argument("--orders", type=int, default=3)
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--card", default=None, help="README.md whose <!-- eval:begin/end --> part is "
                    "replaced by the tables (and the training summary from eval/train_log.json)")
    a = ap.parse_args()

    from tokenizers import Tokenizer
    from transformers import LlamaForCausalLM
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device(a.device)
    tok = Tokenizer.from_file(os.path.join(a.model, "tokenizer.json"))
    model = LlamaForCausalLM.from_pretrained(a.model, dtype=torch.float32,
                                             attn_implementation="sdpa").to(dev).eval()
    exs = load_jsonl(a.test, a.n or None)
    tok_ok = check_tokenizer(a.model, tok, exs)
    t0 = time.time()
    rows = [{"id": e["id"], "type": e["type"], "hops": e["hops"], "answers": e["answers"]} for e in exs]
    for mode in ("block", "full"):
        for k in range(a.orders):
            perm_exs = []
            for e, r in zip(exs, rows):
                perm = permutation(k, e["id"], len(e["documents"]))
                if k > 0 and mode == "block":
                    r.setdefault("orders", {})[str(k)] = perm
                perm_exs.append(dict(e, documents=[e["documents"][j] for j in perm]))
            res = greedy(model, tok, perm_exs, mode == "block", dev, a.max_new_tokens, a.batch)
            for r, (text, ids) in zip(rows, res):
                r.setdefault(f"{mode}_answers", []).append(text)
                if k == 0:
                    r[mode] = text
                    r[f"{mode}_ids"] = ids
                    r[f"{mode}_em"] = em(text, r["answers"])
            print(f"{mode} order {k}: {time.time() - t0:.0f}s", flush=True)
        for r in rows:
            ans = r[f"{mode}_answers"]
            r[f"{mode}_unchanged"] = all(x == ans[0] for x in ans)
            r[f"{mode}_em_all_orders"] = [em(x, r["answers"]) for x in ans]
    results = {}
    for mode in ("block", "full"):
        s = summarize(rows, f"{mode}_em")
        s["em_by_order"] = [round(100.0 * sum(r[f"{mode}_em_all_orders"][k] for r in rows) / len(rows), 2)
                            for k in range(a.orders)]
        s["answers_unchanged_rate"] = round(100.0 * sum(r[f"{mode}_unchanged"] for r in rows) / len(rows), 2)
        results[mode] = s
    per_q = []
    for r in rows:
        per_q.append({"id": r["id"], "type": r["type"], "hops": r["hops"], "answers": r["answers"],
                      "block": r["block"], "block_ids": r["block_ids"], "block_em": r["block_em"],
                      "block_orders": r["block_answers"], "block_perms": r.get("orders", {}),
                      "full": r["full"], "full_em": r["full_em"]})
    out = {
        "model": os.path.basename(os.path.normpath(a.model)),
        "test_file": os.path.basename(a.test),
        "n_questions": len(rows),
        "decoding": f"greedy, max {a.max_new_tokens} new tokens, stop at eos ids {model.config.eos_token_id}",
        "compute": "HF transformers LlamaForCausalLM, float32 (bf16 weights upcast), sdpa with 4-D mask",
        "em_definition": "normalized gold (lower case, no punctuation, no a/an/the) contained in normalized output",
        "orders": "order 0 = file order; order k>0: random.Random(f'order{k}/{id}').shuffle(list(range(n_docs))), "
                  "documents[perm[i]] in slot i (perms stored per question as block_perms)",
        "tokenizer_check": tok_ok,
        "results": results,
        "per_question": per_q,
    }
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(out, f, indent=None, ensure_ascii=False)
        f.write("\n")
    table = markdown(results, len(rows))
    print(table)
    if a.card:
        update_card(a.card, table, os.path.join(os.path.dirname(os.path.abspath(a.out)), "train_log.json"))
    print(f"eval done in {time.time() - t0:.0f}s -> {a.out}")


if __name__ == "__main__":
    main()
