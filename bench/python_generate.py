#!/usr/bin/env python3
"""LLM.generate from Python against the CLI's in-process bench on the same prompts (issue 23, 5).

    python3 bench/python_generate.py [--prompts 100] [--max-tokens 32] [--repeats 3]
                                     [--build build] [--device cpu] [--json FILE]

Both sides run the same workload on the bundled model with method lazy: the first N held-out
questions of models/rag-tiny/eval/test.jsonl are asked once with the file's document order
(warm-up, not measured), then all N again with the documents reversed, submitted together
(the bench: --reorder reverse --concurrency N, a closed loop with every request in flight; Python:
one generate() call). Measured: the wall time of the N reversed requests. The two alternate
--repeats times, each in a fresh engine; the medians and the best runs are printed side by
side with their ratios and saved as JSON with the command, commit and machine (default
bench/results/python_generate_<device>.json), with the share of Python's wall time spent outside
la_engine_step (what the bindings add; the machine's load hardly moves it). Answers must agree: the script fails if the two
sides' exact-match counts or output-token totals differ. A benchmark, never a test assertion on
time.
"""

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
sys.path.insert(0, os.path.join(ROOT, "python"))


def cli_bench(cli, n, max_tokens, device):
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "bench.json")
        cmd = [cli, "bench", "--dataset", os.path.join(ROOT, "models", "rag-tiny", "eval", "test.jsonl"),
               "--requests", str(n), "--methods", "lazy", "--reorder", "reverse", "--concurrency", str(n),
               "--max-tokens", str(max_tokens), "--device", device, "--json", out]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"python_generate: {' '.join(cmd)} failed:\n{r.stderr}")
        with open(out) as f:
            j = json.load(f)
    m = j["methods"][0]
    return {"wall_s": m["wall_s"], "exact_match": round(m["exact_match"] * n),
            "output_tokens": round(m["mean_output_tokens"] * n), "machine": j.get("machine")}


def python_generate(lazyattn, questions, max_tokens, device, answer_matches):
    sp = lazyattn.SamplingParams(max_tokens=max_tokens)
    items = lambda rev: [{"messages": [{"role": "user", "content": q["question"]}],
                          "documents": q["documents"][::-1] if rev else q["documents"]} for q in questions]
    # the bench's engine (src/bench/session.c make_engine): every request of the closed loop runs
    n = len(questions)
    # time inside la_engine_step (the engine's work, the same on both sides); the rest of the
    # wall time is what Python adds (building and submitting requests, the event callbacks
    # run inside the steps are counted as engine time), a figure the machine's load hardly moves
    in_steps = [0.0]
    step = lazyattn.LLM._step

    def timed_step(self):
        t = time.perf_counter()
        step(self)
        in_steps[0] += time.perf_counter() - t

    with lazyattn.LLM(device=device, method="lazy", max_running=max(n, 64), max_queue=1 << 16) as llm:
        llm.generate(items(False), sp)  # warm-up: the file's order
        llm._step = timed_step.__get__(llm)
        t0 = time.perf_counter()
        outs = llm.generate(items(True), sp)
        wall = time.perf_counter() - t0
    em = sum(answer_matches(o.text, q["answers"]) for o, q in zip(outs, questions))
    return {"wall_s": wall, "exact_match": em, "output_tokens": sum(o.completion_tokens for o in outs),
            "in_steps_s": in_steps[0], "outside_steps_s": wall - in_steps[0]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prompts", type=int, default=100)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--json")
    a = ap.parse_args()
    build = os.path.abspath(a.build)
    os.environ.setdefault("LAZYATTN_LIBRARY", os.path.join(build, "liblazyattn.so.0"))
    import lazyattn
    from conftest import answer_matches, held_out

    questions = held_out(a.prompts)
    load_start = os.getloadavg()
    cli, py = [], []
    for _ in range(a.repeats):
        cli.append(cli_bench(os.path.join(build, "lazyattn"), a.prompts, a.max_tokens, a.device))
        py.append(python_generate(lazyattn, questions, a.max_tokens, a.device, answer_matches))
    for c, p in zip(cli, py):
        if (c["exact_match"], c["output_tokens"]) != (p["exact_match"], p["output_tokens"]):
            sys.exit(f"python_generate: answers differ: cli {c} python {p}")
    cw, pw = statistics.median(x["wall_s"] for x in cli), statistics.median(x["wall_s"] for x in py)
    ratio = pw / cw
    # on a shared machine other work only adds time: the best run of each side is the steadier
    # comparison, the medians say how much the runs spread
    cmin, pmin = min(x["wall_s"] for x in cli), min(x["wall_s"] for x in py)
    print(f"{a.prompts} prompts, lazy, documents reversed after a warm-up, max_tokens {a.max_tokens}, "
          f"{a.device}, median of {a.repeats}")
    print(f"{'':24}{'wall s':>10}{'req/s':>10}{'exact match':>14}{'out tokens':>12}")
    print(f"{'lazyattn bench (C)':24}{cw:10.3f}{a.prompts / cw:10.1f}{cli[0]['exact_match']:>14}{cli[0]['output_tokens']:>12}")
    print(f"{'LLM.generate (Python)':24}{pw:10.3f}{a.prompts / pw:10.1f}{py[0]['exact_match']:>14}{py[0]['output_tokens']:>12}")
    load_end = os.getloadavg()
    runs = lambda xs: ", ".join("%.2f" % x["wall_s"] for x in xs)
    print(f"Python / C wall time: median {ratio:.3f} ({(ratio - 1) * 100:+.1f}%), best run {pmin / cmin:.3f} "
          f"({(pmin / cmin - 1) * 100:+.1f}%)")
    outside = statistics.median(x["outside_steps_s"] / x["wall_s"] for x in py)
    print(f"Python outside la_engine_step: {outside * 100:.2f}% of its wall time (median)")
    print(f"runs: C {runs(cli)} s, Python "
          f"{runs(py)} s; load average {load_start[0]:.1f} -> {load_end[0]:.1f} on {os.cpu_count()} cores")
    commit = subprocess.run(["git", "-C", ROOT, "describe", "--always", "--dirty"], capture_output=True,
                            text=True).stdout.strip()
    out = a.json or os.path.join(ROOT, "bench", "results", f"python_generate_{a.device}.json")
    with open(out, "w") as f:
        json.dump({"tool": "bench/python_generate.py", "command": " ".join([sys.executable] + sys.argv),
                   "commit": commit, "machine": cli[0]["machine"] or platform.uname()._asdict(),
                   "python": platform.python_version(),
                   "loadavg_1_5_15min": {"start": load_start, "end": load_end}, "prompts": a.prompts, "max_tokens": a.max_tokens,
                   "device": a.device, "repeats": a.repeats,
                   "cli_bench": [{k: v for k, v in c.items() if k != "machine"} for c in cli],
                   "python_generate": py, "cli_wall_s_median": cw, "python_wall_s_median": pw,
                   "python_over_cli": ratio, "cli_wall_s_min": cmin, "python_wall_s_min": pmin,
                   "python_over_cli_min": pmin / cmin, "python_outside_steps_fraction": outside},
                  f, indent=2)
        f.write("\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
