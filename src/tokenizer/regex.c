/* Regular expressions of tokenizer.json (regex.h). */
#include "tokenizer/regex.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/text.h"

bool la_tok_ranges_push(la_tok_ranges *l, size_t start, size_t end, bool match) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 64;
        la_tok_range *v = realloc(l->v, cap * sizeof *v);
        if (!v) return false;
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = (la_tok_range){start, end, match};
    return true;
}

/* ---- rewriting ---------------------------------------------------------------------------- */

/* Oniguruma's \w in Unicode mode: Alphabetic, Mark, Decimal_Number and
 * Connector_Punctuation (its CR_Word table; unlike UTS #18 Annex C, not Join_Control: HF
 * drops U+200D from \w runs, which the pre-split-word fixture checks); PCRE2's \w with UCP
 * is only letters, numbers and '_'. The body goes inside a class. */
#define WORD_CLASS_BODY "\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}"

/* Rewrite an Oniguruma pattern (what HF's SysRegex runs) into PCRE2 syntax with the same
 * meaning, because these constructs differ:
 *
 *   \s, \S   PCRE2 with UCP counts U+180E MONGOLIAN VOWEL SEPARATOR as white space;
 *            Oniguruma (and Unicode since 6.3) does not. Both become \p{White_Space} /
 *            \P{White_Space}, which PCRE2 also accepts inside classes: [^\s\p{L}] ->
 *            [^\p{White_Space}\p{L}].
 *   \w, \W   Oniguruma's word characters (WORD_CLASS_BODY) differ from PCRE2's: \w becomes
 *            that class ([...] outside a class, its body inside one), \W its negation
 *            outside classes; \W inside a class and \b, \B have no such rewrite and are
 *            refused (*unsupported).
 *   (?i:...) PCRE2 folds 's' with U+017F LATIN SMALL LETTER LONG S and 'k' with U+212A
 *            KELVIN SIGN; HF's engine does not ("x'ſ" is not the contraction 's). ASCII
 *            letters in such a group become explicit classes: (?i:'s|'t) ->
 *            (?:'[sS]|'[tT]); other characters keep (?i:c).
 *
 * When a caseless group holds something this rewrite does not handle (a character class,
 * inline flags), the group is left caseless (*gave_up): only the escapes are rewritten.
 */
static bool rewrite(const char *pat, bool fold_case, la_tok_buf *out, bool *gave_up,
                    const char **unsupported) {
    size_t n = strlen(pat);
    bool stack[256];
    int depth = 0;
    bool ci = false, in_class = false;
    *gave_up = false;
    for (size_t i = 0; i < n; i++) {
        char c = pat[i];
        if (c == '\\' && i + 1 < n) {
            char e = pat[i + 1];
            i++;
            if (e == 's' || e == 'S') {
                if (!la_tok_buf_append(out, e == 's' ? "\\p{White_Space}" : "\\P{White_Space}", 15))
                    return false;
                continue;
            }
            if (e == 'w') {
                const char *w = in_class ? WORD_CLASS_BODY : "[" WORD_CLASS_BODY "]";
                if (!la_tok_buf_append(out, w, strlen(w))) return false;
                continue;
            }
            if (e == 'W' && !in_class) {
                if (!la_tok_buf_append(out, "[^" WORD_CLASS_BODY "]", strlen("[^" WORD_CLASS_BODY "]")))
                    return false;
                continue;
            }
            if (e == 'W' || e == 'b' || e == 'B') {
                *unsupported = e == 'W' ? "\\W inside a character class" : e == 'b' ? "\\b" : "\\B";
                continue;
            }
            if (!la_tok_buf_append(out, pat + i - 1, 2)) return false;
            if (strchr("pPxoNgk", e) && i + 1 < n && pat[i + 1] == '{') {
                size_t j = i + 1;
                while (j < n && pat[j] != '}') j++;
                if (!la_tok_buf_append(out, pat + i + 1, j + 1 - (i + 1) - (j == n))) return false;
                i = j < n ? j : n - 1;
            }
            continue;
        }
        if (in_class) {
            if (c == ']') in_class = false;
            if (ci && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))) *gave_up = true;
            if (!la_tok_buf_append(out, &c, 1)) return false;
            continue;
        }
        if (c == '[') {
            in_class = true;
            size_t j = i + 1;
            if (j < n && pat[j] == '^') j++;
            if (j < n && pat[j] == ']') j++; /* a leading ] is a literal */
            if (!la_tok_buf_append(out, pat + i, j - i)) return false;
            i = j - 1;
            continue;
        }
        if (c == '(') {
            if (depth == (int)(sizeof stack / sizeof stack[0])) {
                *gave_up = true;
                return true;
            }
            stack[depth++] = ci;
            if (fold_case && strncmp(pat + i, "(?i:", 4) == 0) {
                ci = true;
                if (!la_tok_buf_append(out, "(?:", 3)) return false;
                i += 3;
                continue;
            }
            if (i + 1 < n && pat[i + 1] == '?') {
                /* copy the group opener: (?: (?= (?! (?> (?<= (?<! (?<name> (?P<name> */
                size_t j = i + 2;
                if (j < n && strchr(":=!>", pat[j])) {
                    j++;
                } else if (j < n && (pat[j] == '<' || pat[j] == 'P')) {
                    if (pat[j] == '<' && j + 1 < n && (pat[j + 1] == '=' || pat[j + 1] == '!')) {
                        j += 2;
                    } else {
                        while (j < n && pat[j] != '>') j++;
                        j = j < n ? j + 1 : n;
                    }
                } else {
                    if (ci || fold_case) *gave_up = true; /* inline flags */
                    j = i + 1;
                }
                if (!la_tok_buf_append(out, pat + i, j - i)) return false;
                i = j - 1;
                continue;
            }
            if (!la_tok_buf_append(out, "(", 1)) return false;
            continue;
        }
        if (c == ')') {
            if (depth > 0) ci = stack[--depth];
            if (!la_tok_buf_append(out, ")", 1)) return false;
            continue;
        }
        if (ci && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))) {
            char cls[4] = {'[', (char)(c | 0x20), (char)(c & ~0x20), ']'};
            if (!la_tok_buf_append(out, cls, 4)) return false;
            continue;
        }
        if (ci && (unsigned char)c >= 0x80) {
            size_t k = 1;
            while (i + k < n && ((unsigned char)pat[i + k] & 0xC0) == 0x80) k++;
            if (!la_tok_buf_append(out, "(?i:", 4) || !la_tok_buf_append(out, pat + i, k) ||
                !la_tok_buf_append(out, ")", 1))
                return false;
            i += k - 1;
            continue;
        }
        if (!la_tok_buf_append(out, &c, 1)) return false;
    }
    return true;
}

