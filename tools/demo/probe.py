#!/usr/bin/env python3
"""Probe what the demo model can and cannot do on the two-hop questions.

  python3 tools/demo/probe.py --model models/rag-tiny [--n 96] [--answer-format F]

1. Teacher-forced exact match (train.teacher_forced_em, block mask) on fresh
   training-distribution examples of each two-hop type and of the training-only
   scaffolds (gen_data.AUX_TYPES): order_years (compare two years written in the question),
   compare_*_given with both years / one year written after the names; answers written
   in --answer-format (the model's training format).
2. For the held-out comparisons in <model>/eval/hf_results.json whose answers start with a
   year ("<year>: <name>", --year-first training): is the year the deciding one, and is
   the name the one that has that year?

CPU is enough (10.6M parameters; about 2 minutes on 2 cores)."""
import argparse
import collections
import json
import os
import re
import sys

import torch
from tokenizers import Tokenizer
from transformers import LlamaForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_data  # noqa: E402
import train  # noqa: E402

YEAR = re.compile(r"\b(1[89]\d\d|20\d\d)\b")


def teacher_forced(model, tok, n, answer_format):
    dev = torch.device("cpu")
    out = {}
    for t in ["order_years", "compare_film_given", "compare_birth_given", "compare_film",
              "compare_birth", "director_birthplace", "director_birthdate", "director_country"]:
        exs = [gen_data.make_example("train", 900_000_000 + i, qtype=t, fresh_names=True,
                                     answer_format=answer_format) for i in range(n)]
        if t.endswith("_given"):
            for label, k in (("both years", 2), ("one year", 1)):
                sub = [e for e in exs if e["question"].count("(") == k]
                out[f"{t}, {label}"] = (train.teacher_forced_em(model, tok, sub, dev, True, amp=False),
                                        len(sub))
        else:
            out[t] = (train.teacher_forced_em(model, tok, exs, dev, True, amp=False), len(exs))
    return out


def year_first_answers(model_dir):
    res = json.load(open(os.path.join(model_dir, "eval", "hf_results.json")))
    tests = {}
    with open(os.path.join(model_dir, "eval", "test.jsonl")) as f:
        for line in f:
            e = json.loads(line)
            tests[e["id"]] = e
    c = collections.Counter()
    for p in res["per_question"]:
        t = tests[p["id"]]
        if not t["type"].startswith("compare") or ":" not in p["block"] or " vs " in p["block"]:
            continue
        a, b = re.search(r", (.*) or (.*)\?$", t["question"]).groups()
        docs = {d["title"]: d["text"] for d in t["documents"]}
        year = {n: YEAR.search(docs[n]).group(1) for n in (a, b)}
        gold = t["answers"][0]
        said_year, said_name = (x.strip() for x in p["block"].split(":", 1))
        c[(t["type"], "year right" if said_year == year[gold] else "year wrong",
           "name has that year" if year.get(said_name) == said_year else "name does not")] += 1
    return c


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="models/rag-tiny")
    ap.add_argument("--n", type=int, default=96, help="examples per type")
    ap.add_argument("--answer-format", choices=sorted(gen_data.ANSWER_FORMATS), default="plain",
                    help="the answer format the model was trained with (train.py --answer-format)")
    ap.add_argument("--year-first", dest="answer_format", action="store_const", const="year-first")
    a = ap.parse_args()
    tok = Tokenizer.from_file(os.path.join(a.model, "tokenizer.json"))
    model = LlamaForCausalLM.from_pretrained(a.model, torch_dtype=torch.float32).eval()
    print("teacher-forced EM, block mask, fresh training-distribution examples:")
    for k, (em, n) in teacher_forced(model, tok, a.n, a.answer_format).items():
        print(f"  {k:34s} {100 * em:5.1f}%  (n={n})")
    c = year_first_answers(a.model)
    if c:
        print("held-out comparisons answered '<year>: <name>' (hf_results.json, block mask):")
        for k in sorted(c):
            print(f"  {k[0]:14s} {k[1]:10s} {k[2]:20s} {c[k]}")


if __name__ == "__main__":
    main()
