#!/usr/bin/env python3
"""Reference outputs of documents computed after the preamble (doc_context PREAMBLE,
src/kv/plan.h "Documents after the preamble") computed by HF transformers.

    python3 tools/oracle/preamble_fixture.py [NAME ...]

For each tiny model (none named: all of make_models.MODELS) reads the checkpoint and the
block cases of its oracle.json with at least two documents and writes
tests/fixtures/models/<name>/preamble_oracle.json: the tail logits and the greedy
continuation when every document d >= 1 is computed after document 0 (the preamble) and
then placed at its slot; and for R in RATIOS, the same with selected recovery on top.

Two forwards, eager attention, float32. The first computes the context: document 0 at
positions 0..P-1, causal; document d >= 1 at positions P..P+L_d-1, seeing document 0 and
itself causally (a 4-D mask). Its K/V cache is then re-rotated to the documents' slots:
each key computed at position p and placed at S_d + i is multiplied by R(S_d + i - p)
(RoPE composes: R(a) R(b) = R(a + b); lazy's query de-rotation by S_d - P equals it). The
second forward runs the tail at positions T.. over that cache. Selected recovery: the
chosen tokens run in the second forward too, before the tail, at their slots S_d + i; a
chosen token sees the documents before its own as the tail sees them and its own document's
tokens up to itself (recomputed rows where chosen, cached elsewhere), and the tail sees the
recomputed rows instead of the cached ones. The choice: each later-document token's layer-1
V from full causal attention minus its layer-1 V computed after the preamble, squared norm,
largest first, ties to the earlier token, round(R x n) of them; a cut at a near-tie
(relative gap < 1e-3) leaves the case out. Sanity checks: R = 1 gives full causal attention;
plain differs from the documents computed alone (the block case).
"""

import json
import sys

import torch
from transformers import DynamicCache
from transformers.models.llama.modeling_llama import rotate_half

import make_models as mm
from recovery_fixture import pick_rows

RATIOS = (0.5,)
GREEDY = 8
COMMAND = "python3 tools/oracle/preamble_fixture.py"
NEG = torch.finfo(torch.float32).min


def context(model, docs):
    """First forward: the documents after document 0; returns the cache re-rotated to the
    slots and layer 1's input rows (for the choice)."""
    ids, pos, seg = [], [], []
    P = len(docs[0])
    for d, doc in enumerate(docs):
        ids += doc
        pos += [(0 if d == 0 else P) + i for i in range(len(doc))]
        seg += [d] * len(doc)
    n = len(ids)
    s = torch.tensor(seg)
    allowed = torch.ones(n, n, dtype=torch.bool).tril() & ((s[:, None] == s[None, :]) | (s[None, :] == 0))
    mask = torch.zeros(1, 1, n, n).masked_fill_(~allowed[None, None], NEG)
    cache = DynamicCache()
    out = model.model(input_ids=torch.tensor([ids]), attention_mask=mask, position_ids=torch.tensor([pos]),
                      past_key_values=cache, use_cache=True, output_hidden_states=True)
    cos, sin = model.model.rotary_emb(torch.zeros(1, 1, 1), torch.tensor([[i - p for i, p in enumerate(pos)]]))
    for layer in cache.layers:
        layer.keys = layer.keys * cos[:, None] + rotate_half(layer.keys) * sin[:, None]
    return cache, out.hidden_states[1][0], n


@torch.no_grad()
def logits(model, segs, rows):
    """Tail logits; rows: per document its recomputed token indices (None: none)."""
    docs, tail = segs[:-1], segs[-1]
    cache, _, n = context(model, docs)
    starts = [sum(len(d) for d in docs[:k]) for k in range(len(docs))]
    chosen = [starts[d] + i for d in range(len(docs)) for i in (rows[d] if rows else [])]
    nc, nq = len(chosen), len(tail)
    remap = torch.arange(n)
    if nc:
        remap[torch.tensor(chosen)] = n + torch.arange(nc)
    vis = torch.zeros(nc + nq, n + nc + nq, dtype=torch.bool)
    if nc:
        ok = torch.arange(n)[None, :] <= torch.tensor(chosen)[:, None]
        vis[:nc].scatter_(1, remap[None, :].expand(nc, n), ok)
    vis[nc:].scatter_(1, remap[None, :].expand(nq, n), torch.ones(nq, n, dtype=torch.bool))
    vis[nc:, n + nc:] = torch.ones(nq, nq, dtype=torch.bool).tril()
    mask = torch.zeros(1, 1, nc + nq, n + nc + nq).masked_fill_(~vis[None, None], NEG)
    ids = [t for d in range(len(docs)) for t in ([docs[d][i] for i in rows[d]] if rows else [])] + list(tail)
    pos = chosen + list(range(n, n + nq))
    out = model(input_ids=torch.tensor([ids]), attention_mask=mask, position_ids=torch.tensor([pos]),
                past_key_values=cache, use_cache=True)
    return out.logits[0, nc:].float()


