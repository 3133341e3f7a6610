"""Several replicas with real components (issue 22): `lazyattn serve` replicas sharing
document KV through a redis-server, behind nginx, publishing KV events on ZMQ. Every
process is started here (scripts/replicas_up.sh, or directly) on loopback ports and stopped
by its PID.

    python3 tests/deploy/test_replicas.py [BUILD_DIR]

Run by ctest (deploy/test_replicas). Exit status 0 when every check passes. The bundled
model answers the held-out questions, so "the identical answer" is a real one.
"""

import concurrent.futures
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

from loopback import free_port
import traceback
import urllib.error
import urllib.request

import msgspec
import zmq

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else os.path.join(ROOT, "build")
LAZYATTN = os.path.join(BUILD, "lazyattn")
MODEL = os.path.join(ROOT, "models", "rag-tiny")
QUESTIONS = [json.loads(l) for l in open(os.path.join(MODEL, "eval", "test.jsonl"))][:24]
SERVE = ["-m", MODEL, "--threads", "1"]


# ---- processes ----------------------------------------------------------------------------

class Deployment:
    """scripts/replicas_up.sh in a temporary run directory; down() stops it by PID."""

    def __init__(self, n=2, serve=(), redis_args="", events_port=0, redis_url=None):
        self.dir = tempfile.mkdtemp(prefix="lazyattn-deploy-")
        cmd = [os.path.join(ROOT, "scripts", "replicas_up.sh"), "-n", str(n), "--dir", self.dir,
               "--lazyattn", LAZYATTN, "--events-port", str(events_port)]
        if redis_args:
            cmd += ["--redis-args", redis_args]
        if redis_url:
            cmd += ["--redis-url", redis_url]
        cmd += ["--"] + SERVE + list(serve)
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        if r.returncode != 0:
            logs = self.log_tails()
            self.down()
            raise AssertionError(f"replicas_up failed: {r.stderr}{logs}")
        env = {}
        for line in open(os.path.join(self.dir, "env")):
            k, v = line.strip().split("=", 1)
            env[k] = v.strip('"')
        self.url = env["URL"]
        self.redis_url = env["REDIS_URL"]
        self.redis_port = int(self.redis_url.rsplit(":", 1)[1])
        self.ports = [int(p) for p in env["REPLICA_PORTS"].split()]
        self.pids = [int(p) for p in env["REPLICA_PIDS"].split()]
        self.secret = env["SECRET_FILE"]

    def replica(self, i):
        return f"http://127.0.0.1:{self.ports[i]}"

    def redis_pid(self):
        for line in open(os.path.join(self.dir, "pids")):
            kind, pid = line.split()
            if kind == "redis":
                return int(pid)
        return None

    def log_tails(self, lines=20):
        """The last lines of every log in the run directory, for an error message."""
        out = ""
        for name in sorted(os.listdir(self.dir)):
            if name.endswith(".log"):
                with open(os.path.join(self.dir, name), errors="replace") as f:
                    tail = f.readlines()[-lines:]
                out += f"\n--- {name} (last {len(tail)} lines)\n" + "".join(tail)
        return out

    def down(self):
        """Stops what replicas_up started (by its PIDs) and removes the run directory, unless
        LA_TEST_KEEP=1 (then its logs stay for a post-mortem)."""
        if os.path.exists(os.path.join(self.dir, "pids")):
            subprocess.run([os.path.join(ROOT, "scripts", "replicas_down.sh"), self.dir],
                           capture_output=True, timeout=120)
        if os.environ.get("LA_TEST_KEEP") == "1":
            print(f"kept {self.dir} (LA_TEST_KEEP=1)")
        else:
            shutil.rmtree(self.dir, ignore_errors=True)


def redis_cli(port, *args):
    r = subprocess.run(["redis-cli", "-h", "127.0.0.1", "-p", str(port)] + list(args),
                       capture_output=True, text=True, timeout=30)
    return r.stdout


# ---- HTTP ----------------------------------------------------------------------------------

