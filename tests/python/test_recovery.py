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


def test_recompute_ratio_equals_the_server(lazyattn_pkg, llm, server):
    """Selected recovery (recompute_ratio): Python and the server choose the same tokens (same
    answer, same counts); round(R x the later documents' tokens) are recomputed and all of
    them probed; the engine default equals the request's own; refused as recompute_first is."""
    lp = lazyattn_pkg
    item = chat_item(Q, reorder=lambda d: d[1:] + d[:1])
    sp = lp.SamplingParams(max_tokens=16, logprobs=2)
    out = llm.generate(item, sp, recompute_ratio=0.25)[0]
    status, body = server.post("/v1/chat/completions", {
        "model": "rag-tiny", "messages": item["messages"], "documents": item["documents"],
        "max_tokens": 16, "logprobs": True, "top_logprobs": 2, "recompute_ratio": 0.25})
    assert status == 200, body
    assert out.text == body["choices"][0]["message"]["content"]
    ext = body["lazyattn"]
    assert out.doc_tokens_recomputed == ext["doc_tokens_recomputed"] > 0
    assert out.doc_tokens_probed == ext["doc_tokens_probed"]
    # the preamble is document 0: every later document's tokens are probed, the preamble's not
    assert 0 < out.doc_tokens_probed < out.doc_tokens == ext["doc_tokens"]
    assert out.doc_tokens_recomputed == int(0.25 * out.doc_tokens_probed + 0.5)
    with lp.LLM(recompute_ratio=0.25) as other:
        theirs = other.generate(item, sp)[0]
        assert other.generate(item, sp, method="prefix")[0].doc_tokens_probed == 0
    assert theirs.token_ids == out.token_ids
    assert theirs.doc_tokens_recomputed == out.doc_tokens_recomputed
    with pytest.raises(lp.InvalidArgumentError, match="block-wise methods"):
        llm.generate(chat_item(Q), method="prefix", recompute_ratio=0.5)
    with pytest.raises(lp.InvalidArgumentError):
        llm.generate(chat_item(Q), recompute_ratio=1.5)
    status, body = server.post("/v1/chat/completions", {
        "model": "rag-tiny", "messages": chat_item(Q)["messages"], "recompute_ratio": 2})
    assert status == 400 and body["error"]["param"] == "recompute_ratio", body


def test_doc_context_preamble_equals_the_server(lazyattn_pkg, llm, server):
    """A prompt's "doc_context": "preamble" gives the server's answer and counts; the engine
    default LLM(doc_context=1) equals it; an unknown value is refused."""
    lp = lazyattn_pkg
    # a salt of its own: no copy computed alone by another test is found
    item = dict(chat_item(Q, reorder=lambda d: d[1:] + d[:1]), doc_context="preamble", cache_salt="doc-context")
    sp = lp.SamplingParams(max_tokens=16)
    out = llm.generate(item, sp)[0]
    status, body = server.post("/v1/chat/completions", {
        "model": "rag-tiny", "messages": item["messages"], "documents": item["documents"],
        "max_tokens": 16, "doc_context": "preamble", "cache_salt": item["cache_salt"]})
    assert status == 200, body
    assert out.text == body["choices"][0]["message"]["content"]
    assert out.doc_tokens_computed == body["lazyattn"]["doc_tokens_computed"] == out.doc_tokens > 0, "cold"
    plain = {k: v for k, v in item.items() if k != "doc_context"}
    # the keyword applies to every prompt without its own; a prompt's own value wins
    kw = llm.generate(plain, sp, doc_context="preamble")[0]
    assert kw.text == out.text and kw.doc_tokens_reused == kw.doc_tokens, "every preamble-keyed copy found"
    alone = llm.generate(dict(item, doc_context="alone"), sp, doc_context="preamble")[0]
    assert 0 < alone.doc_tokens_reused < alone.doc_tokens, "alone finds document 0 only"
    for default in (1, "preamble"):
        with lp.LLM(doc_context=default) as other:
            theirs = other.generate(plain, sp)[0]
            assert theirs.text == out.text
            with pytest.raises(lp.InvalidArgumentError, match="pre-warming"):
                other.prewarm(item["documents"])
            warm = other.prewarm(item["documents"][:1], doc_context="alone")
            assert len(warm) == 1 and warm[0]["tokens"] > 0
    with pytest.raises(lp.InvalidArgumentError, match="doc_context"):
        llm.generate(dict(item, doc_context="before"), sp)
    with pytest.raises(lp.InvalidArgumentError, match="doc_context"):
        lp.LLM(doc_context="before")
    for bad in (["preamble"], {"a": 1}, 1, True):
        with pytest.raises(lp.InvalidTypeError, match="doc_context"):
            llm.generate(dict(item, doc_context=bad), sp)
