#!/usr/bin/env python3
"""Soak: many clients against one `lazyattn serve` for a bounded time (issue 28).

    python3 tests/deploy/soak.py BUILD_DIR [--seconds 90] [--clients 32] [--json OUT]

A server on the bundled model with a KV pool far smaller than the documents in play (so
blocks are evicted and recomputed all the time) answers `--clients` threads that each, until
the time is up, ask a held-out question with its documents in one of three orders under one
of four cache salts, streamed or not; one request in ten is cancelled half way (a stream cut
after its first token, or a non-streamed request whose connection is closed early). Checks:
  - every answer that completes equals the same (question, order)'s answer computed first,
    one request at a time, on a fresh server (greedy decoding is deterministic);
  - afterwards, with nothing in flight: no KV block pinned and no request running
    (/metrics), and the server's resident memory grew by less than 64 MiB over a second
    load phase as long as the first (a leak grows with the requests served);
  - the server answers /health throughout and exits cleanly on SIGTERM.
Every process is started and stopped here, on loopback. Exit status 0 when all holds.
"""

import argparse
import http.client
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time

from loopback import free_port

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EVAL = os.path.join(ROOT, "models", "rag-tiny", "eval", "test.jsonl")
N_QUESTIONS = 24
ORDERS = ("file", "reversed", "rotated")
SALTS = ("tenant-a", "tenant-b", "tenant-c", None)
MAX_TOKENS = 24


def reorder(docs, order):
    if order == "reversed":
        return list(reversed(docs))
    if order == "rotated":
        return docs[1:] + docs[:1]
    return list(docs)


def body(q, order, salt, stream):
    b = {"model": "rag-tiny", "messages": [{"role": "user", "content": q["question"]}],
         "documents": reorder(q["documents"], order), "max_tokens": MAX_TOKENS, "temperature": 0,
         "stream": stream}
    if salt:
        b["cache_salt"] = salt
    return json.dumps(b)


class Server:
    def __init__(self, build, kv_blocks):
        self.port = free_port()
        self.proc = subprocess.Popen(
            [os.path.join(build, "lazyattn"), "serve", "--port", str(self.port), "--kv-blocks", str(kv_blocks),
             "--threads", "2", "--max-running", "32", "--max-queue", "1024"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=ROOT)
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                if self.get("/health")[0] == 200:
                    return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("the server did not come up")

    def get(self, path):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        c.request("GET", path)
        r = c.getresponse()
        data = r.read()
        c.close()
        return r.status, data

    def metrics(self):
        text = self.get("/metrics")[1].decode()
        out = {}
        for line in text.splitlines():
            if line and not line.startswith("#") and "{" not in line:
                k, v = line.rsplit(" ", 1)
                out[k] = float(v)
        return out

    def rss_kib(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0

    def chat(self, q, order, salt, stream, cut=False):
        """The answer's text, or None when cut (the request is abandoned part way)."""
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        c.request("POST", "/v1/chat/completions", body=body(q, order, salt, stream),
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        if r.status != 200:
            raise RuntimeError(f"status {r.status}: {r.read()[:200]!r}")
        if cut:  # read the first bytes (streamed) or nothing, then hang up
            if stream:
                r.fp.readline()
            c.sock.shutdown(socket.SHUT_RDWR)
            c.close()
            return None
        if not stream:
            text = json.loads(r.read())["choices"][0]["message"]["content"]
            c.close()
            return text
        text = []
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            delta = json.loads(line[6:])["choices"]
            if delta and delta[0]["delta"].get("content"):
                text.append(delta[0]["delta"]["content"])
        c.close()
        return "".join(text)

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        return rc


def load(server, questions, refs, seconds, clients, seed, stats, failures):
    stop_at = time.time() + seconds

    def client(k):
        rng = random.Random(seed * 1000 + k)
        while time.time() < stop_at and len(failures) < 5:
            qi, order = rng.randrange(len(questions)), rng.choice(ORDERS)
            salt, stream, cut = rng.choice(SALTS), rng.random() < 0.5, rng.random() < 0.1
            try:
                got = server.chat(questions[qi], order, salt, stream, cut)
            except Exception as e:  # noqa: BLE001: reported as a failure
                failures.append(f"client {k}: {e}")
                return
            with stats["lock"]:
                stats["cut" if got is None else "answered"] += 1
            if got is not None and got != refs[(qi, order)]:
                failures.append(f"question {qi} order {order} salt {salt} stream {stream}: "
                                f"{got!r} != {refs[(qi, order)]!r}")

    threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        if server.get("/health")[0] != 200:
            failures.append("/health failed under load")
        time.sleep(1)
    for t in threads:
        t.join()


def wait_idle(server, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        m = server.metrics()
        if m.get("lazyattn_running_requests", 0) == 0 and m.get("lazyattn_kv_blocks_pinned", 0) == 0:
            return m
        time.sleep(0.2)
    return server.metrics()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--seconds", type=float, default=90)
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--json")
    a = ap.parse_args()
    questions = [json.loads(line) for line in open(EVAL)][:N_QUESTIONS]

    # the reference: one request at a time, a fresh server with a pool that holds everything
    ref_server = Server(a.build, 4096)
    refs = {(qi, o): ref_server.chat(q, o, None, False) for qi, q in enumerate(questions) for o in ORDERS}
    ref_server.stop()

    # ~24 questions x 10 documents of ~30 tokens x 4 salts need ~3000 blocks: give 160
    server = Server(a.build, 160)
    failures, stats = [], {"lock": threading.Lock(), "answered": 0, "cut": 0}
    t0 = time.time()
    load(server, questions, refs, a.seconds / 2, a.clients, 1, stats, failures)
    m1 = wait_idle(server)
    rss1 = server.rss_kib()
    load(server, questions, refs, a.seconds / 2, a.clients, 2, stats, failures)
    m2 = wait_idle(server)
    rss2 = server.rss_kib()
    if m2.get("lazyattn_kv_blocks_pinned", -1) != 0 or m2.get("lazyattn_running_requests", -1) != 0:
        failures.append(f"not idle after the load: pinned {m2.get('lazyattn_kv_blocks_pinned')}, "
                        f"running {m2.get('lazyattn_running_requests')}")
    if rss2 - rss1 > 64 * 1024:
        failures.append(f"resident memory grew {(rss2 - rss1) / 1024:.0f} MiB over the second phase")
    evictions = m2.get("lazyattn_kv_evictions_total", 0)
    if evictions == 0:
        failures.append("no KV block was evicted: the pool did not force eviction")
    rc = server.stop()
    if rc != 0:
        failures.append(f"the server exited with {rc} on SIGTERM")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip() or "unknown"
    report = {"command": " ".join(sys.argv), "commit": commit, "build": os.path.basename(os.path.abspath(a.build)),
              "machine": f"{os.uname().nodename} ({os.cpu_count()} CPUs)",
              "seconds": round(time.time() - t0, 1), "clients": a.clients, "answered": stats["answered"],
              "cut": stats["cut"], "evictions": evictions, "rss_mib_after_phase_1": rss1 / 1024,
              "rss_mib_after_phase_2": rss2 / 1024, "failures": failures}
    print(json.dumps(report, indent=1))
    if a.json:
        json.dump(report, open(a.json, "w"), indent=1)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
