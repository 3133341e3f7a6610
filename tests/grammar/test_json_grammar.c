/* src/grammar: JSON Schema compilation (the subset, refusals naming the keyword), the
 * byte matcher against hand-written accepted / refused texts, token masks against a brute
 * force over every token, and seeded random generation under a token budget that must end
 * in complete JSON of the schema's shape (a small reference validator below; the HTTP
 * test validates with Python jsonschema). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "engine/sampling.h"
#include "grammar/json_matcher.h"
#include "grammar/json_schema.h"
#include "grammar/token_mask.h"

static la_json_grammar *compile(const char *schema_json) {
    cJSON *s = cJSON_Parse(schema_json);
    cr_assert(s, "bad test schema %s", schema_json);
    la_json_grammar *g = NULL;
    char path[256];
    la_err err = {0};
    la_status st = la_json_grammar_compile(s, &g, path, sizeof path, &err);
    cJSON_Delete(s);
    cr_assert(st == LA_OK, "compile %s: %s", schema_json, err.msg);
    return g;
}

static bool accepts(const la_json_grammar *g, const char *text, bool complete) {
    la_jg_state st;
    la_jg_state_init(g, &st);
    if (!la_jg_state_feed(g, &st, text, strlen(text))) return false;
    return !complete || la_jg_state_can_end(g, &st);
}

Test(json_grammar, refuses_unsupported_keywords_naming_their_path) {
    struct {
        const char *schema, *path;
        la_status code;
    } cases[] = {
        {"{\"type\": \"string\", \"minLength\": 2}", "minLength", LA_ERR_UNSUPPORTED},
        {"{\"type\": \"object\", \"properties\": {\"age\": {\"type\": \"integer\", \"minimum\": 0}}}",
         "properties.age.minimum", LA_ERR_UNSUPPORTED},
        {"{\"type\": \"array\", \"items\": {\"type\": \"string\", \"pattern\": \"a+\"}}", "items.pattern",
         LA_ERR_UNSUPPORTED},
        {"{\"anyOf\": [{\"type\": \"null\"}, {\"$ref\": \"#/$defs/x\"}]}", "anyOf.1.$ref", LA_ERR_UNSUPPORTED},
        {"{\"oneOf\": [{\"type\": \"null\"}]}", "oneOf", LA_ERR_UNSUPPORTED},
        {"{\"type\": \"object\", \"additionalProperties\": {\"type\": \"string\"}}", "additionalProperties",
         LA_ERR_UNSUPPORTED},
        {"{\"type\": \"strung\"}", "type", LA_ERR_INVALID_ARG},
        {"{\"type\": \"object\", \"properties\": {}, \"required\": [\"x\"]}", "required", LA_ERR_INVALID_ARG},
        {"{\"enum\": []}", "enum", LA_ERR_INVALID_ARG},
        {"{\"type\": \"string\", \"format\": \"date\"}", "format", LA_ERR_UNSUPPORTED},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cJSON *s = cJSON_Parse(cases[i].schema);
        la_json_grammar *g = NULL;
        char path[256];
        la_err err = {0};
        la_status st = la_json_grammar_compile(s, &g, path, sizeof path, &err);
        cJSON_Delete(s);
        cr_assert_eq(st, cases[i].code, "%s: status %d (%s)", cases[i].schema, st, err.msg);
        cr_assert_str_eq(path, cases[i].path, "%s: path '%s'", cases[i].schema, path);
        cr_assert(strstr(err.msg, cases[i].path), "message names the path: %s", err.msg);
        cr_assert_null(g);
    }
}

Test(json_grammar, matches_objects_in_schema_order_with_required_and_optional_properties) {
    la_json_grammar *g = compile(
        "{\"type\": \"object\", \"properties\": {\"name\": {\"type\": \"string\"}, \"nick\": {\"type\": \"string\"},"
        " \"age\": {\"type\": \"integer\"}, \"tags\": {\"type\": \"array\", \"items\": {\"enum\": [\"a\", \"b\"]}}},"
        " \"required\": [\"name\", \"age\"], \"additionalProperties\": false}");
    cr_assert(accepts(g, "{\"name\":\"x\",\"age\":3}", true));
    cr_assert(accepts(g, "{\"name\": \"x\", \"nick\": \"y\", \"age\": -30, \"tags\": [\"a\", \"b\"]}", true));
    cr_assert(accepts(g, "{\"name\":\"\\u00e9\\n\xc3\xa9\",\"age\":0,\"tags\":[]}", true));
    cr_assert_not(accepts(g, "{\"age\":3,\"name\":\"x\"}", false), "order is the schema's");
    cr_assert_not(accepts(g, "{\"name\":\"x\"}", false), "age is required");
    cr_assert_not(accepts(g, "{\"name\":\"x\",\"age\":3.5", false), "integer");
    cr_assert_not(accepts(g, "{\"name\":\"x\",\"age\":03", false), "no leading zero");
    cr_assert_not(accepts(g, "{\"name\":\"x\",\"age\":1,\"tags\":[\"c\"", false), "enum");
    cr_assert_not(accepts(g, "{\"name\":\"x\",\"age\":1,\"other\":1", false), "no other property");
    cr_assert_not(accepts(g, "{ \"name\"", false), "no space after '{'");
    cr_assert_not(accepts(g, "{\"name\":\"\x01\"", false), "no control character in a string");
    cr_assert_not(accepts(g, "{\"name\":\"\xc3\x28\"", false), "valid UTF-8 only");
    cr_assert_not(accepts(g, "{\"name\":\"x\",\"age\":1}x", false), "nothing after the value");
    cr_assert(accepts(g, "{\"name\":\"x\",\"age\":1", false) && !accepts(g, "{\"name\":\"x\",\"age\":1", true),
              "a prefix, not complete");
    la_json_grammar_destroy(g);
}

Test(json_grammar, any_of_type_lists_and_scalars) {
    la_json_grammar *g = compile("{\"anyOf\": [{\"type\": \"number\"}, {\"type\": [\"boolean\", \"null\"]},"
                                 " {\"type\": \"object\", \"properties\": {\"k\": {\"type\": \"null\"}}}]}");
    const char *yes[] = {"-0.5e+3", "12", "true", "false", "null", "{}", "{\"k\":null}", "0"};
    const char *no[] = {"01", "1.", "-", "nul", "{\"k\":1}", "\"s\"", "[]", "1e"};
    for (size_t i = 0; i < sizeof yes / sizeof *yes; i++) cr_assert(accepts(g, yes[i], true), "%s", yes[i]);
    for (size_t i = 0; i < sizeof no / sizeof *no; i++) cr_assert_not(accepts(g, no[i], true), "%s", no[i]);
    la_json_grammar_destroy(g);
}

Test(json_grammar, json_object_mode_accepts_nested_objects_only_at_the_top) {
    la_json_grammar *g = NULL;
    la_err err = {0};
    cr_assert(la_json_grammar_object(&g, &err) == LA_OK);
    cr_assert(accepts(g, "{\"a\": [1, {\"b\": null}, \"x\"], \"c\": {}}", true));
    cr_assert_not(accepts(g, "[1]", false));
    cr_assert_not(accepts(g, "\"s\"", false));
    la_json_grammar_destroy(g);
}

Test(json_grammar, shortest_completion_counts_bytes) {
    la_json_grammar *g = compile("{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"string\"},"
                                 " \"b\": {\"type\": \"integer\"}}, \"required\": [\"a\", \"b\"]}");
    /* {"a":"","b":0} is the shortest value: 14 bytes */
    cr_assert_eq(g->nodes[g->root].min_len, 14);
    la_jg_state st;
    la_jg_state_init(g, &st);
    const char *text = "{\"a\":\"xyz\",\"b\":12}";
    for (size_t i = 0; text[i]; i++) {
        cr_assert(la_jg_state_feed(g, &st, text + i, 1));
        if (i == 4) cr_assert_eq(la_jg_state_min_finish(g, &st), 9, "after {\"a\": : \"\",\"b\":0}");
        if (i == 7) cr_assert_eq(la_jg_state_min_finish(g, &st), 8, "inside the string: \",\"b\":0}");
    }
    cr_assert_eq(la_jg_state_min_finish(g, &st), 0);
    cr_assert(la_jg_state_done(g, &st));
    la_json_grammar_destroy(g);
}