def post(base, path, body, timeout=300):
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def metrics(base):
    out = {}
    with urllib.request.urlopen(base + "/metrics", timeout=60) as r:
        for line in r.read().decode().splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                out[name] = float(value)
    return out


def metric(m, name, **labels):
    """Sum of every sample of name whose labels include `labels`."""
    total, found = 0.0, False
    for key, v in m.items():
        base, _, rest = key.partition("{")
        if base != name:
            continue
        if all(f'{k}="{val}"' in rest for k, val in labels.items()):
            total += v
            found = True
    if not found:
        raise AssertionError(f"metric {name} {labels} missing")
    return total


def ask(base, q, order=None, salt=None, max_tokens=12):
    docs = q["documents"] if order is None else [q["documents"][i] for i in order]
    body = {"model": "rag-tiny", "messages": [{"role": "user", "content": q["question"]}],
            "documents": docs, "max_tokens": max_tokens, "temperature": 0, "method": "lazy"}
    if salt:
        body["cache_salt"] = salt
    r = post(base, "/v1/chat/completions", body)
    return r["choices"][0]["message"]["content"], r


def doc_key(d):
    return (d.get("title", ""), d["text"])


def settle(dep, timeout=30):
    """Wait until every replica's computed documents have reached the shared tier (written
    or failed): the write-through is asynchronous, this keeps the counting test exact."""
    t0 = time.time()
    while time.time() - t0 < timeout:
        done = True
        for i in range(len(dep.ports)):
            m = metrics(dep.replica(i))
            computed = metric(m, "lazyattn_documents_computed_total")
            written = (metric(m, "lazyattn_kv_store_writes_total", tier="shared") +
                       metric(m, "lazyattn_kv_store_write_failures_total", tier="shared"))
            done = done and written >= computed
        if done:
            return
        time.sleep(0.05)
    raise AssertionError("the shared tier's writes did not settle")


# ---- checks --------------------------------------------------------------------------------

def check_second_replica_uses_the_first_ones_documents():
    dep = Deployment(2)
    try:
        q = QUESTIONS[0]
        a, ra = ask(dep.replica(0), q)
        settle(dep)
        order = list(range(len(q["documents"])))
        random.Random(1).shuffle(order)
        b, rb = ask(dep.replica(1), q, order)
        assert a == b, f"answers differ: {a!r} vs {b!r}"
        assert any(ans.lower() in a.lower() for ans in q["answers"]), (a, q["answers"])
        la = rb["lazyattn"]
        assert la["doc_tokens_computed"] == 0, la
        assert la["doc_tokens_shared"] == la["doc_tokens"], la
        cached = rb["usage"]["prompt_tokens_details"]["cached_tokens"]
        assert cached >= la["doc_tokens"], (cached, la)
        m = metrics(dep.replica(1))
        assert metric(m, "lazyattn_kv_store_hits_total", tier="shared") == len(q["documents"]) + 1
        print(f"ok: replica B served all {len(q['documents'])} documents (+ the system block) "
              f"from the shared tier, same answer {a!r}")
    finally:
        dep.down()


def check_round_robin_computes_each_document_once():
    dep = Deployment(2)
    try:
        rng = random.Random(2)
        seen = set()
        for k in range(20):
            q = QUESTIONS[rng.randrange(6)]
            order = list(range(len(q["documents"])))
            rng.shuffle(order)
            ask(dep.url, q, order)
            seen.update(doc_key(q["documents"][i]) for i in order)
            settle(dep)
        computed = sum(metric(metrics(dep.replica(i)), "lazyattn_documents_computed_total")
                       for i in range(2))
        assert computed == len(seen) + 1, (computed, len(seen))  # + the system block
        per = [metric(metrics(dep.replica(i)), "lazyattn_engine_requests_total", outcome="ok")
               for i in range(2)]
        assert min(per) >= 5, f"nginx did not spread the requests: {per}"
        print(f"ok: 20 requests through nginx ({per[0]:.0f} + {per[1]:.0f}), "
              f"{len(seen)} distinct documents computed once across both replicas")
    finally:
        dep.down()


