#!/usr/bin/env python3
"""Chat template oracle: what Python jinja2 renders, configured as transformers renders a
checkpoint's chat_template (transformers/utils/chat_template_utils.py: ImmutableSandboxed-
Environment(trim_blocks=True, lstrip_blocks=True, extensions=[AssistantTracker,
loopcontrols]), its own tojson, raise_exception and strftime_now globals; render(messages=,
tools=None, documents=None, add_generation_prompt=, **special tokens, **kwargs)).

Reads the real templates in tests/fixtures/chat_templates/*.jinja (written out as the
checkpoints ship them: Llama 3 / 3.1 / 3.2 Instruct, Qwen2.5, Qwen3, Mistral v0.1 / v0.3,
SmolLM2, Tulu 3) and writes tests/fixtures/chat_templates/renders.json:
  - chat cases: each template over conversations (system / no system, multi-turn, odd
    white space and Unicode, thinking turns, add_generation_prompt both ways): the full
    context and the rendered text, or the message jinja2 raised;
  - rag cases: the conversation lazyattn builds around documents (README "Chat templates and
    documents": the documents' place marked by SENTINEL in the system message, or in the
    first user message for templates without a system role, Tulu's Block-FT layout),
    rendered and cut at the sentinel into preamble / tail, with the documents' blocks; and
    the same conversation rendered with the documents written inline;
  - construct cases: small templates for every statement, filter, test and method the C
    interpreter implements, with their contexts and outputs (or errors).

Regenerate (from the repository root; pip install jinja2):
    python3 tools/oracle/chat_template_fixtures.py
"""
import json
import os
import sys
from datetime import datetime

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DIR = os.path.join(ROOT, "tests", "fixtures", "chat_templates")
COMMAND = "python3 tools/oracle/chat_template_fixtures.py"

# the Block-FT RAG strings of src/model/prompt_template.h (LA_RAG_DEFAULT_SYSTEM,
# LA_RAG_INSTRUCTION) and the documents' sentinel of src/model/chat_template.c
RAG_SYSTEM = ("You are an intelligent AI assistant. Please answer questions based on the user's "
              "instructions. Below are some reference documents that may help you in answering the "
              "user's question.")
RAG_INSTRUCTION = ("Please write a high-quality answer for the given question using only the provided "
                   "search documents (some of which might be irrelevant).\n")
SENTINEL = "[[lazyattn-documents-7f3e]]"

# name -> (bos_token, eos_token, extra render kwargs)
TEMPLATES = {
    "llama3": ("<|begin_of_text|>", "<|eot_id|>", {}),
    "llama3.1": ("<|begin_of_text|>", "<|eot_id|>", {}),
    "llama3.2": ("<|begin_of_text|>", "<|eot_id|>", {"date_string": "26 Jul 2024"}),
    "qwen2.5": (None, "<|im_end|>", {}),
    "qwen3": (None, "<|im_end|>", {}),
    "qwen3-apr2025": (None, "<|im_end|>", {}),
    "mistral-v0.1": ("<s>", "</s>", {}),
    "mistral-v0.3": ("<s>", "</s>", {}),
    "mistral-v0.3-may2024": ("<s>", "</s>", {}),
    "smollm2": ("<|im_start|>", "<|im_end|>", {}),
    "tulu3": ("<|begin_of_text|>", "<|end_of_text|>", {}),
}
# Block-FT layouts (src/model/prompt_template.c): Tulu's puts everything in one user turn
BLOCK_FT_USER_LAYOUT = {"tulu3"}