/* ---- token masks ------------------------------------------------------------------------ */

/* All 256 bytes, then some multi-byte tokens, then a "special" token with no text. */
static const char *const k_multi[] = {"{\"", "\":", "\",", "\"}", ", \"", "true", "null", "12", "name",
                                      "\": \"", "}]", "[{", "ab", "a\"", "\"a", " \"", "0.", "e+", "\\u",
                                      "\xc3\xa9", "\xc3", "\xa9x", "}}", "\"name\":\"", "x\"},{\""};
#define N_MULTI (sizeof k_multi / sizeof k_multi[0])

typedef struct test_vocab {
    int32_t n;
    char *bytes[256 + N_MULTI + 1];
    int32_t len[256 + N_MULTI + 1];
    la_grammar_vocab *v;
} test_vocab;

static void vocab_init(test_vocab *tv) {
    tv->n = 0;
    for (int b = 0; b < 256; b++) {
        tv->bytes[tv->n] = malloc(1);
        tv->bytes[tv->n][0] = (char)b;
        tv->len[tv->n++] = 1;
    }
    for (size_t i = 0; i < N_MULTI; i++) {
        tv->bytes[tv->n] = strdup(k_multi[i]);
        tv->len[tv->n++] = (int32_t)strlen(k_multi[i]);
    }
    tv->bytes[tv->n] = NULL;
    tv->len[tv->n++] = 0;
    int missing = 0;
    la_err err = {0};
    cr_assert(la_grammar_vocab_create(tv->n, (const char *const *)tv->bytes, tv->len, &tv->v, &missing, &err) == LA_OK);
    cr_assert_eq(missing, -1);
}

