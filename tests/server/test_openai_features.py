"""Acceptance 3 of issue 21: the official `openai` Python client against `lazyattn serve`
started with an API key on the bundled model.

Usage: python3 tests/server/test_openai_features.py PORT API_KEY

Checks logprobs (chat and completions, streamed and not: the streamed ones equal the
others), n (choices, usage), response_format (json_object and json_schema, through the
client's own types), the API key (right key, wrong key, none: the client's
AuthenticationError, the OpenAI error shape), X-Request-Id, and that /health stays open.
Exit status 0 when every check passes; each failure is printed.
"""

import json
import sys
import traceback
import urllib.request

import openai
from openai import OpenAI

PORT, KEY = int(sys.argv[1]), sys.argv[2]
BASE = f"http://127.0.0.1:{PORT}"
client = OpenAI(base_url=BASE + "/v1", api_key=KEY, max_retries=0, timeout=300)
MESSAGES = [{"role": "user", "content": "Where was Elkrak Avoltrax born?"}]
DOCS = {"documents": [{"title": "Elkrak Avoltrax",
                       "text": "Elkrak Avoltrax (born 3 September 1972 in Chas, Wirnor) is a cinematographer."}]}
MODEL = "rag-tiny"


def check_api_key():
    assert client.models.list().data[0].id == MODEL
    for bad in ("wrong-key", ""):
        c = OpenAI(base_url=BASE + "/v1", api_key=bad or "x", max_retries=0, timeout=60)
        if not bad:  # no Authorization header at all
            c = OpenAI(base_url=BASE + "/v1", api_key="x", max_retries=0, timeout=60,
                       default_headers={"Authorization": ""})
        try:
            c.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=2)
            raise AssertionError(f"key {bad!r} was accepted")
        except openai.AuthenticationError as e:
            assert e.status_code == 401
            assert e.body["code"] == "invalid_api_key", e.body
            assert e.body["type"] == "invalid_request_error", e.body
    with urllib.request.urlopen(BASE + "/health", timeout=60) as r:  # open without a key
        assert r.status == 200


def check_chat_logprobs_streamed_equal_non_streamed():
    args = dict(model=MODEL, messages=MESSAGES, max_tokens=12, logprobs=True, top_logprobs=4, extra_body=DOCS)
    r = client.chat.completions.create(**args)
    content = r.choices[0].logprobs.content
    assert r.choices[0].finish_reason == "stop" and len(content) == r.usage.completion_tokens - 1, \
        "one entry per token of the text (not the eos that ended it)"
    assert "".join(t.token for t in content) == r.choices[0].message.content
    for t in content:
        assert len(t.top_logprobs) == 4
        lps = [x.logprob for x in t.top_logprobs]
        assert lps == sorted(lps, reverse=True), lps
        assert t.logprob == lps[0], "greedy: the sampled token is the most likely"
        assert bytes(t.bytes).decode("utf-8", "replace") == t.token or "\ufffd" in t.token
    streamed = []
    for chunk in client.chat.completions.create(stream=True, **args):
        if chunk.choices and chunk.choices[0].logprobs and chunk.choices[0].logprobs.content:
            streamed += chunk.choices[0].logprobs.content
    assert [(t.token, round(t.logprob, 5)) for t in streamed] == \
        [(t.token, round(t.logprob, 5)) for t in content]


def check_completion_logprobs():
    r = client.completions.create(model=MODEL, prompt="The quick brown fox", max_tokens=8, logprobs=3,
                                  extra_body={"ignore_eos": True})
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == 8 and len(lp.token_logprobs) == 8 and len(lp.top_logprobs) == 8
    assert "".join(lp.tokens) == r.choices[0].text
    assert lp.text_offset[0] == 0 and lp.text_offset == sorted(lp.text_offset)
    for tok, p, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
        assert tok in top and abs(top[tok] - p) < 1e-6 and p <= 0
    streamed = []
    for chunk in client.completions.create(model=MODEL, prompt="The quick brown fox", max_tokens=8, logprobs=3,
                                           stream=True, extra_body={"ignore_eos": True}):
        if chunk.choices and chunk.choices[0].logprobs:
            streamed += chunk.choices[0].logprobs.token_logprobs
    assert [round(x, 5) for x in streamed] == [round(x, 5) for x in lp.token_logprobs]


def check_n():
    r = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=10, n=3, temperature=1, seed=7,
                                       extra_body={**DOCS, "ignore_eos": True})
    assert [c.index for c in r.choices] == [0, 1, 2]
    assert r.usage.completion_tokens == 30
    again = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=10, n=3, temperature=1, seed=7,
                                           extra_body={**DOCS, "ignore_eos": True})
    assert [c.message.content for c in r.choices] == [c.message.content for c in again.choices]
    texts = {i: "" for i in range(3)}
    for chunk in client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=10, n=3, temperature=1,
                                                seed=7, stream=True, extra_body={**DOCS, "ignore_eos": True}):
        for c in chunk.choices:
            texts[c.index] += c.delta.content or ""
    assert [texts[i] for i in range(3)] == [c.message.content for c in r.choices], texts


def check_response_format():
    r = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=60,
                                       response_format={"type": "json_object"}, extra_body=DOCS)
    assert isinstance(json.loads(r.choices[0].message.content), dict)
    schema = {"type": "object", "properties": {"city": {"type": "string"}, "year": {"type": "integer"}},
              "required": ["city", "year"], "additionalProperties": False}
    r = client.chat.completions.create(
        model=MODEL, messages=MESSAGES, max_tokens=80, extra_body=DOCS,
        response_format={"type": "json_schema", "json_schema": {"name": "answer", "schema": schema, "strict": True}})
    v = json.loads(r.choices[0].message.content)
    assert set(v) == {"city", "year"} and isinstance(v["city"], str) and isinstance(v["year"], int), v
    try:
        client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=8,
                                       response_format={"type": "json_schema", "json_schema": {
                                           "name": "x", "schema": {"type": "string", "pattern": "a+"}}})
        raise AssertionError("pattern was accepted")
    except openai.BadRequestError as e:
        assert e.body["code"] == "unsupported_parameter", e.body
        assert e.body["param"] == "response_format.json_schema.schema.pattern", e.body


def check_request_id():
    raw = client.chat.completions.with_raw_response.create(model=MODEL, messages=MESSAGES, max_tokens=2,
                                                           extra_headers={"X-Request-Id": "trace-42"})
    assert raw.headers["x-request-id"] == "trace-42"
    assert raw.parse().id == "chatcmpl-trace-42"


CHECKS = [check_api_key, check_chat_logprobs_streamed_equal_non_streamed, check_completion_logprobs, check_n,
          check_response_format, check_request_id]


def main():
    failed = 0
    for check in CHECKS:
        try:
            check()
            print("ok  ", check.__name__)
        except Exception:
            failed += 1
            print("FAIL", check.__name__)
            traceback.print_exc()
    print(f"openai features: {len(CHECKS) - failed} of {len(CHECKS)} checks ok")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
