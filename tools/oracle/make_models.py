#!/usr/bin/env python3
"""Build the tiny HF Llama checkpoints and the reference fixtures the C tests use.

    python3 tools/oracle/make_models.py [NAME ...]

(names: only those models; none: every model)

Writes tests/fixtures/models/<name>/ for each model in MODELS: a complete Hugging
Face model directory (config.json, generation_config.json, model.safetensors,
tokenizer.json, tokenizer_config.json) plus oracle.json, the reference outputs
computed by HF transformers (eager attention, float32).  See tools/oracle/README.md.

Everything is deterministic: the tokenizer is trained on a fixed corpus, the
weights come from seeded torch generators, and every forward runs on CPU with
one thread.  This is a tool; nothing in the engine imports it.
"""

import json
import math
import os
import sys
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402
import tokenizers  # noqa: E402
import transformers  # noqa: E402
from tokenizers import (  # noqa: E402
    AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers,
)
from transformers import (  # noqa: E402
    GenerationConfig, LlamaConfig, PreTrainedTokenizerFast, LlamaForCausalLM, MistralConfig, MistralForCausalLM,
    Qwen2Config, Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM,
)

# the architecture of a spec: its config and model classes
ARCHS = {"llama": (LlamaConfig, LlamaForCausalLM), "mistral": (MistralConfig, MistralForCausalLM),
         "qwen2": (Qwen2Config, Qwen2ForCausalLM), "qwen3": (Qwen3Config, Qwen3ForCausalLM)}

COMMAND = "python3 tools/oracle/make_models.py"

ROOT = Path(__file__).resolve().parents[2]
OUT_DIR = ROOT / "tests" / "fixtures" / "models"


def find_data_dir():
    env = os.environ.get("LAZYATTN_DATA")
    cands = ([Path(env)] if env else []) + [ROOT / "shared" / "data",
                                            ROOT.parent / "shared" / "data",
                                            Path("/work/shared/data")]
    for c in cands:
        if (c / "hotpotqa" / "hotpotqa_dev_distractor_ircot_500.jsonl").is_file():
            return c
    sys.exit("make_models.py: cannot find shared/data (set LAZYATTN_DATA)")


DATA = find_data_dir()
HOTPOT = DATA / "hotpotqa" / "hotpotqa_dev_distractor_ircot_500.jsonl"
LLAMA3_TOKENIZER = DATA / "tokenizers" / "llama3" / "tokenizer.json"
LLAMA3_TOKENIZER_CONFIG = DATA / "tokenizers" / "llama3" / "tokenizer_config.json"

BOS, EOS_TEXT, SH, EH, EOT, PAD = ("<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
                                   "<|end_header_id|>", "<|eot_id|>", "<|pad|>")
SPECIALS = [BOS, EOS_TEXT, SH, EH, EOT, PAD]
VOCAB_SIZE = 512          # 256 byte alphabet + 250 merges + 6 special tokens
INIT_STD = 0.2            # initializer_range (Linear and Embedding weights)
NORM_JITTER = 0.1         # RMSNorm weights = 1 + NORM_JITTER * N(0,1), so a missing norm weight is caught
GREEDY_PROMPT = 32
GREEDY_BLOCK = 16
MIN_MARGIN = 1e-3         # every greedy step's top1-top2 logit gap must be at least this ...
MIN_DISTINCT = 4          # ... and every greedy continuation must hold this many distinct ids;
MAX_SEED_TRIES = 64       # otherwise the next seed (seed+1, ...) is tried, deterministically

LLAMA3_ROPE = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 64}

COMMON = dict(hidden_size=64, intermediate_size=160, num_attention_heads=4,
              max_position_embeddings=131072, rms_norm_eps=1e-5, hidden_act="silu",
              attention_bias=False, mlp_bias=False, initializer_range=INIT_STD)

