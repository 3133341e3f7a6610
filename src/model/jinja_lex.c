/* The template lexer of la_jinja (jinja_internal.h), rule for rule as jinja2's lexer.py with
 * transformers' settings (trim_blocks, lstrip_blocks, keep_trailing_newline False):
 *
 *   - newlines are normalized to "\n" and one trailing newline is dropped;
 *   - text runs up to the earliest "{{", "{%" or "{#", each optionally followed by "-"
 *     (strip all white space before the tag) or "+" (no lstrip);
 *   - lstrip_blocks: before "{%" or "{#", the spaces between the last newline (or the
 *     start of a line) and the tag are dropped when they are all white space;
 *   - a tag ends with "%}" / "}}" / "#}", or "-%}" / "-}}" / "-#}" which also eat the white
 *     space after them; trim_blocks: "%}" and "#}" eat one "\n" after them ("+%}" not);
 *     inside a tag the end is only seen when brackets are balanced;
 *   - white space is Python's str.isspace(), as re's \s and str.rstrip() are.
 * Example: "{% if x %}\n  {{- y }}\n" -> [BLOCK_BEGIN, NAME if, NAME x, BLOCK_END,
 * VAR_BEGIN, NAME y, VAR_END] (trim_blocks ate the "\n", "-" the two spaces, and the last
 * "\n" is the dropped trailing newline).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "model/jinja_internal.h"

typedef struct lexer {
    jx_arena *a;
    const char *name;
    const char *s;
    size_t n, pos;
    int line;
    jtoken *v;
    size_t len, cap;
    bool line_starting;
    la_err *err;
} lexer;

static la_status lex_fail(lexer *L, la_status code, const char *fmt, const char *arg) {
    char msg[200];
    snprintf(msg, sizeof msg, fmt, arg);
    return la_err_set(L->err, code, "%s line %d: %s", L->name, L->line, msg);
}

static bool push(lexer *L, jtoken t) {
    if (L->len == L->cap) {
        size_t cap = L->cap ? 2 * L->cap : 256;
        jtoken *v = jx_alloc(L->a, cap * sizeof *v);
        if (!v) return false;
        if (L->len) memcpy(v, L->v, L->len * sizeof *v);
        L->v = v;
        L->cap = cap;
    }
    t.line = t.line ? t.line : L->line;
    L->v[L->len++] = t;
    return true;
}

static void count_lines(lexer *L, size_t from, size_t to) {
    for (size_t i = from; i < to; i++) L->line += L->s[i] == '\n';
}

/* Length of the Python white space character at s[i] (0 if none). */
static size_t space_at(const char *s, size_t n, size_t i) {
    if (i >= n) return 0;
    size_t j = i;
    uint32_t cp = jx_decode(s, &j);
    return jx_is_space(cp) ? j - i : 0;
}

static size_t skip_spaces(const char *s, size_t n, size_t i) {
    size_t k;
    while ((k = space_at(s, n, i)) > 0) i += k;
    return i;
}

/* Start of the white space run that ends s[0..end). */
static size_t rstrip_at(const char *s, size_t start, size_t end) {
    while (end > start) {
        size_t i = end - 1;
        while (i > start && ((unsigned char)s[i] & 0xC0) == 0x80) i--;
        if (!space_at(s, end, i)) break;
        end = i;
    }
    return end;
}

/* ---- inside a tag ----------------------------------------------------------------------- */

