#!/usr/bin/env python3
"""Long libFuzzer runs of the tests/fuzz harnesses, on this machine or on the GPU machine's
idle cores, recorded in bench/results/fuzz.json (issue 28).

  fuzz_run.py stage BUILD_FUZZ DEST
      copy every harness of BUILD_FUZZ (make fuzz's build) into DEST/bin and its ctest inputs
      (the scratch corpus plus every seed directory its ctest entry names) into
      DEST/corpus/<target>, one file per distinct input (named by its SHA-1, as libFuzzer does)
  fuzz_run.py run DEST --seconds S [--procs K] [--procs-for TARGET=K ...] [--nice N] --commit C --json OUT.json
      run K processes of each harness (--procs-for: another count for one target) (they share DEST/corpus/<target>), each for S seconds,
      at nice N; record per target the CPU seconds the processes used (getrusage of each
      child), the inputs executed, and crashes (a crash-*, leak-*, timeout-* or oom-* file;
      libFuzzer's slow-unit-* are not crashes)
  fuzz_run.py merge OUT.json [OUT.json ...] --into bench/results/fuzz.json
      sum the runs' rows per target and commit into the record
      {"targets": [{"target", "cpu_s", "execs", "crashes", "commit"}], "runs": [...]}
"""
import argparse
import glob
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time


def ctest_commands(build):
    """{target: (binary, [corpus and seed directories])} from the fuzz ctest entries."""
    out = subprocess.run(["ctest", "--show-only=json-v1", "-L", "fuzz"], cwd=build, check=True,
                         capture_output=True, text=True).stdout
    cmds = {}
    for t in json.loads(out)["tests"]:
        cmd = t["command"]  # cmake -E env ASAN_OPTIONS=... sh -c '...' BINARY FLAGS... DIRS...
        i = next(k for k, a in enumerate(cmd) if os.path.basename(a).startswith("fuzz_"))
        dirs = [a for a in cmd[i + 1:] if not a.startswith("-")]
        cmds[t["name"].split("/", 1)[1]] = (cmd[i], dirs)
    return cmds


def stage(build, dest):
    os.makedirs(f"{dest}/bin", exist_ok=True)
    for name, (binary, dirs) in sorted(ctest_commands(build).items()):
        shutil.copy2(binary, f"{dest}/bin/")
        corpus = f"{dest}/corpus/{name}"
        os.makedirs(corpus, exist_ok=True)
        n = 0
        for d in dirs:
            for root, _, files in os.walk(d):
                for f in files:
                    data = open(os.path.join(root, f), "rb").read()
                    with open(f"{corpus}/{hashlib.sha1(data).hexdigest()}", "wb") as w:
                        w.write(data)
                    n += 1
        print(f"{name}: {binary} and {n} inputs")


