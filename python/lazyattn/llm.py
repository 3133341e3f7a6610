"""LLM: the engine of the C library, driven from Python (README "Python").

Requests are submitted to the engine together and run by its continuous batching: the
calling thread steps the engine (la_engine_step, with the GIL released) until its own
requests are done, and the engine's event callback collects each request's tokens. Several
threads may use one LLM at once; their requests share the engine's batches (a lock lets one
thread step at a time, as the C API asks). KeyboardInterrupt (Ctrl-C) cancels the interrupted call's requests
(la_engine_cancel), lets the engine release their KV blocks, and is raised again; the engine
stays usable. Errors raise exceptions of lazyattn.errors carrying the C library's message.
"""

import codecs
import ctypes
import itertools
import os
import signal
import threading
from collections import deque
from ctypes import byref, c_char_p, c_int, c_int32, c_uint64, c_void_p, POINTER
from dataclasses import dataclass, field

from . import _capi
from . import request as rq
from .errors import InvalidArgumentError, InvalidTypeError, LazyattnError, ModelLoadError, from_status

_HERE = os.path.dirname(os.path.abspath(__file__))
BUNDLED_MODEL = "rag-tiny"


def default_model_dir():
    """The bundled model, found as the CLI finds it: $LAZYATTN_MODEL, else the copy installed
    with the package (pip install), else models/rag-tiny of the checkout these sources sit in
    (python/lazyattn/ -> ../../models)."""
    env = os.environ.get("LAZYATTN_MODEL")
    if env:
        return env
    candidates = [os.path.join(_HERE, "models", BUNDLED_MODEL),
                  os.path.join(_HERE, os.pardir, os.pardir, "models", BUNDLED_MODEL)]
    for c in candidates:
        if os.path.isfile(os.path.join(c, "config.json")):
            return os.path.normpath(c)
    raise ModelLoadError(f"the bundled model {BUNDLED_MODEL} is in none of {candidates}: pass "
                         "model=DIR or set LAZYATTN_MODEL", "io", "model")


# Engine options LLM(**options) takes: la_engine_options' fields of these types.
_INT32, _INT64 = (-2**31, 2**31 - 1), (-2**63, 2**63 - 1)
ENGINE_OPTIONS = {
    "n_threads": _INT32, "block_size": _INT32, "kv_blocks": _INT64, "kv_bytes": _INT64,
    "gpu_memory_fraction": float, "max_batch_tokens": _INT32, "max_running": _INT32,
    "max_queue": _INT32, "max_docs": _INT32, "max_context": _INT32, "host_kv_bytes": _INT64,
    "kv_dir": str, "kv_dir_bytes": _INT64, "kv_write_through": bool, "kv_secret_file": str,
    "kv_store_url": str, "kv_io_timeout_ms": float, "tokenizer_dir": str, "random_weights": str,
    "chat_template_file": str, "kv_staging_bytes": _INT64, "recompute_first": (0, 2**31 - 1),
    "cpu_weights": (0, 4),  # la_cpu_weights: 0 auto, 1 f32, 2 bf16, 3 f16, 4 bf16-dot
    "cpu_kv": (0, 1),  # la_cpu_kv: 0 f32, 1 bf16
    "kv_io_threads": (0, 64),
    "kv_read": (0, 1),  # la_kv_read: 0 always, 1 auto
    "recompute_ratio": (0.0, 1.0),  # a fraction: checked as a number in [0, 1]
    "doc_context": (0, 1),  # la_doc_context: 0 alone, 1 preamble
    "async_scheduling": (0, 2),  # la_async_scheduling: 0 auto, 1 off, 2 on
    "prefill_first": bool,
    "doc_token_cache_bytes": (0, 2**63 - 1),
}
_DOC_CONTEXTS = {"alone": 0, "preamble": 1}
# The names the command line takes (--cpu-weights, --cpu-kv, --kv-read), as their enum values.
_NAMED_OPTIONS = {
    "cpu_weights": {"auto": 0, "f32": 1, "bf16": 2, "f16": 3, "bf16-dot": 4},
    "cpu_kv": {"f32": 0, "bf16": 1},
    "kv_read": {"always": 0, "auto": 1},
    "async_scheduling": {"auto": 0, "off": 1, "on": 2},
}