static la_status lex_string(lexer *L, size_t *pos) {
    const char *s = L->s;
    char q = s[*pos];
    size_t i = *pos + 1;
    jx_buf b = {.arena = L->a};
    int line = L->line;
    while (i < L->n && s[i] != q) {
        if (s[i] != '\\') {
            if (!jx_buf_add(&b, s + i, 1)) return la_err_set(L->err, LA_ERR_NO_MEMORY, "out of memory");
            i++;
            continue;
        }
        /* Python's unicode-escape codec */
        if (i + 1 >= L->n) break;
        char e = s[i + 1];
        const char *simple = strchr("\\'\"abfnrtv", e);
        static const char k_map[] = "\\'\"\a\b\f\n\r\t\v";
        bool ok = true;
        if (e && simple) {
            ok = jx_buf_add(&b, &k_map[simple - "\\'\"abfnrtv"], 1);
            i += 2;
        } else if (e == '\n') {
            i += 2; /* line continuation */
        } else if (e >= '0' && e <= '7') {
            uint32_t v = 0;
            size_t j = i + 1;
            for (int k = 0; k < 3 && j < L->n && s[j] >= '0' && s[j] <= '7'; k++, j++) v = v * 8 + (uint32_t)(s[j] - '0');
            ok = jx_buf_cp(&b, v);
            i = j;
        } else if (e == 'x' || e == 'u' || e == 'U') {
            int digits = e == 'x' ? 2 : e == 'u' ? 4 : 8;
            uint32_t v = 0;
            for (int k = 0; k < digits; k++) {
                char c = i + 2 + (size_t)k < L->n ? s[i + 2 + k] : 0;
                int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
                        : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
                if (d < 0) return lex_fail(L, LA_ERR_FORMAT, "truncated \\%s escape in a string", e == 'x' ? "x" : e == 'u' ? "u" : "U");
                v = v * 16 + (uint32_t)d;
            }
            if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
                return lex_fail(L, LA_ERR_UNSUPPORTED, "%s", "a string escape outside Unicode scalar values");
            ok = jx_buf_cp(&b, v);
            i += 2 + (size_t)digits;
        } else if (e == 'N') {
            return lex_fail(L, LA_ERR_UNSUPPORTED, "%s", "\\N{...} escapes are not supported");
        } else {
            ok = jx_buf_add(&b, s + i, 2); /* unknown escapes stay as written */
            i += 2;
        }
        if (!ok) return la_err_set(L->err, LA_ERR_NO_MEMORY, "out of memory");
    }
    if (i >= L->n) return lex_fail(L, LA_ERR_FORMAT, "%s", "unterminated string");
    count_lines(L, *pos, i);
    if (!jx_buf_add(&b, "", 0)) return la_err_set(L->err, LA_ERR_NO_MEMORY, "out of memory");
    jtoken t = {.kind = JT_STRING, .s = b.p, .n = b.n, .line = line};
    *pos = i + 1;
    return push(L, t) ? LA_OK : la_err_set(L->err, LA_ERR_NO_MEMORY, "out of memory");
}

static bool is_digit(char c) { return c >= '0' && c <= '9'; }
static bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }

/* Digits with single '_' between them (Python's literal grammar); returns the end. */
static size_t digits_at(const char *s, size_t n, size_t i, int base) {
    size_t j = i;
    for (;;) {
        char c = j < n ? s[j] : 0;
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10 : 99;
        if (d < base) {
            j++;
            continue;
        }
        if (c == '_' && j > i && j + 1 < n) {
            char c2 = s[j + 1];
            int d2 = c2 >= '0' && c2 <= '9' ? c2 - '0' : c2 >= 'a' && c2 <= 'f' ? c2 - 'a' + 10
                     : c2 >= 'A' && c2 <= 'F' ? c2 - 'A' + 10 : 99;
            if (d2 < base) {
                j++;
                continue;
            }
        }
        return j;
    }
}

static la_status lex_number(lexer *L, size_t *pos) {
    const char *s = L->s;
    size_t i = *pos, n = L->n;
    char buf[128];
    size_t k = 0;
    /* float: digits ('.' digits)? exponent | digits '.' digits */
    size_t d_end = digits_at(s, n, i, 10);
    size_t j = d_end;
    bool is_float = false;
    if (j < n && s[j] == '.' && j + 1 < n && is_digit(s[j + 1])) {
        j = digits_at(s, n, j + 1, 10);
        is_float = true;
    }
    if (j < n && (s[j] == 'e' || s[j] == 'E')) {
        size_t e = j + 1;
        if (e < n && (s[e] == '+' || s[e] == '-')) e++;
        if (e < n && is_digit(s[e])) {
            j = digits_at(s, n, e, 10);
            is_float = true;
        }
    }
    if (is_float) {
        for (size_t x = i; x < j && k < sizeof buf - 1; x++)
            if (s[x] != '_') buf[k++] = s[x];
        buf[k] = 0;
        jtoken t = {.kind = JT_FLOAT, .f = strtod(buf, NULL)};
        *pos = j;
        return push(L, t) ? LA_OK : la_err_set(L->err, LA_ERR_NO_MEMORY, "out of memory");
    }
    int base = 10;
    size_t start = i;
    if (s[i] == '0' && i + 1 < n && strchr("bBoOxX", s[i + 1]) && s[i + 1]) {
        base = s[i + 1] == 'b' || s[i + 1] == 'B' ? 2 : s[i + 1] == 'o' || s[i + 1] == 'O' ? 8 : 16;
        start = i + 2;
        j = digits_at(s, n, start, base);
        if (j == start) return lex_fail(L, LA_ERR_FORMAT, "%s", "a number prefix without digits");
    } else {
        j = d_end;
        if (s[i] == '0') { /* only zeros may follow a leading 0 */
            j = i + 1;
            while (j < n && (s[j] == '0' || (s[j] == '_' && j + 1 < n && s[j + 1] == '0'))) j++;
        }
    }
    for (size_t x = start; x < j && k < sizeof buf - 1; x++)
        if (s[x] != '_') buf[k++] = s[x];
    buf[k] = 0;
    errno = 0;
    long long v = strtoll(buf, NULL, base);
    if (errno == ERANGE) return lex_fail(L, LA_ERR_UNSUPPORTED, "%s", "an integer literal over 64 bits");
    jtoken t = {.kind = JT_INT, .i = v};
    *pos = j;
    return push(L, t) ? LA_OK : la_err_set(L->err, LA_ERR_NO_MEMORY, "out of memory");
}

