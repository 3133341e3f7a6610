"""CPU decode and prefill speed, before / after / llama.cpp side by side in one run (not a test).

Runs, round-robin for --rounds rounds, each configuration as its own process (a fresh engine
or llama.cpp context): bench/bench_cpu_decode.c for lazyattn (the build under test, and a
baseline binary built from an earlier commit: the "before" column), bench/llamacpp_peer.py
--speed for llama.cpp on GGUF files of the same weights (tools/peers/convert_gguf.py). Each
run measures decode ms/token at --contexts and prefill tokens/s at --prefill (one request
each: --reps 1); a cell is the median over the rounds and the best round (the JSON has min,
median and max). The machine
is shared: interleaving the configurations round by round spreads the other tenants' load
over all of them; the load average is recorded before and after every run.

    python3 bench/cpu_speed.py --label rag-tiny --hf models/rag-tiny \\
        --gguf-bf16 /tmp/rag-tiny-bf16.gguf --gguf-f32 /tmp/rag-tiny-f32.gguf \\
        --base-bin /tmp/base/bench_cpu_decode --base-commit 4547de0 \\
        --configs before,ours,ours-kv-bf16,ours-f32,llamacpp-bf16,llamacpp-bf16-fa,llamacpp-f32 \\
        --rounds 3 --out bench/results/cpu_speed_rag_tiny.json

Configurations (--configs): before (the baseline binary, the checkpoint as it loads there:
f32 weights, f32 KV), ours (weights in the checkpoint's dtype, f32 KV), ours-kv-bf16 (and a
bf16 KV cache), ours-f32 (--cpu-weights f32), ours-f16 (--cpu-weights f16), ours-bf16-dot
(--cpu-weights bf16-dot: bf16 activations in the products), ours-bf16-dot-kv-bf16, llamacpp-bf16 /
llamacpp-f32 / llamacpp-f16 (that GGUF, llama.cpp's default f16 KV cache, flash attention off
as llama-cpp-python's default), llamacpp-bf16-fa (flash attention on). --threads 1,2 runs every
configuration at each thread count.
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def last_json(text):
    for line in reversed(text.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            return json.loads(line)
    raise ValueError("no JSON line in the output")


def command(a, cfg, threads):
    rows = ["--contexts", a.contexts, "--prefill", a.prefill, "--decode-tokens", str(a.decode_tokens),
            "--reps", "1", "--threads", str(threads)]
    if cfg.startswith("llamacpp"):
        dtype = cfg.split("-")[1]
        gguf = getattr(a, "gguf_" + dtype)
        if not gguf:
            raise SystemExit(f"cpu_speed: {cfg} needs --gguf-{dtype}")
        cmd = [sys.executable, os.path.join(ROOT, "bench", "llamacpp_peer.py"), "--speed", "--gguf", gguf] + rows
        return cmd + (["--flash-attn"] if cfg.endswith("-fa") else [])
    model = ["-m", a.hf] if a.hf else ["--random-weights", a.random_weights]
    if cfg == "before":
        return [a.base_bin] + model + rows
    cmd = [os.path.join(a.build, "bench_cpu_decode")] + model + rows
    extra = {"ours": [], "ours-kv-bf16": ["--cpu-kv", "bf16"], "ours-f32": ["--cpu-weights", "f32"],
             "ours-f16": ["--cpu-weights", "f16"], "ours-bf16": ["--cpu-weights", "bf16"],
             "ours-bf16-kv-bf16": ["--cpu-weights", "bf16", "--cpu-kv", "bf16"],
             "ours-bf16-dot": ["--cpu-weights", "bf16-dot"],
             "ours-bf16-dot-kv-bf16": ["--cpu-weights", "bf16-dot", "--cpu-kv", "bf16"]}
    if cfg not in extra:
        raise SystemExit(f"cpu_speed: unknown configuration {cfg}")
    return cmd + extra[cfg]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--label", required=True)
    ap.add_argument("--hf", help="Hugging Face checkpoint directory (ours and before)")
    ap.add_argument("--random-weights", help="a shape instead of --hf (ours and before)")
    ap.add_argument("--gguf-bf16")
    ap.add_argument("--gguf-f32")
    ap.add_argument("--gguf-f16")
    ap.add_argument("--base-bin", help="bench_cpu_decode built from the baseline commit")
    ap.add_argument("--base-commit", default="")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--configs", default="before,ours,llamacpp-bf16")
    ap.add_argument("--threads", default="2")
    ap.add_argument("--contexts", default="64,1536,8000")
    ap.add_argument("--prefill", default="512,2048")
    ap.add_argument("--decode-tokens", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=1800)
    ap.add_argument("--out", required=True)
    ap.add_argument("--table-only", action="store_true", help="rewrite OUT's .md table from OUT (no runs)")
    a = ap.parse_args()
    if a.table_only:
        result = json.load(open(a.out))
        cfgs = []
        for s in result["summary"]:
            if s["config"] not in cfgs:
                cfgs.append(s["config"])
        write_table(result, cfgs, os.path.splitext(a.out)[0] + ".md")
        return
    configs = [c for c in a.configs.split(",") if c]
    threads = [int(t) for t in a.threads.split(",") if t]
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    cpu = ""
    try:
        cpu = next(l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    runs = []
    for rnd in range(a.rounds):
        for t in threads:
            for cfg in configs:
                cmd = command(a, cfg, t)
                load0 = os.getloadavg()
                t0 = time.time()
                p = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout)
                if p.returncode != 0:
                    print(f"cpu_speed: {cfg} failed ({p.returncode}): {p.stderr[-500:]}", file=sys.stderr)
                    continue
                r = last_json(p.stdout)
                runs.append({"round": rnd, "config": cfg, "threads": t, "command": " ".join(cmd),
                             "wall_s": time.time() - t0, "loadavg_before": load0[0], "loadavg_after": os.getloadavg()[0],
                             "decode": r["decode"], "prefill": r["prefill"]})
                print(f"round {rnd} {cfg} t={t} load {load0[0]:.2f}: " +
                      ", ".join(f"d{d['context']}={d['ms_per_token']:.2f}ms" for d in r["decode"]) + ", " +
                      ", ".join(f"p{q['tokens']}={q['tokens_per_s']:.0f}/s" for q in r["prefill"]), file=sys.stderr)
    # cells: (config, threads, row) -> values over the rounds
    summary = []
    for t in threads:
        for cfg in configs:
            rs = [r for r in runs if r["config"] == cfg and r["threads"] == t]
            if not rs:
                continue
            for kind, key, unit in (("decode", "context", "ms_per_token"), ("prefill", "tokens", "tokens_per_s")):
                for row in rs[0][kind]:
                    v = [x[unit] for r in rs for x in r[kind] if x[key] == row[key]]
                    summary.append({"config": cfg, "threads": t, "row": f"{kind} {row[key]}", "unit": unit,
                                    "median": statistics.median(v), "min": min(v), "max": max(v), "n": len(v)})
    loads = [r["loadavg_before"] for r in runs] + [r["loadavg_after"] for r in runs]
    result = {
        "command": " ".join([os.path.relpath(sys.argv[0], ROOT)] + sys.argv[1:]),
        "label": a.label, "commit": commit, "base_commit": a.base_commit,
        "machine": {"uname": " ".join(platform.uname()), "cpu": cpu, "n_cpus": os.cpu_count(),
                    "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())},
        "loadavg_1min": {"min": min(loads), "median": statistics.median(loads), "max": max(loads)} if loads else {},
        "summary": summary, "runs": runs,
    }
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    json.dump(result, open(a.out, "w"), indent=1)
    write_table(result, configs, os.path.splitext(a.out)[0] + ".md")


def write_table(result, configs, path):
    """The table: one row per measurement and thread count, one column per configuration;
    a cell is the median over the rounds and, in brackets, the best round (the least
    disturbed by the machine's other tenants)."""
    summary = result["summary"]
    rounds = max([s["n"] for s in summary] or [0])
    lo, hi = result["loadavg_1min"].get("min", 0), result["loadavg_1min"].get("max", 0)
    md = [f"{result['label']}: median of {rounds} rounds (best round in brackets); commit {result['commit']}, "
          f"before = {result['base_commit']}; 1-minute load average {lo:.2f}-{hi:.2f}", "",
          "| row | threads | " + " | ".join(configs) + " |", "|---|---|" + "---|" * len(configs)]
    rows = []
    for s in summary:
        if (s["row"], s["threads"]) not in rows:
            rows.append((s["row"], s["threads"]))
    for row, t in rows:
        cells = []
        for cfg in configs:
            s = next((s for s in summary if s["config"] == cfg and s["threads"] == t and s["row"] == row), None)
            if s is None:
                cells.append("")
            elif s["unit"] == "ms_per_token":
                cells.append(f"{s['median']:.2f} ms ({s['min']:.2f})")
            else:
                cells.append(f"{s['median']:.0f}/s ({s['max']:.0f})")
        md.append(f"| {row} | {t} | " + " | ".join(cells) + " |")
    text = "\n".join(md) + "\n"
    open(path, "w").write(text)
    print(text)

if __name__ == "__main__":
    main()