def _doc_context(v):
    """A request's doc_context ("alone" | "preamble", as the server's field) as la_doc_context."""
    if rq.get_string("doc_context", v) not in _DOC_CONTEXTS:
        raise InvalidArgumentError(f"'doc_context' must be 'alone' or 'preamble', not {v!r}.", param="doc_context")
    return _DOC_CONTEXTS[v]


def _utf8(param, s):
    """s as UTF-8 for the C library, whose strings end at NUL: a NUL inside is refused (a
    cache salt cut there would be another tenant's)."""
    if "\x00" in s:
        raise InvalidArgumentError(f"'{param}' holds \\u0000 (NUL), which is not supported.", param=param)
    try:
        return s.encode("utf-8")
    except UnicodeEncodeError as e:
        raise InvalidArgumentError(f"'{param}' is not valid UTF-8 (character {e.start}).", param=param) from None


def _check(status, err, param=None):
    if status != _capi.LA_OK:
        raise from_status(_capi.STATUS_NAMES[status], err.msg.decode("utf-8", "replace"), param)


class _DeferSigint:
    """Ctrl-C while the engine runs: Python would raise KeyboardInterrupt inside the event
    callback (the only Python code that runs during la_engine_step), where ctypes swallows it
    and the event is half handled. So while a call drives the engine from the main thread,
    SIGINT only sets a flag, and check() raises KeyboardInterrupt between steps, where the call
    can cancel its requests. Only the standard handler is replaced (a program's own handler
    stays), and it is put back on exit."""

    def __enter__(self):
        self.hit, self.old = False, None
        if (threading.current_thread() is threading.main_thread()
                and signal.getsignal(signal.SIGINT) is signal.default_int_handler):
            self.old = signal.signal(signal.SIGINT, self._handler)
        return self

    def _handler(self, signum, frame):
        self.hit = True

    def check(self):
        if self.hit:
            self.hit = False
            raise KeyboardInterrupt

    def __exit__(self, exc_type, exc, tb):
        if self.old is not None:
            signal.signal(signal.SIGINT, self.old)
        if self.hit and exc_type is None:
            raise KeyboardInterrupt


