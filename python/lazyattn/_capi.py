"""ctypes mirror of the public C API (include/lazyattn/*.h) and the loading of liblazyattn.

Only what the bindings call is declared. Structs mirror the C layouts field by field, in
order; tests/python/test_abi.py compiles a C program against the headers and checks every
offset. The sized structs (la_engine_options, la_request_params, la_engine_stats) may be a
prefix of the library's: the library reads or writes only the size these mirrors pass
(include/lazyattn/abi.h), so a library with fields appended still works with these bindings.

ctypes.CDLL releases the GIL for the duration of every foreign call (la_engine_step
included) and the event callback takes it back while it runs.
"""

import ctypes
import os
from ctypes import (CFUNCTYPE, POINTER, Structure, c_bool, c_char, c_char_p, c_double, c_float,
                    c_int, c_int32, c_int64, c_size_t, c_uint64, c_void_p)

ABI_MAJOR = 0  # LA_VERSION_MAJOR of the headers these mirrors were written from

# ---- enums (values as in the headers) ------------------------------------------------------

LA_OK = 0
STATUS_NAMES = ["ok", "invalid_arg", "io", "format", "unsupported", "no_memory", "no_space",
                "not_found", "too_long", "cancelled", "busy", "backend", "internal"]
LA_ERR_BUSY = STATUS_NAMES.index("busy")
LA_EVENT_TOKEN, LA_EVENT_DONE = 1, 2
FINISH_NAMES = {0: None, 1: "stop", 2: "length", 3: "cancelled", 4: "error"}
LA_METHOD_COUNT = 6
LA_CHAT_FORMAT_AUTO = 0
LA_ERR_MSG_LEN = 512


# ---- structs -------------------------------------------------------------------------------

class la_err(Structure):
    _fields_ = [("code", c_int), ("msg", c_char * LA_ERR_MSG_LEN)]


class la_segment(Structure):
    _fields_ = [("text", c_char_p), ("len", c_size_t), ("ids", POINTER(c_int32)), ("n_ids", c_int32),
                ("title", c_char_p)]


class la_chat_message(Structure):
    _fields_ = [("role", c_char_p), ("content", c_char_p)]


class la_kv_event(Structure):  # opaque here: the bindings install no KV-event callback
    pass


class la_engine_options(Structure):
    _fields_ = [
        ("struct_size", c_size_t), ("model_dir", c_char_p), ("random_weights", c_char_p),
        ("tokenizer_dir", c_char_p), ("device", c_int), ("n_threads", c_int),
        ("block_size", c_int32), ("kv_blocks", c_int64), ("kv_bytes", c_int64),
        ("gpu_memory_fraction", c_double), ("method", c_int), ("max_batch_tokens", c_int32),
        ("max_running", c_int32), ("max_queue", c_int32), ("max_docs", c_int32),
        ("max_context", c_int32), ("host_kv_bytes", c_int64), ("kv_dir", c_char_p),
        ("kv_dir_bytes", c_int64), ("kv_write_through", c_bool), ("kv_secret_file", c_char_p),
        ("kv_store_url", c_char_p), ("kv_io_timeout_ms", c_double),
        ("on_kv_event", CFUNCTYPE(None, c_void_p, POINTER(la_kv_event))),
        ("kv_event_user", c_void_p), ("chat_template_file", c_char_p), ("kv_staging_bytes", c_int64),
        ("recompute_first", c_int32), ("cpu_weights", c_int), ("cpu_kv", c_int),
        ("kv_io_threads", c_int32), ("kv_read", c_int), ("recompute_ratio", c_float),
        ("doc_context", c_int), ("async_scheduling", c_int), ("prefill_first", c_bool),
        ("doc_token_cache_bytes", c_int64),
    ]


class la_logit_bias(Structure):
    _fields_ = [("token_id", c_int32), ("bias", c_float)]


LA_RESPONSE_TEXT, LA_RESPONSE_JSON_OBJECT, LA_RESPONSE_JSON_SCHEMA = 0, 1, 2