static void vocab_fini(test_vocab *tv) {
    la_grammar_vocab_destroy(tv->v);
    for (int32_t i = 0; i < tv->n; i++) free(tv->bytes[i]);
}

static bool bit(const uint64_t *m, int32_t t) { return (m[t / 64] >> (t % 64)) & 1; }

/* The mask of st by feeding every token alone (the definition). */
static void brute_mask(const la_json_grammar *g, const test_vocab *tv, const la_jg_state *st, int32_t left,
                       uint64_t *mask) {
    memset(mask, 0, sizeof(uint64_t) * (size_t)((tv->n + 63) / 64));
    la_jg_state *tmp = malloc(sizeof *tmp);
    for (int32_t t = 0; t < tv->n; t++) {
        if (tv->len[t] <= 0) continue;
        la_jg_state_copy(tmp, st);
        if (la_jg_state_feed(g, tmp, tv->bytes[t], (size_t)tv->len[t]) &&
            la_jg_state_min_finish(g, tmp) <= left - 1)
            mask[t / 64] |= (uint64_t)1 << (t % 64);
    }
    free(tmp);
}

/* A reference check of the subset: is v an instance of schema s? */
static bool validates(const cJSON *v, const cJSON *s) {
    if (cJSON_IsBool(s)) return cJSON_IsTrue(s);
    const cJSON *any_of = cJSON_GetObjectItem(s, "anyOf"), *en = cJSON_GetObjectItem(s, "enum");
    const cJSON *type = cJSON_GetObjectItem(s, "type");
    if (any_of) {
        for (const cJSON *a = any_of->child; a; a = a->next)
            if (validates(v, a)) return true;
        return false;
    }
    if (en) {
        bool hit = false;
        for (const cJSON *e = en->child; e && !hit; e = e->next) hit = cJSON_Compare(v, e, true);
        if (!hit) return false;
    }
    if (!type) return true;
    bool ok = false;
    const cJSON *t = cJSON_IsArray(type) ? type->child : type;
    for (; t && !ok; t = cJSON_IsArray(type) ? t->next : NULL) {
        const char *n = t->valuestring;
        if (!strcmp(n, "string")) ok = cJSON_IsString(v);
        else if (!strcmp(n, "number")) ok = cJSON_IsNumber(v);
        else if (!strcmp(n, "integer")) ok = cJSON_IsNumber(v) && v->valuedouble == (double)(long long)v->valuedouble;
        else if (!strcmp(n, "boolean")) ok = cJSON_IsBool(v);
        else if (!strcmp(n, "null")) ok = cJSON_IsNull(v);
        else if (!strcmp(n, "array")) {
            ok = cJSON_IsArray(v);
            const cJSON *items = cJSON_GetObjectItem(s, "items");
            for (const cJSON *x = v->child; ok && items && x; x = x->next) ok = validates(x, items);
        } else if (!strcmp(n, "object")) {
            ok = cJSON_IsObject(v);
            const cJSON *props = cJSON_GetObjectItem(s, "properties"), *req = cJSON_GetObjectItem(s, "required");
            for (const cJSON *r = req ? req->child : NULL; ok && r; r = r->next)
                ok = cJSON_GetObjectItemCaseSensitive(v, r->valuestring) != NULL;
            for (const cJSON *x = v->child; ok && props && x; x = x->next) {
                const cJSON *ps = cJSON_GetObjectItemCaseSensitive(props, x->string);
                ok = ps && validates(x, ps);
            }
        }
    }
    return ok;
}

