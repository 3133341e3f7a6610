/* The request field table (api_fields.h). Keep the README's "Request fields" table equal to
 * it (tests/server/test_api_fields.c checks). */
#include "server/api_fields.h"

#include <string.h>

static bool is_false(const cJSON *v) { return cJSON_IsFalse(v); }
static bool is_true(const cJSON *v) { return cJSON_IsTrue(v); }
static bool is_bool(const cJSON *v) { return cJSON_IsBool(v); }
static bool is_zero(const cJSON *v) { return cJSON_IsNumber(v) && v->valuedouble == 0; }
static bool is_one(const cJSON *v) { return cJSON_IsNumber(v) && v->valuedouble == 1; }
static bool is_empty_array(const cJSON *v) { return cJSON_IsArray(v) && !v->child; }
static bool is_empty_object(const cJSON *v) { return cJSON_IsObject(v) && !v->child; }
static bool is_string(const cJSON *v) { return cJSON_IsString(v); }
static bool is_empty_string(const cJSON *v) { return cJSON_IsString(v) && !v->valuestring[0]; }
static bool is_none(const cJSON *v) { return cJSON_IsString(v) && !strcmp(v->valuestring, "none"); }
static bool is_auto_default(const cJSON *v) {
    return cJSON_IsString(v) && (!strcmp(v->valuestring, "auto") || !strcmp(v->valuestring, "default"));
}
static bool is_text_only(const cJSON *v) {
    return cJSON_IsArray(v) && cJSON_GetArraySize(v) == 1 && cJSON_IsString(v->child) &&
           !strcmp(v->child->valuestring, "text");
}

#define C LA_FIELD_COMPLETIONS
#define H LA_FIELD_CHAT
#define B LA_FIELD_BOTH
#define IMPL LA_FIELD_IMPLEMENTED
#define NEUT LA_FIELD_NEUTRAL
#define REFU LA_FIELD_REFUSED