class _Closing:
    """close() on leaving a with block and when collected."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


@dataclass
class RequestOutput:
    """One request's result. cached_tokens is the server's usage.prompt_tokens_details
    .cached_tokens: document tokens plus prefix tokens served from the KV cache."""
    prompt: object
    text: str
    token_ids: list
    finish_reason: str            # "stop", "length", "cancelled" or "error"
    cached_tokens: int
    prompt_tokens: int
    completion_tokens: int
    doc_tokens: int
    doc_tokens_reused: int
    doc_tokens_computed: int
    prefix_tokens_reused: int
    doc_tokens_recomputed: int    # recovery: document tokens recomputed in context
    doc_tokens_probed: int        # selected recovery: document tokens its probe ran
    doc_tokens_host: int          # of doc_tokens_reused: loaded from the KV store's host tier,
    doc_tokens_disk: int          # its disk tier,
    doc_tokens_shared: int        # its shared tier (by this request's own document jobs)
    preemptions: int
    ttft_ms: float
    tpot_ms: float
    queue_ms: float
    e2e_ms: float
    method: str
    error: str = None
    logprobs: list = None         # SamplingParams(logprobs=k): per output token, a dict
                                  # {token id: logprob} of the chosen token and the k most
                                  # likely ones (log-softmax of the raw logits, as vLLM's)
    index: int = 0                # the choice, 0 .. SamplingParams.n - 1


class _Choice:
    """What the events of one choice (sampling n) brought."""

    def __init__(self, logprobs):
        self.pieces = deque()
        self.text = []
        self.token_ids = []
        self.decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self.done = False
        self.finish = None
        self.status = 0
        self.error = None
        self.stats = None
        self.logprobs = [] if logprobs else None


class _Request:
    """One submitted request: the C params with everything they point to, and what its events
    brought, per choice."""

    def __init__(self, source, chat, method):
        self.source = source
        self.chat = chat
        self.method = method
        self.params = _capi.la_request_params()
        self.keep = []            # Python objects the params point into
        self.id = None
        self.choices = [_Choice(False)]

    def set_choices(self, n, logprobs):
        self.choices = [_Choice(logprobs) for _ in range(n)]

    @property
    def done(self):
        return all(c.done for c in self.choices)

    def failed(self):
        """The first failed choice, or None."""
        return next((c for c in self.choices if c.finish == "error"), None)

    def outputs(self):
        return [self._output(i, c) for i, c in enumerate(self.choices)]

    def _output(self, index, c):
        s = c.stats or _capi.la_request_stats()
        return RequestOutput(
            prompt=self.source, text="".join(c.text), token_ids=list(c.token_ids),
            finish_reason=c.finish, cached_tokens=s.doc_tokens_reused + s.prefix_tokens_reused,
            prompt_tokens=s.n_prompt_tokens, completion_tokens=s.n_generated,
            doc_tokens=s.n_doc_tokens, doc_tokens_reused=s.doc_tokens_reused,
            doc_tokens_computed=s.doc_tokens_computed, prefix_tokens_reused=s.prefix_tokens_reused,
            doc_tokens_recomputed=s.doc_tokens_recomputed, doc_tokens_probed=s.doc_tokens_probed,
            doc_tokens_host=s.doc_tokens_host,
            doc_tokens_disk=s.doc_tokens_disk, doc_tokens_shared=s.doc_tokens_shared,
            preemptions=s.n_preemptions, ttft_ms=s.ttft_ms, tpot_ms=s.tpot_ms, queue_ms=s.queue_ms,
            e2e_ms=s.e2e_ms, method=self.method, error=c.error,
            logprobs=None if c.logprobs is None else list(c.logprobs), index=index)


class LLM(_Closing):
    """An engine on one model.

    model    a Hugging Face Llama directory; None: the bundled model (default_model_dir())
    device   "cpu" or "cuda"
    method   the requests' default method: recompute, prefix, block, mepic, lazy, block-ref
    options  la_engine_options fields (include/lazyattn/lazyattn.h): n_threads, block_size,
             kv_blocks, kv_bytes, gpu_memory_fraction, max_batch_tokens, max_running,
             max_queue, max_docs, max_context, host_kv_bytes, kv_dir, kv_dir_bytes,
             kv_write_through, kv_secret_file, kv_store_url, kv_io_timeout_ms, tokenizer_dir,
             random_weights, chat_template_file (a Jinja file instead of the model's template),
             kv_staging_bytes, recompute_first (recovery's default for the block-wise methods:
             each later document's first N tokens recomputed in context; README "Recovery"),
             cpu_weights ("auto" or 0: the checkpoint's dtype, "f32" 1, "bf16" 2, "f16" 3, "bf16-dot"
             4; README "CPU backend"), cpu_kv ("f32" or 0, "bf16" 1: the CPU's KV cache dtype),
             kv_io_threads (threads reading and writing the disk and shared tiers; 0: 2), kv_read
             ("always" or 0, the default; "auto" 1: a disk or shared-tier record is read only when
             that beats computing it),
             recompute_ratio (selected recovery's default R in [0, 1]: the fraction of the later
             documents' tokens a probe of layers 0-1 finds most changed by context, recomputed),
             doc_context ("alone" or 0, the default; "preamble" or 1: the documents after the first are
             computed after document 0 and cached under it; README "Documents encoded after the
             preamble"; a request's "doc_context": "alone" | "preamble" overrides),
             async_scheduling ("auto" or 0, the default: on with CUDA; "off" 1; "on" 2: the engine
             queues the next greedy decode step before reading this one's tokens back; README
             "Async scheduling"), prefill_first (False, the default; True: a step with prefill
             work ready packs no decode rows, README "Async scheduling"), doc_token_cache_bytes
             (64 MiB, the default; 0: off: host memory for documents' token ids by their text,
             README "Document tokens")

    Raises InvalidTypeError / InvalidArgumentError for a bad argument and ModelLoadError
    (or another LazyattnError) when the engine cannot be created.
    """

    def __init__(self, model=None, device="cpu", method="lazy", **options):
        self._e = None
        lib = _capi.lib()
        o = _capi.la_engine_options()
        lib.la_engine_options_init_sized(byref(o), ctypes.sizeof(o))
        keep = []
        if model is None and not options.get("random_weights"):
            model = default_model_dir()
        if model is not None:
            model = os.fspath(model) if isinstance(model, os.PathLike) else model
            o.model_dir = _utf8("model", rq.get_string("model", model))
            keep.append(o.model_dir)
        err = _capi.la_err()
        dev = c_int()
        _check(lib.la_device_parse(_utf8("device", rq.get_string("device", device)), byref(dev), byref(err)),
               err, "device")
        o.device = dev.value
        self._method = self._parse_method(method)
        o.method = self._method
        for name, value in options.items():
            kind = ENGINE_OPTIONS.get(name)
            if kind is None:
                raise InvalidTypeError(f"LLM() got an unknown engine option '{name}' (known: "
                                       f"{', '.join(sorted(ENGINE_OPTIONS))})", param=name)
            if value is None:
                continue
            if name == "doc_context" and isinstance(value, str):
                value = _doc_context(value)
            if name in _NAMED_OPTIONS and isinstance(value, str):
                names = _NAMED_OPTIONS[name]
                if value not in names:
                    raise InvalidArgumentError(f"'{name}' must be one of {', '.join(map(repr, names))} "
                                               f"(or its number), not {value!r}.", param=name)
                value = names[value]
            if kind is str:
                value = _utf8(name, rq.get_string(name, value))
                keep.append(value)
            elif kind is bool:
                rq.get_bool(name, value)
            elif kind is float:
                if not rq._is_number(value):
                    raise rq.bad_type(name, value, "a number")
                value = float(value)
            elif isinstance(kind[0], float):
                value = rq.get_number(name, value, kind[0], False, kind[1])
            else:
                value = rq.get_int(name, value, *kind)  # an int compared exactly
            setattr(o, name, value)
        e = c_void_p()
        _check(lib.la_engine_create(byref(o), byref(e), byref(err)), err, "model")
        self._e = e
        self._lib = lib
        self._cb = _capi.EVENT_FN(self._on_event)  # kept alive as long as the engine
        self._step_lock = threading.Lock()  # la_engine_step is for one thread at a time
        self._by_key = {}
        self._keys = itertools.count(1)
        self.max_context = lib.la_engine_max_context(e)
        self.vocab_size = lib.la_engine_vocab_size(e)
        self.model_name = lib.la_engine_model_name(e).decode()
        self.device = lib.la_engine_device_name(e).decode()
        self.max_docs = o.max_docs
        self._doc_context = o.doc_context

    # ---- lifetime ------------------------------------------------------------------------

    def close(self):
        """Cancel what is in flight and free the engine (and its KV cache)."""
        if self._e is not None:
            with self._step_lock:
                e, self._e = self._e, None
                self._lib.la_engine_destroy(e)
            self._by_key.clear()

    def _engine(self):
        if self._e is None:
            raise LazyattnError("this LLM is closed", "invalid_arg")
        return self._e

    # ---- requests --------------------------------------------------------------------------

    def _parse_method(self, m, param="method"):
        if m is None:
            return _capi.LA_METHOD_COUNT
        out, err = c_int(), _capi.la_err()
        _check(_capi.lib().la_method_parse(_utf8(param, rq.get_string(param, m)), byref(out), byref(err)),
               err, param)
        return out.value

    def _method_name(self, m):
        return self._lib.la_method_name(self._method if m == _capi.LA_METHOD_COUNT else m).decode()

    def _segments(self, r, docs):
        arr = (_capi.la_segment * max(len(docs), 1))()
        for i, (title, text) in enumerate(docs):
            b = _utf8(f"documents[{i}]", text)
            arr[i].text, arr[i].len = b, len(b)
            if title is not None:
                arr[i].title = _utf8(f"documents[{i}].title", title)
                r.keep.append(arr[i].title)
            r.keep.append(b)
        r.keep.append(arr)
        return arr

    def _build(self, source, item, sp, documents, method, cache_salt, recompute_first=None, recompute_ratio=None,
               doc_context=None):
        """A _Request from one normalized item {"prompt" | "messages", "documents", ...}."""
        chat = "messages" in item
        m = self._parse_method(item.get("method", method))
        r = _Request(source, chat, self._method_name(m))
        p = r.params
        self._lib.la_request_params_init_sized(byref(p), ctypes.sizeof(p))
        docs = rq.parse_documents(item.get("documents", documents), self.max_docs)
        if chat:
            msgs = rq.parse_messages(item["messages"])
            arr = (_capi.la_chat_message * len(msgs))()
            for i, (role, content) in enumerate(msgs):
                arr[i].role = role.encode()
                arr[i].content = _utf8(f"messages[{i}].content", content)
                r.keep += [arr[i].role, arr[i].content]
            r.keep.append(arr)
            p.messages, p.n_messages = arr, len(msgs)
            p.chat_format = _capi.LA_CHAT_FORMAT_AUTO
        else:
            text = _utf8("prompt", rq.parse_prompt(item.get("prompt")))
            r.keep.append(text)
            p.prompt.text, p.prompt.len = text, len(text)
        if docs:
            p.docs, p.n_docs = self._segments(r, docs), len(docs)
        p.method = m
        rf = item.get("recompute_first", recompute_first)
        if rf is not None:
            p.recompute_first = rq.get_int("recompute_first", rf, 0, 2**31 - 1)
        rr = item.get("recompute_ratio", recompute_ratio)
        if rr is not None:
            p.recompute_ratio = rq.get_number("recompute_ratio", rr, 0.0, False, 1.0)
        dc = item.get("doc_context", doc_context)
        if dc is not None:
            p.doc_context = _doc_context(dc)
        salt = rq.parse_cache_salt(item.get("cache_salt", cache_salt))
        if salt is not None:
            p.cache_salt = _utf8("cache_salt", salt)
            r.keep.append(p.cache_salt)
        if sp is None:
            sp = rq.SamplingParams()
        elif not isinstance(sp, rq.SamplingParams):
            raise InvalidTypeError(f"Invalid type for 'sampling_params': expected a SamplingParams, "
                                   f"but got {rq.json_type_name(sp)} instead.", param="sampling_params")
        stop_ids, allowed_ids, bias = sp.check_vocab(self.vocab_size)
        s = p.sampling
        s.max_tokens = sp.resolved_max_tokens(chat, self.max_context)
        if sp.min_tokens > s.max_tokens:
            raise rq.bad_value("min_tokens", f"Invalid value for 'min_tokens': {sp.min_tokens} exceeds "
                                             f"max_tokens ({s.max_tokens}).")
        s.min_tokens = sp.min_tokens
        s.temperature, s.top_p, s.top_k, s.min_p = sp.temperature, sp.top_p, sp.top_k, sp.min_p
        s.seed = sp.seed & (2**64 - 1)
        s.ignore_eos = sp.ignore_eos
        s.include_stop_str = sp.include_stop_str_in_output
        s.presence_penalty, s.frequency_penalty = sp.presence_penalty, sp.frequency_penalty
        s.repetition_penalty = sp.repetition_penalty
        if sp.stop:
            stops = (c_char_p * len(sp.stop))(*[_utf8("stop", x) for x in sp.stop])
            r.keep.append(stops)
            s.stop, s.n_stop = ctypes.cast(stops, POINTER(c_char_p)), len(sp.stop)
        for name, ids in (("stop_token_ids", stop_ids), ("allowed_token_ids", allowed_ids)):
            if ids:
                arr = (c_int32 * len(ids))(*ids)
                r.keep.append(arr)
                setattr(s, name, ctypes.cast(arr, POINTER(c_int32)))
                setattr(s, "n_" + name, len(ids))
        if bias:
            lb = (_capi.la_logit_bias * len(bias))(*bias)
            r.keep.append(lb)
            s.logit_bias, s.n_logit_bias = ctypes.cast(lb, POINTER(_capi.la_logit_bias)), len(bias)
        if sp.logprobs is not None:
            s.logprobs, s.top_logprobs = True, sp.logprobs
        s.n = sp.n
        r.set_choices(sp.n, sp.logprobs is not None)
        if sp.json_schema is not None:
            s.response_format = _capi.LA_RESPONSE_JSON_SCHEMA
            s.json_schema = sp.json_schema.encode()
            r.keep.append(s.json_schema)
        elif sp.json_object:
            s.response_format = _capi.LA_RESPONSE_JSON_OBJECT
        p.on_event = self._cb
        return r

    def _on_event(self, user, evp):
        r = self._by_key.get(user)
        if r is None:
            return
        ev = evp.contents
        c = r.choices[ev.index if 0 <= ev.index < len(r.choices) else 0]
        if ev.text_len:
            piece = c.decoder.decode(ctypes.string_at(ev.text, ev.text_len))
            if piece:
                c.text.append(piece)
                c.pieces.append(piece)
        if ev.kind == _capi.LA_EVENT_TOKEN:
            c.token_ids.append(ev.token_id)
            if c.logprobs is not None:
                lp = {ev.top_ids[i]: ev.top_logprobs[i] for i in range(ev.n_top)}
                lp[ev.token_id] = ev.logprob
                c.logprobs.append(lp)
        elif ev.kind == _capi.LA_EVENT_DONE:
            tail = c.decoder.decode(b"", final=True)
            if tail:
                c.text.append(tail)
                c.pieces.append(tail)
            c.finish = _capi.FINISH_NAMES.get(ev.finish)
            c.status = ev.status
            c.error = ev.error.decode("utf-8", "replace") if ev.status and ev.error else None
            if ev.stats:
                c.stats = _capi.la_request_stats.from_buffer_copy(ev.stats.contents)
            c.done = True

    def _step(self):
        """One engine step (a failed step finishes its requests with ERROR: they say why).
        Threads take turns: the C API wants one stepping thread at a time."""
        err = _capi.la_err()
        with self._step_lock:
            self._lib.la_engine_step(self._engine(), byref(err))

    def _submit(self, r, in_flight):
        """Queue r; while the queue is full, step the engine for the requests in flight."""
        key = next(self._keys)
        r.params.user = key
        self._by_key[key] = r
        err, rid = _capi.la_err(), c_uint64()
        while True:
            st = self._lib.la_engine_submit(self._engine(), byref(r.params), byref(rid), byref(err))
            if st == _capi.LA_ERR_BUSY and any(not q.done for q in in_flight):
                self._step()
                continue
            if st != _capi.LA_OK:
                del self._by_key[key]
            _check(st, err)
            r.id = rid.value
            r.key = key
            return

    def _drive(self, reqs, guard=None):
        while any(not r.done for r in reqs):
            self._step()
            if guard is not None:
                guard.check()
            if not self._lib.la_engine_has_work(self._engine()) and any(not r.done for r in reqs):
                raise LazyattnError("engine went idle with requests unfinished", "internal")

    def _cancel(self, reqs):
        """Cancel reqs that are still running and let the engine finish them (their KV blocks
        are released; cached documents stay cached)."""
        for r in reqs:
            if r.id is not None and not r.done:
                self._lib.la_engine_cancel(self._engine(), r.id)
        while True:
            try:
                with _DeferSigint():  # a second Ctrl-C waits until the requests are drained
                    self._drive([r for r in reqs if r.id is not None])
                return
            except KeyboardInterrupt:
                return  # drained; the interrupt being handled is raised by the caller

    def _release(self, reqs):
        for r in reqs:
            self._by_key.pop(getattr(r, "key", None), None)

    def _run(self, reqs):
        """Submit reqs together, step until all are done; cancel them on any exception."""
        try:
            with _DeferSigint() as guard:
                for r in reqs:
                    self._submit(r, reqs)
                    guard.check()
                self._drive(reqs, guard)
        except BaseException:
            if self._e is not None:
                self._cancel(reqs)
            raise
        finally:
            self._release(reqs)
        outs = [o for r in reqs for o in r.outputs()]
        for r in reqs:
            c = r.failed()
            if c is not None:
                exc = from_status(_capi.STATUS_NAMES[c.status], c.error or "request failed")
                exc.outputs = outs
                raise exc
        return outs

    # ---- normalizing what the caller gives ------------------------------------------------

    _ITEM_KEYS = {"prompt", "messages", "documents", "method", "cache_salt", "recompute_first", "recompute_ratio",
                  "doc_context"}

    def _item(self, p, i):
        if isinstance(p, str):
            return {"prompt": p}
        if isinstance(p, dict):
            unknown = set(p) - self._ITEM_KEYS
            if unknown:
                raise InvalidArgumentError(f"prompts[{i}]: unknown field '{sorted(unknown)[0]}' (a prompt "
                                           "is {prompt | messages, documents?, method?, cache_salt?, recompute_first?, "
                                           "recompute_ratio?, doc_context?})",
                                           param=f"prompts[{i}]")
            if ("prompt" in p) == ("messages" in p):
                raise InvalidArgumentError(f"prompts[{i}]: give exactly one of 'prompt' and 'messages'",
                                           param=f"prompts[{i}]")
            return p
        raise rq.bad_type(f"prompts[{i}]", p, "a string or an object {prompt | messages, documents}")

    def _requests(self, items, sampling_params, documents, method, cache_salt, recompute_first=None, recompute_ratio=None,
                  doc_context=None):
        if isinstance(sampling_params, (list, tuple)):
            if len(sampling_params) != len(items):
                raise InvalidArgumentError(f"{len(sampling_params)} sampling_params for {len(items)} prompts",
                                           param="sampling_params")
            sps = list(sampling_params)
        else:
            sps = [sampling_params] * len(items)
        return [self._build(src, it, sp, documents, method, cache_salt, recompute_first, recompute_ratio, doc_context)
                for (src, it), sp in zip(items, sps)]

    # ---- the API -------------------------------------------------------------------------------

    def generate(self, prompts, sampling_params=None, documents=None, *, method=None, cache_salt=None,
                 recompute_first=None, recompute_ratio=None, doc_context=None):
        """Complete prompts, batched together. prompts: a string, a dict {"prompt": text} or
        {"messages": [...]} with optional "documents", "method", "cache_salt", "recompute_first"
        (recovery: each later document's first N tokens recomputed in context),
        "recompute_ratio" (selected recovery: the fraction R of the later documents' tokens
        whose layer-1 values change most in context, recomputed too), "doc_context" ("alone" |
        "preamble": the documents after the first computed after document 0; README "Documents
        encoded after the preamble"), or a list of those; the keywords recompute_first,
        recompute_ratio and doc_context apply to every prompt without its own. A "prompt" is
        raw text after the documents (as /v1/completions); "messages" go through the model's
        chat template (as /v1/chat/completions and `lazyattn run`).
        documents: [str | {"title", "text"}] for every prompt without its own. sampling_params:
        one SamplingParams, or one per prompt. Returns a list of RequestOutput in prompt order;
        with SamplingParams(n=k), k of them per prompt (RequestOutput.index 0 .. k-1), as
        OpenAI's completions flatten the choices of several prompts."""
        plist = prompts if isinstance(prompts, (list, tuple)) else [prompts]
        items = [(p, self._item(p, i)) for i, p in enumerate(plist)]
        return self._run(self._requests(items, sampling_params, documents, method, cache_salt, recompute_first, recompute_ratio,
                                         doc_context))

    def chat(self, messages, sampling_params=None, documents=None, *, method=None, cache_salt=None,
             recompute_first=None, recompute_ratio=None, doc_context=None):
        """Answer a conversation ([{"role", "content"}]) or a list of conversations, through the
        chat template (with documents: the Block-FT RAG template). Returns a list of
        RequestOutput."""
        many = isinstance(messages, (list, tuple)) and messages and isinstance(messages[0], (list, tuple))
        convs = list(messages) if many else [messages]
        items = [(c, {"messages": c}) for c in convs]
        return self._run(self._requests(items, sampling_params, documents, method, cache_salt, recompute_first, recompute_ratio,
                                         doc_context))

    def stream(self, prompt, sampling_params=None, documents=None, *, method=None, cache_salt=None,
               recompute_first=None, recompute_ratio=None, doc_context=None):
        """An iterator of the text pieces of one request as the engine makes them. prompt: a
        string, a prompt dict as generate() takes, or a conversation [{"role", "content"}].
        close(), leaving a `with llm.stream(...) as s:` block, or the iterator being collected
        cancels the request if it still runs: breaking out of `for piece in llm.stream(...)`
        cancels it at once (nothing else holds the iterator), while after `s = llm.stream(...)`
        it runs on until s.close() or s goes. .output holds the RequestOutput once the iterator
        is exhausted."""
        if isinstance(prompt, (list, tuple)):
            item = {"messages": prompt}
        else:
            item = self._item(prompt, 0)
        r = self._build(prompt, item, sampling_params, documents, method, cache_salt, recompute_first, recompute_ratio,
                        doc_context)
        if len(r.choices) > 1:
            raise InvalidArgumentError("stream() makes one completion: use generate() for n > 1.", param="n")
        self._submit(r, [])
        return TextStream(self, r)

    def prewarm(self, documents, *, method=None, cache_salt=None, doc_context=None):
        """Compute documents into the KV cache (POST /v1/documents): each becomes a request of
        its own (that document, the prompt "\\n", no BOS, one token), submitted together.
        Documents are pre-warmed alone: under doc_context "preamble" (given, or the LLM's)
        this is refused, as by the server. Returns, per document, {"index", "tokens",
        "cached", "cached_tokens"}."""
        m = self._parse_method(method)
        mm = self._method if m == _capi.LA_METHOD_COUNT else m
        if documents is None:
            raise InvalidArgumentError("Missing required parameter: 'documents'.", param="documents")
        docs = rq.parse_documents(documents, self.max_docs)
        if not docs:
            raise InvalidArgumentError("'documents' must not be empty.", param="documents")
        name = self._lib.la_method_name(mm).decode()
        if not self._lib.la_method_is_blockwise(mm) or name == "block-ref":
            raise InvalidArgumentError(f"Method '{name}' does not cache documents on their own; "
                                       "pre-warming needs lazy, block or mepic.", param="method")
        dc = self._doc_context if doc_context is None else _doc_context(doc_context)
        if dc == _DOC_CONTEXTS["preamble"]:
            raise InvalidArgumentError("Documents computed after the preamble (doc_context preamble) are cached "
                                       "under the preamble of the requests that use them: send those requests "
                                       "instead of pre-warming.", param="doc_context")
        sp = rq.SamplingParams(max_tokens=1)
        reqs = []
        for i, d in enumerate(docs):
            r = self._build(d, {"prompt": "\n", "doc_context": "alone"}, sp, [], method, cache_salt)
            r.params.docs, r.params.n_docs = self._segments(r, [d]), 1
            r.params.add_special = False
            reqs.append(r)
        outs = self._run(reqs)  # one choice each
        return [{"index": i, "tokens": o.doc_tokens, "cached": o.doc_tokens_reused == o.doc_tokens,
                 "cached_tokens": o.doc_tokens_reused} for i, o in enumerate(outs)]

    def stats(self):
        """The engine's counters (la_engine_stats) with its model, device and default method."""
        s = _capi.la_engine_stats()
        self._lib.la_engine_get_stats_sized(self._engine(), byref(s), ctypes.sizeof(s))
        out = {name: getattr(s, name) for name, _ in s._fields_}
        out.update(model=self.model_name, device=self.device, method=self._method_name(self._method))
        return out

    def store_stats(self):
        """The KV store's counters (la_engine_store_stats; README "Document KV store"): per tier
        ("host", "disk", "shared") hits, misses, bytes, seconds, writes, failures, evictions,
        records, reads skipped (kv_read auto: computed instead) and read rate; rejected records by
        reason; write-backs, spills, promotions, drops; the prefill rate the reads are weighed
        against. All zero without a store."""
        s = _capi.la_engine_store_stats()
        self._lib.la_engine_get_store_stats_sized(self._engine(), byref(s), ctypes.sizeof(s))
        by_tier = ("tier", "rejected_by_reason", "reads_skipped", "read_bytes_per_s")
        out = {name: getattr(s, name) for name, _ in s._fields_ if name not in by_tier}
        out["tiers"] = {n: dict({f: getattr(s.tier[i], f) for f, _ in s.tier[i]._fields_},
                                reads_skipped=s.reads_skipped[i], read_bytes_per_s=s.read_bytes_per_s[i])
                        for i, n in enumerate(_capi.TIER_NAMES)}
        reasons = {}
        for i in range(16):
            name = self._lib.la_engine_reject_reason_name(i)
            if name is None:
                break
            reasons[name.decode()] = s.rejected_by_reason[i]
        out["rejected_by_reason"] = reasons
        return out

    def tokenize(self, text, add_special=True):
        """Token ids of text with the model's tokenizer."""
        b = _utf8("text", rq.get_string("text", text))
        ids, n, err = POINTER(c_int32)(), c_int32(), _capi.la_err()
        _check(self._lib.la_engine_tokenize(self._engine(), b, len(b), bool(add_special), byref(ids),
                                            byref(n), byref(err)), err, "text")
        try:
            return ids[:n.value]
        finally:
            _capi.libc.free(ids)


class TextStream(_Closing):
    """The iterator llm.stream() returns."""

    def __init__(self, llm, r):
        self._llm, self._r = llm, r
        self.output = None

    def __iter__(self):
        return self

    def __next__(self):
        r = self._r
        c = r.choices[0]
        try:
            with _DeferSigint() as guard:
                while not c.pieces and not c.done:
                    self._llm._step()
                    guard.check()
        except BaseException:
            self.close()
            raise
        if c.pieces:
            return c.pieces.popleft()
        self._finish()
        if c.finish == "error":
            raise from_status(_capi.STATUS_NAMES[c.status], c.error or "request failed")
        raise StopIteration

    def _finish(self):
        if self.output is None:
            self._llm._release([self._r])
            self.output = self._r.outputs()[0]

    def close(self):
        """Cancel the request if it is still running."""
        if self.output is None and self._llm._e is not None:
            self._llm._cancel([self._r])
            self._finish()
