/* src/model/jinja*.c against Python jinja2 configured as transformers (fixtures written by
 * tools/oracle/chat_template_fixtures.py into tests/fixtures/chat_templates/renders.json):
 * every real template over every conversation, and every construct template, byte for
 * byte; what jinja2 raises is an error here too. Then what is refused at compile time.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/json.h"
#include "common/test_util.h"
#include "model/jinja.h"

/* At most this many mismatches are described in detail. */
#define MAX_REPORTS 6

static cJSON *load_fixture(void) {
    char *path = la_test_path("tests/fixtures/chat_templates/renders.json");
    cJSON *root = NULL;
    la_err err = {0};
    la_status s = la_json_load_file(path, &root, &err);
    free(path);
    LA_CHECK_OK(s, err);
    cr_assert(cJSON_IsString(cJSON_GetObjectItem(root, "command")), "fixture without a command field");
    return root;
}

static void report_diff(const char *label, const char *want, const char *got) {
    size_t at = 0;
    while (want[at] && want[at] == got[at]) at++;
    size_t from = at > 40 ? at - 40 : 0;
    fprintf(stderr, "%s: differs at byte %zu\n    want \"%.120s\"\n    got  \"%.120s\"\n", label, at, want + from,
            got + from);
}

/* Render text with ctx and compare with the case's expected text or error. Returns 1 on a
 * mismatch. */
static int check_case(const char *label, const char *text, const cJSON *ctx, const cJSON *c, int *reports) {
    la_jinja *t = NULL;
    la_err err = {0};
    la_status s = la_jinja_compile(text, strlen(text), "template", &t, &err);
    if (s != LA_OK) {
        if ((*reports)++ < MAX_REPORTS) fprintf(stderr, "%s: does not compile: %s\n", label, err.msg);
        return 1;
    }
    char *out = NULL;
    size_t n = 0;
    s = la_jinja_render(t, ctx, &out, &n, &err);
    la_jinja_destroy(t);
    const cJSON *want = cJSON_GetObjectItem(c, "expected");
    const cJSON *raised = cJSON_GetObjectItem(c, "error");
    int bad = 0;
    if (cJSON_IsString(want)) {
        if (s != LA_OK) {
            if ((*reports)++ < MAX_REPORTS) fprintf(stderr, "%s: failed: %s\n", label, err.msg);
            bad = 1;
        } else if (n != strlen(want->valuestring) || memcmp(out, want->valuestring, n)) {
            if ((*reports)++ < MAX_REPORTS) report_diff(label, want->valuestring, out);
            bad = 1;
        }
    } else {
        /* jinja2 raised: so must we; raise_exception's message must come through */
        const char *msg = raised->valuestring;
        const char *te = "TemplateError: ";
        bool template_error = !strncmp(msg, te, strlen(te));
        if (s == LA_OK || s != LA_ERR_INVALID_ARG) bad = 1;
        else if (template_error && !strstr(err.msg, msg + strlen(te))) bad = 1;
        if (bad && (*reports)++ < MAX_REPORTS)
            fprintf(stderr, "%s: jinja2 raised \"%s\"; here: %s (%s)\n", label, msg, la_status_name(s),
                    s == LA_OK ? out : err.msg);
    }
    free(out);
    return bad;
}

Test(jinja, real_templates_render_every_conversation_as_jinja2) {
    cJSON *root = load_fixture();
    const cJSON *templates = cJSON_GetObjectItem(root, "templates");
    int bad = 0, reports = 0, n = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(root, "chat")) {
        const char *name = cJSON_GetObjectItem(c, "template")->valuestring;
        const char *text = cJSON_GetObjectItem(cJSON_GetObjectItem(templates, name), "text")->valuestring;
        char label[160];
        snprintf(label, sizeof label, "%s / %s (case %d)", name, cJSON_GetObjectItem(c, "label")->valuestring, n);
        bad += check_case(label, text, cJSON_GetObjectItem(c, "context"), c, &reports);
        n++;
    }
    cr_assert_geq(n, 200, "only %d chat cases", n);
    cr_assert_eq(bad, 0, "%d of %d chat renders differ from jinja2", bad, n);
    cJSON_Delete(root);
}