def run(dest, seconds, procs, nice, commit, json_out, procs_for=()):
    bins = sorted(glob.glob(f"{dest}/bin/fuzz_*"))
    counts = {}
    for spec in procs_for:  # NAME=K: K processes of that target instead of procs
        name, _, k = spec.partition("=")
        if not k.isdigit() or not os.path.exists(f"{dest}/bin/fuzz_{name}"):
            sys.exit(f"fuzz_run.py: --procs-for takes TARGET=PROCESSES with a staged target, not '{spec}'")
        counts[name] = int(k)
    logs = f"{dest}/logs"
    os.makedirs(logs, exist_ok=True)
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1")
    children = {}
    t0 = time.time()
    for b in bins:
        name = os.path.basename(b)[len("fuzz_"):]
        for k in range(counts.get(name, procs)):
            art = f"{dest}/artifacts/{name}/{k}/"
            os.makedirs(art, exist_ok=True)
            log = open(f"{logs}/{name}.{k}.log", "w")
            p = subprocess.Popen(["nice", "-n", str(nice), os.path.abspath(b), f"-max_total_time={seconds}",
                                  "-max_len=65536", "-rss_limit_mb=2048", "-timeout=20", "-print_final_stats=1",
                                  f"-artifact_prefix={art}", f"{dest}/corpus/{name}"],
                                 stdout=log, stderr=subprocess.STDOUT, env=env)
            children[p.pid] = (p, name, k, log)  # p kept: a dropped Popen reaps its child itself
    rows = {}

    def row(name):
        return rows.setdefault(name, {"target": name, "cpu_s": 0.0, "execs": 0, "crashes": 0, "processes": 0,
                                      "exit_codes": []})

    while children:
        try:
            pid, status, ru = os.wait4(-1, 0)
        except ChildProcessError:
            break
        if pid not in children:
            continue
        _, name, k, log = children.pop(pid)
        log.close()
        text = open(f"{logs}/{name}.{k}.log", errors="replace").read()
        execs = re.search(r"stat::number_of_executed_units:\s*(\d+)", text)
        crashes = sum(len(glob.glob(f"{dest}/artifacts/{name}/{k}/{kind}-*")) for kind in ("crash", "leak", "timeout", "oom"))
        r = row(name)
        r["cpu_s"] += ru.ru_utime + ru.ru_stime
        r["execs"] += int(execs.group(1)) if execs else 0
        r["crashes"] += crashes
        r["processes"] += 1
        r["exit_codes"].append(os.waitstatus_to_exitcode(status))
    for _, name, k, log in children.values():  # reaped elsewhere: their CPU time is unknown
        log.close()
        row(name)["exit_codes"].append(None)
    for r in rows.values():
        r["cpu_s"] = round(r["cpu_s"], 1)
        r["commit"] = commit
    rec = {"commit": commit, "machine": f"{platform.node()} ({os.cpu_count()} CPUs)", "seconds": seconds,
           "procs_per_target": procs, "procs_for": counts, "nice": nice, "wall_s": round(time.time() - t0, 1),
           "targets": sorted(rows.values(), key=lambda r: r["target"])}
    json.dump(rec, open(json_out, "w"), indent=1)
    for r in rec["targets"]:
        print(f"{r['target']}: {r['cpu_s']} CPU s, {r['execs']} execs, {r['crashes']} crashes")
    return 1 if any(r["crashes"] or None in r["exit_codes"] for r in rows.values()) else 0


def merge(runs, into):
    recs = [json.load(open(f)) for f in runs]
    totals = {}
    for rec in recs:
        for r in rec["targets"]:
            t = totals.setdefault((r["target"], r["commit"]), {"target": r["target"], "cpu_s": 0.0, "execs": 0,
                                                               "crashes": 0, "commit": r["commit"]})
            t["cpu_s"] = round(t["cpu_s"] + r["cpu_s"], 1)
            t["execs"] += r["execs"]
            t["crashes"] += r["crashes"]
    out = {"command": "tools/fuzz_run.py run (scripts/fuzz_record.sh here, scripts/device_fuzz.sh on the GPU "
                      "machine's idle cores), tools/fuzz_run.py merge",
           "note": "cpu_s: the CPU seconds of every libFuzzer process of the target, summed over the runs "
                   "(user + system by getrusage; records older than fuzz_run.py: the wall time of one-process "
                   "runs, as their note says); clang libFuzzer with ASan and UBSan",
           "targets": sorted(totals.values(), key=lambda r: (r["commit"], r["target"])),
           "runs": [{k: v for k, v in rec.items() if k != "targets"} | {"file": os.path.basename(f)}
                    for rec, f in zip(recs, runs)]}
    json.dump(out, open(into, "w"), indent=1)
    for r in out["targets"]:
        print(f"{r['target']} @ {r['commit']}: {r['cpu_s']} CPU s, {r['execs']} execs, {r['crashes']} crashes")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("stage")
    s.add_argument("build")
    s.add_argument("dest")
    r = sub.add_parser("run")
    r.add_argument("dest")
    r.add_argument("--seconds", type=int, required=True)
    r.add_argument("--procs", type=int, default=1)
    r.add_argument("--procs-for", action="append", default=[], metavar="TARGET=K",
                   help="K processes of TARGET instead of --procs (repeatable)")
    r.add_argument("--nice", type=int, default=19)
    r.add_argument("--commit", required=True)
    r.add_argument("--json", required=True)
    m = sub.add_parser("merge")
    m.add_argument("runs", nargs="+")
    m.add_argument("--into", required=True)
    a = ap.parse_args()
    if a.cmd == "stage":
        stage(a.build, a.dest)
    elif a.cmd == "run":
        sys.exit(run(a.dest, a.seconds, a.procs, a.nice, a.commit, a.json, a.procs_for))
    else:
        merge(a.runs, a.into)


if __name__ == "__main__":
    main()