def check_faults():
    # references: answers of a replica with no shared tier trouble
    dep = Deployment(2)
    try:
        ref = {i: ask(dep.replica(0), QUESTIONS[i])[0] for i in range(8)}
        # Redis killed mid-load: every request still answered, correctly
        rpid = dep.redis_pid()
        with concurrent.futures.ThreadPoolExecutor(8) as ex:
            futs = [ex.submit(ask, dep.replica(k % 2), QUESTIONS[k % 8],
                              list(reversed(range(len(QUESTIONS[k % 8]["documents"])))))
                    for k in range(16)]
            time.sleep(0.3)
            os.kill(rpid, signal.SIGKILL)
            answers = [f.result()[0] for f in futs]
        for k, a in enumerate(answers):
            assert a == ref[k % 8], (k, a, ref[k % 8])
        # more requests while it is down: answered, errors counted
        for i in range(4):
            assert ask(dep.replica(1), QUESTIONS[8 + i])[0]
        m = metrics(dep.replica(1))
        assert metric(m, "lazyattn_kv_store_errors_total", tier="shared") > 0
        assert metric(m, "lazyattn_kv_store_up", tier="shared") == 0
        # Redis back on the same port: hits resume
        rp = subprocess.Popen(["redis-server", "--port", str(dep.redis_port), "--bind", "127.0.0.1",
                               "--save", "", "--appendonly", "no"], stdout=subprocess.DEVNULL)
        try:
            for _ in range(100):
                if "PONG" in redis_cli(dep.redis_port, "ping"):
                    break
                time.sleep(0.1)
            time.sleep(6)  # past the longest back-off
            # each replica reconnects on its next store operation: a throwaway question on
            # each, then wait until both say the tier is up, so the check below does not race
            # a reconnection (a write made while one is under way can be dropped)
            ask(dep.replica(0), QUESTIONS[19])
            ask(dep.replica(1), QUESTIONS[20])
            settle(dep)
            for _ in range(300):
                if all(metric(metrics(dep.replica(i)), "lazyattn_kv_store_up", tier="shared") == 1 for i in range(2)):
                    break
                time.sleep(0.1)
            q = QUESTIONS[16]  # asked nowhere yet
            ask(dep.replica(0), q, [1, 0] + list(range(2, len(q["documents"]))))
            settle(dep)
            hits0 = metric(metrics(dep.replica(1)), "lazyattn_kv_store_hits_total", tier="shared")
            a, r = ask(dep.replica(1), q)
            hits1 = metric(metrics(dep.replica(1)), "lazyattn_kv_store_hits_total", tier="shared")
            assert hits1 > hits0, (hits0, hits1)
            assert metric(metrics(dep.replica(1)), "lazyattn_kv_store_up", tier="shared") == 1
            # a record overwritten with garbage: rejected, recomputed, the right answer
            q = QUESTIONS[17]
            a0 = ask(dep.replica(0), q)[0]
            settle(dep)
            for key in redis_cli(dep.redis_port, "--scan", "--pattern", "lazyattn:kv:*").split():
                if key.count(":") == 2:  # a record header, not a chunk
                    redis_cli(dep.redis_port, "SET", key, "x" * 200)
            rej0 = metric(metrics(dep.replica(1)), "lazyattn_kv_store_rejected_total")
            a1, r1 = ask(dep.replica(1), q, list(reversed(range(len(q["documents"])))))
            assert a1 == a0, (a1, a0)
            assert r1["lazyattn"]["doc_tokens_computed"] > 0
            assert metric(metrics(dep.replica(1)), "lazyattn_kv_store_rejected_total") > rej0
            # Redis answering OOM to writes: still answered, write failures counted
            redis_cli(dep.redis_port, "FLUSHALL")
            redis_cli(dep.redis_port, "CONFIG", "SET", "maxmemory-policy", "noeviction")
            redis_cli(dep.redis_port, "CONFIG", "SET", "maxmemory", "1")  # below what it uses: OOM
            f0 = metric(metrics(dep.replica(0)), "lazyattn_kv_store_write_failures_total", tier="shared")
            q = QUESTIONS[18]
            assert ask(dep.replica(0), q)[0] == ask(dep.replica(1), q)[0]
            time.sleep(1)
            f1 = metric(metrics(dep.replica(0)), "lazyattn_kv_store_write_failures_total", tier="shared")
            assert f1 > f0, (f0, f1)
        finally:
            rp.terminate()
            rp.wait(30)
        print("ok: Redis killed mid-load, restarted, answering garbage and OOM: every answer right, "
              "errors, rejections and write failures counted, hits resumed")
    finally:
        dep.down()

    # a replica killed mid-load: nginx routes to the other, no client hangs. Six clients ask
    # without pause; the kill comes after the 10th answer and the clients go on until 30
    # answers have come after it, so the check does not depend on how fast the machine is.
    dep = Deployment(2)
    try:
        q = QUESTIONS[0]
        ref = ask(dep.url, q)[0]
        lock = threading.Lock()
        log = []  # (started, finished, answer)
        killed = threading.Event()
        t_kill = [None]

        def client(k):
            while True:
                with lock:
                    after = sum(1 for _, f, _ in log if t_kill[0] is not None and f > t_kill[0])
                    if killed.is_set() and after >= 30:
                        return
                    k += 6
                order = list(range(len(q["documents"])))[::1 if k % 2 else -1]
                t = time.time()
                a = ask(dep.url, q, order)[0]
                with lock:
                    log.append((t, time.time(), a))
        t0 = time.time()
        with concurrent.futures.ThreadPoolExecutor(6) as ex:
            futs = [ex.submit(client, k) for k in range(6)]
            while len(log) < 10 and time.time() - t0 < 120:
                time.sleep(0.001)
            with lock:
                t_kill[0] = time.time()
                os.kill(dep.pids[0], signal.SIGKILL)
                killed.set()
            for f in futs:
                f.result(timeout=300)
        assert all(a == ref for _, _, a in log), [a for _, _, a in log]
        across = sum(1 for s, f, _ in log if s < t_kill[0] < f)
        after = sum(1 for _, f, _ in log if f > t_kill[0])
        assert across >= 1, "no request was in flight at the kill"
        print(f"ok: a replica killed mid-load; nginx answered all {len(log)} requests ({across} in "
              f"flight at the kill, {after} after it) in {time.time() - t0:.1f} s")
    finally:
        dep.down()

    # wrong password: a clear error at start
    port = free_port()
    rp = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                           "--requirepass", "right"], stdout=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        r = subprocess.run([LAZYATTN, "serve", "--port", "0", "--kv-store",
                            f"redis://:wrong@127.0.0.1:{port}"] + SERVE,
                           capture_output=True, text=True, timeout=120)
        assert r.returncode != 0, r
        assert "AUTH" in r.stderr, r.stderr
        print(f"ok: a wrong password stops serve at start: {r.stderr.strip().splitlines()[-1]}")
    finally:
        rp.terminate()
        rp.wait(30)


