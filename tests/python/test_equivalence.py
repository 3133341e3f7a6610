"""Python results equal the CLI's and the server's for the same requests (issue 23, 2).

Greedy answers (text and token counts) and cached-token counts of the same chat requests:
  - against `lazyattn serve`: one fresh server and one fresh LLM get the same sequence of
    requests (every method, documents in the file's order then reversed, so the reversed
    request finds them cached under block/mepic/lazy and not under prefix), and must answer
    each with the same text, completion_tokens, prompt_tokens and cached_tokens;
  - against `lazyattn run --warm --stats`: a fresh process per request warms the cache with
    the documents reversed and one token, then asks; a fresh LLM does the same.
Across methods, block / mepic / lazy / block-ref answer alike and prefix equals recompute
(DESIGN.md §4), which the same data shows.
"""

import json

import pytest

from conftest import CLI, chat_item, held_out, run

METHODS = ["lazy", "block", "mepic", "block-ref", "prefix", "recompute"]
ORDERS = {"file": lambda d: list(d), "reversed": lambda d: list(reversed(d))}
MAX_TOKENS = 64  # `lazyattn run`'s default -n
QUESTIONS = held_out(2, hops=1) + held_out(1, hops=2)


def server_chat(server, item, method):
    status, body = server.post("/v1/chat/completions", {
        "model": "rag-tiny", "messages": item["messages"], "documents": item["documents"],
        "method": method, "max_tokens": MAX_TOKENS, "temperature": 0})
    assert status == 200, body
    u = body["usage"]
    return {"text": body["choices"][0]["message"]["content"], "completion_tokens": u["completion_tokens"],
            "prompt_tokens": u["prompt_tokens"], "cached_tokens": u["prompt_tokens_details"]["cached_tokens"]}


def python_chat(llm, sp, item, method):
    o = llm.generate(item, sp, method=method)[0]
    assert o.finish_reason in ("stop", "length")
    return {"text": o.text, "completion_tokens": o.completion_tokens, "prompt_tokens": o.prompt_tokens,
            "cached_tokens": o.cached_tokens}


def test_python_equals_server_across_methods_and_orders(lazyattn_pkg, server):
    llm = lazyattn_pkg.LLM()
    sp = lazyattn_pkg.SamplingParams(max_tokens=MAX_TOKENS)
    rows = []
    for q in QUESTIONS:
        for method in METHODS:
            for order, reorder in ORDERS.items():
                item = chat_item(q, reorder)
                py, srv = python_chat(llm, sp, item, method), server_chat(server, item, method)
                rows.append((q["id"], method, order, py))
                assert py == srv, f"{q['id']} {method} {order}: python {py} != server {srv}"
    llm.close()
    by = {(qid, m, o): r for qid, m, o, r in rows}
    for q in QUESTIONS:
        for order in ORDERS:
            lazy = by[(q["id"], "lazy", order)]["text"]
            for m in ("block", "mepic", "block-ref"):
                assert by[(q["id"], m, order)]["text"] == lazy, (q["id"], m, order)
            assert by[(q["id"], "prefix", order)]["text"] == by[(q["id"], "recompute", order)]["text"]
        # the reordered request found its documents cached (block-wise methods that cache)
        for m in ("lazy", "block", "mepic"):
            assert by[(q["id"], m, "reversed")]["cached_tokens"] > 0, (q["id"], m)
        assert by[(q["id"], "recompute", "reversed")]["cached_tokens"] == 0


def test_content_parts_make_the_same_prompt_as_the_server(lazyattn_pkg, server):
    """A parts list is one message: its non-empty text parts joined with a newline, in
    Python as in the server (api_request.c), the same as the joined string."""
    q = QUESTIONS[0]
    parts = [{"type": "text", "text": q["question"]}, {"type": "text", "text": ""},
             {"type": "text", "text": "Answer briefly."}]
    joined = q["question"] + "\nAnswer briefly."
    sp = lazyattn_pkg.SamplingParams(max_tokens=8)
    with lazyattn_pkg.LLM() as llm:
        got = [python_chat(llm, sp, {"messages": [{"role": "user", "content": c}], "documents": q["documents"]},
                           "lazy") for c in (parts, joined)]
    srv = [server_chat(server, {"messages": [{"role": "user", "content": c}], "documents": q["documents"]}, "lazy")
           for c in (parts, joined)]
    for g in got + srv[1:]:
        assert (g["text"], g["prompt_tokens"]) == (srv[0]["text"], srv[0]["prompt_tokens"])