static const struct {
    const char *text;
    jo_op op;
} k_ops[] = {
    {"//", JO_FLOORDIV}, {"**", JO_POW}, {"==", JO_EQ}, {"!=", JO_NE}, {">=", JO_GE},
    {"<=", JO_LE},       {"+", JO_ADD},  {"-", JO_SUB}, {"/", JO_DIV}, {"*", JO_MUL},
    {"%", JO_MOD},       {"~", JO_TILDE}, {"[", JO_LBRACKET}, {"]", JO_RBRACKET},
    {"(", JO_LPAREN},    {")", JO_RPAREN}, {"{", JO_LBRACE}, {"}", JO_RBRACE}, {">", JO_GT},
    {"<", JO_LT},        {"=", JO_ASSIGN}, {".", JO_DOT}, {":", JO_COLON}, {"|", JO_PIPE},
    {",", JO_COMMA},     {";", JO_SEMICOLON},
};

/* Tokens of one tag, from L->pos to its end (block: "%}", variable: "}}"). */
static la_status lex_tag(lexer *L, bool block) {
    const char *s = L->s;
    size_t n = L->n;
    char stack[64];
    int depth = 0;
    for (;;) {
        size_t i = L->pos;
        if (i >= n) return lex_fail(L, LA_ERR_FORMAT, "%s", block ? "missing %} at the end" : "missing }} at the end");
        const char *end = block ? "%}" : "}}";
        if (depth == 0) {
            size_t stop = 0;
            bool eat_space = false, eat_newline = false;
            if (block && !strncmp(s + i, "+%}", 3)) {
                stop = i + 3;
            } else if (s[i] == '-' && !strncmp(s + i + 1, end, 2)) {
                stop = i + 3;
                eat_space = true;
            } else if (!strncmp(s + i, end, 2)) {
                stop = i + 2;
                eat_newline = block; /* trim_blocks */
            }
            if (stop) {
                if (eat_space) stop = skip_spaces(s, n, stop);
                if (eat_newline && stop < n && s[stop] == '\n') stop++;
                if (!push(L, (jtoken){.kind = block ? JT_BLOCK_END : JT_VAR_END}))
                    return la_err_set(L->err, LA_ERR_NO_MEMORY, "out of memory");
                L->line_starting = s[stop - 1] == '\n';
                count_lines(L, i, stop);
                L->pos = stop;
                return LA_OK;
            }
        }
        size_t k = space_at(s, n, i);
        if (k) {
            size_t j = skip_spaces(s, n, i);
            count_lines(L, i, j);
            L->pos = j;
            continue;
        }
        char c = s[i];
        la_status st = LA_OK;
        if (is_digit(c)) {
            st = lex_number(L, &L->pos);
        } else if (is_name_start(c)) {
            size_t j = i;
            while (j < n && (is_name_start(s[j]) || is_digit(s[j]))) j++;
            char *name = jx_strdup(L->a, s + i, j - i);
            if (!name || !push(L, (jtoken){.kind = JT_NAME, .s = name, .n = j - i}))
                return la_err_set(L->err, LA_ERR_NO_MEMORY, "out of memory");
            L->pos = j;
        } else if (c == '\'' || c == '"') {
            st = lex_string(L, &L->pos);
        } else {
            size_t o = 0;
            while (o < sizeof k_ops / sizeof k_ops[0] && strncmp(s + i, k_ops[o].text, strlen(k_ops[o].text))) o++;
            if (o == sizeof k_ops / sizeof k_ops[0]) {
                char ch[8];
                size_t j = i;
                jx_decode(s, &j);
                snprintf(ch, sizeof ch, "%.*s", (int)(j - i), s + i);
                return lex_fail(L, LA_ERR_FORMAT, "unexpected character '%s' in a tag", ch);
            }
            jo_op op = k_ops[o].op;
            if (op == JO_LPAREN || op == JO_LBRACKET || op == JO_LBRACE) {
                if (depth == (int)sizeof stack) return lex_fail(L, LA_ERR_UNSUPPORTED, "%s", "brackets nested too deep");
                stack[depth++] = op == JO_LPAREN ? ')' : op == JO_LBRACKET ? ']' : '}';
            } else if (op == JO_RPAREN || op == JO_RBRACKET || op == JO_RBRACE) {
                if (depth == 0 || stack[depth - 1] != k_ops[o].text[0]) {
                    char ch[2] = {k_ops[o].text[0], 0};
                    return lex_fail(L, LA_ERR_FORMAT, "unexpected '%s'", ch);
                }
                depth--;
            }
            if (!push(L, (jtoken){.kind = JT_OP, .op = (uint8_t)op}))
                return la_err_set(L->err, LA_ERR_NO_MEMORY, "out of memory");
            L->pos = i + strlen(k_ops[o].text);
        }
        if (st != LA_OK) return st;
    }
}