# vLLM's KV event classes (vllm/distributed/kv_events.py, array_like as the subscribers of
# llm-d and Dynamo decode them)
class EventBatch(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
    ts: float
    events: list
    data_parallel_rank: int | None = None


class KVCacheEvent(msgspec.Struct, array_like=True, omit_defaults=True, gc=False, tag=True):
    pass


class BlockStored(KVCacheEvent):
    block_hashes: list[int]
    parent_block_hash: int | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: str | None


class BlockRemoved(KVCacheEvent):
    block_hashes: list[int]
    medium: str | None


class AllBlocksCleared(KVCacheEvent):
    pass


class KVEventBatch(EventBatch):
    events: list[BlockStored | BlockRemoved | AllBlocksCleared]


def check_kv_events():
    base = free_port()
    dep = Deployment(1, serve=["--kv-blocks", "48"], events_port=base)
    try:
        ctx = zmq.Context()
        sub = ctx.socket(zmq.SUB)
        sub.connect(f"tcp://127.0.0.1:{base}")
        sub.setsockopt(zmq.SUBSCRIBE, b"")
        time.sleep(0.5)  # the slow joiner
        dec = msgspec.msgpack.Decoder(type=KVEventBatch)
        raw = msgspec.msgpack.Decoder()
        q = QUESTIONS[0]
        pre = post(dep.replica(0), "/v1/documents", {"documents": q["documents"], "method": "lazy"})
        stored, removed, doc_keys, seqs = {}, set(), set(), []
        deadline = time.time() + 10
        while time.time() < deadline:
            if not sub.poll(200):
                if stored:
                    break
                continue
            topic, seq, payload = sub.recv_multipart()
            seqs.append(int.from_bytes(seq, "big"))
            batch = dec.decode(payload)  # vLLM's schema decodes it
            for ev, rawev in zip(batch.events, raw.decode(payload)[1]):
                if isinstance(ev, BlockStored):
                    assert ev.medium == "CPU", ev.medium  # the CPU backend's pool
                    for i, h in enumerate(ev.block_hashes):
                        stored[h] = ev
                    extra = rawev[8] if len(rawev) > 8 else None
                    if extra:
                        assert extra[0][0] == "lazyattn.document", extra
                        doc_keys.add(extra[0][1])
                elif isinstance(ev, BlockRemoved):
                    removed.update(ev.block_hashes)
        assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs), seqs
        for d in pre["documents"]:
            for h in d["block_hashes"]:
                assert h in stored, f"document {d['index']}: block {h} never reported stored"
            assert d["key"] in doc_keys, d["key"]
        # eviction: more documents than the pool holds
        for q2 in QUESTIONS[1:5]:
            post(dep.replica(0), "/v1/documents", {"documents": q2["documents"], "method": "lazy"})
        deadline = time.time() + 10
        while time.time() < deadline and not removed:
            if sub.poll(200):
                _, _, payload = sub.recv_multipart()
                for ev in dec.decode(payload).events:
                    if isinstance(ev, BlockRemoved):
                        removed.update(ev.block_hashes)
        assert removed & set(stored), "no stored block was reported removed on eviction"
        print(f"ok: KV events decode with vLLM's classes: {len(stored)} blocks stored (every block "
              f"the server reported), {len(doc_keys)} documents named, {len(removed)} removed")
        sub.close()
        ctx.term()
    finally:
        dep.down()