def cli_run(q, docs, method):
    cmd = [CLI, "run", "--method", method, "--warm", "--stats", "-n", str(MAX_TOKENS), "-p", q["question"]]
    for d in docs:
        cmd += ["--title", d["title"], "--doc", d["text"]]
    r = run(cmd, timeout=600)
    assert r.returncode == 0, r.stderr
    st = json.loads(r.stderr.strip().splitlines()[-1])
    return {"text": r.stdout, "completion_tokens": st["generated_tokens"], "prompt_tokens": st["prompt_tokens"],
            "cached_tokens": st["doc_tokens_reused"] + st["prefix_tokens_reused"],
            "doc_tokens_reused": st["doc_tokens_reused"], "finish": st["finish"]}


@pytest.mark.parametrize("method", METHODS)
def test_python_equals_cli_run(lazyattn_pkg, method):
    sp = lazyattn_pkg.SamplingParams(max_tokens=MAX_TOKENS)
    for q in QUESTIONS[:2]:
        for order, reorder in ORDERS.items():
            docs = reorder(q["documents"])
            cli = cli_run(q, docs, method)
            with lazyattn_pkg.LLM(method=method) as llm:  # a fresh cache, as a fresh process has
                llm.generate(chat_item(q, lambda d: list(reversed(docs))), lazyattn_pkg.SamplingParams(max_tokens=1))
                o = llm.generate(chat_item(q, lambda d: docs), sp)[0]
            py = {"text": o.text, "completion_tokens": o.completion_tokens, "prompt_tokens": o.prompt_tokens,
                  "cached_tokens": o.cached_tokens, "doc_tokens_reused": o.doc_tokens_reused,
                  "finish": o.finish_reason}
            assert py == cli, f"{q['id']} {method} {order}: python {py} != cli {cli}"


# (SamplingParams field, value): the server's 400 message for the same JSON field is the
# message Python raises (src/server/api_request.c and python/lazyattn/request.py)
BAD_SAMPLING = [("temperature", -1), ("temperature", 2.5), ("temperature", "hot"), ("top_p", 0), ("top_p", 1.5),
                ("top_k", -2), ("top_k", 0.5), ("seed", "x"), ("stop", [""]), ("stop", 5), ("stop", ["a"] * 17),
                ("stop", [3]), ("ignore_eos", 1), ("n", 0), ("n", 129), ("min_tokens", -1), ("seed", 2**64), ("seed", -2**63 - 1),
                ("min_p", 1.5), ("presence_penalty", 3), ("frequency_penalty", -2.5), ("repetition_penalty", 0),
                ("logit_bias", {"x": 1}), ("logit_bias", {"5": 200}), ("stop_token_ids", [-1]),
                ("allowed_token_ids", []), ("max_tokens", 0), ("max_tokens", 9000),
                ("max_tokens", 2.5)]
BAD_REQUEST = [("documents", "one"), ("documents", [""]), ("documents", [{"title": "t"}]), ("documents", [5]),
               ("documents", [{"text": 5}]), ("documents", [{"text": "x", "title": 3}]), ("method", "fast"),
               ("method", 3), ("cache_salt", 7), ("cache_salt", ""), ("messages", []), ("messages", [{"role": "bot", "content": "x"}]),
               ("messages", [{"role": "system", "content": "x"}]), ("messages", [{"content": "x"}]),
               ("messages", [{"role": "user"}]), ("messages", [{"role": "user", "content": [{"type": "image"}]}]),
               ("messages", "hi")]


def server_error(server, field, value):
    body = {"model": "rag-tiny", "messages": [{"role": "user", "content": "Where?"}], field: value}
    status, reply = server.post("/v1/chat/completions", body)
    assert status == 400, (field, value, reply)
    return reply["error"]["message"], reply["error"]["code"]


def test_bad_values_raise_the_servers_messages(lazyattn_pkg, llm, server):
    lp = lazyattn_pkg
    for field, value in BAD_SAMPLING + BAD_REQUEST:
        message, code = server_error(server, field, value)
        with pytest.raises(lp.LazyattnError) as info:
            if field in ("messages", "documents", "method", "cache_salt"):
                kw = {"method": value} if field == "method" else {"cache_salt": value} if field == "cache_salt" else {}
                item = {"messages": value if field == "messages" else [{"role": "user", "content": "Where?"}]}
                if field == "documents":
                    item["documents"] = value
                llm.generate(item, **kw)
            else:
                llm.generate({"messages": [{"role": "user", "content": "Where?"}]}, lp.SamplingParams(**{field: value}))
        assert str(info.value) == message, (field, value)
        want = lp.InvalidTypeError if code == "invalid_type" else lp.InvalidArgumentError
        assert isinstance(info.value, want), (field, value, code, type(info.value))
