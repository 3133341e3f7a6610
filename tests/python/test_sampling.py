"""SamplingParams' OpenAI / vLLM fields give what `lazyattn serve` gives for the same JSON.

Each case is one set of fields on one chat request with documents; Python and a server over
the same bundled model must return the same text, token count and finish reason for every
choice, and the same logprobs where asked (to f32 rounding of the JSON). Each case also
differs from the control request without those fields, so a field the engine ignored could
not pass.
"""

import json
import math

import pytest

from conftest import chat_item, held_out

Q = held_out(1, hops=2)[0]
MAX_TOKENS = 24

# case: (the fields of the control request, the fields under test added to them). Past its
# end-of-sequence token (ignore_eos) the bundled model repeats itself, which the penalties
# change; it is too sure of its answers for them to change those.
EOS = {"ignore_eos": True}
HOT = {"temperature": 2.0, "seed": 7, "ignore_eos": True}
CASES = {
    "presence_penalty": (EOS, {"presence_penalty": 2.0}),
    "frequency_penalty": (EOS, {"frequency_penalty": 2.0}),
    "repetition_penalty": (EOS, {"repetition_penalty": 1.9}),
    "logit_bias": (EOS, {"logit_bias": "ban the control's first token"}),
    "min_tokens": ({}, {"min_tokens": 20, "stop_token_ids": "the control's 3rd token"}),
    "stop_token_ids": (EOS, {"stop_token_ids": "the control's 3rd token"}),
    "allowed_token_ids": (EOS, {"allowed_token_ids": "the control's tokens but the first"}),
    "min_p": (HOT, {"min_p": 0.3}),
    "top_k": (HOT, {"top_k": 2}),
    "n_3": (HOT, {"n": 3}),
    "logprobs": ({}, {"logprobs": 3}),
    "json_schema": ({}, {"json_schema": {"type": "object", "properties": {"a": {"type": "integer"}},
                                         "required": ["a"]}}),
}


def server_fields(fields):
    body = dict(fields)
    if "logprobs" in body:
        body["top_logprobs"] = body.pop("logprobs")
        body["logprobs"] = True
    if "logit_bias" in body:
        body["logit_bias"] = {str(k): v for k, v in body["logit_bias"].items()}
    return body


def resolve(fields, control_ids):
    """Turn the cases' descriptions of token ids into ids from the control answer."""
    f = dict(fields)
    if "logit_bias" in f:
        f["logit_bias"] = {control_ids[0]: -100}
    if "stop_token_ids" in f:
        f["stop_token_ids"] = [control_ids[2]]
    if "allowed_token_ids" in f:
        f["allowed_token_ids"] = sorted(set(control_ids) - {control_ids[0]})
    return f


@pytest.mark.parametrize("case", sorted(CASES))
def test_sampling_fields_equal_the_server(lazyattn_pkg, llm, server, case):
    lp = lazyattn_pkg
    item = chat_item(Q)
    base, test = CASES[case]
    control = llm.generate(item, lp.SamplingParams(max_tokens=MAX_TOKENS, **base))[0]
    fields = {**base, **resolve(test, control.token_ids)}
    outs = llm.generate(item, lp.SamplingParams(max_tokens=MAX_TOKENS, **fields))
    status, body = server.post("/v1/chat/completions", {
        "model": "rag-tiny", "messages": item["messages"], "documents": item["documents"],
        "max_tokens": MAX_TOKENS, **server_fields(fields)})
    assert status == 200, body
    choices = sorted(body["choices"], key=lambda c: c["index"])
    assert len(outs) == len(choices) == fields.get("n", 1)
    assert sum(o.completion_tokens for o in outs) == body["usage"]["completion_tokens"]
    for o, c in zip(outs, choices):
        assert o.index == c["index"]
        assert o.text == c["message"]["content"], (case, o.text, c["message"]["content"])
        assert o.finish_reason == c["finish_reason"]
        if "logprobs" in fields:
            got = c["logprobs"]["content"]
            assert len(got) == len(o.logprobs) == len(o.token_ids)  # the eos token has none
            for mine, theirs in zip(o.logprobs, got):
                want = sorted((t["logprob"] for t in theirs["top_logprobs"]), reverse=True)
                have = sorted(mine.values(), reverse=True)[:len(want)]
                assert all(math.isclose(a, b, rel_tol=1e-5, abs_tol=1e-5) for a, b in zip(have, want))
                assert len(mine) >= fields["logprobs"]
    # the field changed the answer (or, for logprobs, added them)
    ids = outs[0].token_ids
    if case == "logprobs":
        assert ids == control.token_ids[:len(ids)] and all(len(d) >= 3 for d in outs[0].logprobs)
    elif case == "n_3":
        assert len({o.text for o in outs}) == 3 and outs[0].token_ids == control.token_ids
    elif case != "stop_token_ids":
        assert ids != control.token_ids[:len(ids)]  # not the control's answer, nor cut short
    if case == "json_schema":
        assert isinstance(json.loads(outs[0].text)["a"], int)
    if case == "logit_bias":
        assert control.token_ids[0] not in outs[0].token_ids
    if case == "allowed_token_ids":
        assert set(outs[0].token_ids) <= set(fields["allowed_token_ids"])
    if case == "stop_token_ids":
        first = control.token_ids.index(fields["stop_token_ids"][0])
        assert ids == control.token_ids[:first] and outs[0].finish_reason == "stop"
    if case == "min_tokens":
        assert outs[0].completion_tokens >= 20


def test_stream_refuses_n(lazyattn_pkg, llm):
    with pytest.raises(lazyattn_pkg.InvalidArgumentError):
        llm.stream("Hi", lazyattn_pkg.SamplingParams(n=2))