MODELS = [
    dict(name="tiny-f32-tied", seed=1001, disk_dtype=torch.float32,
         cfg=dict(COMMON, num_hidden_layers=2, num_key_value_heads=2, head_dim=16,
                  tie_word_embeddings=True,
                  rope_parameters=dict(LLAMA3_ROPE, rope_theta=10000.0))),
    dict(name="tiny-bf16-untied", seed=2002, disk_dtype=torch.bfloat16,
         cfg=dict(COMMON, num_hidden_layers=3, num_key_value_heads=1, head_dim=24,
                  tie_word_embeddings=False,
                  rope_parameters=dict(LLAMA3_ROPE, rope_theta=500000.0))),
    dict(name="tiny-f32-linear", seed=3003, disk_dtype=torch.float32,
         cfg=dict(COMMON, num_hidden_layers=2, num_key_value_heads=4, head_dim=16,
                  tie_word_embeddings=True,
                  rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0})),
    # the other families (issue 30): default RoPE at their usual theta, so no scaling check
    dict(name="tiny-qwen2", seed=4004, disk_dtype=torch.float32, arch="qwen2",
         cfg=dict(hidden_size=64, intermediate_size=160, num_attention_heads=4, num_key_value_heads=2,
                  num_hidden_layers=2, max_position_embeddings=131072, rms_norm_eps=1e-6, hidden_act="silu",
                  initializer_range=INIT_STD, tie_word_embeddings=True, use_sliding_window=False,
                  rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})),
    dict(name="tiny-qwen3", seed=5005, disk_dtype=torch.bfloat16, arch="qwen3",
         cfg=dict(hidden_size=64, intermediate_size=160, num_attention_heads=4, num_key_value_heads=2,
                  head_dim=24, num_hidden_layers=2, max_position_embeddings=131072, rms_norm_eps=1e-6,
                  hidden_act="silu", initializer_range=INIT_STD, tie_word_embeddings=False,
                  attention_bias=False, use_sliding_window=False,
                  rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})),
    dict(name="tiny-mistral", seed=6006, disk_dtype=torch.float32, arch="mistral",
         cfg=dict(hidden_size=64, intermediate_size=160, num_attention_heads=4, num_key_value_heads=1,
                  head_dim=16, num_hidden_layers=2, max_position_embeddings=131072, rms_norm_eps=1e-5,
                  hidden_act="silu", initializer_range=INIT_STD, tie_word_embeddings=False, sliding_window=None,
                  rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})),
]


# ----------------------------------------------------------------------------- data

def load_hotpot():
    rows = []
    with open(HOTPOT, encoding="utf-8") as f:
        for line in f:
            rows.append(json.loads(line))
    return rows


def corpus_iter(rows):
    for q in rows:
        for c in q["contexts"]:
            yield c["title"] + "\n" + c["paragraph_text"]


# ----------------------------------------------------------------------------- tokenizer

def build_tokenizer(rows):
    llama3 = json.loads(LLAMA3_TOKENIZER.read_text(encoding="utf-8"))
    pattern = llama3["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"]

    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE - len(SPECIALS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  min_frequency=2, show_progress=False)
    tok.train_from_iterator(corpus_iter(rows), trainer)
    assert tok.model.ignore_merges
    # Special tokens go after the learned vocab, as in Llama-3 (ids 506..511).
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False, lstrip=False,
                                       rstrip=False, single_word=False) for s in SPECIALS])
    assert tok.get_vocab_size() == VOCAB_SIZE, tok.get_vocab_size()
    bos_id = tok.token_to_id(BOS)
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A",
        pair=f"{BOS} $A {BOS}:1 $B:1",
        special_tokens=[(BOS, bos_id)],
    )
    return tok


def tokenizer_config():
    chat_template = json.loads(LLAMA3_TOKENIZER_CONFIG.read_text(encoding="utf-8"))["chat_template"]
    return {
        "add_bos_token": True,
        "add_eos_token": False,
        "bos_token": BOS,
        "eos_token": EOT,
        "pad_token": PAD,
        "chat_template": chat_template,
        "clean_up_tokenization_spaces": False,  # transformers 5 ignores it for BPE anyway
        "model_input_names": ["input_ids", "attention_mask"],
        "model_max_length": 131072,
        "tokenizer_class": "PreTrainedTokenizerFast",
    }


