"""Shared set-up of the Python tests (run by `make test`: ctest "python/pytest").

The tests import the package from python/ of this checkout and load the library of the
build tree ($LAZYATTN_BUILD_DIR, default build/): what `make` just built. test_install.py
checks the other way in: `pip install .` into a fresh venv, and `make install`.
"""

import json
import os
import re
import string
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.path.abspath(os.environ.get("LAZYATTN_BUILD_DIR", os.path.join(ROOT, "build")))
MODEL = os.path.join(ROOT, "models", "rag-tiny")
EVAL = os.path.join(MODEL, "eval", "test.jsonl")
CLI = os.path.join(BUILD, "lazyattn")

os.environ["LAZYATTN_LIBRARY"] = os.path.join(BUILD, "liblazyattn.so.0")
os.environ.pop("LAZYATTN_MODEL", None)
sys.path.insert(0, os.path.join(ROOT, "python"))


def held_out(n, hops=None):
    """The first n held-out questions of the bundled model (models/rag-tiny/eval/test.jsonl)."""
    out = []
    with open(EVAL) as f:
        for line in f:
            q = json.loads(line)
            if hops is None or q["hops"] == hops:
                out.append(q)
            if len(out) == n:
                break
    return out


def normalize(s):
    """src/bench/rag_dataset.c la_rag_normalize: no ASCII punctuation, lower case, no articles."""
    s = "".join(c for c in s if c not in string.punctuation).lower()
    return " ".join(w for w in s.split() if w not in ("a", "an", "the"))


def answer_matches(prediction, answers):
    """la_rag_answer_matches: a gold answer contained on word boundaries."""
    p = normalize(prediction)
    return any(a and re.search(r"(^| )" + re.escape(a) + r"( |$)", p) for a in map(normalize, answers))


def chat_item(q, reorder=None):
    docs = q["documents"] if reorder is None else reorder(q["documents"])
    return {"messages": [{"role": "user", "content": q["question"]}], "documents": docs}


@pytest.fixture(scope="session")
def lazyattn_pkg():
    if not os.path.exists(os.environ["LAZYATTN_LIBRARY"]):
        pytest.fail(f"{os.environ['LAZYATTN_LIBRARY']} is missing: build the tree first (make)")
    import lazyattn
    return lazyattn


@pytest.fixture(scope="session")
def llm(lazyattn_pkg):
    m = lazyattn_pkg.LLM()
    yield m
    m.close()


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


class Server:
    """`lazyattn serve --port 0` on loopback, started by the test and stopped by its PID."""

    def __init__(self, *args):
        import re as _re
        import threading
        import time
        self.proc = subprocess.Popen([CLI, "serve", "--port", "0", *args], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True)
        self.log = []
        deadline = time.monotonic() + 120
        self.port = None
        while self.port is None:
            line = self.proc.stderr.readline()
            if not line or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("lazyattn serve did not start: " + "".join(self.log))
            self.log.append(line)
            m = _re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
            if m:
                self.port = int(m.group(1))
        # keep reading stderr so the server never blocks on a full pipe
        threading.Thread(target=lambda: [self.log.append(x) for x in self.proc.stderr], daemon=True).start()

    def post(self, path, body):
        """(HTTP status, JSON body)."""
        import urllib.error
        import urllib.request
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=300) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()  # SIGTERM to this PID: the server shuts down and exits 0
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


@pytest.fixture(scope="module")
def server():
    if not os.access(CLI, os.X_OK):
        pytest.fail(f"{CLI} is missing: build the tree first (make)")
    s = Server()
    yield s
    assert s.stop() == 0, "".join(s.log)