/* Generate with random picks among the allowed tokens (seeded), at most max_tokens, then
 * check: complete, parses, validates; masks equal the brute force at every step. */
static void generate_checked(const char *schema_json, int32_t max_tokens, uint64_t seed, bool check_brute) {
    test_vocab tv;
    vocab_init(&tv);
    cJSON *schema = cJSON_Parse(schema_json);
    la_json_grammar *jg = compile(schema_json);
    la_grammar *g = NULL;
    la_grammar_matcher *m = NULL;
    la_err err = {0};
    cr_assert(la_grammar_create(jg, tv.v, 0, &g, &err) == LA_OK);
    cr_assert(la_grammar_matcher_create(g, &m, &err) == LA_OK);
    cr_assert_leq(la_grammar_min_tokens(g), max_tokens);
    int32_t W = (tv.n + 63) / 64;
    uint64_t *mask = malloc(sizeof(uint64_t) * (size_t)W), *ref = malloc(sizeof(uint64_t) * (size_t)W);
    la_rng rng;
    la_rng_seed(&rng, seed);
    char out[8192];
    size_t len = 0;
    la_jg_state *st = malloc(sizeof *st);
    la_jg_state_init(jg, st);
    bool ended = false;
    for (int32_t step = 0; step < max_tokens; step++) {
        bool end_ok = false;
        cr_assert(la_grammar_matcher_mask(m, max_tokens - step, mask, &end_ok, &err) == LA_OK);
        if (check_brute) {
            brute_mask(jg, &tv, st, max_tokens - step, ref);
            for (int32_t t = 0; t < tv.n; t++)
                cr_assert_eq(bit(mask, t), bit(ref, t), "step %d token %d ('%.*s'): mask %d, brute force %d", step, t,
                             tv.len[t], tv.bytes[t] ? tv.bytes[t] : "", bit(mask, t), bit(ref, t));
            cr_assert_eq(end_ok, la_jg_state_can_end(jg, st));
        }
        int32_t n_allowed = 0;
        for (int32_t t = 0; t < tv.n; t++) n_allowed += bit(mask, t);
        cr_assert(n_allowed > 0 || end_ok, "step %d: no token and cannot end (text %.*s)", step, (int)len, out);
        /* end with probability 1/4 once allowed */
        if (end_ok && (n_allowed == 0 || la_rng_uniform(&rng) < 0.25)) {
            ended = true;
            break;
        }
        int32_t pick = (int32_t)(la_rng_uniform(&rng) * n_allowed), t = 0;
        for (;; t++)
            if (bit(mask, t) && pick-- == 0) break;
        cr_assert(la_grammar_matcher_accept(m, t, &err) == LA_OK, "%s", err.msg);
        cr_assert(la_jg_state_feed(jg, st, tv.bytes[t], (size_t)tv.len[t]));
        memcpy(out + len, tv.bytes[t], (size_t)tv.len[t]);
        len += (size_t)tv.len[t];
    }
    out[len] = '\0';
    cr_assert(ended || la_grammar_matcher_can_end(m), "did not end within %d tokens: %s", max_tokens, out);
    cJSON *v = cJSON_ParseWithLength(out, len);
    cr_assert(v, "not JSON: %s", out);
    cr_assert(validates(v, schema), "does not validate: %s against %s", out, schema_json);
    cJSON_Delete(v);
    cJSON_Delete(schema);
    free(st);
    free(mask);
    free(ref);
    la_grammar_matcher_destroy(m);
    la_grammar_unref(g);
    vocab_fini(&tv);
}

