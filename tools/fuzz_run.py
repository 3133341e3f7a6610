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
  fuzz_run.py merge OUT.json [OUT.json ...] --into bench/results/fuzz.json [--build build-fuzz] [--need S]
      sum the runs' rows per target and commit into the record
      {"targets": [{"target", "cpu_s", "execs", "crashes", "commit"}], "at_head": {...}, "runs": [...]};
      at_head sums, per target, the runs that fuzzed the code HEAD has (at_head's rule); --need S:
      exit 1 unless every target has S CPU seconds there and no crash
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

ARTIFACT_KINDS = ("crash", "leak", "timeout", "oom")  # libFuzzer's artifact files that are failures
TIMEOUT_EXIT = 70  # libFuzzer's -timeout_exitcode default


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
    children, started = {}, {}
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
            started[p.pid] = time.time()
    rows = {}

    def row(name):
        return rows.setdefault(name, {"target": name, "cpu_s": 0.0, "execs": 0, "crashes": 0, "processes": 0,
                                      "exit_codes": [], "wall_s": 0.0,
                                      "crash_files": {k: 0 for k in ARTIFACT_KINDS}})

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
        files = {kind: len(glob.glob(f"{dest}/artifacts/{name}/{k}/{kind}-*")) for kind in ARTIFACT_KINDS}
        crashes = sum(files.values())
        r = row(name)
        for kind, n in files.items():
            r["crash_files"][kind] += n
        r["wall_s"] += time.time() - started[pid]
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
        r["wall_s"] = round(r["wall_s"], 1)
        r["commit"] = commit
    rec = {"commit": commit, "machine": f"{platform.node()} ({os.cpu_count()} CPUs)", "seconds": seconds,
           "procs_per_target": procs, "procs_for": counts, "nice": nice, "wall_s": round(time.time() - t0, 1),
           "targets": sorted(rows.values(), key=lambda r: r["target"])}
    json.dump(rec, open(json_out, "w"), indent=1)
    for r in rec["targets"]:
        print(f"{r['target']}: {r['cpu_s']} CPU s, {r['execs']} execs, {r['crashes']} crashes")
    return 1 if any(r["crashes"] or None in r["exit_codes"] for r in rows.values()) else 0


def fuzzed_files(build, target):
    """The repository files that make up harness `target` of `build` (make fuzz's build dir): the
    compile units its binary holds (DWARF: the library objects the linker pulled in, the harness
    itself), every header those objects include (their .o.d files) and the build's CMake files."""
    src = next(l.split("=", 1)[1].strip() for l in open(f"{build}/CMakeCache.txt")
               if l.startswith("CMAKE_HOME_DIRECTORY:")) + "/"
    info = subprocess.run(["readelf", "--debug-dump=info", "--dwarf-depth=1", f"{build}/fuzz_{target}"],
                          check=True, capture_output=True, text=True).stdout
    units = set()
    for cu in info.split("DW_TAG_compile_unit")[1:]:
        m = re.search(r"DW_AT_name\s*:(?:.*?\):)?\s*(\S+)", cu[:2000])
        if m and m.group(1).startswith(src):
            units.add(m.group(1)[len(src):])
    if not units:
        sys.exit(f"fuzz_run.py: {build}/fuzz_{target} names no source of {src} (built without -g?)")
    files = set(units) | {"CMakeLists.txt", "cmake/fuzz.cmake"}
    for u in units:
        for dep in glob.glob(f"{build}/CMakeFiles/*/{u}.o.d"):
            files |= {w[len(src):] for w in open(dep).read().replace("\\\n", " ").split() if w.startswith(src)}
    return sorted(files)


def same_code(commit, files):
    """True when `files` (paths from the repository's top) are identical at `commit` and at HEAD
    (False for a commit git does not know), from any working directory."""
    known = subprocess.run(["git", "cat-file", "-e", f"{commit}^{{commit}}"], capture_output=True).returncode == 0
    return known and subprocess.run(["git", "diff", "--quiet", commit, "HEAD", "--",
                                     *(f":(top,literal){f}" for f in files)]).returncode == 0


def failures(r):
    """The crash files of run row r that are not timeouts of a starved process: per kind when the
    row has them; for older rows, all of them unless every failing process exited with libFuzzer's
    timeout code."""
    if "crash_files" in r:
        return sum(n for kind, n in r["crash_files"].items() if kind != "timeout")
    failing = [c for c in r.get("exit_codes", []) if c != 0]
    return 0 if failing and all(c == TIMEOUT_EXIT for c in failing) else r["crashes"]


AT_HEAD_RULE = ("a run counts when the target's files (fuzzed_files) are unchanged between its commit and "
                "HEAD, and its processes were not starved (CPU time at least half their wall time: libFuzzer's "
                "-timeout is a wall-clock alarm, so a starved process reports timeouts that are not the "
                "input's). A starved run's CPU time and timeouts are left out; its other crash files (crash, "
                "leak, oom) still count. Wall time: the processes' own where the record has it, else the run's "
                "seconds per process.")


def at_head(recs, runs, build):
    """Per target, the runs that fuzzed the code HEAD has (AT_HEAD_RULE)."""
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], check=True, capture_output=True,
                          text=True).stdout.strip()
    rows, left_out, files = {}, [], {}

    def target_row(name):
        return rows.setdefault(name, {"target": name, "cpu_s": 0.0, "execs": 0, "crashes": 0, "commit": head,
                                      "runs": [], "files": len(files[name])})

    for rec, f in zip(recs, runs):
        for r in rec["targets"]:
            name = r["target"]
            if name not in files:
                files[name] = fuzzed_files(build, name) if os.path.exists(f"{build}/fuzz_{name}") else None
            why = None
            if files[name] is None:
                why = "no such harness in " + build
            elif not same_code(r["commit"], files[name]):
                why = f"its code at {r['commit']} is not HEAD's"
            else:
                wall = r["wall_s"] if "wall_s" in r else rec.get("seconds", 0) * r.get("processes", 1)
                if wall and r["cpu_s"] < 0.5 * wall:
                    why = (f"starved: {r['cpu_s']} CPU s in {wall} s of {r.get('processes', 1)} processes "
                           f"({r['crashes']} crash/timeout files)")
            real = failures(r) if why and why.startswith("starved") else 0
            if why:
                if real:  # a starved run's real crashes still count
                    target_row(name)["crashes"] += real
                    why += f"; its {real} crash files that are not timeouts count"
                left_out.append({"file": os.path.basename(f), "target": name, "why": why})
                continue
            t = target_row(name)
            t["cpu_s"] = round(t["cpu_s"] + r["cpu_s"], 1)
            t["execs"] += r["execs"]
            t["crashes"] += r["crashes"]
            t["runs"].append(os.path.basename(f))
    return {"commit": head, "rule": AT_HEAD_RULE,
            "targets": sorted(rows.values(), key=lambda r: r["target"]), "left_out": left_out}