static const la_api_field k_fields[] = {
    /* ---- OpenAI, both endpoints */
    {"model", B, IMPL, "OpenAI", NULL, NULL, "must name the served model (404 otherwise)"},
    {"max_tokens", B, IMPL, "OpenAI", NULL, NULL, "tokens to generate (completions 16, chat 512 by default)"},
    {"temperature", B, IMPL, "OpenAI", NULL, NULL, "[0, 2]; 0 is greedy"},
    {"top_p", B, IMPL, "OpenAI", NULL, NULL, "(0, 1]"},
    {"n", B, IMPL, "OpenAI", NULL, NULL, "[1, 128] choices sharing the prompt's KV blocks"},
    {"seed", B, IMPL, "OpenAI", NULL, NULL, "any 64-bit integer, read exactly; choice i draws from stream i"},
    {"stop", B, IMPL, "OpenAI", NULL, NULL, "up to 16 strings; not with a JSON response_format"},
    {"stream", B, IMPL, "OpenAI", NULL, NULL, "server-sent events"},
    {"stream_options", B, IMPL, "OpenAI", NULL, NULL,
     "include_usage; only with stream; continuous_usage_stats is refused"},
    {"frequency_penalty", B, IMPL, "OpenAI", NULL, NULL, "[-2, 2], over the generated tokens"},
    {"presence_penalty", B, IMPL, "OpenAI", NULL, NULL, "[-2, 2], over the generated tokens"},
    {"logit_bias", B, IMPL, "OpenAI", NULL, NULL, "token id -> [-100, 100], ids in the vocabulary"},
    {"logprobs", C, IMPL, "OpenAI", NULL, NULL, "[0, 20] alternatives per token, streamed too"},
    {"logprobs", H, IMPL, "OpenAI", NULL, NULL, "true: the sampled token's logprob, streamed too"},
    {"top_logprobs", H, IMPL, "OpenAI", NULL, NULL, "[0, 20]; needs logprobs"},
    {"response_format", B, IMPL, "OpenAI", NULL, NULL,
     "text, json_object, json_schema (the supported JSON Schema subset; strict)"},
    {"user", B, NEUT, "OpenAI", "any string", is_string, "an end-user id; --log-requests logs it"},
    {"prompt", C, IMPL, "OpenAI", NULL, NULL, "string, [string], [int], [[int]]: one prompt"},
    {"echo", C, IMPL, "OpenAI", NULL, NULL, "the prompt before the completion (not with logprobs)"},
    {"best_of", B, NEUT, "OpenAI", "n (or 1)", NULL, "more candidates than n, ranked by logprob, is refused"},
    {"suffix", C, NEUT, "OpenAI", "\"\"", is_empty_string, "insertion is not supported"},
    {"messages", H, IMPL, "OpenAI", NULL, NULL, "system / developer / user / assistant, text parts"},
    {"max_completion_tokens", H, IMPL, "OpenAI", NULL, NULL, "as max_tokens"},
    {"tools", H, NEUT, "OpenAI", "[]", is_empty_array, "tool calling is not supported"},
    {"tool_choice", H, NEUT, "OpenAI", "\"none\"", is_none, "tool calling is not supported"},
    {"parallel_tool_calls", H, NEUT, "OpenAI", "true, false", is_bool, "no tools: nothing to call"},
    {"functions", H, NEUT, "OpenAI", "[]", is_empty_array, "tool calling is not supported"},
    {"function_call", H, NEUT, "OpenAI", "\"none\"", is_none, "tool calling is not supported"},
    {"modalities", H, NEUT, "OpenAI", "[\"text\"]", is_text_only, "text only"},
    {"audio", H, REFU, "OpenAI", NULL, NULL, "text only"},
    {"prediction", H, REFU, "OpenAI", NULL, NULL, "predicted outputs are not supported"},
    {"reasoning_effort", H, REFU, "OpenAI", NULL, NULL, "not a reasoning model"},
    {"verbosity", H, REFU, "OpenAI", NULL, NULL, "not supported"},
    {"web_search_options", H, REFU, "OpenAI", NULL, NULL, "no web search"},
    {"service_tier", B, NEUT, "OpenAI", "\"auto\", \"default\"", is_auto_default, "one tier"},
    {"store", H, NEUT, "OpenAI", "false", is_false, "completions are not stored"},
    {"metadata", H, NEUT, "OpenAI", "{}", is_empty_object, "completions are not stored"},
    {"prompt_cache_key", B, NEUT, "OpenAI", "any string", is_string,
     "a routing hint; one server shares its cache (cache_salt separates tenants)"},
    {"safety_identifier", B, NEUT, "OpenAI", "any string", is_string, "an end-user id, like user"},
    /* ---- vLLM (SGLang shares most) */
    {"top_k", B, IMPL, "vLLM", NULL, NULL, "-1 or 0: off"},
    {"min_p", B, IMPL, "vLLM", NULL, NULL, "[0, 1], after top-k and top-p"},
    {"repetition_penalty", B, IMPL, "vLLM", NULL, NULL, "(0, 2], over prompt and output (HF)"},
    {"min_tokens", B, IMPL, "vLLM", NULL, NULL, "eos, stop ids and stop strings wait until then"},
    {"stop_token_ids", B, IMPL, "vLLM", NULL, NULL, "end like eos; ids in the vocabulary; not with a JSON response_format"},
    {"ignore_eos", B, IMPL, "vLLM", NULL, NULL, "generate past eos"},
    {"include_stop_str_in_output", B, IMPL, "vLLM", NULL, NULL, "the matched stop string stays"},
    {"skip_special_tokens", B, IMPL, "vLLM", NULL, NULL, "false: special tokens appear in the text"},
    {"spaces_between_special_tokens", B, NEUT, "vLLM", "true", is_true, "decoding is tokenizers' decode"},
    {"allowed_token_ids", B, IMPL, "vLLM", NULL, NULL, "only these tokens"},
    {"bad_words", B, NEUT, "vLLM", "[]", is_empty_array, "use logit_bias"},
    {"prompt_logprobs", B, REFU, "vLLM", NULL, NULL, "prompt logprobs are not computed"},
    {"truncate_prompt_tokens", B, REFU, "vLLM", NULL, NULL, "prompts are never truncated"},
    {"use_beam_search", B, NEUT, "vLLM", "false", is_false, "no beam search"},
    {"length_penalty", B, NEUT, "vLLM", "1", is_one, "beam search only"},
    {"priority", B, NEUT, "vLLM", "0", is_zero, "first come, first served"},
    {"guided_json", B, IMPL, "vLLM", NULL, NULL, "as response_format json_schema"},
    {"guided_regex", B, REFU, "vLLM", NULL, NULL, "regex grammars are not supported"},
    {"guided_choice", B, REFU, "vLLM", NULL, NULL, "use response_format with an enum"},
    {"guided_grammar", B, REFU, "vLLM", NULL, NULL, "EBNF grammars are not supported"},
    {"guided_decoding_backend", B, REFU, "vLLM", NULL, NULL, "one backend (src/grammar)"},
    {"guided_whitespace_pattern", B, REFU, "vLLM", NULL, NULL, "whitespace is fixed (compact JSON)"},
    {"structural_tag", B, REFU, "vLLM", NULL, NULL, "not supported"},
    {"logits_processors", B, REFU, "vLLM", NULL, NULL, "no custom processors"},
    {"return_tokens_as_token_ids", B, REFU, "vLLM", NULL, NULL, "not supported"},
    {"kv_transfer_params", B, REFU, "vLLM", NULL, NULL, "no disaggregated serving"},
    {"vllm_xargs", B, REFU, "vLLM", NULL, NULL, "not supported"},
    {"request_id", B, IMPL, "vLLM", NULL, NULL, "as the X-Request-Id header"},
    {"add_special_tokens", C, IMPL, "vLLM", NULL, NULL, "BOS as the tokenizer adds it (true)"},
    {"add_special_tokens", H, NEUT, "vLLM", "false", is_false, "the chat template writes BOS"},
    {"echo", H, NEUT, "vLLM", "false", is_false, "not supported in chat"},
    {"add_generation_prompt", H, NEUT, "vLLM", "true", is_true, "the assistant header always follows"},
    {"continue_final_message", H, NEUT, "vLLM", "false", is_false, "not supported"},
    {"chat_template", H, REFU, "vLLM", NULL, NULL, "the model's own template (--chat-format)"},
    {"chat_template_kwargs", H, NEUT, "vLLM", "{}", is_empty_object, "the template takes no arguments"},
    {"mm_processor_kwargs", B, REFU, "vLLM", NULL, NULL, "text only"},
    {"cache_salt", B, IMPL, "vLLM", NULL, NULL, "tenant id: tenants never share cached blocks"},
    {"documents", B, IMPL, "lazyattn", NULL, NULL, "[string | {title, text}], each cached on its own"},
    {"method", B, IMPL, "lazyattn", NULL, NULL, "recompute, prefix, block, mepic, lazy, block-ref"},
    {"recompute_first", B, IMPL, "lazyattn", NULL, NULL,
     "recovery: each later document's first N tokens recomputed in context (block-wise methods)"},
    {"recompute_ratio", B, IMPL, "lazyattn", NULL, NULL,
     "selected recovery: the fraction of later documents' tokens whose layer-1 values change most, "
     "recomputed in context (a probe picks them; block-wise methods)"},
    {"doc_context", B, IMPL, "lazyattn", NULL, NULL,
     "alone or preamble: what cached documents after the first are computed after (lazy, block, mepic)"},
    /* ---- SGLang */
    {"json_schema", B, IMPL, "SGLang", NULL, NULL, "a schema (object or JSON text), as guided_json"},
    {"regex", B, REFU, "SGLang", NULL, NULL, "regex grammars are not supported"},
    {"ebnf", B, REFU, "SGLang", NULL, NULL, "EBNF grammars are not supported"},
    {"no_stop_trim", B, IMPL, "SGLang", NULL, NULL, "as include_stop_str_in_output"},
    {"lora_path", B, REFU, "SGLang", NULL, NULL, "no adapters"},
    {"return_hidden_states", B, NEUT, "SGLang", "false", is_false, "not supported"},
    {"session_params", B, REFU, "SGLang", NULL, NULL, "not supported"},
    /* ---- llama.cpp */
    {"n_predict", B, REFU, "llama.cpp", NULL, NULL, "use max_tokens"},
    {"repeat_penalty", B, REFU, "llama.cpp", NULL, NULL, "use repetition_penalty (over the whole input)"},
    {"repeat_last_n", B, REFU, "llama.cpp", NULL, NULL, "penalties see every token"},
    {"penalize_nl", B, NEUT, "llama.cpp", "false", is_false, "newlines are tokens like others"},
    {"typical_p", B, NEUT, "llama.cpp", "1", is_one, "not supported"},
    {"tfs_z", B, NEUT, "llama.cpp", "1", is_one, "not supported"},
    {"mirostat", B, NEUT, "llama.cpp", "0", is_zero, "not supported"},
    {"dynatemp_range", B, NEUT, "llama.cpp", "0", is_zero, "not supported"},
    {"xtc_probability", B, NEUT, "llama.cpp", "0", is_zero, "not supported"},
    {"dry_multiplier", B, NEUT, "llama.cpp", "0", is_zero, "not supported"},
    {"min_keep", B, NEUT, "llama.cpp", "0", is_zero, "not supported"},
    {"n_probs", B, REFU, "llama.cpp", NULL, NULL, "use logprobs / top_logprobs"},
    {"cache_prompt", B, NEUT, "llama.cpp", "true", is_true, "prompts are always cached"},
    {"samplers", B, REFU, "llama.cpp", NULL, NULL, "the order is fixed (engine/sampling.h)"},
    {"grammar", B, REFU, "llama.cpp", NULL, NULL, "GBNF grammars are not supported"},
    {"id_slot", B, REFU, "llama.cpp", NULL, NULL, "no slots"},
};

const la_api_field *la_api_fields(size_t *n) {
    *n = sizeof k_fields / sizeof k_fields[0];
    return k_fields;
}

const la_api_field *la_api_field_find(const char *name, bool chat) {
    unsigned api = chat ? LA_FIELD_CHAT : LA_FIELD_COMPLETIONS;
    for (size_t i = 0; i < sizeof k_fields / sizeof k_fields[0]; i++)
        if ((k_fields[i].apis & api) && !strcmp(k_fields[i].name, name)) return &k_fields[i];
    return NULL;
}

const char *la_api_field_status_name(la_field_status s) {
    return s == LA_FIELD_IMPLEMENTED ? "implemented" : s == LA_FIELD_NEUTRAL ? "neutral" : "refused";
}
