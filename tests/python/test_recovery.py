"""Recovery (README "Recovery on models not fine-tuned for reuse"): recompute_first through
Python and through `lazyattn serve` give the same answer and the same count of recomputed
document tokens; the engine default (LLM(recompute_first=N)) equals the request's own; the
field under a method that has nothing to recover is refused by both."""

import pytest

from conftest import chat_item, held_out

Q = held_out(1, hops=2)[0]
N = 8


def test_recompute_first_equals_the_server(lazyattn_pkg, llm, server):
    lp = lazyattn_pkg
    item = chat_item(Q)
    sp = lp.SamplingParams(max_tokens=16)
    plain = llm.generate(item, sp)[0]
    out = llm.generate(item, sp, recompute_first=N)[0]
    status, body = server.post("/v1/chat/completions", {
        "model": "rag-tiny", "messages": item["messages"], "documents": item["documents"],
        "max_tokens": 16, "recompute_first": N})
    assert status == 200, body
    assert out.text == body["choices"][0]["message"]["content"]
    # the preamble is document 0; each later document recomputes min(N, its length) tokens
    n_docs = len(item["documents"])
    assert out.doc_tokens_recomputed == body["lazyattn"]["doc_tokens_recomputed"] == N * n_docs
    assert plain.doc_tokens_recomputed == 0
    assert out.doc_tokens_computed == 0, "the documents were cached by the plain request"


def test_engine_default_equals_the_request_field(lazyattn_pkg, llm):
    lp = lazyattn_pkg
    item = chat_item(Q, reorder=lambda d: d[::-1])
    sp = lp.SamplingParams(max_tokens=16, logprobs=2)
    mine = llm.generate(item, sp, recompute_first=N)[0]
    with lp.LLM(recompute_first=N) as other:
        theirs = other.generate(item, sp)[0]
        assert other.generate(item, sp, method="prefix")[0].doc_tokens_recomputed == 0
    assert theirs.doc_tokens_recomputed == mine.doc_tokens_recomputed > 0
    assert theirs.token_ids == mine.token_ids
    for a, b in zip(theirs.logprobs, mine.logprobs):
        assert a.keys() == b.keys()
        assert all(abs(a[k] - b[k]) < 1e-4 for k in a)


def test_refused_where_nothing_is_recovered(lazyattn_pkg, llm, server):
    with pytest.raises(lazyattn_pkg.InvalidArgumentError, match="block-wise methods"):
        llm.generate(chat_item(Q), method="prefix", recompute_first=4)
    with pytest.raises(lazyattn_pkg.InvalidArgumentError):
        llm.generate(chat_item(Q), recompute_first=-1)
    status, body = server.post("/v1/chat/completions", {
        "model": "rag-tiny", "messages": chat_item(Q)["messages"], "method": "recompute",
        "recompute_first": 4})
    assert status == 400 and body["error"]["param"] == "recompute_first", body