def write_tokenizer(tok, d):
    tok.save(str(d / "tokenizer.json"), pretty=True)
    with open(d / "tokenizer_config.json", "w", encoding="utf-8") as f:
        json.dump(tokenizer_config(), f, indent=2, ensure_ascii=False)
        f.write("\n")


# ----------------------------------------------------------------------------- model

def init_weights(model, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters(), key=lambda kv: kv[0]):
            if name.endswith("norm.weight"):
                p.copy_(1.0 + NORM_JITTER * torch.randn(p.shape, generator=g))
            else:
                p.copy_(INIT_STD * torch.randn(p.shape, generator=g))


def build_model(spec, seed, tok, d):
    ids = {s: tok.token_to_id(s) for s in SPECIALS}
    config_cls, model_cls = ARCHS[spec.get("arch", "llama")]
    cfg = config_cls(vocab_size=VOCAB_SIZE, bos_token_id=ids[BOS],
                     eos_token_id=[ids[EOT], ids[EOS_TEXT]], **spec["cfg"])
    torch.manual_seed(seed)
    model = model_cls(cfg).to(torch.float32)
    init_weights(model, seed)
    if cfg.tie_word_embeddings:
        assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    model = model.to(spec["disk_dtype"])
    model.generation_config = GenerationConfig(bos_token_id=ids[BOS],
                                               eos_token_id=[ids[EOT], ids[EOS_TEXT]])
    model.save_pretrained(str(d))
    write_tokenizer(tok, d)


def load_for_oracle(d, rope_override=None):
    """Load the saved checkpoint as written and run it in float32 (bf16 weights upcast exactly)."""
    cfg = json.loads((d / "config.json").read_text())
    disk = cfg.get("dtype", cfg.get("torch_dtype"))
    config_cls, model_cls = ARCHS[cfg.get("model_type", "llama")]
    config = config_cls.from_pretrained(str(d))
    if rope_override is not None:
        config.rope_parameters = {"rope_type": rope_override,
                                  "rope_theta": config.rope_parameters["rope_theta"]}
    m = model_cls.from_pretrained(str(d), config=config, dtype=getattr(torch, disk),
                                  attn_implementation="eager")
    m = m.float().eval()
    assert m.config._attn_implementation == "eager"
    return m, disk


# ----------------------------------------------------------------------------- forward helpers

@torch.no_grad()
def causal_logits(model, ids):
    x = torch.tensor([ids], dtype=torch.long)
    return model(input_ids=x, use_cache=False).logits[0].float()


def block_mask(seg_lens):
    """Additive [1,1,N,N] mask: documents block-diagonal causal, last segment sees everything before it."""
    n = sum(seg_lens)
    allowed = torch.zeros(n, n, dtype=torch.bool)
    s = 0
    for L in seg_lens[:-1]:
        allowed[s:s + L, s:s + L] = torch.ones(L, L, dtype=torch.bool).tril()
        s += L
    t = seg_lens[-1]
    allowed[s:, :s] = True
    allowed[s:, s:] = torch.ones(t, t, dtype=torch.bool).tril()
    mask = torch.zeros(n, n, dtype=torch.float32)
    mask.masked_fill_(~allowed, torch.finfo(torch.float32).min)
    return mask[None, None]


@torch.no_grad()
def block_logits(model, segments):
    ids = [t for seg in segments for t in seg]
    n = len(ids)
    out = model(input_ids=torch.tensor([ids], dtype=torch.long),
                attention_mask=block_mask([len(s) for s in segments]),
                position_ids=torch.arange(n, dtype=torch.long)[None],
                use_cache=False)
    return out.logits[0].float()


