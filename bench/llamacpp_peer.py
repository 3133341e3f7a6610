"""The CPU peer: llama.cpp (through the llama-cpp-python package) serving the same reordered
RAG requests as `lazyattn bench`, with its prompt cache on, measured in the same run.

    pip install llama-cpp-python gguf sentencepiece
    python3 tools/peers/convert_gguf.py --llamacpp <llama.cpp src> models/rag-tiny /tmp/rag-tiny.gguf
    python3 bench/llamacpp_peer.py --gguf /tmp/rag-tiny.gguf --requests 24 \
        --out bench/results/peer_llamacpp_cpu.json

Workload (as `lazyattn bench --dataset models/rag-tiny/eval/test.jsonl`): questions of the
demo set in the Block-FT template (tools/demo/prompt.py blocks, each tokenized alone, ids
concatenated: exactly the ids our engine builds). Each question is first asked with the
file's document order (warm-up, not measured), then asked again with the documents shuffled
(measured). llama.cpp keeps the KV of the longest common token prefix between consecutive
prompts and, with a LlamaRAMCache, of earlier prompts: prefix caching. TTFT = time to the
first generated token of a streamed completion. The same script then runs
`build/lazyattn bench` on the same questions (methods prefix, lazy) and puts both in one JSON.
This is not the product: a peer measured beside it.

--speed instead measures decode and prefill speed as bench/bench_cpu_decode.c does ours
(bench/cpu_speed.py runs both side by side): decode ms/token at --contexts (a prompt of
pseudo-random ids below 3000, then --decode-tokens one-token evals, their mean time), prefill
tokens/s at --prefill (one eval of the prompt, n_batch 512), medians of --reps; prints one
JSON object. --flash-attn turns llama.cpp's flash attention on (llama-cpp-python's default:
off); --type-kv f16|f32 the KV cache type (llama.cpp's default f16).

    python3 bench/llamacpp_peer.py --speed --gguf /tmp/rag-tiny-f32.gguf --threads 2
"""
import argparse
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools", "demo"))
import prompt as rag  # noqa: E402  tools/demo/prompt.py: the template strings


