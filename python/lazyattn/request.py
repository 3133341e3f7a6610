"""What a request may hold, checked the way `lazyattn serve` checks its JSON.

The one place in Python of the server's request rules (src/server/api_request.c): the same
fields, ranges and messages, so a value the server answers 400 to raises here with the
sentence the server writes. Wrong types raise InvalidTypeError (a TypeError), bad values
InvalidArgumentError (a ValueError). None counts as absent, as JSON null does there.
Checks that need the tokenizer (context length, empty documents after tokenizing) are the
engine's, at submit, and raise with the C message.
"""

import json
import math
import re

from .errors import InvalidArgumentError, InvalidTypeError

INT32_MAX = 2**31 - 1
MAX_STOP = 16                   # stop strings per request (the server's la_api_limits)
DEFAULT_MAX_TOKENS = 16         # completions without max_tokens (OpenAI's default)
DEFAULT_CHAT_MAX_TOKENS = 512   # chat without max_tokens (serve's default)
ROLES = ("system", "user", "assistant")


def json_type_name(v):
    """The server's name of a JSON value's type ("a string", "an array", ...)."""
    if isinstance(v, str):
        return "a string"
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, (int, float)):
        return "a number"
    if isinstance(v, (list, tuple)):
        return "an array"
    if isinstance(v, dict):
        return "an object"
    if v is None:
        return "null"
    return f"a {type(v).__name__}"


def bad_type(param, v, expected):
    return InvalidTypeError(
        f"Invalid type for '{param}': expected {expected}, but got {json_type_name(v)} instead.",
        param=param)


def bad_value(param, message):
    return InvalidArgumentError(message, param=param)


def _is_number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _is_whole(v):
    """An int, or a float without a fraction (what the server reads as an integer)."""
    if isinstance(v, bool):
        return False
    if isinstance(v, int):
        return True
    return isinstance(v, float) and math.isfinite(v) and v == math.floor(v)


def _is_integer(v):
    return _is_whole(v) and abs(v) <= 9.2e18  # exact for an int of any size


def _shown(v):
    """A whole number as a message writes it: an int exactly, a float without its fraction."""
    return v if isinstance(v, int) else f"{v:.0f}"


def get_int(param, v, lo, hi):
    """An integer in [lo, hi] (the server's get_int): a whole number outside it, however large,
    is out of range, not of the wrong type. Python ints are compared exactly, never through a
    double."""
    if not _is_whole(v):
        raise bad_type(param, v, "an integer")
    if v < lo or v > hi:
        if math.isinf(hi) and not math.isinf(lo):
            raise bad_value(param, f"Invalid value for '{param}': {_shown(v)} must be >= {_shown(lo)}.")
        raise bad_value(param, f"Invalid value for '{param}': {_shown(v)} is outside [{_shown(lo)}, {_shown(hi)}].")
    return int(v)


def get_number(param, v, lo, lo_open, hi):
    """A number in [lo, hi] or (lo, hi] (the server's get_number)."""
    if not _is_number(v):
        raise bad_type(param, v, "a number")
    d = float(v)
    if not (d > lo if lo_open else d >= lo) or d > hi:
        raise bad_value(param, "Invalid value for '%s': %.15g is outside %s%g, %g]."
                        % (param, d, "(" if lo_open else "[", lo, hi))
    return d


def get_bool(param, v):
    if not isinstance(v, bool):
        raise bad_type(param, v, "a boolean")
    return v


def get_string(param, v):
    if not isinstance(v, str):
        raise bad_type(param, v, "a string")
    return v