def margin(row):
    top = torch.topk(row, 2).values
    return float(top[0] - top[1])


def greedy_causal(model, ids, steps):
    seq = list(ids)
    out, margins = [], []
    for _ in range(steps):
        row = causal_logits(model, seq)[-1]
        nxt = int(torch.argmax(row))
        margins.append(margin(row))
        out.append(nxt)
        seq.append(nxt)
    return out, min(margins)


def greedy_block(model, segments, steps):
    segs = [list(s) for s in segments]
    out, margins = [], []
    for _ in range(steps):
        row = block_logits(model, segs)[-1]
        nxt = int(torch.argmax(row))
        margins.append(margin(row))
        out.append(nxt)
        segs[-1].append(nxt)
    return out, min(margins)


# ----------------------------------------------------------------------------- fixture content

def cut_to_tokens(tok, text, n):
    """Longest word-boundary prefix of text that encodes to at most n tokens (no BOS)."""
    words = text.split(" ")
    cut = words[0]
    for w in words[1:]:
        if len(tok.encode(cut + " " + w, add_special_tokens=False).ids) > n:
            break
        cut = cut + " " + w
    return cut


def prompt_texts(rows, tok):
    sent = ("The quick brown fox jumps over the lazy dog while the old farmer watches "
            "from the porch of his small wooden house near the river.")
    passage = rows[0]["contexts"][1]["paragraph_text"]
    return [
        "",                                                        # BOS only: one token
        "The",                                                     # one text token (+BOS)
        "The capital of France is",                                # short
        cut_to_tokens(tok, sent, 39),                              # ~40 tokens with BOS
        "Zürich – café, 東京 😀 it's 3.14!",                         # unicode, digits, contraction
        f"{SH}user{EH}\n\nWho wrote Hamlet?{EOT}{SH}assistant{EH}\n\n",  # special tokens in text
        cut_to_tokens(tok, passage, 47),                           # real passage (HotpotQA)
    ]


def block_case_segments(rows, tok, bos_id):
    def enc(text):
        return tok.encode(text, add_special_tokens=False).ids

    passages = [c["paragraph_text"] for q in rows[1:40] for c in q["contexts"]]
    passages = [p for p in passages if len(enc(p)) >= 40]
    questions = [q["question_text"] for q in rows[1:40]]
    pi = iter(passages)
    qi = iter(questions)

    def doc(n):
        return enc(next(pi))[:n]

    def tail(n):
        return enc(next(qi))[:n]

    cases = []
    cases.append(("one_doc", [doc(12), tail(5)]))
    cases.append(("docs_5_16_17", [doc(5), doc(16), doc(17), tail(7)]))
    cases.append(("one_token_doc", [doc(1), doc(9), tail(4)]))
    cases.append(("bos_plus_8_docs", [[bos_id]] + [doc(n) for n in (1, 7, 16, 40, 23, 3, 33, 12)]
                  + [tail(10)]))
    a32 = doc(32)
    t = tail(6)
    cases.append(("one_doc_32", [list(a32), list(t)]))
    cases.append(("two_docs_16_16", [a32[:16], a32[16:], list(t)]))
    cases.append(("five_docs", [doc(n) for n in (9, 21, 4, 16, 30)] + [tail(3)]))
    for name, segs in cases:
        assert all(len(s) >= 1 for s in segs), name
        assert 3 <= len(segs[-1]) <= 10, name
    assert [len(s) for s in cases[1][1][:3]] == [5, 16, 17]
    assert cases[2][1][0].__len__() == 1
    return cases


# ----------------------------------------------------------------------------- JSON writer

def fnum(x):
    x = float(x)
    assert math.isfinite(x)
    return f"{x:.9g}"


def jstr(s):
    return json.dumps(s, ensure_ascii=False)


def jints(v):
    return "[" + ",".join(str(int(i)) for i in v) + "]"