def merge(runs, into, build, need):
    recs = [json.load(open(f)) for f in runs]
    totals = {}
    for rec in recs:
        for r in rec["targets"]:
            t = totals.setdefault((r["target"], r["commit"]), {"target": r["target"], "cpu_s": 0.0, "execs": 0,
                                                               "crashes": 0, "commit": r["commit"]})
            t["cpu_s"] = round(t["cpu_s"] + r["cpu_s"], 1)
            t["execs"] += r["execs"]
            t["crashes"] += r["crashes"]
    head = at_head(recs, runs, build)
    out = {"command": "tools/fuzz_run.py run (scripts/fuzz_record.sh here, scripts/device_fuzz.sh on the GPU "
                      "machine's idle cores), tools/fuzz_run.py merge",
           "note": "cpu_s: the CPU seconds of every libFuzzer process of the target, summed over the runs "
                   "(user + system by getrusage; records older than fuzz_run.py: the wall time of one-process "
                   "runs, as their note says); clang libFuzzer with ASan and UBSan. targets: per target and "
                   "commit; at_head: per target, the runs whose fuzzed code is HEAD's (tools/fuzz_run.py merge "
                   "recomputes it at any later commit)",
           "targets": sorted(totals.values(), key=lambda r: (r["commit"], r["target"])),
           "at_head": head,
           "runs": [{k: v for k, v in rec.items() if k != "targets"} | {"file": os.path.basename(f)}
                    for rec, f in zip(recs, runs)]}
    json.dump(out, open(into, "w"), indent=1)
    print(f"at HEAD ({head['commit']}): the runs that fuzzed the code it has")
    short = []
    for r in head["targets"]:
        print(f"  {r['target']}: {r['cpu_s']} CPU s, {r['execs']} execs, {r['crashes']} crashes, "
              f"{len(r['runs'])} runs")
        if r["cpu_s"] < need or r["crashes"]:
            short.append(r["target"])
    # the targets are the harnesses the build has (a new one with no run is missing; a removed one is not)
    built = {os.path.basename(b)[len("fuzz_"):] for b in glob.glob(f"{build}/fuzz_*")
             if os.path.isfile(b) and os.access(b, os.X_OK)}
    missing = sorted(built - {r["target"] for r in head["targets"] if r["cpu_s"] > 0} - set(short))
    for name in missing:
        print(f"  {name}: no run of the code HEAD has")
    for lo in head["left_out"]:
        print(f"  left out: {lo['file']} {lo['target']}: {lo['why']}")
    if need and not built:
        print(f"no harness in {build} (make fuzz's build): nothing to hold to {need} CPU s")
        return 1
    if need and (short or missing):
        print(f"under {need} CPU s or with crashes at HEAD: {' '.join(short + missing)}")
        return 1
    return 0


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
    m.add_argument("--build", default="build-fuzz", help="make fuzz's build (the harnesses' files)")
    m.add_argument("--need", type=float, default=0, metavar="CPU_S",
                   help="exit 1 unless every target has CPU_S at HEAD and no crash")
    a = ap.parse_args()
    if a.cmd == "stage":
        stage(a.build, a.dest)
    elif a.cmd == "run":
        sys.exit(run(a.dest, a.seconds, a.procs, a.nice, a.commit, a.json, a.procs_for))
    else:
        build = a.build
        if not os.path.isdir(build) and not os.path.isabs(build):  # relative to the repository's top
            top = subprocess.run(["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True).stdout.strip()
            build = os.path.join(top, build) if top else build
        sys.exit(merge(a.runs, a.into, build, a.need))


if __name__ == "__main__":
    main()
