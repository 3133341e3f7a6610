#!/usr/bin/env python3
"""Train the demo model (a tiny Llama) with Block-Attention fine-tuning, then export it.

  python3 tools/demo/train.py --tokenizer models/rag-tiny --out models/rag-tiny \
      [--batch 64] [--questions 6] [--time-budget 450] [--device cuda] \
      [--init DIR --start-batch K] [--type-weights film_year=3,...]

Most batches encode every document block independently (block-diagonal mask, block 0
and each document causal within themselves; each question block -- question + answer --
attends to the preamble, the documents and itself); --full-frac of the batches use plain
causal attention over the preamble and documents. Each example packs up to --questions
questions onto one encoding of its documents, each at the positions it would have alone
(tools/demo/test_packing.py checks this equals single-question examples). Loss: the
answer tokens (incl. the final <|eot_id|>); --lm-weight adds a language-model loss on the
document tokens. Training example i is gen_data.make_example("train", i,
fresh_names=True, n_questions=--questions): every world's names are drawn fresh.
"""
import argparse
import json
import math
import os
import random
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F
from tokenizers import Tokenizer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_data  # noqa: E402
from prompt import ANSWER_FMT, encode_blocks, prompt_blocks  # noqa: E402


def safe_sdpa():
    """Pin SDPA to the memory-efficient kernel (math as fallback). With an explicit mask,
    PyTorch 2.11's default cuDNN backward on H100/H200 returns NaN in dQ when the sequence
    length is 64 mod 128 and a row's logsumexp is below -88.7 (pytorch/pytorch#196678);
    block masks make such rows (a document's first token sees only itself). The first
    full training run here went NaN at step ~2850 that way."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    return sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH])


def model_config(tok, a):
    """config.json in the classic Llama-3.1 format (rope_theta + rope_scaling)."""
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": tok.get_vocab_size(),
        "hidden_size": a.hidden,
        "intermediate_size": a.ffn,
        "num_hidden_layers": a.layers,
        "num_attention_heads": a.heads,
        "num_key_value_heads": a.kv_heads,
        "head_dim": a.hidden // a.heads,
        "hidden_act": "silu",
        "max_position_embeddings": 8192,
        "rms_norm_eps": 1e-5,
        "rope_theta": 500000.0,
        "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0, "original_max_position_embeddings": 256},
        "attention_bias": False,
        "attention_dropout": 0.0,
        "mlp_bias": False,
        "initializer_range": 0.02,
        "tie_word_embeddings": True,
        "bos_token_id": tok.token_to_id("<|begin_of_text|>"),
        "eos_token_id": [tok.token_to_id("<|end_of_text|>"), tok.token_to_id("<|eot_id|>")],
        "pad_token_id": tok.token_to_id("<|pad|>"),
        "torch_dtype": "bfloat16",
        "use_cache": True,
    }


def build_model(cfg_dict):
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig.from_dict(dict(cfg_dict))
    cfg._attn_implementation = "sdpa"
    return LlamaForCausalLM(cfg)


# ------------------------------------------------------------------ data ----------

_PREAMBLE_IDS = {}


def tokenize_example(tok, ex, with_answer=True):
    """One example as flat token arrays. Blocks: preamble, one per document, then one
    final block per question (ex["questions"] when present, else the example's own),
    each followed by its answer when with_answer. Every question block sits at the
    positions it would have alone (right after the documents) and attends to the
    preamble, the documents and itself, never to another question block, so packing
    several questions onto one encoding of the documents trains each exactly as if it
    were alone.

    Returns a dict of equal-length lists: ids, bid (block index), pos, isq (token of a
    question block), labels (labels[t] = the target of logits[t], -100 = none); and
    ans_start (index of the first question block's first answer token)."""
    qs = ex.get("questions") or [{"question": ex["question"], "answers": ex["answers"]}]
    docs_texts = prompt_blocks(qs[0]["question"], ex["documents"])[:-1]
    key = (id(tok), docs_texts[0])
    if key not in _PREAMBLE_IDS:
        _PREAMBLE_IDS[key] = tok.encode(docs_texts[0], add_special_tokens=False).ids
    q_texts = [prompt_blocks(q["question"], [])[-1] for q in qs]
    a_texts = [ANSWER_FMT.format(answer=q["answers"][0]) for q in qs] if with_answer else []
    enc = encode_blocks(tok, docs_texts[1:] + q_texts + a_texts)
    doc_ids, q_ids, a_ids = enc[:len(docs_texts) - 1], enc[len(docs_texts) - 1:len(docs_texts) - 1 + len(qs)], \
        enc[len(docs_texts) - 1 + len(qs):]
    ids, bid, pos, isq, labels = [], [], [], [], []
    for b, bl in enumerate([_PREAMBLE_IDS[key]] + doc_ids):
        ids += bl
        bid += [b] * len(bl)
    n_ctx = len(ids)
    pos = list(range(n_ctx))
    isq = [False] * n_ctx
    labels = [-100] * n_ctx
    ans_start = None
    for j, qb in enumerate(q_ids):
        blk = qb + (a_ids[j] if with_answer else [])
        ids += blk
        bid += [len(doc_ids) + 1 + j] * len(blk)
        pos += list(range(n_ctx, n_ctx + len(blk)))
        isq += [True] * len(blk)
        lab = [-100] * len(blk)
        if with_answer:
            a0 = len(qb)  # the answer's tokens are predicted from the token before each
            lab[a0 - 1:len(blk) - 1] = blk[a0:]
            if ans_start is None:
                ans_start = n_ctx + a0
        labels += lab
    return {"ids": ids, "bid": bid, "pos": pos, "isq": isq, "labels": labels,
            "ans_start": ans_start if ans_start is not None else len(ids)}


def collate(items, pad_id, left_pad=False):
    """items: tokenize_example dicts. Returns a dict of CPU tensors [B, N]: ids, bid (-1 on
    padding), pos, isq, labels, lm (real non-question tokens t whose next token t+1 is in
    the same block: language-model targets for logits[t])."""
    n = max(len(x["ids"]) for x in items)
    B = len(items)
    ids = np.full((B, n), pad_id, dtype=np.int64)
    bid = np.full((B, n), -1, dtype=np.int64)
    pos = np.zeros((B, n), dtype=np.int64)
    isq = np.zeros((B, n), dtype=bool)
    labels = np.full((B, n), -100, dtype=np.int64)
    lm = np.zeros((B, n), dtype=bool)
    for i, x in enumerate(items):
        L = len(x["ids"])
        o = n - L if left_pad else 0
        ids[i, o:o + L] = x["ids"]
        bid[i, o:o + L] = x["bid"]
        pos[i, o:o + L] = x["pos"]
        isq[i, o:o + L] = x["isq"]
        labels[i, o:o + L] = x["labels"]
        b = np.asarray(x["bid"])
        q = np.asarray(x["isq"])
        lm[i, o:o + L - 1] = (b[:-1] == b[1:]) & ~q[:-1]
    t = torch.from_numpy
    return {"ids": t(ids), "bid": t(bid), "pos": t(pos), "isq": t(isq), "labels": t(labels),
            "lm": t(lm)}


def attn_mask(bid, isq, block, dtype):
    """[B,1,N,N] additive mask over tokens in index order (causal), padding keys masked.
    block=True: the preamble and every document see only their own block; a question
    block sees the preamble, every document and itself. block=False (full attention):
    non-question tokens see every earlier non-question token; a question block sees them
    and itself. Question blocks never see each other."""
    B, n = bid.shape
    i = torch.arange(n, device=bid.device)
    causal = (i[None, :] <= i[:, None])[None]            # [1,N(q),N(k)]
    valid_k = (bid >= 0)[:, None, :]
    same = bid[:, :, None] == bid[:, None, :]
    ctx_k = ~isq[:, None, :]
    see = same | (isq[:, :, None] & ctx_k) if block else same | ctx_k
    allowed = causal & valid_k & see
    allowed = allowed | torch.eye(n, dtype=torch.bool, device=bid.device)[None]  # pad rows
    m = torch.zeros((B, 1, n, n), dtype=dtype, device=bid.device)
    m.masked_fill_(~allowed[:, None], torch.finfo(dtype).min)
    return m


TRAIN_DOC_COUNTS = [1, 2, 3, 4, 5, 6, 7, 8, 8, 9, 9, 10, 10, 10, 11, 11, 12, 12]


def batch_plan(k, full_frac, curriculum):
    """Attention mode and document count of training batch k (one count per batch, so
    batches hardly need padding). Curriculum: during the first `curriculum` batches the
    largest document count grows from 2 to 12."""
    r = random.Random(f"batch/{gen_data.SEED}/{k}")
    block = r.random() >= full_frac
    if k < curriculum:
        n_docs = r.randint(1, 2 + (10 * k) // max(curriculum, 1))
    else:
        n_docs = r.choice(TRAIN_DOC_COUNTS)
    return block, n_docs


class TrainStream(torch.utils.data.IterableDataset):
    """Batch k holds examples k*B .. k*B+B-1; worker w makes the batches k = w mod W, and the
    DataLoader takes them round robin, so the stream is the same for any worker count."""

    def __init__(self, tok_path, batch, pad_id, full_frac, curriculum, questions, start_batch=0,
                 type_weights=None, answer_format="plain"):
        self.tok_path, self.batch, self.pad_id = tok_path, batch, pad_id
        self.full_frac, self.curriculum, self.start = full_frac, curriculum, start_batch
        self.questions, self.type_weights = questions, type_weights
        self.answer_format = answer_format

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        w, W = (info.id, info.num_workers) if info else (0, 1)
        tok = Tokenizer.from_file(self.tok_path)
        k = self.start + w
        while True:
            block, n_docs = batch_plan(k, self.full_frac, self.curriculum)
            items = [tokenize_example(tok, gen_data.make_example(
                "train", k * self.batch + j, n_docs=n_docs, fresh_names=True,
                n_questions=self.questions, type_weights=self.type_weights,
                answer_format=self.answer_format))
                for j in range(self.batch)]
            d = collate(items, self.pad_id)
            d["block"] = torch.tensor(block)
            yield d
            k += W


def parse_weights(spec):
    """'type=w,type=w' -> {type: float}; unknown types are an error."""
    out = {}
    for part in filter(None, (p.strip() for p in spec.split(","))):
        t, w = part.split("=")
        if t not in gen_data.TYPES + gen_data.AUX_TYPES:
            raise SystemExit(f"--type-weights: unknown question type {t!r}")
        out[t] = float(w)
    return out or None


def load_jsonl(path, n=None):
    out = []
    with open(path) as f:
        for line in f:
            out.append(json.loads(line))
            if n and len(out) >= n:
                break
    return out


@torch.no_grad()
def teacher_forced_em(model, tok, examples, dev, block, bs=64, amp=True, by_type=None):
    """Fraction of examples whose answer tokens are all argmax under teacher forcing.
    by_type: a dict that receives {question type: fraction} as well."""
    model.eval()
    ok = 0
    right = []
    pad = tok.token_to_id("<|pad|>")
    for s in range(0, len(examples), bs):
        d = collate([tokenize_example(tok, e) for e in examples[s:s + bs]], pad)
        d = {k: v.to(dev) for k, v in d.items()}
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=amp), safe_sdpa():
            m = attn_mask(d["bid"], d["isq"], block, torch.bfloat16 if amp else torch.float32)
            h = model.model(input_ids=d["ids"], attention_mask=m, position_ids=d["pos"]).last_hidden_state
            logits = model.lm_head(h)
        pred = logits.argmax(-1)
        lab = d["labels"]
        wrong = ((pred != lab) & (lab != -100)).any(-1)
        ok += int((~wrong).sum())
        right += (~wrong).tolist()
    if by_type is not None:
        for t in sorted({e["type"] for e in examples}):
            r = [x for x, e in zip(right, examples) if e["type"] == t]
            by_type[t] = round(sum(r) / len(r), 3)
    model.train()
    return ok / len(examples)


# ---------------------------------------------------------------- export ----------

def export(model, cfg_dict, tok_dir, out_dir):
    from safetensors.torch import save_file
    os.makedirs(out_dir, exist_ok=True)
    sd = {k: v.detach().to(torch.bfloat16).contiguous().cpu() for k, v in model.state_dict().items()
          if k != "lm_head.weight" and "rotary_emb" not in k}
    save_file(sd, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
    os.chmod(os.path.join(out_dir, "model.safetensors"), 0o644)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg_dict, f, indent=2)
        f.write("\n")
    gen = {"bos_token_id": cfg_dict["bos_token_id"], "eos_token_id": cfg_dict["eos_token_id"],
           "pad_token_id": cfg_dict["pad_token_id"], "do_sample": False, "max_new_tokens": 32}
    with open(os.path.join(out_dir, "generation_config.json"), "w") as f:
        json.dump(gen, f, indent=2)
        f.write("\n")
    if os.path.abspath(tok_dir) != os.path.abspath(out_dir):
        import shutil
        for n in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(os.path.join(tok_dir, n), os.path.join(out_dir, n))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokenizer", required=True, help="dir with tokenizer.json")
    ap.add_argument("--out", required=True, help="export dir (HF format)")
    ap.add_argument("--val", default=None, help="val.jsonl for periodic checks")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--hidden", type=int, default=384)
    ap.add_argument("--ffn", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--heads", type=int, default=6)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=6000)
    ap.add_argument("--batch", type=int, default=96)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--wd", type=float, default=0.1)
    ap.add_argument("--full-frac", type=float, default=0.25)
    ap.add_argument("--curriculum", type=int, default=1200,
                    help="batches over which the max document count grows from 2 to 12")
    ap.add_argument("--lm-weight", type=float, default=0.0)
    ap.add_argument("--questions", type=int, default=6,
                    help="questions packed onto each training example's documents")
    ap.add_argument("--answer-format", choices=sorted(gen_data.ANSWER_FORMATS), default="plain",
                    help="how training answers are written: year-first (stage 4: comparisons as "
                         "'<deciding year>: <name>'), bridge-first (stage 5: two-hop answers "
                         "name their bridge first); gen_data.year_first / bridge_first")
    ap.add_argument("--year-first", dest="answer_format", action="store_const", const="year-first",
                    help="same as --answer-format year-first (the stage-4 command)")
    ap.add_argument("--val-size", type=int, default=256, help="validation questions per evaluation")
    ap.add_argument("--type-weights", default="",
                    help="weights for drawing question types, e.g. film_year=3,birthdate=3 "
                         "(others 1; default uniform)")
    ap.add_argument("--init", default=None,
                    help="start from the weights of this HF model directory (continue training)")
    ap.add_argument("--time-budget", type=float, default=0.0,
                    help="seconds; the LR schedule runs on max(step/steps, time/budget) and "
                         "training stops when either ends")
    ap.add_argument("--workers", type=int, default=max(1, min(12, (os.cpu_count() or 2) - 2)))
    ap.add_argument("--start-batch", type=int, default=0,
                    help="first batch of the training stream (continuing: skip seen examples)")
    ap.add_argument("--eval-every", type=int, default=500)
    ap.add_argument("--log-every", type=int, default=50)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--log-json", default=None)
    a = ap.parse_args()

    torch.manual_seed(a.seed)
    dev = torch.device(a.device)
    amp = dev.type == "cuda"
    if amp:
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    tok_path = os.path.join(a.tokenizer, "tokenizer.json")
    tok = Tokenizer.from_file(tok_path)
    pad_id = tok.token_to_id("<|pad|>")
    cfg_dict = model_config(tok, a)
    model = build_model(cfg_dict)
    if a.init:
        from safetensors.torch import load_file
        sd = load_file(os.path.join(a.init, "model.safetensors"))
        missing, unexpected = model.load_state_dict({k: v.float() for k, v in sd.items()}, strict=False)
        missing = [k for k in missing if k != "lm_head.weight" and "rotary_emb" not in k]
        if missing or unexpected:
            raise SystemExit(f"--init {a.init}: missing {missing}, unexpected {unexpected}")
        model.tie_weights()
        print(f"initialised from {a.init}")
    model = model.to(dev)
    nparam = sum(p.numel() for p in model.parameters())
    print(f"model: {nparam / 1e6:.2f}M parameters, config {json.dumps({k: cfg_dict[k] for k in ('hidden_size', 'intermediate_size', 'num_hidden_layers', 'num_attention_heads', 'num_key_value_heads', 'vocab_size')})}")
    val = load_jsonl(a.val, a.val_size) if a.val else []
    val = [gen_data.format_answers(e, a.answer_format) for e in val]

    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.wd},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8, fused=amp)
    dl = torch.utils.data.DataLoader(TrainStream(tok_path, a.batch, pad_id, a.full_frac, a.curriculum,
                                                 a.questions, start_batch=a.start_batch,
                                                 type_weights=parse_weights(a.type_weights),
                                                 answer_format=a.answer_format),
                                     batch_size=None, num_workers=a.workers, pin_memory=amp,
                                     prefetch_factor=8 if a.workers else None,
                                     persistent_workers=False)
    log = []
    t0 = time.time()
    it = iter(dl)
    run_loss = run_ans = 0.0
    run_n = 0
    step = 0
    wait = 0.0
    skipped = 0
    good = None  # last snapshot with finite weights
    while True:
        el = time.time() - t0
        prog = step / a.steps
        if a.time_budget > 0:
            prog = max(prog, el / a.time_budget)
        if prog >= 1.0:
            break
        lr = a.lr * min(1.0, (step + 1) / a.warmup) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * prog)))
        for g in opt.param_groups:
            g["lr"] = lr
        tw = time.time()
        d = next(it)
        wait += time.time() - tw
        block = bool(d.pop("block"))
        d = {k: v.to(dev, non_blocking=True) for k, v in d.items()}
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=amp), safe_sdpa():
            m = attn_mask(d["bid"], d["isq"], block, torch.bfloat16 if amp else torch.float32)
            h = model.model(input_ids=d["ids"], attention_mask=m, position_ids=d["pos"]).last_hidden_state
            sel = d["labels"] != -100
            logits = model.lm_head(h[sel]).float()
            ans_loss = F.cross_entropy(logits, d["labels"][sel])
            loss = ans_loss
            if a.lm_weight > 0:
                lmsel = d["lm"]
                tgt = d["ids"][:, 1:][lmsel[:, :-1]]
                lml = F.cross_entropy(model.lm_head(h[:, :-1][lmsel[:, :-1]]).float(), tgt)
                loss = ans_loss + a.lm_weight * lml
        opt.zero_grad(set_to_none=True)
        with safe_sdpa():
            loss.backward()
        gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        if torch.isfinite(gnorm) and torch.isfinite(loss):
            opt.step()
        else:  # never let one bad batch poison the weights
            skipped += 1
            print(f"step {step}: non-finite loss/grad, update skipped ({skipped} so far)", flush=True)
        step += 1
        run_loss += float(loss.detach()) if step % 10 == 0 or step < 20 else 0.0
        run_ans += float(ans_loss.detach()) if step % 10 == 0 or step < 20 else 0.0
        run_n += 1 if step % 10 == 0 or step < 20 else 0
        if step % a.log_every == 0:
            rec = {"step": step, "time": round(time.time() - t0, 1), "lr": lr,
                   "loss": run_loss / max(run_n, 1), "ans_loss": run_ans / max(run_n, 1),
                   "data_wait": round(wait, 1), "tokens": int(d["ids"].numel()),
                   "skipped": skipped}
            run_loss = run_ans = 0.0
            run_n = 0
            if step % a.eval_every == 0 and all(torch.isfinite(p).all() for p in model.parameters()):
                good = (step, {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()})
            if val and step % a.eval_every == 0:
                rec["val_tf_em_block_by_type"] = {}
                rec["val_tf_em_block"] = teacher_forced_em(model, tok, val, dev, True, amp=amp,
                                                           by_type=rec["val_tf_em_block_by_type"])
                rec["val_tf_em_full"] = teacher_forced_em(model, tok, val, dev, False, amp=amp)
            log.append(rec)
            print(json.dumps(rec), flush=True)
    train_time = time.time() - t0
    if not all(torch.isfinite(p).all() for p in model.parameters()):
        if good is None:
            raise SystemExit("training produced non-finite weights and no finite snapshot exists")
        print(f"final weights not finite: restoring the snapshot of step {good[0]}")
        model.load_state_dict(good[1])
    print(f"trained {step} steps in {train_time:.0f}s ({step * a.batch} examples), "
          f"{wait:.0f}s waiting for data")
    if val:
        final = {"step": step, "val_tf_em_block_by_type": {}}
        final["val_tf_em_block"] = teacher_forced_em(model, tok, val, dev, True, amp=amp,
                                                     by_type=final["val_tf_em_block_by_type"])
        final["val_tf_em_full"] = teacher_forced_em(model, tok, val, dev, False, amp=amp)
        print(json.dumps(final))
        log.append(final)
    export(model, cfg_dict, a.tokenizer, a.out)
    print(f"exported to {a.out}")
    if a.log_json:
        with open(a.log_json, "w") as f:
            json.dump({"args": vars(a), "params": nparam, "steps": step, "train_seconds": train_time,
                   "data_wait_seconds": wait, "skipped_steps": skipped,
                       "log": log}, f, indent=1)


if __name__ == "__main__":
    main()