class la_sampling_params(Structure):
    _fields_ = [("temperature", c_float), ("top_p", c_float), ("top_k", c_int32), ("seed", c_uint64),
                ("max_tokens", c_int32), ("stop", POINTER(c_char_p)), ("n_stop", c_int32),
                ("ignore_eos", c_bool), ("presence_penalty", c_float), ("frequency_penalty", c_float),
                ("repetition_penalty", c_float), ("min_p", c_float), ("min_tokens", c_int32),
                ("stop_token_ids", POINTER(c_int32)), ("n_stop_token_ids", c_int32),
                ("logit_bias", POINTER(la_logit_bias)), ("n_logit_bias", c_int32),
                ("allowed_token_ids", POINTER(c_int32)), ("n_allowed_token_ids", c_int32),
                ("n", c_int32), ("logprobs", c_bool), ("top_logprobs", c_int32),
                ("response_format", c_int), ("json_schema", c_char_p), ("include_stop_str", c_bool)]


class la_request_stats(Structure):
    _fields_ = [("n_prompt_tokens", c_int32), ("n_doc_tokens", c_int32),
                ("doc_tokens_reused", c_int64), ("doc_tokens_computed", c_int64),
                ("prefix_tokens_reused", c_int64), ("n_generated", c_int32),
                ("n_preemptions", c_int32), ("queue_ms", c_double), ("ttft_ms", c_double),
                ("tpot_ms", c_double), ("e2e_ms", c_double), ("doc_tokens_host", c_int64),
                ("doc_tokens_disk", c_int64), ("doc_tokens_shared", c_int64),
                ("doc_tokens_recomputed", c_int64), ("doc_tokens_probed", c_int64)]


class la_event(Structure):
    _fields_ = [("request_id", c_uint64), ("kind", c_int), ("token_id", c_int32),
                ("text", c_void_p), ("text_len", c_size_t), ("logits", POINTER(c_float)),
                ("n_vocab", c_int32), ("finish", c_int), ("status", c_int), ("error", c_char_p),
                ("stats", POINTER(la_request_stats)), ("index", c_int32), ("logprob", c_float),
                ("n_top", c_int32), ("top_ids", POINTER(c_int32)), ("top_logprobs", POINTER(c_float))]


EVENT_FN = CFUNCTYPE(None, c_void_p, POINTER(la_event))


class la_request_params(Structure):
    _fields_ = [("struct_size", c_size_t), ("prompt", la_segment), ("preamble", la_segment),
                ("docs", POINTER(la_segment)), ("n_docs", c_int32),
                ("messages", POINTER(la_chat_message)), ("n_messages", c_int32),
                ("chat_format", c_int), ("method", c_int), ("cache_salt", c_char_p),
                ("add_special", c_bool), ("return_logits", c_bool), ("keep_special_tokens", c_bool),
                ("sampling", la_sampling_params), ("on_event", EVENT_FN), ("user", c_void_p),
                ("recompute_first", c_int32), ("recompute_ratio", c_float), ("doc_context", c_int)]


class la_engine_tier_stats(Structure):
    _fields_ = [("enabled", c_bool), ("hits", c_int64), ("misses", c_int64), ("bytes_read", c_int64),
                ("bytes_written", c_int64), ("read_s", c_double), ("write_s", c_double), ("writes", c_int64),
                ("write_failures", c_int64), ("evictions", c_int64), ("errors", c_int64), ("records", c_int64),
                ("bytes", c_int64), ("down", c_bool)]


TIER_NAMES = ("host", "disk", "shared")  # la_kv_tier_kind


class la_engine_store_stats(Structure):
    _fields_ = [("tier", la_engine_tier_stats * len(TIER_NAMES)), ("rejected", c_int64),
                ("rejected_by_reason", c_int64 * 16), ("timeouts", c_int64), ("writebacks", c_int64),
                ("spills", c_int64), ("puts_dropped", c_int64), ("copy_in_s", c_double), ("copy_out_s", c_double),
                ("copy_in_bytes", c_int64), ("copy_out_bytes", c_int64), ("promotions", c_int64),
                ("lookups_dropped", c_int64), ("reads_skipped", c_int64 * len(TIER_NAMES)),
                ("read_bytes_per_s", c_double * len(TIER_NAMES)), ("prefill_tokens_per_s", c_double)]


