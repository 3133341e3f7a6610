"""Acceptance 2 of issue 21: structured output on the bundled model.

Usage: python3 tests/server/test_structured_output.py PORT [N_SCHEMAS] [SEED]

Generates N_SCHEMAS (200) JSON Schemas from the supported subset (src/grammar/json_schema.h:
objects with properties / required / additionalProperties, arrays with items, strings,
enums of scalars, numbers, integers, booleans, null, anyOf, type lists, nesting), seeded,
and asks the server running on PORT for each with greedy and with sampled decoding
(response_format json_schema, strict). Every output must parse (json.loads) and validate
(Python jsonschema). Then unsupported keywords must be a 400 naming them. Exit status 0
when every check passes; each failure is printed.
"""

import concurrent.futures
import json
import random
import sys
import urllib.error
import urllib.request

import jsonschema

PORT = int(sys.argv[1])
N = int(sys.argv[2]) if len(sys.argv) > 2 else 200
SEED = int(sys.argv[3]) if len(sys.argv) > 3 else 21
BASE = f"http://127.0.0.1:{PORT}"
QUESTION = [{"role": "user", "content": "Where was Elkrak Avoltrax born? Answer in JSON."}]
DOCS = [{"title": "Elkrak Avoltrax",
         "text": "Elkrak Avoltrax (born 3 September 1972 in Chas, Wirnor) is a cinematographer."}]
NAMES = ["name", "city", "year", "born", "tags", "id", "score", "ok", "note", "a b", "naïve", 'q"uote',
         "back\\slash", "x", "items", "kind"]
WORDS = ["red", "green", "Chas", "Wirnor", "é", "a\"b", "", "line\nbreak", "tab\t", "日本", "1972", "null"]


def gen_schema(rng, depth):
    kinds = ["string", "number", "integer", "boolean", "null", "enum", "typelist"]
    if depth < 3:
        kinds += ["object", "object", "array", "anyOf"]
    k = rng.choice(kinds)
    s = {}
    if rng.random() < 0.2:
        s["description"] = "a value"
    if k == "object":
        s["type"] = "object"
        props = {}
        for name in rng.sample(NAMES, rng.randint(0, 4)):
            props[name] = gen_schema(rng, depth + 1)
        s["properties"] = props
        if props:
            s["required"] = [p for p in props if rng.random() < 0.7]
        if rng.random() < 0.8:
            s["additionalProperties"] = False
    elif k == "array":
        s["type"] = "array"
        if rng.random() < 0.9:
            s["items"] = gen_schema(rng, depth + 1)
    elif k == "enum":
        vals = rng.sample(WORDS, rng.randint(1, 4))
        if rng.random() < 0.3:
            vals += [rng.choice([1, -2.5, True, None])]
        if rng.random() < 0.5 and all(isinstance(v, str) for v in vals):
            s["type"] = "string"
        s["enum"] = vals
    elif k == "anyOf":
        s["anyOf"] = [gen_schema(rng, depth + 1) for _ in range(rng.randint(2, 3))]
    elif k == "typelist":
        s["type"] = rng.sample(["string", "number", "integer", "boolean", "null"], rng.randint(1, 3))
    else:
        s["type"] = k
    return s


def gen_root(rng):
    if rng.random() < 0.8:  # OpenAI's strict mode wants an object at the root
        s = gen_schema(rng, 1)
        while s.get("type") != "object":
            s = gen_schema(rng, 1)
        return s
    return gen_schema(rng, 0)


def post(path, body):
    req = urllib.request.Request(BASE + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=600) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def ask(i, schema, sampled):
    body = {"messages": QUESTION, "documents": DOCS, "max_tokens": 256,
            "response_format": {"type": "json_schema",
                                "json_schema": {"name": f"s{i}", "schema": schema, "strict": True}}}
    if sampled:
        body.update(temperature=1.0, seed=1000 + i)
    status, r = post("/v1/chat/completions", body)
    where = f"schema {i} ({'sampled' if sampled else 'greedy'}): {json.dumps(schema)}"
    if status != 200:
        return f"{where}: HTTP {status}: {r}"
    text = r["choices"][0]["message"]["content"]
    try:
        value = json.loads(text)
    except ValueError as e:
        return f"{where}: output does not parse ({e}): {text!r}"
    try:
        jsonschema.validate(value, schema)
    except jsonschema.ValidationError as e:
        return f"{where}: output {text!r} does not validate: {e.message}"
    return None


def main():
    rng = random.Random(SEED)
    schemas = [gen_root(rng) for _ in range(N)]
    for s in schemas:
        jsonschema.Draft202012Validator.check_schema(s)
    failures = []
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        jobs = [pool.submit(ask, i, s, sampled) for i, s in enumerate(schemas) for sampled in (False, True)]
        for j in jobs:
            f = j.result()
            if f:
                failures.append(f)
    # keywords outside the subset: 400 naming them
    for schema, param in [({"type": "string", "minLength": 1}, "minLength"),
                          ({"type": "object", "properties": {"n": {"type": "integer", "maximum": 3}}},
                           "properties.n.maximum"),
                          ({"$ref": "#/$defs/a", "$defs": {"a": {"type": "string"}}}, "$ref")]:
        status, r = post("/v1/chat/completions", {
            "messages": QUESTION, "max_tokens": 16,
            "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}})
        want = "response_format.json_schema.schema." + param
        err = r.get("error", {})
        if status != 400 or err.get("code") != "unsupported_parameter" or err.get("param") != want:
            failures.append(f"unsupported keyword {param}: HTTP {status} {r} (want 400 naming {want})")
    for f in failures:
        print("FAIL", f)
    print(f"structured output: {2 * N} outputs of {N} schemas, {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