@torch.no_grad()
def select(model, segs, ratio):
    docs = segs[:-1]
    _, h_pre, n = context(model, docs)
    layer = model.model.layers[1]
    v_pre = layer.self_attn.v_proj(layer.input_layernorm(h_pre)).float()
    ids = [t for d in docs for t in d]
    h_full = model(input_ids=torch.tensor([ids]), output_hidden_states=True, use_cache=False).hidden_states[1][0]
    v_full = layer.self_attn.v_proj(layer.input_layernorm(h_full)).float()
    n0 = len(docs[0])
    dev = ((v_full[n0:] - v_pre[n0:]) ** 2).sum(-1).tolist()
    return pick_rows(dev, docs, ratio)


def greedy(model, segs, rows, steps):
    segs = [list(s) for s in segs]
    out, margins = [], []
    for _ in range(steps):
        row = logits(model, segs, rows)[-1]
        nxt = int(torch.argmax(row))
        margins.append(mm.margin(row))
        out.append(nxt)
        segs[-1].append(nxt)
    return out, min(margins)


def make(name):
    d = mm.OUT_DIR / name
    model, disk = mm.load_for_oracle(d)
    oracle = json.loads((d / "oracle.json").read_text())
    cases = []
    for c in oracle["block_cases"]:
        segs = c["segments"]
        if len(segs) < 3:
            continue
        plain = logits(model, segs, None)
        alone = torch.tensor(c["logits"])
        assert (plain - alone).abs().max().item() > 1e-4, f"{name} {c['name']}: the preamble changed nothing"
        every = [list(range(len(s))) if k > 0 else [] for k, s in enumerate(segs[:-1])]
        all_ids = [t for s in segs for t in s]
        causal = mm.causal_logits(model, all_ids)[len(all_ids) - len(segs[-1]):]
        assert (logits(model, segs, every) - causal).abs().max().item() <= 1e-4, f"{name} {c['name']}: R = 1 is not causal"
        for ratio in (0.0,) + RATIOS:
            rows = select(model, segs, ratio) if ratio > 0 else None
            if ratio > 0 and rows is None:
                print(f"{name} {c['name']} R {ratio}: the choice's cut is a near-tie, case left out")
                continue
            g, mg = greedy(model, segs, rows, GREEDY)
            if mg < mm.MIN_MARGIN:
                print(f"{name} {c['name']} R {ratio}: greedy margin {mg:.3g} too small, case left out")
                continue
            cases.append({"name": c["name"], "ratio": ratio, "rows": rows, "segments": segs,
                          "logits": logits(model, segs, rows), "greedy": g})
    out = ["{"]
    head = {"command": COMMAND, "transformers_version": mm.transformers.__version__,
            "torch_version": torch.__version__, "model": name, "weights_dtype_on_disk": disk,
            "note": __doc__.split("\n\n")[2].replace("\n", " ")}
    for k, v in head.items():
        out.append(f"  {mm.jstr(k)}: {mm.jstr(v)},")
    out.append('  "cases": [')
    for i, c in enumerate(cases):
        out.append("    {")
        out.append(f'      "name": {mm.jstr(c["name"])},')
        out.append(f'      "ratio": {c["ratio"]},')
        if c["rows"]:
            out.append('      "rows": [' + ",".join(mm.jints(r) for r in c["rows"]) + "],")
        out.append('      "segments": [' + ",".join(mm.jints(s) for s in c["segments"]) + "],")
        out.append(f'      "logits": {mm.jrows(c["logits"][-1:], 8)},')
        out.append(f'      "greedy": {mm.jints(c["greedy"])}')
        out.append("    }" + ("," if i + 1 < len(cases) else ""))
    out.append("  ]")
    out.append("}")
    text = "\n".join(out) + "\n"
    json.loads(text)
    (d / "preamble_oracle.json").write_text(text, encoding="utf-8")
    print(f"{name}: {len(cases)} cases")


def main():
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    names = sys.argv[1:] or [s["name"] for s in mm.MODELS]
    for n in names:
        make(n)


if __name__ == "__main__":
    main()