def pct(v, p):
    v = sorted(v)
    if not v:
        return float("nan")
    k = (len(v) - 1) * p / 100.0
    lo, hi = int(k), min(int(k) + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


def speed(a):
    """Decode ms/token and prefill tokens/s of llama.cpp (see the module comment)."""
    import llama_cpp
    from llama_cpp import Llama

    contexts = [int(v) for v in a.contexts.split(",") if v]
    prefills = [int(v) for v in a.prefill.split(",") if v]
    n_ctx = max([c + a.decode_tokens for c in contexts] + [p + 1 for p in prefills] + [128])
    kv = {"f16": llama_cpp.GGML_TYPE_F16, "f32": llama_cpp.GGML_TYPE_F32}[a.type_kv]
    load0 = os.getloadavg()
    llm = Llama(model_path=a.gguf, n_ctx=n_ctx, n_threads=a.threads, n_threads_batch=a.threads, n_batch=512,
                logits_all=False, verbose=False, seed=1, flash_attn=a.flash_attn, type_k=kv, type_v=kv)
    state = [12345]

    def ids(n):  # the xorshift of bench_cpu_decode.c: ids below 3000
        out = []
        x = state[0]
        for _ in range(n):
            x ^= (x << 13) & 0xFFFFFFFFFFFFFFFF
            x ^= x >> 7
            x ^= (x << 17) & 0xFFFFFFFFFFFFFFFF
            out.append((x >> 11) % 3000)
        state[0] = x
        return out

    def prefill(n):
        llm.reset()
        t0 = time.perf_counter()
        llm.eval(ids(n))
        return time.perf_counter() - t0

    prefill(64)  # warm-up
    for _ in range(4):
        llm.eval([100])
    rows = {"decode": [], "prefill": []}
    for c in contexts:
        v = []
        for _ in range(a.reps):
            prefill(c)
            llm.eval([100])  # the first output token (TPOT counts those after it)
            t0 = time.perf_counter()
            for _ in range(a.decode_tokens - 1):
                llm.eval([100])
            v.append((time.perf_counter() - t0) * 1000.0 / (a.decode_tokens - 1))
        rows["decode"].append({"context": c, "ms_per_token": statistics.median(v)})
        print(f"llama.cpp decode at {c}: {statistics.median(v):.2f} ms/token", file=sys.stderr)
    for p in prefills:
        v = [p / prefill(p) for _ in range(a.reps)]
        rows["prefill"].append({"tokens": p, "tokens_per_s": statistics.median(v)})
        print(f"llama.cpp prefill {p}: {statistics.median(v):.1f} tokens/s", file=sys.stderr)
    rows.update({"engine": "llama.cpp via llama-cpp-python " + llama_cpp.__version__,
                 "gguf": os.path.basename(a.gguf), "threads": a.threads, "flash_attn": a.flash_attn,
                 "type_kv": a.type_kv, "loadavg_before": " ".join(f"{x:.2f}" for x in load0),
                 "loadavg_after": " ".join(f"{x:.2f}" for x in os.getloadavg())})
    print(json.dumps(rows))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "rag-tiny"))
    ap.add_argument("--requests", type=int, default=24)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "peer_llamacpp_cpu.json"))
    ap.add_argument("--no-lazyattn", action="store_true", help="skip the lazyattn side")
    ap.add_argument("--speed", action="store_true", help="decode / prefill speed instead (module comment)")
    ap.add_argument("--contexts", default="64,1536,8000")
    ap.add_argument("--prefill", default="512,2048")
    ap.add_argument("--decode-tokens", type=int, default=32)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--flash-attn", action="store_true")
    ap.add_argument("--type-kv", default="f16", choices=["f16", "f32"])
    a = ap.parse_args()
    if a.speed:
        speed(a)
        return

    from llama_cpp import Llama, LlamaRAMCache
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(os.path.join(a.model, "tokenizer.json"))
    test = os.path.join(a.model, "eval", "test.jsonl")
    qs = [json.loads(l) for l in open(test)][: a.requests]
    llm = Llama(model_path=a.gguf, n_ctx=4096, n_threads=a.threads, n_batch=512, logits_all=False,
                verbose=False, seed=a.seed)
    llm.set_cache(LlamaRAMCache(capacity_bytes=1 << 30))
    eot = tok.token_to_id("<|eot_id|>")
    rng = random.Random(a.seed)

    def ask(q, docs):
        ids = [i for block in rag.encode_blocks(tok, rag.prompt_blocks(q["question"], docs)) for i in block]
        t0 = time.perf_counter()
        ttft, out = None, []
        for chunk in llm.create_completion(ids, max_tokens=a.max_tokens, temperature=0.0, top_k=1,
                                           stream=True, stop=None):
            if ttft is None:
                ttft = (time.perf_counter() - t0) * 1000.0
            out.append(chunk["choices"][0]["text"])
        return ttft, "".join(out), len(ids)

    ttft, answers, lens, em = [], [], [], 0
    for q in qs:
        ask(q, q["documents"])  # warm-up: the file's order
        docs = list(q["documents"])
        rng.shuffle(docs)
        t, text, n = ask(q, docs)
        ttft.append(t)
        lens.append(n)
        answers.append(text)
        em += any(g.lower() in text.lower() for g in q["answers"])
    peer = {
        "engine": "llama.cpp via llama-cpp-python",
        "version": __import__("llama_cpp").__version__,
        "gguf": os.path.basename(a.gguf),
        "cache": "in-context longest common prefix + LlamaRAMCache(1 GiB)",
        "requests": len(qs),
        "mean_prompt_tokens": statistics.mean(lens),
        "ttft_ms_p50": pct(ttft, 50),
        "ttft_ms_p90": pct(ttft, 90),
        "ttft_ms_mean": statistics.mean(ttft),
        "exact_match_contains": em / len(qs),
        "answers": answers,
    }
    print(f"llama.cpp prefix cache: TTFT p50 {peer['ttft_ms_p50']:.1f} ms, p90 {peer['ttft_ms_p90']:.1f} ms "
          f"over {len(qs)} reordered requests ({peer['mean_prompt_tokens']:.0f} prompt tokens)")
    result = {
        "command": " ".join([os.path.basename(sys.argv[0])] + sys.argv[1:]),
        "machine": {"uname": " ".join(platform.uname()), "cpu": platform.processor(), "n_cpus": os.cpu_count()},
        "workload": "demo set questions, warm-up in file order, measured with documents shuffled, "
                    f"greedy, max {a.max_tokens} tokens, concurrency 1, {a.threads} threads",
        "llamacpp": peer,
    }
    if not a.no_lazyattn:
        out = "/tmp/lazyattn_peer_side.json"
        cmd = [os.path.join(ROOT, "build", "lazyattn"), "bench", "-m", a.model, "--dataset", test,
               "--requests", str(len(qs)), "--methods", "prefix,lazy", "--threads", str(a.threads),
               "--max-tokens", str(a.max_tokens), "--json", out]
        subprocess.run(cmd, check=True, stderr=subprocess.DEVNULL)
        ours = json.load(open(out))
        result["lazyattn_command"] = " ".join(cmd[1:])
        result["lazyattn"] = ours
        for m in ours.get("methods", []):
            name = m.get("method")
            t = m.get("ttft_ms", {})
            p50 = t.get("p50") if isinstance(t, dict) else None
            print(f"lazyattn {name}: TTFT p50 {p50} ms")
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    json.dump(result, open(a.out, "w"), indent=1)


if __name__ == "__main__":
    main()