class AssistantTracker(Extension):
    """transformers' {% generation %} ... {% endgeneration %}: renders its body."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def environment():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.now().strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[AssistantTracker, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


ENV = environment()


def render(text, context):
    """(output, None) or (None, error message)."""
    try:
        return ENV.from_string(text).render(**context), None
    except Exception as e:  # what the template raised, or a type / undefined error
        return None, "%s: %s" % (type(e).__name__, e)


def chat_context(name, messages, add_generation_prompt=True, **kwargs):
    bos, eos, extra = TEMPLATES[name]
    ctx = {"messages": messages, "tools": None, "documents": None,
           "add_generation_prompt": add_generation_prompt}
    if bos is not None:
        ctx["bos_token"] = bos
    if eos is not None:
        ctx["eos_token"] = eos
    ctx.update(extra)
    ctx.update(kwargs)
    return ctx


def u(c):
    return {"role": "user", "content": c}


def a(c):
    return {"role": "assistant", "content": c}


def s(c):
    return {"role": "system", "content": c}


CONVERSATIONS = [
    ("one user", [u("What is the capital of France?")]),
    ("system and user", [s("You are a terse assistant."), u("Name a prime number.")]),
    ("multi-turn", [u("Hi!"), a("Hello! How can I help?"), u("Tell me a joke.")]),
    ("system multi-turn", [s("Answer in French."), u("Hello"), a("Bonjour"), u("How are you?"),
                           a("Très bien, merci."), u("Goodbye")]),
    ("white space", [s("  padded system \n"), u("\n  spaced question?  \t"), a(" answer \n\n"),
                     u("next")]),
    ("unicode and quotes", [u("Café 'naïve' \"quotes\" — 日本語 😀\\n {{ not a tag }} {% nor this %}")]),
    ("assistant last", [u("Complete this:"), a("The quick brown")]),
    ("thinking", [u("2+2?"), a("<think>\nadd them\n</think>\n\n4"), u("and 3+3?")]),
    ("empty contents", [s(""), u(""), a(""), u("x")]),
    ("two systems", [s("first"), u("q"), s("second"), u("q2")]),
    ("starts with assistant", [a("I speak first."), u("ok")]),
]

DOCUMENTS = [
    {"title": "Paris", "text": "Paris is the capital and most populous city of France."},
    {"title": "Lyon", "text": "Lyon is the third-largest city of France.\nIt sits on the Rhône."},
    {"text": "An untitled passage about the Seine, used verbatim."},
]


def doc_block(d):
    if "title" in d:
        return "- Title: %s\n%s\n" % (d["title"], d["text"])
    return d["text"]


def rag_messages(messages, layout, docs_text):
    """The conversation lazyattn renders around documents (README)."""
    system, rest = RAG_SYSTEM, list(messages)
    if rest and rest[0]["role"] == "system":
        system, rest = rest[0]["content"], rest[1:]
    question, later = rest[0]["content"], rest[1:]
    if layout == "system":
        return [s(system + "\n\n" + docs_text), u(RAG_INSTRUCTION + "Question: " + question)] + later
    return [u(system + "\n\n" + docs_text + "\n\n" + RAG_INSTRUCTION + "Question: " + question)] + later


def layout_of(name, text):
    """system when the template writes a system message's content, else user (a template
    that raises on a system role or drops it)."""
    if name in BLOCK_FT_USER_LAYOUT:
        return "user"
    out, err = render(text, chat_context(name, [s(SENTINEL), u("q")]))
    return "system" if out is not None and SENTINEL in out else "user"


RAG_CONVERSATIONS = [
    ("question", [u("What is the capital of France?")], DOCUMENTS),
    ("system and question", [s("Use the documents."), u("Where is Lyon?")], DOCUMENTS[:2]),
    ("follow-up", [u("Which river?"), a("The Rhône."), u("And in Paris?")], DOCUMENTS),
    ("one untitled document", [u("What flows through Paris?")], DOCUMENTS[2:]),
]


def chat_cases():
    cases = []
    for name in TEMPLATES:
        text = open(os.path.join(DIR, name + ".jinja"), encoding="utf-8").read()
        for label, msgs in CONVERSATIONS:
            for gen in (True, False):
                ctx = chat_context(name, msgs, gen)
                out, err = render(text, ctx)
                cases.append({"template": name, "label": label, "context": ctx,
                              "api": gen and not TEMPLATES[name][2], "expected": out, "error": err})
        if name.startswith("qwen3"):
            for think in (True, False):
                ctx = chat_context(name, CONVERSATIONS[7][1], True, enable_thinking=think)
                out, err = render(text, ctx)
                cases.append({"template": name, "label": "enable_thinking=%s" % think, "context": ctx,
                              "api": False, "expected": out, "error": err})
        # tool definitions through tojson (Llama 3.1 / 3.2, Qwen, Mistral v0.3)
        tools = [{"type": "function", "function": {
            "name": "get_weather", "description": "Weather of a city, in °C",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                           "required": ["city"]}}}]
        ctx = chat_context(name, [u("Weather in Paris?")], True, tools=tools)
        out, err = render(text, ctx)
        cases.append({"template": name, "label": "tools", "context": ctx, "api": False,
                      "expected": out, "error": err})
    return cases


def rag_cases():
    cases = []
    for name in TEMPLATES:
        text = open(os.path.join(DIR, name + ".jinja"), encoding="utf-8").read()
        layout = layout_of(name, text)
        for label, msgs, docs in RAG_CONVERSATIONS:
            blocks = [doc_block(d) for d in docs]
            out, err = render(text, chat_context(name, rag_messages(msgs, layout, SENTINEL)))
            case = {"template": name, "label": label, "layout": layout, "messages": msgs,
                    "documents": docs, "doc_blocks": blocks, "error": err,
                    "api": not TEMPLATES[name][2]}
            if out is not None:
                if out.count(SENTINEL) != 1:
                    sys.exit("%s: the sentinel appears %d times" % (name, out.count(SENTINEL)))
                case["preamble"], case["tail"] = out.split(SENTINEL)
                inline, _ = render(text, chat_context(name, rag_messages(msgs, layout, "".join(blocks))))
                case["inline"] = inline
                case["inline_equal"] = inline == case["preamble"] + "".join(blocks) + case["tail"]
            cases.append(case)
    return cases


# ---- constructs: one small template per feature, with what jinja2 renders ----------------

CONSTRUCTS = [
    # whitespace control, trim_blocks, lstrip_blocks, comments, the trailing newline
    ("{% if true %}\n  yes\n{% endif %}\n", {}),
    ("  {% if true %}x{% endif %}  \n  {%- if true %}y{% endif %}\n", {}),
    ("a  {{- ' b ' -}}  c {{ 'd' }} {#- note -#} e {# keep #}\nf\n", {}),
    ("line\n    {% for i in [1,2] %}\n    {{ i }}\n    {% endfor %}\nend\n\n", {}),
    ("x {%+ if true %}y{% endif +%}\nz", {}),
    ("{% for m in msgs %}{{ m }}{% if not loop.last %}, {% endif %}{% endfor %}", {"msgs": ["a", "b", "c"]}),
    ("{{ 'a' }}\r\n{{ 'b' }}\r\n", {}),
    # loops
    ("{% for x in items %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.revindex }}/{{ loop.revindex0 }}/"
     "{{ loop.first }}/{{ loop.last }}/{{ loop.length }}|{% endfor %}", {"items": ["p", "q", "r"]}),
    ("{% for x in items %}{{ loop.previtem is defined }}{{ loop.nextitem | default('-') }}"
     "{{ loop.cycle('odd', 'even') }} {% endfor %}", {"items": [1, 2, 3]}),
    ("{% for k, v in d | items %}{{ k }}={{ v }};{% endfor %}", {"d": {"b": 2, "a": 1, "c": [1, 2]}}),
    ("{% for k in d %}{{ k }}{% endfor %}{% for ch in 'héllo' %}[{{ ch }}]{% endfor %}", {"d": {"x": 1, "y": 2}}),
    ("{% for x in xs if x > 1 %}{{ x }}:{{ loop.index }}/{{ loop.length }} {% else %}none{% endfor %}",
     {"xs": [1, 2, 3, 0, 5]}),
    ("{% for x in [] %}x{% else %}empty{% endfor %}{% for x in missing %}x{% endfor %}", {}),
    ("{% for x in range(10) %}{% if x is odd %}{% continue %}{% endif %}{% if x > 6 %}{% break %}{% endif %}"
     "{{ x }}{% endfor %}", {}),
    ("{% for a, b in pairs %}{{ a }}{{ b }}{% endfor %}{% for (a, b) in pairs %}{{ b }}{% endfor %}",
     {"pairs": [[1, 2], ["x", "y"]]}),
    ("{% for r in rows %}{% for c in r %}{{ loop.index }}{% endfor %}.{{ loop.index }} {% endfor %}",
     {"rows": [[1, 2], [3]]}),
    # scoping and namespace
    ("{% set x = 1 %}{% for i in [1, 2] %}{{ x }}{% set x = i * 10 %}{{ x }}{% endfor %}{{ x }}", {}),
    ("{% set ns = namespace(n=0, s='') %}{% for i in [1, 2, 3] %}{% set ns.n = ns.n + i %}"
     "{% set ns.s = ns.s ~ i %}{% endfor %}{{ ns.n }} {{ ns.s }} {{ ns.missing is defined }}", {}),
    ("{% if true %}{% set y = 'set in if' %}{% endif %}{{ y }}", {}),
    ("{% set a, b = 1, 2 %}{{ a + b }}{% set t = (1, 'x') %}{{ t }}{% set e = () %}{{ e }}{{ (5,) }}", {}),
    ("{% set block %}inside {{ 1 + 1 }}{% endset %}[{{ block | trim }}]", {}),
    ("{% set messages = messages[1:] %}{{ messages | length }}", {"messages": [1, 2, 3]}),
    # macros
    ("{% macro greet(name, punct='!') %}Hello {{ name }}{{ punct }}{% endmacro %}"
     "{{ greet('A') }} {{ greet('B', '?') }} {{ greet(punct='.', name='C') }}", {}),
    ("{% macro m(x) %}{{ x }}{{ outer }}{% endmacro %}{% set outer = 'o' %}{{ m(1) }}", {"outer": "ctx"}),
    # expressions and operators
    ("{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 2 ** 10 }} "
     "{{ 2 ** 3 ** 2 }} {{ 7 / 2 }} {{ 1 / 3 }} {{ 10 / 5 }} {{ 0.1 + 0.2 }} {{ 1e20 }} {{ 1.5e-7 }} {{ -0.0 }}",
     {}),
    ("{{ 'a' ~ 1 ~ none ~ true ~ [1, 'b'] ~ missing }} {{ 'x' + 'y' * 3 }} {{ 3 * 'ab' }} {{ [1] + [2, 3] }}", {}),
    ("{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 'a' in 'cat' }} {{ 2 not in [1, 3] }} {{ 'k' in d }} "
     "{{ [1, 2] == [1, 2] }} {{ (1, 2) == [1, 2] }} {{ 1 == 1.0 }} {{ true == 1 }} {{ d == {'k': 1} }}",
     {"d": {"k": 1}}),
    ("{{ 1 and 'x' }} {{ 0 or 'y' }} {{ none or [] }} {{ not 0 }} {{ not missing }} {{ 'a' if x else 'b' }} "
     "{{ 'c' if none }}|{{ x if x is defined else 'no x' }}", {"x": 0}),
    ("{{ -x }} {{ +x }} {{ -(1.5) }} {{ 5 - - 3 }}", {"x": 4}),
    ("{{ s[0] }}{{ s[-1] }}{{ s[1:3] }}{{ s[::-1] }}{{ s[:-1] }}{{ s[10] is defined }} {{ l[1:] }} {{ l[::2] }} "
     "{{ l[-2] }} {{ l[5] is defined }} {{ l.0 }} {{ d.k }} {{ d['k'] }} {{ d.nope is defined }}",
     {"s": "héllo", "l": [1, 2, 3, 4], "d": {"k": "v"}}),
    ("{{ none }} {{ true }} {{ false }} {{ [1, 'two', none, true, 2.5, {'a': [1]}] }} {{ {'q': \"it's\"} }} "
     "{{ ['a\\nb', \"x'y\", 'x\"y', 'both\\'\"'] }}", {}),
    ("{{ 'esc: \\t|\\n|\\\\|\\'|\\x41|\\u00e9|\\U0001F600|\\d' }} {{ \"dq \\\" \" }} {{ 'adj' 'acent' }}", {}),
    ("{{ {'a': 1, 'b': [2, 3]} }} {{ [] }} {{ {} }} {{ 0x1F }} {{ 0o17 }} {{ 0b101 }} {{ 1_000 }}", {}),
    # filters
    ("{{ '  pad  ' | trim }}|{{ 'xxhixx' | trim('x') }}|{{ ' a ' | upper }}|{{ 'ÀB' | lower }}|"
     "{{ 'hello world-wide (x' | title }}|{{ 'hELLO wORLD' | capitalize }}|{{ 'ß' | upper }}", {}),
    ("{{ [3, 1, 2] | length }} {{ 'héllo' | length }} {{ {'a': 1} | count }} {{ missing | length }} "
     "{{ [3, 1, 2] | first }} {{ [3, 1, 2] | last }} {{ 'abc' | first }} {{ [] | first is defined }}", {}),
    ("{{ [1, 2, 3] | join }} {{ ['a', 'b'] | join(', ') }} {{ users | join(' ', attribute='name') }} "
     "{{ [1, none, 'x'] | join('-') }}", {"users": [{"name": "ann"}, {"name": "bob"}]}),
    ("{{ missing | default('dflt') }} {{ '' | default('empty', true) }} {{ 0 | d('zero') }} "
     "{{ none | default('n') }} {{ false | default('f', boolean=true) }}", {}),
    ("{{ '42' | int }} {{ '4.7' | int }} {{ 'x' | int }} {{ 'x' | int(7) }} {{ 3.9 | int }} {{ '0x1A' | int(0, 16) }} "
     "{{ '3.5' | float }} {{ 'y' | float }} {{ 2 | float }} {{ -3 | abs }} {{ -2.5 | abs }}", {}),
    ("{{ 2.5 | round }} {{ 3.5 | round }} {{ 2.675 | round(2) }} {{ 2.1 | round(0, 'ceil') }} "
     "{{ 2.9 | round(method='floor') }} {{ 7 | round }}", {}),
    ("{{ 'a-b-c' | replace('-', '+') }} {{ 'aaa' | replace('a', 'b', 2) }} {{ 123 | string }} "
     "{{ [1, 2] | string }} {{ none | string }}", {}),
    ("{{ [3, 1, 2] | sort }} {{ ['b', 'A', 'c'] | sort }} {{ ['b', 'A', 'c'] | sort(case_sensitive=true) }} "
     "{{ [3, 1, 2] | sort(reverse=true) }} {{ users | sort(attribute='age') | map(attribute='name') | list }}",
     {"users": [{"name": "x", "age": 3}, {"name": "y", "age": 1}, {"name": "z", "age": 2}]}),
    ("{{ ['a', 'A', 'b', 'a'] | unique | list }} {{ [1, 2, 1] | unique | list }} {{ [4, 9, 2] | max }} "
     "{{ [4, 9, 2] | min }} {{ ['b', 'C'] | max }} {{ [] | max is defined }} {{ [1, 2, 3] | sum }} "
     "{{ users | sum(attribute='age') }} {{ [0.5, 1] | sum(start=10) }}",
     {"users": [{"age": 3}, {"age": 4}]}),
    ("{{ msgs | selectattr('role', 'equalto', 'user') | map(attribute='content') | join(',') }} "
     "{{ msgs | rejectattr('role', 'eq', 'user') | list | length }} {{ msgs | selectattr('extra') | list }} "
     "{{ msgs | selectattr('extra', 'undefined') | list | length }} {{ [1, 0, 2, none] | select | list }} "
     "{{ [1, 2, 3, 4] | reject('odd') | list }} {{ [1, 5, 9] | select('gt', 3) | list }} "
     "{{ ['a', 'b'] | map('upper') | join }} {{ [[1, 2], [3]] | map('length') | list }}",
     {"msgs": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b", "extra": 1},
               {"role": "user", "content": "c"}]}),
    ("{{ 'abc' | reverse }} {{ [1, 2, 3] | reverse | list }} {{ {'a': 1} | items | list }} "
     "{{ 'ab' | list }} {{ {'x': 1, 'y': 2} | list }}", {}),
    ("{{ 'line1\\nline2\\n\\nline4' | indent }}|{{ 'a\\nb' | indent(2, true) }}|"
     "{{ 'a\\n\\nb' | indent('> ', blank=true) }}", {}),
    # tojson (transformers' json.dumps)
    ("{{ obj | tojson }}\n{{ obj | tojson(indent=2) }}\n{{ obj | tojson(indent=4, sort_keys=true) }}\n"
     "{{ obj | tojson(separators=(',', ':')) }}\n{{ 'é<>&\\'\"\\n' | tojson }}\n{{ 'é' | tojson(ensure_ascii=true) }}\n"
     "{{ [] | tojson }} {{ {} | tojson(indent=2) }} {{ [1.0, 2.5e-8, 1e16, -0.0, true, none] | tojson }}",
     {"obj": {"name": "get_weather", "zeta": [1, 2, {"deep": None}], "alpha": True, "num": 1.5,
              "text": "🌧 \u2028 \x7f"}}),
    # tests
    ("{{ x is defined }}{{ y is undefined }}{{ none is none }}{{ 'a' is string }}{{ 1 is number }}"
     "{{ 1.5 is float }}{{ 1 is integer }}{{ true is integer }}{{ true is boolean }}{{ true is true }}"
     "{{ 0 is false }}{{ d is mapping }}{{ l is mapping }}{{ l is iterable }}{{ 'x' is iterable }}"
     "{{ 1 is iterable }}{{ l is sequence }}{{ d is sequence }}{{ 4 is even }}{{ 4 is odd }}"
     "{{ 9 is divisibleby 3 }}{{ 9 is divisibleby(2) }}{{ 'abc' is lower }}{{ 'ABC' is upper }}"
     "{{ 'aBc' is lower }}{{ range is callable }}{{ x is callable }}{{ 1 is eq 1 }}{{ 1 is ne 1 }}"
     "{{ 2 is gt 1 }}{{ 2 is ge 3 }}{{ 1 is lt 2 }}{{ 1 is le 0 }}{{ 'a' is in 'cat' }}{{ 3 is in [1, 2] }}"
     "{{ none is sameas none }}{{ x is not defined }}{{ d is not mapping }}{{ 1 is equalto(1) }}"
     "{{ 2 is greaterthan 3 }}{{ 2 is lessthan 3 }}",
     {"x": 1, "d": {}, "l": [1]}),
    # string methods
    ("{{ s.strip() }}|{{ s.lstrip() }}|{{ s.rstrip() }}|{{ '--x--'.strip('-') }}|{{ 'a,b,,c'.split(',') }}|"
     "{{ '  a  b '.split() }}|{{ 'a b c'.split(' ', 1) }}|{{ 'a b c'.rsplit(' ', 1) }}|{{ 'x</think>y'.split('</think>')[-1] }}|"
     "{{ 'abc'.startswith('ab') }}{{ 'abc'.endswith(('x', 'c')) }}|{{ 'MiXed'.upper() }}{{ 'MiXed'.lower() }}|"
     "{{ 'hello wORLD'.title() }}|{{ 'hello'.capitalize() }}|{{ 'aXbXc'.replace('X', '-') }}|"
     "{{ 'héllo'.find('l') }}{{ 'hello'.rfind('l') }}{{ 'hello'.find('z') }}|{{ 'banana'.count('an') }}|"
     "{{ '-'.join(['a', 'b']) }}|{{ '123'.isdigit() }}{{ 'ab1'.isalpha() }}{{ 'ab1'.isalnum() }}"
     "{{ ' \\t'.isspace() }}{{ 'AB'.isupper() }}{{ 'ab'.islower() }}|{{ 'a\\nb\\r\\nc'.splitlines() }}",
     {"s": "  \n padded \t "}),
    ("{{ d.get('a') }} {{ d.get('z') }} {{ d.get('z', 'dflt') }} {{ d.keys() | list }} {{ d.values() | list }} "
     "{% for k, v in d.items() %}{{ k }}{{ v }}{% endfor %} {{ d.items is defined }}",
     {"d": {"a": 1, "b": 2}}),
    # globals and errors raised by templates
    ("{{ range(3) | list }} {{ range(1, 7, 2) | list }} {{ range(5, 0, -2) | list }} {{ dict(a=1, b='x') }} "
     "{{ namespace(a=1).a }}", {}),
    ("{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}", {}),
    ("{{ 1 + 'a' }}", {}),
    ("{{ missing + 1 }}", {}),
    ("{{ missing.attr }}", {}),
    ("{{ messages[0]['content'] }}|{{ messages[5] is defined }}|{{ none.attr is defined }}", {"messages": [{"content": "c"}]}),
    ("{% generation %}gen {{ 1 }}{% endgeneration %}", {}),
    ("{{ 'unicode: café ☕ 𝔘' }} {{ 'x' * 0 }}|{{ [1, 2] * 2 }}", {}),
]


def construct_cases():
    cases = []
    for i, (text, ctx) in enumerate(CONSTRUCTS):
        out, err = render(text, ctx)
        cases.append({"template_text": text, "label": "construct %d" % i, "context": ctx,
                      "expected": out, "error": err})
    return cases


def main():
    texts = {}
    for name, (bos, eos, extra) in TEMPLATES.items():
        text = open(os.path.join(DIR, name + ".jinja"), encoding="utf-8").read()
        texts[name] = {"text": text, "bos_token": bos, "eos_token": eos, "layout": layout_of(name, text)}
    out = {"command": COMMAND, "generator": "jinja2 %s" % jinja2.__version__,
           "rag": {"default_system": RAG_SYSTEM, "instruction": RAG_INSTRUCTION, "sentinel": SENTINEL},
           "templates": texts, "chat": chat_cases(), "rag_cases": rag_cases(),
           "constructs": construct_cases()}
    with open(os.path.join(DIR, "renders.json"), "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=True, indent=1)
        f.write("\n")
    n_err = sum(1 for c in out["chat"] + out["constructs"] if c["error"])
    print("%d chat, %d rag, %d construct cases (%d raise); %s" % (
        len(out["chat"]), len(out["rag_cases"]), len(out["constructs"]), n_err,
        os.path.relpath(os.path.join(DIR, "renders.json"), ROOT)))


if __name__ == "__main__":
    sys.exit(main())