Test(jinja, constructs_render_as_jinja2) {
    cJSON *root = load_fixture();
    int bad = 0, reports = 0, n = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(root, "constructs")) {
        char label[64];
        snprintf(label, sizeof label, "%s", cJSON_GetObjectItem(c, "label")->valuestring);
        bad += check_case(label, cJSON_GetObjectItem(c, "template_text")->valuestring,
                          cJSON_GetObjectItem(c, "context"), c, &reports);
        n++;
    }
    cr_assert_geq(n, 50);
    cr_assert_eq(bad, 0, "%d of %d construct renders differ from jinja2", bad, n);
    cJSON_Delete(root);
}

/* ---- refused at compile time ------------------------------------------------------------ */

static void expect_compile_error(const char *text, la_status code, const char *needle) {
    la_jinja *t = NULL;
    la_err err = {0};
    la_status s = la_jinja_compile(text, strlen(text), "chat template", &t, &err);
    cr_assert_eq(s, code, "\"%s\": want %s, got %s (%s)", text, la_status_name(code), la_status_name(s), err.msg);
    cr_assert_null(t);
    cr_assert(strstr(err.msg, needle), "\"%s\": message \"%s\" lacks \"%s\"", text, err.msg, needle);
    cr_assert(strstr(err.msg, "line "), "\"%s\": message \"%s\" names no line", text, err.msg);
}

Test(jinja, unsupported_constructs_are_named_at_compile_time) {
    static const struct {
        const char *text, *needle;
    } k_cases[] = {
        {"{{ x | wordwrap }}", "filter 'wordwrap'"},
        {"{{ x | batch(2) }}", "filter 'batch'"},
        {"{{ x | dictsort }}", "filter 'dictsort'"},
        {"{{ xs | map('wordcount') | list }}", "filter 'wordcount' (named in map)"},
        {"{{ xs | selectattr('role', 'startingwith', 'u') | list }}", "test 'startingwith' (named in selectattr)"},
        {"{{ x is escaped }}", "test 'escaped'"},
        {"{{ lipsum() }}", "function 'lipsum'"},
        {"{{ cycler(1, 2) }}", "function 'cycler'"},
        {"{{ undefined_function(1) }}", "function 'undefined_function'"},
        {"{{ x.format(1) }}", "method '.format()'"},
        {"{{ messages.append(1) }}", "method '.append()'"},
        {"{% include 'other.jinja' %}", "{% include %}"},
        {"{% extends 'base' %}", "{% extends %}"},
        {"{% call m() %}x{% endcall %}", "{% call %}"},
        {"{% filter upper %}x{% endfilter %}", "{% filter %}"},
        {"{% with a = 1 %}{{ a }}{% endwith %}", "{% with %}"},
        {"{% raw %}{{ x }}{% endraw %}", "{% raw %}"},
        {"{% do x %}", "{% do %}"},
        {"{% for x in y recursive %}{{ loop(x) }}{% endfor %}", "recursive"},
        {"{{ f(*args) }}", "*args"},
    };
    for (size_t i = 0; i < sizeof k_cases / sizeof k_cases[0]; i++) {
        expect_compile_error(k_cases[i].text, LA_ERR_UNSUPPORTED, k_cases[i].needle);
    }
    /* one line per statement: the line is the unsupported construct's */
    expect_compile_error("a\nb\n{{ x }}\n{{ y | nope }}", LA_ERR_UNSUPPORTED, "line 4");
}