/* ---- the text around tags ----------------------------------------------------------------- */

static la_status push_data(lexer *L, size_t from, size_t to) {
    if (to <= from) return LA_OK;
    jtoken t = {.kind = JT_DATA, .s = L->s + from, .n = to - from};
    count_lines(L, from, to);
    return push(L, t) ? LA_OK : la_err_set(L->err, LA_ERR_NO_MEMORY, "out of memory");
}

static la_status lex_root(lexer *L) {
    const char *s = L->s;
    size_t n = L->n;
    L->line_starting = true;
    while (L->pos < n) {
        size_t i = L->pos, at = n;
        char kind = 0;
        for (size_t j = i; j + 1 < n; j++) {
            if (s[j] == '{' && (s[j + 1] == '{' || s[j + 1] == '%' || s[j + 1] == '#')) {
                at = j;
                kind = s[j + 1];
                break;
            }
        }
        if (!kind) return push_data(L, i, n);
        size_t after = at + 2;
        char sign = after < n && (s[after] == '-' || s[after] == '+') ? s[after] : 0;
        size_t text_end = at;
        if (sign == '-') {
            text_end = rstrip_at(s, i, at);
        } else if (sign != '+' && kind != '{') { /* lstrip_blocks */
            size_t l_pos = at;
            while (l_pos > i && s[l_pos - 1] != '\n') l_pos--;
            bool at_line_start = l_pos > i || (l_pos == i && L->line_starting);
            if (at_line_start && l_pos < at && skip_spaces(s, at, l_pos) == at) text_end = l_pos;
        }
        /* lines of stripped text still count */
        LA_TRY(push_data(L, i, text_end));
        count_lines(L, text_end, at);
        L->line_starting = false;
        L->pos = after + (sign ? 1 : 0);
        if (kind == '#') {
            size_t j = L->pos, stop = 0;
            for (; j + 1 < n; j++) {
                if (s[j] == '+' && !strncmp(s + j + 1, "#}", 2)) {
                    stop = j + 3;
                    break;
                }
                if (s[j] == '-' && !strncmp(s + j + 1, "#}", 2)) {
                    stop = skip_spaces(s, n, j + 3);
                    break;
                }
                if (!strncmp(s + j, "#}", 2)) {
                    stop = j + 2;
                    if (stop < n && s[stop] == '\n') stop++;
                    break;
                }
            }
            if (!stop) return lex_fail(L, LA_ERR_FORMAT, "%s", "missing #} at the end of a comment");
            count_lines(L, L->pos, stop);
            L->line_starting = s[stop - 1] == '\n';
            L->pos = stop;
            continue;
        }
        if (kind == '%') {
            size_t j = skip_spaces(s, n, L->pos);
            if (!strncmp(s + j, "raw", 3) && (j + 3 >= n || !(is_name_start(s[j + 3]) || is_digit(s[j + 3]))))
                return lex_fail(L, LA_ERR_UNSUPPORTED, "%s", "{% raw %} is not supported");
        }
        if (!push(L, (jtoken){.kind = kind == '%' ? JT_BLOCK_BEGIN : JT_VAR_BEGIN}))
            return la_err_set(L->err, LA_ERR_NO_MEMORY, "out of memory");
        LA_TRY(lex_tag(L, kind == '%'));
    }
    return LA_OK;
}

la_status jx_lex(jx_arena *a, const char *name, const char *text, size_t len, jtoken **toks,
                 size_t *n, la_err *err) {
    /* newlines normalized, one trailing newline dropped (keep_trailing_newline=False) */
    char *src = jx_alloc(a, len + 1);
    if (!src) return la_err_set(err, LA_ERR_NO_MEMORY, "%s: out of memory", name);
    size_t k = 0;
    for (size_t i = 0; i < len; i++) {
        if (text[i] == '\r') {
            src[k++] = '\n';
            if (i + 1 < len && text[i + 1] == '\n') i++;
        } else {
            src[k++] = text[i];
        }
    }
    if (k > 0 && src[k - 1] == '\n') k--;
    src[k] = 0;
    lexer L = {.a = a, .name = name, .s = src, .n = k, .line = 1, .err = err};
    LA_TRY(lex_root(&L));
    if (!push(&L, (jtoken){.kind = JT_EOF})) return la_err_set(err, LA_ERR_NO_MEMORY, "%s: out of memory", name);
    *toks = L.v;
    *n = L.len;
    return LA_OK;
}
