"""bench/python_generate.py runs (issue 23, 5: a benchmark, so nothing here is about time):
on 8 prompts, the CLI's in-process bench and LLM.generate give the same answers (the script
fails otherwise) and the JSON holds both sides' runs."""

import json
import sys

from conftest import BUILD, ROOT, run


def test_python_generate_benchmark_runs_and_answers_agree(tmp_path):
    out = tmp_path / "bench.json"
    r = run([sys.executable, f"{ROOT}/bench/python_generate.py", "--prompts", "8", "--repeats", "1",
             "--build", BUILD, "--json", str(out)], timeout=900)
    assert r.returncode == 0, r.stdout + r.stderr
    print(r.stdout)
    j = json.loads(out.read_text())
    (c,), (p,) = j["cli_bench"], j["python_generate"]
    assert c["exact_match"] == p["exact_match"] >= 7 and c["output_tokens"] == p["output_tokens"] > 0
    assert j["python_over_cli"] > 0 and j["commit"] and j["machine"]