def jrows(m, indent):
    pad = " " * indent
    lines = [pad + "[" + ",".join(fnum(x) for x in row.tolist()) + "]" for row in m]
    return "[\n" + ",\n".join(lines) + "\n" + pad[:-2] + "]"


def write_oracle(path, head, prompts, cases):
    out = ["{"]
    for k, v in head.items():
        out.append(f"  {jstr(k)}: {jstr(v)},")
    out.append('  "prompts": [')
    for i, p in enumerate(prompts):
        out.append("    {")
        out.append(f'      "text": {jstr(p["text"])},')
        out.append(f'      "ids": {jints(p["ids"])},')
        out.append(f'      "logits": {jrows(p["logits"], 8)},')
        out.append(f'      "greedy": {jints(p["greedy"])}')
        out.append("    }" + ("," if i + 1 < len(prompts) else ""))
    out.append("  ],")
    out.append('  "block_cases": [')
    for i, c in enumerate(cases):
        out.append("    {")
        out.append(f'      "name": {jstr(c["name"])},')
        out.append('      "segments": [' + ",".join(jints(s) for s in c["segments"]) + "],")
        out.append(f'      "logits": {jrows(c["logits"], 8)},')
        out.append(f'      "greedy": {jints(c["greedy"])}')
        out.append("    }" + ("," if i + 1 < len(cases) else ""))
    out.append("  ]")
    out.append("}")
    text = "\n".join(out) + "\n"
    json.loads(text)  # must be valid JSON
    path.write_text(text, encoding="utf-8")


# ----------------------------------------------------------------------------- main

class Reject(Exception):
    """This seed gives fragile fixtures; the caller tries the next seed."""


def check_greedy(name, what, g, mg):
    if len(set(g)) < MIN_DISTINCT:
        raise Reject(f"{name} {what}: greedy continuation nearly constant {g}")
    if mg < MIN_MARGIN:
        raise Reject(f"{name} {what}: greedy top1-top2 logit margin {mg:.3g} < {MIN_MARGIN}")


