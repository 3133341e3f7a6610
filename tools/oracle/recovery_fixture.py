#!/usr/bin/env python3
"""Reference outputs of recovery (src/kv/plan.h "Recovery") computed by HF transformers.

    python3 tools/oracle/recovery_fixture.py [NAME ...]

For each tiny model (none named: all of make_models.MODELS) reads the checkpoint and the
block cases of its oracle.json (tools/oracle/make_models.py) and writes
tests/fixtures/models/<name>/recovery_oracle.json: for N in RECOVERY_N, the tail logits and
the greedy continuation when the first min(N, L_d) tokens of every document d >= 1 are
recomputed in context on top of the documents encoded alone; and for R in RECOVERY_R
(selected recovery, src/kv/plan.h; n_first 0), the same when the round(R x sum_{d>=1} L_d)
tokens of those documents whose layer-1 V moves most in context are recomputed instead.

One HF forward computes it, eager attention, float32, with duplicated tokens and a 4-D mask:
the sequence holds every document as encoded alone, each document's recomputed tokens again
right after it, then the tail. A document's copy sees itself causally (block-diagonal); a
recomputed token of document d sits at S_d + i and sees the documents before it as the tail
sees them (recomputed tokens where there are some, the alone copy past them) and its own
recomputed tokens causally; the tail sees every document so and itself causally. Position ids
are the logical positions (no padding). Selected recovery generalizes the recomputed tokens
from a prefix to any set: a recomputed token sees its own document's final rows up to itself
(recomputed copies where chosen, the alone rows elsewhere). The choice: each token's layer-1
V from full causal attention (layer 0 in context; its K and V do not depend on context) minus
its layer-1 V encoded alone, squared norm, largest first, ties to the earlier token; a case
whose cut falls at a near-tie (relative gap < 1e-3) is left out. Sanity checks: N = 0 gives the block case's logits;
N at least every document's length gives full causal attention; N > 0 differs from both on
cases of three or more segments.
"""

import json
import sys

import torch

import make_models as mm

RECOVERY_N = (1, 5, 16)
RECOVERY_R = (0.25, 0.5)  # exact in f32, as the engine holds R
GREEDY = 8
COMMAND = "python3 tools/oracle/recovery_fixture.py"


def layout(segs, n_first):
    """Token ids, position ids, and the allowed [n, n] matrix of the duplicated sequence;
    also the index of the tail's first row. n_first: N, or a list of each document's
    recomputed token indices (ascending; document 0's empty)."""
    docs, tail = segs[:-1], segs[-1]
    ids, pos = [], []
    final = []          # per document: the row of each of its tokens as later tokens see it
    allowed_rows = []   # per row: the set of rows it sees (filled below)
    start = 0
    for d, doc in enumerate(docs):
        alone = list(range(len(ids), len(ids) + len(doc)))
        for i, t in enumerate(doc):
            ids.append(t)
            pos.append(start + i)
            allowed_rows.append(set(alone[:i + 1]))
        if isinstance(n_first, int):
            chosen = list(range(min(n_first, len(doc)))) if d > 0 else []
        else:
            chosen = list(n_first[d])
        row_of = list(alone)  # document token -> the row later tokens see
        for i in chosen:
            row_of[i] = len(ids) + chosen.index(i)
        before = [row for f in final for row in f]
        for i in chosen:
            ids.append(doc[i])
            pos.append(start + i)
            allowed_rows.append(set(before) | set(row_of[:i + 1]))
        final.append(row_of)
        start += len(doc)
    t0 = len(ids)
    before = [row for f in final for row in f]
    for i, t in enumerate(tail):
        ids.append(t)
        pos.append(start + i)
        allowed_rows.append(set(before) | set(range(t0, t0 + i + 1)))
    n = len(ids)
    allowed = torch.zeros(n, n, dtype=torch.bool)
    for q, ks in enumerate(allowed_rows):
        allowed[q, sorted(ks)] = True
    return ids, pos, allowed, t0


@torch.no_grad()
def recovery_logits(model, segs, n_first):
    ids, pos, allowed, t0 = layout(segs, n_first)
    mask = torch.zeros(allowed.shape, dtype=torch.float32)
    mask.masked_fill_(~allowed, torch.finfo(torch.float32).min)
    out = model(input_ids=torch.tensor([ids]), attention_mask=mask[None, None],
                position_ids=torch.tensor([pos]), use_cache=False)
    return out.logits[0, t0:].float()


@torch.no_grad()
def layer1_v(model, ids, mask=None, pos=None):
    """Layer 1's V rows (v_proj of its input norm) of a forward over ids."""
    kw = dict(input_ids=torch.tensor([ids]), output_hidden_states=True, use_cache=False)
    if mask is not None:
        kw.update(attention_mask=mask[None, None], position_ids=torch.tensor([pos]))
    h = model(**kw).hidden_states[1][0]
    layer = model.model.layers[1]
    return layer.self_attn.v_proj(layer.input_layernorm(h)).float()