class SamplingParams:
    """How tokens are chosen, with the fields `lazyattn serve` accepts (same ranges and
    messages; the engine applies them in vLLM's order, include/lazyattn/lazyattn.h).

    max_tokens          tokens to generate: [1, the model's context]; None: 16 for a prompt,
                        512 for chat (at most the context), as the server
    min_tokens          [0, max_tokens]: eos, stop_token_ids and stop strings cannot end the
                        output before this many tokens
    temperature         [0, 2]; 0 (default): greedy
    top_p               (0, 1]; 1: off
    top_k               [-1, 2**31-1]; -1 or 0: off
    min_p               [0, 1]; 0: off
    seed                integer seed of the sampler (0)
    stop                a string or a list of at most 16 non-empty strings
    stop_token_ids      token ids that end the output like eos
    include_stop_str_in_output  a matched stop string stays at the end of the text
    ignore_eos          keep generating past end-of-sequence tokens
    presence_penalty, frequency_penalty   [-2, 2]; 0: off (OpenAI's)
    repetition_penalty  (0, 2]; 1: off (the CTRL / HF one)
    logit_bias          {token id: bias in [-100, 100]}
    allowed_token_ids   a non-empty list: only these tokens may be generated
    logprobs            None: off; k in [0, 20]: each output token's logprob and the k most
                        likely tokens' (RequestOutput.logprobs)
    json_schema         a JSON schema (dict, bool or JSON text): the output is a JSON value
                        valid against it (the subset of src/grammar/json_schema.h)
    json_object         True: the output is a JSON object
    n                   completions per prompt, [1, 128]: they share the prompt's KV blocks and
                        fork at the first token; choice i samples from seed's stream i

    Checked on construction (types and ranges; token ids and max_tokens against the model
    when used).
    """

    __slots__ = ("max_tokens", "min_tokens", "temperature", "top_p", "top_k", "min_p", "seed", "stop",
                 "stop_token_ids", "include_stop_str_in_output", "ignore_eos", "presence_penalty",
                 "frequency_penalty", "repetition_penalty", "logit_bias", "allowed_token_ids", "logprobs",
                 "json_schema", "json_object", "n", "_allowed_given")

    def __init__(self, max_tokens=None, temperature=None, top_p=None, top_k=None, seed=None,
                 stop=None, ignore_eos=None, n=None, *, min_tokens=None, min_p=None, stop_token_ids=None,
                 include_stop_str_in_output=None, presence_penalty=None, frequency_penalty=None,
                 repetition_penalty=None, logit_bias=None, allowed_token_ids=None, logprobs=None,
                 json_schema=None, json_object=None):
        self.n = 1 if n is None else get_int("n", n, 1, 128)
        if max_tokens is not None:
            get_int("max_tokens", max_tokens, -math.inf, math.inf)  # its range: resolved_max_tokens
        self.max_tokens = None if max_tokens is None else int(max_tokens)
        self.min_tokens = 0 if min_tokens is None else get_int("min_tokens", min_tokens, 0, math.inf)
        # a max_tokens below 1 is refused by resolved_max_tokens, in the server's words
        if self.max_tokens is not None and self.max_tokens >= 1 and self.min_tokens > self.max_tokens:
            raise bad_value("min_tokens", f"Invalid value for 'min_tokens': {self.min_tokens} exceeds "
                                          f"max_tokens ({self.max_tokens}).")
        self.temperature = 0.0 if temperature is None else get_number("temperature", temperature, 0, False, 2)
        self.top_p = 1.0 if top_p is None else get_number("top_p", top_p, 0, True, 1)
        self.min_p = 0.0 if min_p is None else get_number("min_p", min_p, 0, False, 1)
        k = 0 if top_k is None else get_int("top_k", top_k, -1, INT32_MAX)
        self.top_k = 0 if k < 0 else k  # -1: off, as in vLLM
        self.seed = 0 if seed is None else _parse_seed(seed)
        self.stop = _parse_stop(stop)
        self.stop_token_ids = _parse_ids("stop_token_ids", stop_token_ids)
        self.include_stop_str_in_output = (False if include_stop_str_in_output is None else
                                           get_bool("include_stop_str_in_output", include_stop_str_in_output))
        self.ignore_eos = False if ignore_eos is None else get_bool("ignore_eos", ignore_eos)
        self.presence_penalty = (0.0 if presence_penalty is None else
                                 get_number("presence_penalty", presence_penalty, -2, False, 2))
        self.frequency_penalty = (0.0 if frequency_penalty is None else
                                  get_number("frequency_penalty", frequency_penalty, -2, False, 2))
        self.repetition_penalty = (1.0 if repetition_penalty is None else
                                   get_number("repetition_penalty", repetition_penalty, 0, True, 2))
        self.logit_bias = _parse_logit_bias(logit_bias)
        self.allowed_token_ids = _parse_ids("allowed_token_ids", allowed_token_ids)
        self._allowed_given = allowed_token_ids is not None
        self.logprobs = None if logprobs is None else get_int("logprobs", logprobs, 0, 20)
        self.json_object = False if json_object is None else get_bool("json_object", json_object)
        self.json_schema = _parse_schema(json_schema)
        if self.json_schema is not None and self.json_object:
            raise bad_value("json_object", "'json_schema' and 'json_object' both ask for a format.")
        if (self.json_schema is not None or self.json_object) and self.ignore_eos:
            raise InvalidArgumentError("'ignore_eos' cannot be combined with a JSON response format (the "
                                       "output ends with its value).", param="ignore_eos", status="unsupported")
        if (self.json_schema is not None or self.json_object) and self.min_tokens > 0:
            raise InvalidArgumentError("'min_tokens' cannot be combined with a JSON response format (the "
                                       "output ends with its value).", param="min_tokens", status="unsupported")

    def resolved_max_tokens(self, chat, context):
        """max_tokens for a request of the engine whose context is `context` tokens."""
        if self.max_tokens is None:  # min_tokens above it is refused, as the server does
            return min(DEFAULT_CHAT_MAX_TOKENS if chat else DEFAULT_MAX_TOKENS, context)
        if self.max_tokens < 1 or self.max_tokens > context:
            raise bad_value("max_tokens", f"Invalid value for 'max_tokens': {self.max_tokens}; "
                                          f"it must be in [1, {context}].")
        return self.max_tokens

    def check_vocab(self, vocab):
        """Token ids against the model's vocabulary, in the server's order and words
        (src/server/api_sampling.c). Returns (stop_token_ids, allowed_token_ids, [(id, bias)])."""
        bias = []
        for k, b in self.logit_bias.items():
            m = _STRTOL.fullmatch(k)  # the server reads keys with C's strtol: " 5", "+5"
            t = int(m.group(1)) if m else -1
            if t < 0 or t >= vocab:
                raise bad_value("logit_bias", f"Invalid value for 'logit_bias': '{k[:32]}' is not a token id "
                                              f"in [0, {vocab}).")
            if not _is_number(b) or not (-100 <= b <= 100):
                raise bad_value("logit_bias", f"Invalid value for 'logit_bias' of token {t}: biases are numbers "
                                              "in [-100, 100].")
            bias.append((t, float(b)))
        out = []
        for param in ("stop_token_ids", "allowed_token_ids"):
            ids = getattr(self, param)
            for i, t in enumerate(ids):
                if not _is_integer(t) or t < 0 or t >= vocab:
                    raise bad_value(param, f"Invalid value for '{param}'[{i}]: token ids are integers in "
                                           f"[0, {vocab}).")
            out.append([int(t) for t in ids])
            if param == "allowed_token_ids" and self.allowed_token_ids is not None and not ids \
                    and self._allowed_given:
                raise bad_value(param, "'allowed_token_ids' must not be empty.")
        return out[0], out[1], bias

    def __repr__(self):
        fields = ", ".join(f"{k}={getattr(self, k)!r}" for k in self.__slots__ if k not in ("n", "_allowed_given"))
        return f"SamplingParams({fields})"