la_tok_regex_result la_tok_regex_compile(const char *pat, pcre2_code **out, char *msg,
                                         size_t msg_len) {
    la_tok_buf rw = {0};
    bool gave_up = false;
    const char *unsupported = NULL;
    if (!rewrite(pat, true, &rw, &gave_up, &unsupported)) {
        la_tok_buf_free(&rw);
        return LA_TOK_REGEX_NO_MEMORY;
    }
    if (gave_up) {
        rw.len = 0;
        if (!rewrite(pat, false, &rw, &gave_up, &unsupported)) {
            la_tok_buf_free(&rw);
            return LA_TOK_REGEX_NO_MEMORY;
        }
    }
    if (unsupported) {
        la_tok_buf_free(&rw);
        snprintf(msg, msg_len, "%s is not supported (Oniguruma and PCRE2 disagree on it)", unsupported);
        return LA_TOK_REGEX_UNSUPPORTED;
    }
    int code;
    PCRE2_SIZE at;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)(rw.data ? rw.data : ""), rw.len,
                                   PCRE2_UTF | PCRE2_UCP, &code, &at, NULL);
    la_tok_buf_free(&rw);
    if (!re) {
        PCRE2_UCHAR text[256];
        pcre2_get_error_message(code, text, sizeof text);
        snprintf(msg, msg_len, "%s", (const char *)text);
        return code == PCRE2_ERROR_NOMEMORY ? LA_TOK_REGEX_NO_MEMORY : LA_TOK_REGEX_BAD;
    }
    pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* falls back to the interpreter if absent */
    *out = re;
    return LA_TOK_REGEX_OK;
}

/* ---- splits --------------------------------------------------------------------------------- */

int la_tok_regex_ranges(const pcre2_code *re, pcre2_match_data *md, const char *s, size_t n,
                        la_tok_ranges *out) {
    size_t last_end = 0, prev = 0, last_match_end = 0;
    bool have_last = false;
    while (last_end <= n) {
        int rc = pcre2_match(re, (PCRE2_SPTR)s, n, last_end, PCRE2_NO_UTF_CHECK, md, NULL);
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
            rc = pcre2_match(re, (PCRE2_SPTR)s, n, last_end, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md,
                             NULL);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) return rc;
        const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t ms = ov[0], me = ov[1];
        if (ms == me && have_last && last_match_end == me) {
            if (last_end >= n) break;
            uint32_t cp;
            last_end += (size_t)la_utf8_decode((const uint8_t *)s + last_end, &cp);
            continue;
        }
        last_end = me;
        last_match_end = me;
        have_last = true;
        if (prev != ms && !la_tok_ranges_push(out, prev, ms, false)) return 1;
        if (!la_tok_ranges_push(out, ms, me, true)) return 1;
        prev = me;
    }
    return prev == n || la_tok_ranges_push(out, prev, n, false) ? 0 : 1;
}

bool la_tok_literal_ranges(const char *lit, size_t lit_len, const char *s, size_t n,
                           la_tok_ranges *out) {
    size_t prev = 0, i = 0;
    while (lit_len && i + lit_len <= n) {
        const char *hit = memmem(s + i, n - i, lit, lit_len);
        if (!hit) break;
        size_t at = (size_t)(hit - s);
        if (prev != at && !la_tok_ranges_push(out, prev, at, false)) return false;
        if (!la_tok_ranges_push(out, at, at + lit_len, true)) return false;
        prev = i = at + lit_len;
    }
    return prev == n || la_tok_ranges_push(out, prev, n, false);
}

bool la_tok_char_ranges(bool (*pred)(uint32_t cp, const void *ctx), const void *ctx,
                        const char *s, size_t n, la_tok_ranges *out) {
    size_t prev = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        int k = la_utf8_decode((const uint8_t *)s + i, &cp);
        if (pred(cp, ctx)) {
            if (prev < i && !la_tok_ranges_push(out, prev, i, false)) return false;
            if (!la_tok_ranges_push(out, i, i + (size_t)k, true)) return false;
            prev = i + (size_t)k;
        }
        i += (size_t)k;
    }
    return prev == n || la_tok_ranges_push(out, prev, n, false);
}
