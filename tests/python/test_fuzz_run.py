"""tools/fuzz_run.py merge's at_head (issue 28's hour per target "at the resolving commit"): a
run counts for a target only when the target's files are the same at the run's commit and at
HEAD, and only when its processes were not starved (a starved run's crashes that are not timeouts
still count); a commit git does not know never counts; --need covers every harness of the build.
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


def record(commit_, cpu_s, crashes=0, seconds=100, procs=2, exit_codes=None, crash_files=None):
    row = {"target": "parser", "cpu_s": cpu_s, "execs": 10, "crashes": crashes, "processes": procs,
           "commit": commit_, "exit_codes": exit_codes if exit_codes is not None else [0] * procs}
    if crash_files is not None:
        row["crash_files"] = crash_files
    return {"commit": commit_, "seconds": seconds, "procs_per_target": procs, "targets": [row]}


def scratch(tmp_path, monkeypatch, harnesses=("parser",)):
    """A repository whose HEAD has parser.c as commit `same` had it, and a build with those harnesses."""
    repo = str(tmp_path / "repo")
    os.makedirs(os.path.join(repo, "sub"))
    git(repo, "init", "-q")
    old = commit(repo, "parser.c", "v1")         # code HEAD does not have
    same = commit(repo, "parser.c", "v2")        # the code HEAD has
    commit(repo, "notes.md", "docs only")        # HEAD: the fuzzed file unchanged since `same`
    os.makedirs(tmp_path / "build")
    for h in harnesses:
        path = tmp_path / "build" / f"fuzz_{h}"
        open(path, "w").close()
        os.chmod(path, 0o755)
    monkeypatch.chdir(repo)
    monkeypatch.setattr(fuzz_run, "fuzzed_files", lambda build, target: ["parser.c"])
    return repo, old, same


def write_runs(tmp_path, recs):
    runs = []
    for i, rec in enumerate(recs):
        path = str(tmp_path / f"run{i}.json")
        json.dump(rec, open(path, "w"))
        runs.append(path)
    return runs


def test_at_head_counts_only_runs_of_heads_code(tmp_path, monkeypatch):
    repo, old, same = scratch(tmp_path, monkeypatch)
    runs = write_runs(tmp_path, [record(old, 190.0), record(same, 180.0),
                                 record(same, 20.0, crashes=1, exit_codes=[70, 0]),
                                 record("0123abc", 200.0), record(same, 150.0)])
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
    # from a subdirectory the file comparison is the same (paths are from the repository's top)
    os.chdir(os.path.join(repo, "sub"))
    assert fuzz_run.merge(runs, into, str(tmp_path / "build"), 300) == 0
    assert json.load(open(into))["at_head"]["targets"][0]["runs"] == ["run1.json", "run4.json"]


def test_a_starved_runs_real_crash_still_counts(tmp_path, monkeypatch):
    """A process that crashed early used little CPU: it must not hide as "starved"."""
    _, _, same = scratch(tmp_path, monkeypatch)
    into = str(tmp_path / "fuzz.json")
    for crashed in (record(same, 20.0, crashes=1, exit_codes=[77, 0]),  # libFuzzer's crash exit code
                    record(same, 20.0, crashes=1, crash_files={"crash": 0, "leak": 1, "timeout": 0, "oom": 0})):
        runs = write_runs(tmp_path, [record(same, 500.0), crashed])
        assert fuzz_run.merge(runs, into, str(tmp_path / "build"), 300) == 1
        head = json.load(open(into))["at_head"]
        assert head["targets"][0]["crashes"] == 1 and head["targets"][0]["cpu_s"] == 500.0
    # per-kind files: a starved process's timeout is forgiven, as with the timeout exit code
    runs = write_runs(tmp_path, [record(same, 500.0),
                                 record(same, 20.0, crashes=1, crash_files={"crash": 0, "leak": 0, "timeout": 1,
                                                                            "oom": 0})])
    assert fuzz_run.merge(runs, into, str(tmp_path / "build"), 300) == 0
    # wall time recorded per process: a run that ended early by itself is judged by it
    runs = write_runs(tmp_path, [record(same, 500.0)])
    rec = record(same, 20.0)
    rec["targets"][0]["wall_s"] = 30.0
    json.dump(rec, open(str(tmp_path / "run1.json"), "w"))
    assert fuzz_run.merge(runs + [str(tmp_path / "run1.json")], into, str(tmp_path / "build"), 300) == 0
    assert json.load(open(into))["at_head"]["targets"][0]["cpu_s"] == 520.0


def test_need_covers_every_harness_the_build_has(tmp_path, monkeypatch):
    _, _, same = scratch(tmp_path, monkeypatch, harnesses=("parser", "newharness"))
    runs = write_runs(tmp_path, [record(same, 500.0)])
    into = str(tmp_path / "fuzz.json")
    assert fuzz_run.merge(runs, into, str(tmp_path / "build"), 300) == 1  # newharness never ran
    os.remove(tmp_path / "build" / "fuzz_newharness")
    assert fuzz_run.merge(runs, into, str(tmp_path / "build"), 300) == 0
    # a build directory with no harness (a wrong --build) never passes
    assert fuzz_run.merge(runs, into, str(tmp_path / "no-such-build"), 300) == 1
    os.remove(tmp_path / "build" / "fuzz_parser")
    assert fuzz_run.merge(runs, into, str(tmp_path / "build"), 300) == 1
