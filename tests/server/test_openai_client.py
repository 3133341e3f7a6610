"""End-to-end test of `lazyattn serve` with the official `openai` Python client.

Usage: python3 tests/server/test_openai_client.py PORT

Run by tests/server/test_openai_e2e.c against a server started with a small KV pool
(--kv-blocks 64) on the tiny fixture model (random weights: answers are gibberish, but
greedy decoding is deterministic, which is what these checks rely on). Exit status 0 when
every check passes; each failure is printed.
"""

import concurrent.futures
import json
import random
import sys
import time
import traceback
import urllib.request

import openai
from openai import OpenAI

PORT = int(sys.argv[1])
BASE = f"http://127.0.0.1:{PORT}"
client = OpenAI(base_url=BASE + "/v1", api_key="unused", max_retries=0, timeout=300)

TOPICS = ["rivers", "mountains", "the weather", "old castles", "ships", "bread", "owls",
          "copper mines", "jazz", "glaciers", "printing", "tea"]
DOCS = [{"title": f"Doc {i}", "text": f"Document {i} is about {t}; it has a few facts about {t}."}
        for i, t in enumerate(TOPICS)]


def http_json(path, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(BASE + path, data=data,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as r:
        return json.loads(r.read())


def metric(name):
    with urllib.request.urlopen(BASE + "/metrics", timeout=60) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    raise AssertionError(f"metric {name} missing")


MODEL = None


def chat(docs, question, method="lazy", salt=None, stream=False, max_tokens=16):
    extra = {"documents": docs, "method": method}
    if salt:
        extra["cache_salt"] = salt
    args = dict(model=MODEL, messages=[{"role": "user", "content": question}],
                max_tokens=max_tokens, temperature=0, extra_body=extra)
    if not stream:
        r = client.chat.completions.create(**args)
        return r.choices[0].message.content, r.choices[0].finish_reason, r
    text, finish, usage, ext = "", None, None, None
    for i, chunk in enumerate(client.chat.completions.create(
            stream=True, stream_options={"include_usage": True}, **args)):
        if chunk.choices:
            c = chunk.choices[0]
            if i == 0:
                assert c.delta.role == "assistant", "first chunk carries the role"
            if c.delta.content:
                text += c.delta.content
            if c.finish_reason:
                finish = c.finish_reason
        if chunk.usage:
            usage = chunk.usage
            ext = (chunk.model_extra or {}).get("lazyattn")
    return text, finish, (usage, ext)


def complete(prompt, docs, method="lazy", salt=None, stream=False, max_tokens=16):
    extra = {"documents": docs, "method": method}
    if salt:
        extra["cache_salt"] = salt
    args = dict(model=MODEL, prompt=prompt, max_tokens=max_tokens, temperature=0,
                extra_body=extra)
    if not stream:
        r = client.completions.create(**args)
        return r.choices[0].text, r.choices[0].finish_reason, r
    text, finish, usage = "", None, None
    for chunk in client.completions.create(stream=True, stream_options={"include_usage": True},
                                           **args):
        if chunk.choices:
            text += chunk.choices[0].text
            if chunk.choices[0].finish_reason:
                finish = chunk.choices[0].finish_reason
        if chunk.usage:
            usage = chunk.usage
    return text, finish, usage


# ---------------------------------------------------------------------------- checks


def check_models():
    global MODEL
    models = client.models.list().data
    assert len(models) == 1, models
    MODEL = models[0].id
    assert MODEL == "tiny-f32-tied", MODEL


def check_completion_stream_equals_non_stream():
    docs = [DOCS[0], DOCS[1]["text"]]
    text, finish, r = complete("The answer is", docs, max_tokens=24)
    assert r.object == "text_completion" and r.id.startswith("cmpl-")
    assert r.usage.completion_tokens > 0
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    s_text, s_finish, s_usage = complete("The answer is", docs, stream=True, max_tokens=24)
    assert s_text == text, (s_text, text)
    assert s_finish == finish, (s_finish, finish)
    assert s_usage.completion_tokens == r.usage.completion_tokens
    assert s_usage.prompt_tokens == r.usage.prompt_tokens


def check_chat_stream_equals_non_stream():
    docs = [DOCS[2], DOCS[3]]
    text, finish, r = chat(docs, "What is it about?", max_tokens=24)
    assert r.object == "chat.completion" and r.id.startswith("chatcmpl-")
    assert r.choices[0].message.role == "assistant"
    assert finish in ("stop", "length")
    ext = r.model_extra["lazyattn"]
    assert ext["method"] == "lazy" and ext["ttft_ms"] > 0
    s_text, s_finish, (s_usage, s_ext) = chat(docs, "What is it about?", stream=True, max_tokens=24)
    assert s_text == text, (s_text, text)
    assert s_finish == finish
    assert s_usage.completion_tokens == r.usage.completion_tokens
    assert s_ext["doc_tokens"] == ext["doc_tokens"]


def check_reordered_all_cached(method):
    salt = f"reorder-{method}"
    a, b, c = DOCS[4], DOCS[5], DOCS[6]
    _, _, r1 = chat([a, b, c], "Which document mentions ships?", method=method, salt=salt)
    assert r1.usage.prompt_tokens_details.cached_tokens == 0, r1.usage
    _, _, r2 = chat([c, a, b], "Which document mentions ships?", method=method, salt=salt)
    ext = r2.model_extra["lazyattn"]
    cached = r2.usage.prompt_tokens_details.cached_tokens
    assert ext["method"] == method
    assert ext["doc_tokens_reused"] == ext["doc_tokens"], ext
    assert cached >= ext["doc_tokens"], (method, cached, ext)


def check_reordered_prefix_only_shares_the_prefix():
    salt = "reorder-prefix"
    a, b, c = DOCS[7], DOCS[8], DOCS[9]
    chat([a, b, c], "Which one?", method="prefix", salt=salt)
    _, _, r2 = chat([c, a, b], "Which one?", method="prefix", salt=salt)
    _, _, r3 = chat([b, c, a], "Which one?", method="prefix", salt=salt)
    ext = r2.model_extra["lazyattn"]
    cached = r2.usage.prompt_tokens_details.cached_tokens
    assert ext["doc_tokens_reused"] == 0, ext
    assert 0 < cached < ext["doc_tokens"], (cached, ext)
    assert cached % 16 == 0, cached
    # whichever document comes first, what is shared is the same prefix (the preamble)
    assert r3.usage.prompt_tokens_details.cached_tokens == cached


def check_prewarm_then_reuse():
    docs = [DOCS[10], DOCS[11]["text"]]
    r = http_json("/v1/documents", {"documents": docs, "cache_salt": "warm"})
    assert [d["cached"] for d in r["documents"]] == [False, False], r
    r = http_json("/v1/documents", {"documents": docs, "cache_salt": "warm"})
    assert [d["cached"] for d in r["documents"]] == [True, True], r
    _, _, c = chat(docs, "Tea?", salt="warm")
    assert c.model_extra["lazyattn"]["doc_tokens_reused"] >= r["tokens"]


def check_errors():
    try:
        chat([DOCS[0]], "x", method="magic")
        raise AssertionError("unknown method accepted")
    except openai.BadRequestError as e:
        assert e.status_code == 400 and e.body["param"] == "method", e.body
    try:
        client.completions.create(model="no-such-model", prompt="x", max_tokens=2)
        raise AssertionError("unknown model accepted")
    except openai.NotFoundError as e:
        assert e.body["code"] == "model_not_found", e.body
    try:
        client.completions.create(model=MODEL, prompt="x", max_tokens=0)
        raise AssertionError("max_tokens 0 accepted")
    except openai.BadRequestError as e:
        assert e.body["param"] == "max_tokens", e.body


def workload(method):
    """32 RAG requests (chat and completions), 3 of 12 documents each, in shuffled orders."""
    rng = random.Random(1234)
    reqs = []
    for i in range(32):
        docs = rng.sample(DOCS, 3)
        reqs.append((i % 2 == 0, docs, f"Question {i}: what do they share?", method))
    return reqs


def run_one(req):
    is_chat, docs, q, method = req
    salt = f"conc-{method}"
    if is_chat:
        text, finish, _ = chat(docs, q, method=method, salt=salt)
    else:
        text, finish, _ = complete(q, docs, method=method, salt=salt)
    return text, finish


def check_concurrent_equals_sequential(method):
    reqs = workload(method)
    evictions_before = metric("lazyattn_kv_evictions_total")
    sequential = [run_one(r) for r in reqs]
    with concurrent.futures.ThreadPoolExecutor(max_workers=32) as pool:
        concurrent_ = list(pool.map(run_one, reqs))
    for i, (s, c) in enumerate(zip(sequential, concurrent_)):
        assert s == c, f"{method} request {i}: sequential {s!r} != concurrent {c!r}"
    evictions = metric("lazyattn_kv_evictions_total") - evictions_before
    assert evictions > 0, f"{method}: the KV pool was not small enough to evict"
    # the engine refreshes its stats after the step that answered the last request
    for _ in range(1000):
        if metric("lazyattn_kv_blocks_pinned") == 0 and metric("lazyattn_running_requests") == 0:
            break
        time.sleep(0.01)
    assert metric("lazyattn_kv_blocks_pinned") == 0, "blocks still pinned after every answer"
    return evictions


def main():
    checks = [
        ("models", check_models),
        ("completion stream == non-stream", check_completion_stream_equals_non_stream),
        ("chat stream == non-stream", check_chat_stream_equals_non_stream),
        ("reordered docs cached (lazy)", lambda: check_reordered_all_cached("lazy")),
        ("reordered docs cached (block)", lambda: check_reordered_all_cached("block")),
        ("reordered docs cached (mepic)", lambda: check_reordered_all_cached("mepic")),
        ("reordered docs, prefix shares only the prefix", check_reordered_prefix_only_shares_the_prefix),
        ("prewarm then reuse", check_prewarm_then_reuse),
        ("errors", check_errors),
        ("32 concurrent == sequential (lazy)", lambda: check_concurrent_equals_sequential("lazy")),
        ("32 concurrent == sequential (prefix)", lambda: check_concurrent_equals_sequential("prefix")),
    ]
    failed = 0
    for name, fn in checks:
        try:
            out = fn()
            print(f"ok    {name}" + (f" ({out} evictions)" if out is not None else ""), flush=True)
        except Exception:  # noqa: BLE001 - report every failure and continue
            failed += 1
            print(f"FAIL  {name}", flush=True)
            traceback.print_exc()
            if MODEL is None:
                break
    print(f"{len(checks) - failed}/{len(checks)} checks passed", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