def select(model, segs, ratio):
    """Selected recovery's choice: per document, its recomputed token indices; None when the
    cut is a near-tie."""
    docs = segs[:-1]
    ids, pos, allowed, _ = layout(segs, 0)
    mask = torch.zeros(allowed.shape, dtype=torch.float32)
    mask.masked_fill_(~allowed, torch.finfo(torch.float32).min)
    alone = layer1_v(model, ids, mask, pos)
    ctx = layer1_v(model, [t for s in segs for t in s])
    n0 = len(docs[0])
    n_all = sum(len(d) for d in docs[1:])
    dev = ((ctx[n0:n0 + n_all] - alone[n0:n0 + n_all]) ** 2).sum(-1).tolist()
    return pick_rows(dev, docs, ratio)


def pick_rows(dev, docs, ratio):
    """Selected recovery's choice from the later documents' tokens' distances dev (in order):
    the round(ratio x n) largest, ties to the earlier token, as row lists per document
    (document 0 none); None when the cut falls on a near tie (the f32 engine could pick
    either side)."""
    n_all = len(dev)
    k = max(1, int(ratio * n_all + 0.5))  # the engine's llround
    order = sorted(range(n_all), key=lambda j: (-dev[j], j))
    if k < n_all:
        a, b = dev[order[k - 1]], dev[order[k]]
        if a - b < 1e-3 * max(a, 1e-12):
            return None
    pick = set(order[:k])
    out, at = [[]], 0
    for d in docs[1:]:
        out.append([i for i in range(len(d)) if at + i in pick])
        at += len(d)
    return out


def greedy(model, segs, n_first, steps):
    segs = [list(s) for s in segs]
    out, margins = [], []
    for _ in range(steps):
        row = recovery_logits(model, segs, n_first)[-1]
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
        block = torch.tensor(c["logits"])
        zero = recovery_logits(model, segs, 0)
        assert (zero - block).abs().max().item() <= 1e-5, f"{name} {c['name']}: N = 0 is not the block case"
        all_ids = [t for s in segs for t in s]
        t0 = len(all_ids) - len(segs[-1])
        full = recovery_logits(model, segs, max(len(s) for s in segs))
        causal = mm.causal_logits(model, all_ids)[t0:]
        assert (full - causal).abs().max().item() <= 1e-5, f"{name} {c['name']}: N = all is not causal"
        for n in RECOVERY_N:
            logits = recovery_logits(model, segs, n)
            if len(segs) > 2:
                assert (logits - block).abs().max().item() > 1e-4, f"{name} {c['name']} N {n}: recovery changed nothing"
            g, mg = greedy(model, segs, n, GREEDY)
            if mg < mm.MIN_MARGIN:
                print(f"{name} {c['name']} N {n}: greedy margin {mg:.3g} too small, case left out")
                continue
            cases.append({"name": c["name"], "n_first": n, "segments": segs, "logits": logits, "greedy": g})
        if len(segs) < 3:
            continue
        for r in RECOVERY_R:
            rows = select(model, segs, r)
            if rows is None:
                print(f"{name} {c['name']} R {r}: the choice's cut is a near-tie, case left out")
                continue
            logits = recovery_logits(model, segs, rows)
            assert (logits - block).abs().max().item() > 1e-4, f"{name} {c['name']} R {r}: recovery changed nothing"
            g, mg = greedy(model, segs, rows, GREEDY)
            if mg < mm.MIN_MARGIN:
                print(f"{name} {c['name']} R {r}: greedy margin {mg:.3g} too small, case left out")
                continue
            cases.append({"name": c["name"], "n_first": 0, "ratio": r, "rows": rows, "segments": segs,
                          "logits": logits, "greedy": g})
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
        out.append(f'      "n_first": {c["n_first"]},')
        if "ratio" in c:
            out.append(f'      "ratio": {c["ratio"]},')
            out.append('      "rows": [' + ",".join(mm.jints(r) for r in c["rows"]) + "],")
        out.append('      "segments": [' + ",".join(mm.jints(s) for s in c["segments"]) + "],")
        out.append(f'      "logits": {mm.jrows(c["logits"][-1:], 8)},')
        out.append(f'      "greedy": {mm.jints(c["greedy"])}')
        out.append("    }" + ("," if i + 1 < len(cases) else ""))
    out.append("  ]")
    out.append("}")
    text = "\n".join(out) + "\n"
    json.loads(text)
    (d / "recovery_oracle.json").write_text(text, encoding="utf-8")
    print(f"{name}: {len(cases)} cases")


def main():
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    names = sys.argv[1:] or [s["name"] for s in mm.MODELS]
    for n in names:
        make(n)


if __name__ == "__main__":
    main()