Test(jinja, syntax_errors_are_format_errors_naming_the_line) {
    static const char *const k_bad[] = {
        "{% if x %}never closed", "{% for x in %}{% endfor %}", "{{ x ", "{% endif %}", "{{ (1, 2 }}",
        "{% set %}", "{{ 'unterminated }}", "{# comment", "{% if x %}{% endfor %}", "{{ x is }}",
        "{% elif x %}", "{{ 1 + }}", "{% break %}", "{% unknowntag %}",
    };
    for (size_t i = 0; i < sizeof k_bad / sizeof k_bad[0]; i++) {
        la_jinja *t = NULL;
        la_err err = {0};
        la_status s = la_jinja_compile(k_bad[i], strlen(k_bad[i]), "chat template", &t, &err);
        cr_assert_eq(s, LA_ERR_FORMAT, "\"%s\": want format, got %s (%s)", k_bad[i], la_status_name(s), err.msg);
        cr_assert_null(t);
        cr_assert(strstr(err.msg, "chat template line "), "\"%s\": %s", k_bad[i], err.msg);
    }
    la_jinja *t = NULL;
    la_err err = {0};
    cr_assert_eq(la_jinja_compile("\xff\xfe", 2, "chat template", &t, &err), LA_ERR_FORMAT);
    cr_assert(strstr(err.msg, "UTF-8"));
}

/* ---- what a rendering refuses -------------------------------------------------------------- */

static la_status render_text(const char *text, const char *ctx_json, char **out, la_err *err) {
    la_jinja *t = NULL;
    la_status s = la_jinja_compile(text, strlen(text), "t", &t, err);
    cr_assert_eq(s, LA_OK, "%s", err->msg);
    cJSON *ctx = cJSON_Parse(ctx_json ? ctx_json : "{}");
    cr_assert(ctx);
    s = la_jinja_render(t, ctx, out, NULL, err);
    cJSON_Delete(ctx);
    la_jinja_destroy(t);
    return s;
}

Test(jinja, generators_and_unbounded_work_are_errors_not_wrong_text) {
    char *out = NULL;
    la_err err = {0};
    /* jinja2 prints "<generator object ...>": not a prompt anyone wants; refused */
    cr_assert_eq(render_text("{{ [1, 2] | select }}", NULL, &out, &err), LA_ERR_UNSUPPORTED);
    cr_assert(strstr(err.msg, "generator"), "%s", err.msg);
    cr_assert_null(out);
    cr_assert_eq(render_text("{{ [1, 2] | map('string') | length }}", NULL, &out, &err), LA_ERR_INVALID_ARG);
    cr_assert_eq(render_text("{{ range(3) }}", NULL, &out, &err), LA_ERR_UNSUPPORTED);
    cr_assert_eq(render_text("{% for i in range(100000) %}{% for j in range(1000) %}{% endfor %}{% endfor %}", NULL,
                             &out, &err),
                 LA_ERR_TOO_LONG);
    cr_assert_eq(render_text("{{ 'x' * 100000000 }}", NULL, &out, &err), LA_ERR_TOO_LONG);
    cr_assert_eq(render_text("{{ 9223372036854775807 + 1 }}", NULL, &out, &err), LA_ERR_UNSUPPORTED);
    cr_assert_eq(render_text("{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}", NULL, &out, &err),
                 LA_ERR_TOO_LONG);
    cr_assert_null(out);
}

Test(jinja, strftime_now_is_the_local_time) {
    char *out = NULL;
    la_err err = {0};
    LA_CHECK_OK(render_text("{{ strftime_now('%Y-%m-%d') }}", NULL, &out, &err), err);
    char want[32];
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    strftime(want, sizeof want, "%Y-%m-%d", &tm);
    cr_assert_str_eq(out, want); /* (a test run across midnight may see the next day) */
    free(out);
}

Test(jinja, raise_exception_names_the_message_and_line) {
    char *out = NULL;
    la_err err = {0};
    cr_assert_eq(render_text("\n\n{{ raise_exception('roles must alternate') }}", NULL, &out, &err), LA_ERR_INVALID_ARG);
    cr_assert(strstr(err.msg, "roles must alternate"), "%s", err.msg);
    cr_assert(strstr(err.msg, "line 3"), "%s", err.msg);
}