def make_oracle(spec, seed, d, rows, tok):
    model, disk_dtype = load_for_oracle(d)
    # the file as it is (AutoTokenizer would build Qwen2Tokenizer's own pipeline for qwen2 / qwen3)
    hf_tok = PreTrainedTokenizerFast.from_pretrained(str(d))
    bos_id = tok.token_to_id(BOS)
    name = spec["name"]
    report = {"min_greedy_margin": float("inf")}

    prompts = []
    for text in prompt_texts(rows, tok):
        ids = hf_tok(text, add_special_tokens=True)["input_ids"]
        assert ids == tok.encode(text).ids, (text, ids)
        assert ids[0] == bos_id and bos_id not in ids[1:], ids
        logits = causal_logits(model, ids)
        greedy, mg = greedy_causal(model, ids, GREEDY_PROMPT)
        check_greedy(name, repr(text[:20]), greedy, mg)
        report["min_greedy_margin"] = min(report["min_greedy_margin"], mg)
        prompts.append({"text": text, "ids": ids, "logits": logits, "greedy": greedy})

    # Sanity 1: a single segment (tail only) under the 4-D block mask == plain causal.
    for p in prompts:
        if len(p["ids"]) < 2:
            continue
        diff = (block_logits(model, [p["ids"]]) - p["logits"]).abs().max().item()
        assert diff <= 1e-5, f"{name}: block mask with one segment differs from causal by {diff}"

    cases = []
    by_name = {}
    for cname, segs in block_case_segments(rows, tok, bos_id):
        full = block_logits(model, segs)
        t0 = sum(len(s) for s in segs[:-1])
        tail_logits = full[t0:]
        ids = [t for s in segs for t in s]
        causal = causal_logits(model, ids)
        diff = (causal[t0:] - tail_logits).abs().max().item()
        if len(segs) > 2:
            # Sanity 2: the 4-D mask was really applied (multi-document differs from causal).
            assert diff > 1e-3, f"{name} {cname}: block logits equal causal ({diff}): mask ignored?"
        else:
            # One document + tail: the block mask *is* the causal mask.
            assert diff <= 1e-5, f"{name} {cname}: one-document case differs from causal ({diff})"
        # Document tokens: first document's logits equal a plain causal run of that document.
        d0 = segs[0]
        diff0 = (causal_logits(model, d0) - full[:len(d0)]).abs().max().item()
        assert diff0 <= 1e-5, f"{name} {cname}: first document not independent ({diff0})"
        greedy, mg = greedy_block(model, segs, GREEDY_BLOCK)
        check_greedy(name, cname, greedy, mg)
        report["min_greedy_margin"] = min(report["min_greedy_margin"], mg)
        by_name[cname] = tail_logits
        cases.append({"name": cname, "segments": segs, "logits": tail_logits, "greedy": greedy})

    # Sanity 3: the rope scaling in config.json matters for these fixtures (a reader that
    # ignored it would fail): the same weights with plain unscaled RoPE give other logits.
    if spec.get("arch", "llama") == "llama":
        plain = load_for_oracle(d, rope_override="default")[0]
        longest = max(prompts, key=lambda p: len(p["ids"]))
        dr = (causal_logits(plain, longest["ids"]) - longest["logits"]).abs().max().item()
        assert dr > 1e-2, f"{name}: rope scaling does not change the logits ({dr})"
        del plain

    d32 = (by_name["one_doc_32"] - by_name["two_docs_16_16"]).abs().max().item()
    assert d32 > 1e-3, f"{name}: one 32-token doc aliases two 16-token docs (diff {d32})"

    head = {
        "command": COMMAND,
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "tokenizers_version": tokenizers.__version__,
        "dtype_of_run": "float32",
        "model": name,
        "seed": seed,
        "weights_dtype_on_disk": disk_dtype,
        "note": (f"HF {type(model).__name__}, attn_implementation=eager, CPU, float32, no KV cache "
                 "(every greedy step is a full recompute). Weights loaded from this directory "
                 "in their on-disk dtype and upcast with .float(), so bf16 weights are the "
                 "exact bf16-rounded values. block_cases: positions 0..N-1, additive 4-D mask "
                 "(documents block-diagonal causal; last segment attends to everything "
                 "before it and causally within itself); logits are for the tail positions."),
    }
    write_oracle(d / "oracle.json", head, prompts, cases)
    report["prompt_positions"] = sum(len(p["ids"]) for p in prompts)
    report["tail_positions"] = sum(len(c["segments"][-1]) for c in cases)
    return report


def main():
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    rows = load_hotpot()
    tok = build_tokenizer(rows)
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    only = set(sys.argv[1:])
    unknown = only - {s["name"] for s in MODELS}
    if unknown:
        sys.exit(f"make_models: no model named {sorted(unknown)}")
    for spec in MODELS:
        if only and spec["name"] not in only:
            continue
        d = OUT_DIR / spec["name"]
        d.mkdir(parents=True, exist_ok=True)
        for attempt in range(MAX_SEED_TRIES):
            seed = spec["seed"] + attempt
            for f in d.iterdir():
                if f.is_file():
                    f.unlink()
            build_model(spec, seed, tok, d)
            try:
                rep = make_oracle(spec, seed, d, rows, tok)
                break
            except Reject as e:
                print(f"  seed {seed} rejected: {e}", flush=True)
        else:
            sys.exit(f"{spec['name']}: no acceptable seed in {MAX_SEED_TRIES} tries")
        size = sum(f.stat().st_size for f in d.iterdir())
        print(f"{spec['name']}: seed {seed}, {size / 1e6:.2f} MB, prompt positions {rep['prompt_positions']}, "
              f"tail positions {rep['tail_positions']}, "
              f"min greedy top1-top2 margin {rep['min_greedy_margin']:.3g}")


if __name__ == "__main__":
    main()
