/* la_json_strict_check: what RFC 8259 refuses and cJSON takes (issue 28, item 4). */
#include <stdio.h>
#include <string.h>

#include "base/json.h"
#include "common/test_util.h"

static void refused(const char *text, size_t len, const char *why_part, const char *path_want) {
    char path[128];
    const char *why = NULL;
    cr_assert(!la_json_strict_check(text, len, path, sizeof path, &why), "accepted: %.*s", (int)len, text);
    cr_assert(why && strstr(why, why_part), "%.*s: why '%s', wanted '%s'", (int)len, text, why ? why : "", why_part);
    if (path_want) cr_assert_str_eq(path, path_want, "%.*s", (int)len, text);
}

static void accepted(const char *text) {
    char path[128];
    const char *why = NULL;
    cr_assert(la_json_strict_check(text, strlen(text), path, sizeof path, &why), "%s: %s at '%s'", text, why, path);
}

Test(json_strict, what_cjson_takes_and_strict_json_refuses) {
    /* a name twice: cJSON reads the first, most parsers the last */
    refused("{\"temperature\": 0, \"temperature\": 2}", 36, "twice", "temperature");
    refused("{\"a\": {\"b\": 1, \"c\": 2, \"b\": 3}}", 31, "twice", "a.b");
    refused("{\"x\": 1, \"\\u0078\": 2}", 21, "twice", "x"); /* the same name, escaped */
    /* \u0000: cJSON's strings end there ("victim\u0000x" would read as "victim") */
    refused("{\"cache_salt\": \"victim\\u0000x\"}", 31, "\\u0000", "cache_salt");
    refused("{\"messages\": [{\"content\": \"a\\u0000\"}]}", 38, "\\u0000", "messages[0].content");
    /* raw control characters in a string, and as whitespace */
    refused("{\"prompt\": \"a\x01b\"}", 17, "control character", "prompt");
    refused("{\"a\": 1}\x01", 9, "control character", "");
    refused("{\"a\":\x0c 1}", 9, "control character", "a");
    const char nul_ws[] = {'{', '\0', '"', 'a', '"', ':', '1', '}'};
    refused(nul_ws, sizeof nul_ws, "quoted name", "");
    /* not JSON at all: no member named */
    refused("[1, 2", 5, "not closed", "");
    refused("{\"a\": \"\\q\"}", 11, "bad escape", "");
    char deep[300];
    memset(deep, '[', 200);
    memset(deep + 200, ']', 100);
    refused(deep, 300, "128", NULL);
}

/* A long name in a path is cut between characters: the path goes into a 400's JSON. */
Test(json_strict, long_names_are_cut_between_characters) {
    char name[160] = "", text[400];
    for (int i = 0; i < 35; i++) strcat(name, "\xc3\xa9x"); /* "éx" x 35: 105 bytes */
    int n = snprintf(text, sizeof text, "{\"%s\": 1, \"%s\": 2}", name, name);
    char path[128];
    const char *why = NULL;
    cr_assert(!la_json_strict_check(text, (size_t)n, path, sizeof path, &why));
    size_t len = strlen(path);
    cr_assert(len > 0 && len <= 64, "%zu", len);
    cr_assert_eq(strncmp(path, name, len), 0);
    cr_assert(((unsigned char)name[len] & 0xC0) != 0x80, "cut inside a character at %zu", len);
    /* a small buffer: the same */
    char small[6];
    cr_assert(!la_json_strict_check(text, (size_t)n, small, sizeof small, &why));
    cr_assert_str_eq(small, "\xc3\xa9x\xc3\xa9"); /* 5 bytes: "éxé", never half an é */
}

Test(json_strict, ordinary_requests_pass) {
    accepted("{\"model\": \"m\", \"messages\": [{\"role\": \"user\", \"content\": \"caf\\u00e9 \\ud83d\\ude00 \\n\"}],"
             " \"logit_bias\": {\"1\": -100, \"2\": 5}, \"stop\": [\"a\", \"b\"], \"n\": 1.5e0, \"x\": null, \"y\": true}");
    accepted("  [ ]\r\n");
    accepted("{\"a\": {\"b\": 1}, \"c\": {\"b\": 2}}"); /* one name in two objects */
    /* an empty name first (fuzz_json_strict's first find: the key arena was NULL then) */
    accepted("{\"\": 1}");
    refused("{\"\": [1\": 2]}", 13, "not closed", "");
    refused("{\"\": 1, \"\": 2}", 14, "twice", "");
    /* a fault in a name is the object's (not the member before it) */
    refused("{\"a\": 1, \"b\\u0000\": 2}", 21, "\\u0000", "");
    refused("{\"o\": {\"a\": 1, \"b\x01\": 2}}", 25, "control character", "o");
    /* surrogates come in pairs (cJSON refuses a lone one) */
    refused("[\"\\ud83d x\"]", 12, "unpaired surrogate", "[0]");
    refused("[\"\\ude00\"]", 10, "unpaired surrogate", "[0]");
}