static const char *const k_schemas[] = {
    "{\"type\": \"object\", \"properties\": {\"name\": {\"type\": \"string\"}, \"n\": {\"type\": \"integer\"},"
    " \"ok\": {\"type\": \"boolean\"}}, \"required\": [\"name\", \"n\"], \"additionalProperties\": false}",
    "{\"type\": \"array\", \"items\": {\"type\": \"object\", \"properties\": {\"a\": {\"enum\": [\"x\", \"y\", 3, null]},"
    " \"b\": {\"type\": [\"number\", \"null\"]}}, \"required\": [\"a\"]}}",
    "{\"anyOf\": [{\"type\": \"string\"}, {\"type\": \"object\", \"properties\": {\"name\": {\"type\": \"string\"}},"
    " \"required\": [\"name\"]}]}",
    "{\"type\": \"object\"}",
    "{\"type\": \"object\", \"properties\": {\"deep\": {\"type\": \"object\", \"properties\": {\"deeper\":"
    " {\"type\": \"array\", \"items\": {\"type\": \"array\", \"items\": {\"type\": \"integer\"}}}},"
    " \"required\": [\"deeper\"]}}, \"required\": [\"deep\"]}",
};

Test(json_grammar, masks_equal_the_brute_force_over_every_token) {
    for (size_t i = 0; i < sizeof k_schemas / sizeof *k_schemas; i++)
        for (uint64_t seed = 1; seed <= 4; seed++) generate_checked(k_schemas[i], 60, seed, true);
}

Test(json_grammar, random_generation_always_ends_in_valid_json_within_the_budget) {
    for (size_t i = 0; i < sizeof k_schemas / sizeof *k_schemas; i++)
        for (uint64_t seed = 1; seed <= 60; seed++) {
            test_vocab tv; /* the smallest budget that can hold the schema's shortest value */
            vocab_init(&tv);
            la_json_grammar *jg = compile(k_schemas[i]);
            int32_t min = jg->nodes[jg->root].min_len;
            la_json_grammar_destroy(jg);
            vocab_fini(&tv);
            generate_checked(k_schemas[i], seed % 3 == 0 ? min : min + (int32_t)(seed % 40), seed, false);
        }
}

Test(json_grammar, the_cache_serves_repeated_states) {
    test_vocab tv;
    vocab_init(&tv);
    la_grammar *g = NULL;
    la_grammar_matcher *m = NULL;
    la_err err = {0};
    cr_assert(la_grammar_create(compile("{\"type\": \"string\"}"), tv.v, 0, &g, &err) == LA_OK);
    cr_assert(la_grammar_matcher_create(g, &m, &err) == LA_OK);
    uint64_t mask[8];
    bool end_ok;
    cr_assert(la_grammar_matcher_accept(m, '"', &err) == LA_OK);
    for (int i = 0; i < 10; i++) {
        cr_assert(la_grammar_matcher_mask(m, 100, mask, &end_ok, &err) == LA_OK);
        cr_assert(bit(mask, 'a') && !bit(mask, 1) && bit(mask, '"'));
        cr_assert(la_grammar_matcher_accept(m, 'a', &err) == LA_OK);
    }
    la_grammar_cache_stats cs = la_grammar_get_cache_stats(g);
    cr_assert_eq(cs.misses, 1);
    cr_assert_eq(cs.hits, 9);
    cr_assert(la_grammar_matcher_accept(m, 1, &err) == LA_ERR_INVALID_ARG, "a control byte is refused");
    la_grammar_matcher_destroy(m);
    la_grammar_unref(g);
    vocab_fini(&tv);
}