class la_engine_stats(Structure):
    _fields_ = [(name, c_int64) for name in (
        "n_waiting", "n_running", "requests_ok", "requests_error", "requests_cancelled",
        "doc_tokens_reused", "doc_tokens_computed", "prefix_tokens_reused", "prompt_tokens",
        "kv_blocks_total", "kv_blocks_free", "kv_blocks_cached", "kv_blocks_pinned", "kv_hits",
        "kv_misses", "kv_evictions", "n_preemptions", "n_steps")] + [
        ("block_size", c_int32), ("documents_computed", c_int64), ("documents_loaded", c_int64),
        ("choose_s", c_double), ("grammar_s", c_double),
        ("steps_computed", c_int64), ("steps_decode", c_int64), ("step_rows", c_int64)] + [
        (name, c_double) for name in (
            "step_schedule_s", "step_forward_s", "step_after_s", "step_decode_forward_s", "step_decode_s",
            "step_batch_begin_s", "step_decode_batch_begin_s")] + [("max_batch_tokens", c_int32)] + [
        ("steps_async", c_int64), ("rows_dropped", c_int64), ("async_scheduling", c_bool)] + [
        (name, c_int64) for name in (
            "doc_token_cache_hits", "doc_token_cache_misses", "doc_token_cache_entries",
            "doc_token_cache_bytes", "doc_token_cache_evictions")]


# ---- the library -----------------------------------------------------------------------------

_HERE = os.path.dirname(os.path.abspath(__file__))
LIBRARY_NAME = f"liblazyattn.so.{ABI_MAJOR}"


def library_path():
    """$LAZYATTN_LIBRARY, else the copy installed in the package (pip install)."""
    env = os.environ.get("LAZYATTN_LIBRARY")
    if env:
        return env
    return os.path.join(_HERE, LIBRARY_NAME)


def _declare(lib):
    E = c_void_p  # la_engine *
    sigs = {
        "la_version": (c_char_p, [POINTER(c_int), POINTER(c_int), POINTER(c_int)]),
        "la_status_name": (c_char_p, [c_int]),
        "la_method_parse": (c_int, [c_char_p, POINTER(c_int), POINTER(la_err)]),
        "la_method_name": (c_char_p, [c_int]),
        "la_method_is_blockwise": (c_bool, [c_int]),
        "la_device_parse": (c_int, [c_char_p, POINTER(c_int), POINTER(la_err)]),
        "la_engine_options_init_sized": (None, [POINTER(la_engine_options), c_size_t]),
        "la_engine_create": (c_int, [POINTER(la_engine_options), POINTER(E), POINTER(la_err)]),
        "la_engine_destroy": (None, [E]),
        "la_request_params_init_sized": (None, [POINTER(la_request_params), c_size_t]),
        "la_engine_submit": (c_int, [E, POINTER(la_request_params), POINTER(c_uint64), POINTER(la_err)]),
        "la_engine_cancel": (c_int, [E, c_uint64]),
        "la_engine_step": (c_int, [E, POINTER(la_err)]),
        "la_engine_has_work": (c_bool, [E]),
        "la_engine_get_stats_sized": (None, [E, POINTER(la_engine_stats), c_size_t]),
        "la_engine_get_store_stats_sized": (None, [E, POINTER(la_engine_store_stats), c_size_t]),
        "la_engine_reject_reason_name": (c_char_p, [c_int32]),
        "la_engine_vocab_size": (c_int32, [E]),
        "la_engine_max_context": (c_int32, [E]),
        "la_engine_model_name": (c_char_p, [E]),
        "la_engine_device_name": (c_char_p, [E]),
        "la_engine_tokenize": (c_int, [E, c_char_p, c_size_t, c_bool, POINTER(POINTER(c_int32)),
                                       POINTER(c_int32), POINTER(la_err)]),
    }
    for name, (res, args) in sigs.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args
    return lib


_lib = None


def lib():
    """The loaded library (loaded on first use). Raises OSError naming the path tried."""
    global _lib
    if _lib is None:
        path = library_path()
        try:
            handle = ctypes.CDLL(path)
        except OSError as e:
            raise OSError(f"lazyattn: cannot load the C library {path}: {e} (pip install the "
                          "package, or set LAZYATTN_LIBRARY to a built liblazyattn.so)") from None
        _declare(handle)
        major = c_int()
        version = handle.la_version(ctypes.byref(major), None, None).decode()
        if major.value != ABI_MAJOR:
            raise OSError(f"lazyattn: {path} is version {version}; these bindings need major "
                          f"version {ABI_MAJOR}")
        _lib = handle
    return _lib


libc = ctypes.CDLL(None)
libc.free.argtypes = [c_void_p]
libc.free.restype = None