def _parse_seed(v):
    """An exact 64-bit seed in [-2^63, 2^64 - 1], as the server reads one (api_sampling.c)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise bad_type("seed", v, "an integer")
    if isinstance(v, float):
        if not (math.isfinite(v) and v == math.floor(v)):
            raise bad_type("seed", v, "an integer")
        if abs(v) > 2**53:
            raise bad_value("seed", "Invalid value for 'seed': write an integer above 2^53 in digits.")
        return int(v)
    if not -2**63 <= v <= 2**64 - 1:
        raise bad_value("seed", f"Invalid value for 'seed': {v} is outside [-2^63, 2^64 - 1].")
    return v


_STRTOL = re.compile(r"[ \t\n\v\f\r]*([+-]?[0-9]+)")


def _parse_ids(param, v):
    """Token ids: the type here, the values against the vocabulary in check_vocab."""
    if v is None:
        return []
    if not isinstance(v, (list, tuple)):
        raise bad_type(param, v, "an array of token ids")
    return list(v)


def _parse_logit_bias(v):
    """{token id: bias}: the type here (keys kept as the strings JSON would carry), the
    entries in check_vocab."""
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise bad_type("logit_bias", v, "an object {token id: bias}")
    return {str(k): b for k, b in v.items()}


def _parse_schema(v):
    """A JSON schema as JSON text (checked against the supported subset at submit)."""
    if v is None:
        return None
    if isinstance(v, str):
        try:
            json.loads(v)
        except ValueError:
            raise bad_value("json_schema", "'json_schema' is not a JSON schema.") from None
        return v
    if isinstance(v, (dict, bool)):
        return json.dumps(v)
    raise bad_type("json_schema", v, "a JSON schema")


def _parse_stop(v):
    if v is None:
        return []
    if isinstance(v, str):
        items = [v]
    elif isinstance(v, (list, tuple)):
        items = list(v)
    else:
        raise bad_type("stop", v, "a string or an array of strings")
    if len(items) > MAX_STOP:
        raise bad_value("stop", f"At most {MAX_STOP} stop sequences are supported (got {len(items)}).")
    for s in items:
        if not isinstance(s, str):
            raise bad_type("stop", s, "a string")
        if not s:
            raise bad_value("stop", "Stop sequences must not be empty.")
    return items


def parse_documents(v, max_docs):
    """documents: [string | {title?, text}] -> [(title or None, text)] (parse_documents)."""
    if v is None:
        return []
    if not isinstance(v, (list, tuple)):
        raise bad_type("documents", v, "an array")
    if len(v) > max_docs:
        raise bad_value("documents", f"Too many documents: {len(v)}, the limit is {max_docs} per request.")
    out = []
    for i, d in enumerate(v):
        param = f"documents[{i}]"
        if isinstance(d, str):
            if not d:
                raise bad_value(param, f"'{param}' must not be empty.")
            out.append((None, d))
        elif isinstance(d, dict):
            for k in d:
                if k not in ("title", "text"):  # a misspelt field is never ignored
                    raise bad_value(f"{param}.{k}", f"Unrecognized request argument supplied: '{param}.{k}'.")
            text, title = d.get("text"), d.get("title")
            param = f"documents[{i}].text"
            if text is None:
                raise bad_value(param, f"Missing required parameter: '{param}'.")
            if not isinstance(text, str):
                raise bad_type(param, text, "a string")
            if not text:
                raise bad_value(param, f"'{param}' must not be empty.")
            if title is not None and not isinstance(title, str):
                raise bad_type(f"documents[{i}].title", title, "a string")
            out.append((title or None, text))  # an empty title: an untitled document
        else:
            raise bad_type(param, d, "a string or an object {title, text}")
    return out


def _parse_content(v, i):
    param = f"messages[{i}].content"
    if v is None:
        raise bad_value(param, f"Missing required parameter: '{param}'.")
    if isinstance(v, str):
        return v
    if not isinstance(v, (list, tuple)):
        raise bad_type(param, v, "a string or an array of content parts")
    parts = []
    for k, p in enumerate(v):
        pk = f"messages[{i}].content[{k}]"
        if not isinstance(p, dict):
            raise bad_type(pk, p, "an object {type, text}")
        if p.get("type") != "text":
            raise InvalidArgumentError("Only content parts of type 'text' are supported.",
                                       param=pk, status="unsupported")
        if not isinstance(p.get("text"), str):
            raise bad_type(pk, p.get("text"), "a string in 'text'")
        for key, x in p.items():  # a misspelt or foreign key (cache_control) is never ignored
            if key not in ("type", "text") and x is not None:
                raise bad_value(f"{pk}.{key}", f"Unrecognized request argument supplied: '{pk}.{key}'.")
        if p["text"]:
            parts.append(p["text"])
    return "\n".join(parts)


def parse_messages(v):
    """messages: [{role, content}] -> [(role, content)] (parse_messages)."""
    if v is None:
        raise bad_value("messages", "Missing required parameter: 'messages'.")
    if not isinstance(v, (list, tuple)):
        raise bad_type("messages", v, "an array")
    if not v:
        raise bad_value("messages", "'messages' must not be empty.")
    out, user = [], False
    for i, m in enumerate(v):
        if not isinstance(m, dict):
            raise bad_type(f"messages[{i}]", m, "an object {role, content}")
        for k, x in m.items():  # nothing in a message is ignored (the server's rule)
            pk = f"messages[{i}].{k}"
            if k in ("role", "content") or x is None:
                continue
            if k in ("name", "tool_calls", "tool_call_id", "refusal", "audio"):
                raise InvalidArgumentError(f"'{pk}' is not supported: the chat template has no place for it.",
                                           param=pk, status="unsupported")
            raise bad_value(pk, f"Unrecognized message field: '{pk}'.")
        param = f"messages[{i}].role"
        role = m.get("role")
        if role is None:
            raise bad_value(param, f"Missing required parameter: '{param}'.")
        if not isinstance(role, str):
            raise bad_type(param, role, "a string")
        if role == "developer":
            role = "system"  # OpenAI's newer name for system
        if role not in ROLES:
            raise bad_value(param, f"Invalid value for '{param}': '{role[:64]}' is not one of system, "
                                   "developer, user, assistant.")
        user |= role == "user"
        out.append((role, _parse_content(m.get("content"), i)))
    if not user:
        raise bad_value("messages", "'messages' must contain a user message.")
    return out


def parse_prompt(v):
    """prompt: a string (one prompt)."""
    if v is None:
        raise bad_value("prompt", "Missing required parameter: 'prompt'.")
    if not isinstance(v, str):
        raise bad_type("prompt", v, "a string")
    return v


def parse_cache_salt(v):
    if v is None:
        return None
    if not get_string("cache_salt", v):  # "" would share the unsalted cache, as the server says
        raise bad_value("cache_salt", "'cache_salt' must not be empty (leave it out for no salt).")
    return v
