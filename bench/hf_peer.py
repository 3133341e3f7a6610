#!/usr/bin/env python3
"""The outside peer for bench_gpu (bench/GPU_NOTES.md): Hugging Face transformers on the
same GPU, same shapes, random bf16 weights made on the device, timed the way a user of
transformers would see it (wall clock around the call, CUDA synchronised; Python overhead
included, as in DESIGN.md section 8's HF numbers).

  python3 bench/hf_peer.py [--shapes llama3-8b,llama3.2-1b] [--contexts 2048,8192,32768]
                           [--reps 3] > hf_peer.json

Per shape and context N: a full prefill of N tokens (logits of the last row only, as
generate() computes them); a prefill of the 64-token question on a cached prefix of N - 64
tokens (past_key_values, cropped back after each run); and at 8K one decode step (batch 1).
RoPE: the 8B shape's default RoPE; the 1B shape's llama3 scaling changes only inv_freq,
not the cost. Attention: SDPA (transformers' default on this GPU).
"""
import argparse
import json
import statistics
import sys
import time

import torch
import transformers
from transformers import LlamaConfig, LlamaForCausalLM

SHAPES = {
    "llama3-8b": dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                      num_attention_heads=32, num_key_value_heads=8, head_dim=128,
                      tie_word_embeddings=False),
    "llama3.2-1b": dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                        num_attention_heads=32, num_key_value_heads=8, head_dim=64,
                        tie_word_embeddings=True),
}
QUESTION = 64


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def build(shape):
    cfg = LlamaConfig(vocab_size=128256, max_position_embeddings=131072, rms_norm_eps=1e-5,
                      rope_theta=500000.0, **SHAPES[shape])
    torch.manual_seed(0)
    prev = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device("cuda"):
            try:
                model = LlamaForCausalLM._from_config(cfg, attn_implementation="sdpa")
            except TypeError:
                cfg._attn_implementation = "sdpa"
                model = LlamaForCausalLM(cfg)
    finally:
        torch.set_default_dtype(prev)
    model = model.to(device="cuda", dtype=torch.bfloat16).eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2:
                p.uniform_(-0.0346, 0.0346)
    return model


def timed(fn, reps, warm=1):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        ts.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ts)


def crop(cache, n):
    if hasattr(cache, "crop"):
        cache.crop(n)
        return True
    return False


def run_shape(shape, contexts, reps):
    t0 = time.perf_counter()
    model = build(shape)
    log(f"{shape}: model built in {time.perf_counter() - t0:.1f} s")
    res = {"prefill_ms": {}, "cached_prefix_question_ms": {}, "decode_ms": {}}
    gen = torch.Generator(device="cuda").manual_seed(1)
    with torch.inference_mode():
        for n in contexts:
            ids = torch.randint(1000, 120000, (1, n), device="cuda", generator=gen)
            r = reps if n < 32768 else min(reps, 2)
            ms = timed(lambda: model(input_ids=ids, use_cache=True, logits_to_keep=1), r)
            res["prefill_ms"][str(n)] = round(ms, 3)
            log(f"{shape}: full prefill {n}: {ms:.1f} ms")
            out = model(input_ids=ids[:, : n - QUESTION], use_cache=True, logits_to_keep=1)
            cache = out.past_key_values
            q = ids[:, n - QUESTION:]

            def question():
                model(input_ids=q, past_key_values=cache, use_cache=True, logits_to_keep=1)
                crop(cache, n - QUESTION)

            ms = timed(question, reps)
            res["cached_prefix_question_ms"][str(n)] = round(ms, 3)
            log(f"{shape}: 64-token question on a cached prefix of {n - QUESTION}: {ms:.1f} ms")
            if n == 8192:
                crop(cache, n - QUESTION)
                model(input_ids=q, past_key_values=cache, use_cache=True, logits_to_keep=1)
                tok = ids[:, -1:]

                def decode():
                    model(input_ids=tok, past_key_values=cache, use_cache=True, logits_to_keep=1)
                    crop(cache, n)

                ms = timed(decode, max(reps, 5), warm=2)
                res["decode_ms"]["8192"] = round(ms, 3)
                log(f"{shape}: decode step at 8192 (batch 1): {ms:.1f} ms")
            del cache, out
            torch.cuda.empty_cache()
    del model
    torch.cuda.empty_cache()
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="llama3-8b,llama3.2-1b")
    ap.add_argument("--contexts", default="2048,8192,32768")
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    contexts = [int(x) for x in a.contexts.split(",")]
    out = {"peer": "transformers", "transformers": transformers.__version__, "torch": torch.__version__,
           "gpu": torch.cuda.get_device_name(0), "attention": "sdpa", "dtype": "bfloat16",
           "timing": "wall clock per call, CUDA synchronised, median", "shapes": {}}
    for s in a.shapes.split(","):
        try:
            out["shapes"][s] = run_shape(s, contexts, a.reps)
        except Exception as e:  # report and go on with the next shape
            log(f"{s}: failed: {e!r}")
            out["shapes"][s] = {"error": repr(e)}
    json.dump(out, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