def check_salts_stay_apart():
    dep = Deployment(2)
    try:
        q = QUESTIONS[3]
        ask(dep.replica(0), q, salt="tenant-a")
        settle(dep)
        _, rb = ask(dep.replica(1), q, salt="tenant-b")
        assert rb["lazyattn"]["doc_tokens_shared"] == 0, rb["lazyattn"]
        _, rn = ask(dep.replica(1), q)
        assert rn["lazyattn"]["doc_tokens_shared"] == 0, rn["lazyattn"]
        _, ra = ask(dep.replica(1), q, [1, 0] + list(range(2, len(q["documents"]))), salt="tenant-a")
        assert ra["lazyattn"]["doc_tokens_shared"] > 0, ra["lazyattn"]
        print("ok: a record written under salt A is not found under salt B or none on another replica")
    finally:
        dep.down()


CHECKS = [check_second_replica_uses_the_first_ones_documents, check_round_robin_computes_each_document_once,
          check_salts_stay_apart, check_kv_events, check_faults]

if __name__ == "__main__":
    only = os.environ.get("LA_DEPLOY_CHECKS")  # e.g. "check_faults": run those alone
    if only:
        CHECKS = [c for c in CHECKS if c.__name__ in only.split(",")]
    failed = 0
    for c in CHECKS:
        try:
            c()
        except Exception:
            failed += 1
            print(f"FAIL: {c.__name__}")
            traceback.print_exc()
    print(f"{len(CHECKS) - failed}/{len(CHECKS)} checks passed")
    sys.exit(1 if failed else 0)
