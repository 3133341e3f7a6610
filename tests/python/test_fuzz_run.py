"""tools/fuzz_run.py merge's at_head (issue 28's hour per target "at the resolving commit"): a
run counts for a target only when the target's files are the same at the run's commit and at
HEAD, and only when its processes were not starved; a commit git does not know never counts.
Checked on a scratch git repository with the harness's file list given (fuzzed_files reads a
real fuzz build; make fuzz exercises that)."""

import importlib.util
import json
import os
import subprocess

from conftest import ROOT

spec = importlib.util.spec_from_file_location("fuzz_run", os.path.join(ROOT, "tools", "fuzz_run.py"))
fuzz_run = importlib.util.module_from_spec(spec)
spec.loader.exec_module(fuzz_run)


def git(repo, *args):
    return subprocess.run(["git", "-C", repo, *args], check=True, capture_output=True, text=True).stdout.strip()


def commit(repo, name, text):
    with open(os.path.join(repo, name), "w") as f:
        f.write(text)
    git(repo, "add", name)
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", name + " " + text)
    return git(repo, "rev-parse", "--short", "HEAD")


def record(commit_, cpu_s, crashes=0, seconds=100, procs=2):
    return {"commit": commit_, "seconds": seconds, "procs_per_target": procs,
            "targets": [{"target": "parser", "cpu_s": cpu_s, "execs": 10, "crashes": crashes,
                         "processes": procs, "commit": commit_}]}


def test_at_head_counts_only_runs_of_heads_code(tmp_path, monkeypatch):
    repo = str(tmp_path / "repo")
    os.makedirs(repo)
    git(repo, "init", "-q")
    old = commit(repo, "parser.c", "v1")         # code HEAD does not have
    same = commit(repo, "parser.c", "v2")        # the code HEAD has
    commit(repo, "notes.md", "docs only")        # HEAD: the fuzzed file unchanged since `same`
    os.makedirs(tmp_path / "build")
    open(tmp_path / "build" / "fuzz_parser", "w").close()
    monkeypatch.chdir(repo)
    monkeypatch.setattr(fuzz_run, "fuzzed_files", lambda build, target: ["parser.c"])
    runs = []
    for i, rec in enumerate([record(old, 190.0), record(same, 180.0), record(same, 20.0, crashes=1),
                             record("0123abc", 200.0), record(same, 150.0)]):
        path = str(tmp_path / f"run{i}.json")
        json.dump(rec, open(path, "w"))
        runs.append(path)
    into = str(tmp_path / "fuzz.json")
    rc = fuzz_run.merge(runs, into, str(tmp_path / "build"), 300)
    head = json.load(open(into))["at_head"]
    [row] = head["targets"]
    assert row["cpu_s"] == 330.0 and row["crashes"] == 0
    assert row["runs"] == ["run1.json", "run4.json"]
    why = {lo["file"]: lo["why"] for lo in head["left_out"]}
    assert why["run0.json"].startswith("its code at") and why["run3.json"].startswith("its code at")
    assert why["run2.json"].startswith("starved")  # 20 CPU s in 2 x 100 s: its timeout is not the input's
    assert rc == 0
    assert fuzz_run.merge(runs, into, str(tmp_path / "build"), 400) == 1  # short of 400 CPU s
