/* Methods of la_jinja values (jinja_internal.h): Python's str methods that chat templates
 * call (strip, split, startswith, ...), dict.items / keys / values / get, loop.cycle, and
 * the case mappings behind them (utf8proc's simple mappings, plus U+00DF -> "SS" and
 * U+0130 -> "i\u0307" of SpecialCasing.txt; Python applies the full mappings).
 */
#include <stdio.h>
#include <string.h>

#include <utf8proc.h>

#include "model/jinja_internal.h"

static const char *const k_str_methods[JM_STR_N] = {
    "strip", "lstrip", "rstrip", "split", "rsplit", "startswith", "endswith", "upper", "lower",
    "title", "capitalize", "replace", "find", "rfind", "count", "join", "isdigit", "isalpha",
    "isalnum", "isspace", "isupper", "islower", "splitlines"};

int jx_str_method_id(const char *name, size_t n) {
    for (int i = 0; i < JM_STR_N; i++)
        if (strlen(k_str_methods[i]) == n && !memcmp(k_str_methods[i], name, n)) return i;
    return -1;
}

bool jx_method_known(const char *name, size_t n) {
    static const char *const k_other[] = {"items", "keys", "values", "get", "cycle"};
    if (jx_str_method_id(name, n) >= 0) return true;
    for (size_t i = 0; i < sizeof k_other / sizeof k_other[0]; i++)
        if (strlen(k_other[i]) == n && !memcmp(k_other[i], name, n)) return true;
    return false;
}

static bool oom(jx_ctx *c, int line) { return jx_fail(c, LA_ERR_NO_MEMORY, line, "out of memory"); }

/* ---- case ------------------------------------------------------------------------------------ */

int jx_case_kind(uint32_t cp) {
    utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)cp);
    return k == UTF8PROC_CATEGORY_LU || k == UTF8PROC_CATEGORY_LT ? 1 : k == UTF8PROC_CATEGORY_LL ? 2 : 0;
}

static bool add_upper(jx_buf *b, uint32_t cp) {
    if (cp == 0xDF) return jx_buf_add(b, "SS", 2);
    return jx_buf_cp(b, (uint32_t)utf8proc_toupper((utf8proc_int32_t)cp));
}
static bool add_lower(jx_buf *b, uint32_t cp) {
    if (cp == 0x130) return jx_buf_add(b, "i\xCC\x87", 3);
    return jx_buf_cp(b, (uint32_t)utf8proc_tolower((utf8proc_int32_t)cp));
}
static bool add_title(jx_buf *b, uint32_t cp) {
    if (cp == 0xDF) return jx_buf_add(b, "Ss", 2);
    return jx_buf_cp(b, (uint32_t)utf8proc_totitle((utf8proc_int32_t)cp));
}

bool jx_str_case(const jv *s, jx_case mode, jx_buf *out) {
    bool prev_cased = false, first = true;
    if (!jx_buf_add(out, "", 0)) return false;
    for (size_t i = 0; i < s->s.n;) {
        uint32_t cp = jx_decode(s->s.p, &i);
        bool ok;
        switch (mode) {
        case JX_CASE_UPPER: ok = add_upper(out, cp); break;
        case JX_CASE_LOWER: ok = add_lower(out, cp); break;
        case JX_CASE_CAPITALIZE: ok = first ? add_title(out, cp) : add_lower(out, cp); break;
        default: { /* str.title(): title case after an uncased character, lower after a cased one */
            bool cased = jx_case_kind(cp) != 0;
            ok = prev_cased ? add_lower(out, cp) : add_title(out, cp);
            prev_cased = cased;
        }
        }
        if (!ok) return false;
        first = false;
    }
    return true;
}

/* ---- str helpers -------------------------------------------------------------------------------- */

static bool in_chars(uint32_t cp, const jv *chars) {
    if (!chars) return jx_is_space(cp);
    for (size_t i = 0; i < chars->s.n;)
        if (jx_decode(chars->s.p, &i) == cp) return true;
    return false;
}

jv jx_str_strip(const jv *s, const jv *chars, bool left, bool right) {
    size_t a = 0, b = s->s.n;
    while (left && a < b) {
        size_t j = a;
        if (!in_chars(jx_decode(s->s.p, &j), chars)) break;
        a = j;
    }
    while (right && b > a) {
        size_t i = b - 1;
        while (i > a && ((unsigned char)s->s.p[i] & 0xC0) == 0x80) i--;
        size_t j = i;
        if (!in_chars(jx_decode(s->s.p, &j), chars)) break;
        b = i;
    }
    return jv_str(s->s.p + a, b - a);
}

bool jx_str_replace(const jv *s, const jv *old, const jv *new_, int64_t count, jx_buf *out) {
    if (!jx_buf_add(out, "", 0)) return false;
    if (old->s.n == 0) { /* Python: new before every character and at the end */
        int64_t done = 0;
        for (size_t i = 0; i < s->s.n;) {
            size_t start = i;
            jx_decode(s->s.p, &i);
            if ((count < 0 || done < count) && !jx_buf_add(out, new_->s.p, new_->s.n)) return false;
            done++;
            if (!jx_buf_add(out, s->s.p + start, i - start)) return false;
        }
        return (count >= 0 && done >= count) || jx_buf_add(out, new_->s.p, new_->s.n);
    }
    size_t i = 0, run = 0;
    int64_t done = 0;
    while (i + old->s.n <= s->s.n && (count < 0 || done < count)) {
        if (!memcmp(s->s.p + i, old->s.p, old->s.n)) {
            if (!jx_buf_add(out, s->s.p + run, i - run) || !jx_buf_add(out, new_->s.p, new_->s.n)) return false;
            i += old->s.n;
            run = i;
            done++;
        } else {
            i++;
        }
    }
    return jx_buf_add(out, s->s.p + run, s->s.n - run);
}

/* Python's line boundaries: \n \r \r\n \v \f \x1c \x1d \x1e \x85 \u2028 \u2029. */
static size_t line_break_at(const char *s, size_t n, size_t i) {
    unsigned char c = (unsigned char)s[i];
    if (c == '\r') return i + 1 < n && s[i + 1] == '\n' ? 2 : 1;
    if (c == '\n' || c == 0x0B || c == 0x0C || (c >= 0x1C && c <= 0x1E)) return 1;
    if (c == 0xC2 && i + 1 < n && (unsigned char)s[i + 1] == 0x85) return 2;
    if (c == 0xE2 && i + 2 < n && (unsigned char)s[i + 1] == 0x80 &&
        ((unsigned char)s[i + 2] == 0xA8 || (unsigned char)s[i + 2] == 0xA9))
        return 3;
    return 0;
}

jlist *jx_str_splitlines(jx_arena *a, const jv *s, bool keepends) {
    jlist *l = jv_list_new(a, 4);
    size_t start = 0;
    for (size_t i = 0; l && i < s->s.n;) {
        size_t k = line_break_at(s->s.p, s->s.n, i);
        if (!k) {
            i++;
            continue;
        }
        if (!jv_list_push(a, l, jv_str(s->s.p + start, (keepends ? i + k : i) - start))) return NULL;
        i += k;
        start = i;
    }
    if (l && start < s->s.n && !jv_list_push(a, l, jv_str(s->s.p + start, s->s.n - start))) return NULL;
    return l;
}

/* str.split / rsplit. sep NULL: runs of white space, none empty. */
static bool split(jx_ctx *c, const jv *s, const jv *sep, int64_t maxsplit, bool from_right, int line, jv *out) {
    jx_arena *a = jx_ctx_arena(c);
    jlist *l = jv_list_new(a, 4);
    if (!l) return oom(c, line);
    const char *p = s->s.p;
    size_t n = s->s.n;
    if (sep && sep->s.n == 0) return jx_fail(c, LA_ERR_INVALID_ARG, line, "empty separator");
    /* parts as [start, end) pairs collected left to right, or right to left then reversed */
    size_t *cuts = jx_alloc(a, (n + 2) * 2 * sizeof *cuts);
    if (!cuts) return oom(c, line);
    size_t k = 0;
    int64_t done = 0;
    if (sep) {
        if (!from_right) {
            size_t start = 0, i = 0;
            while (i + sep->s.n <= n && (maxsplit < 0 || done < maxsplit)) {
                if (!memcmp(p + i, sep->s.p, sep->s.n)) {
                    cuts[k++] = start;
                    cuts[k++] = i;
                    i += sep->s.n;
                    start = i;
                    done++;
                } else {
                    i++;
                }
            }
            cuts[k++] = start;
            cuts[k++] = n;
        } else {
            size_t end = n, i = n;
            while (i >= sep->s.n && (maxsplit < 0 || done < maxsplit)) {
                if (!memcmp(p + i - sep->s.n, sep->s.p, sep->s.n)) {
                    cuts[k++] = i;
                    cuts[k++] = end;
                    i -= sep->s.n;
                    end = i;
                    done++;
                } else {
                    i--;
                }
            }
            cuts[k++] = 0;
            cuts[k++] = end;
        }
    } else if (!from_right) {
        size_t i = 0;
        for (;;) {
            while (i < n) { /* skip spaces */
                size_t j = i;
                if (!jx_is_space(jx_decode(p, &j))) break;
                i = j;
            }
            if (i >= n) break;
            if (maxsplit >= 0 && done >= maxsplit) { /* the rest, trailing spaces stripped */
                jv rest = jx_str_strip(&(jv){.kind = JV_STR, .s = {p + i, n - i}}, NULL, false, true);
                cuts[k++] = i;
                cuts[k++] = i + rest.s.n;
                break;
            }
            size_t start = i;
            while (i < n) {
                size_t j = i;
                if (jx_is_space(jx_decode(p, &j))) break;
                i = j;
            }
            cuts[k++] = start;
            cuts[k++] = i;
            done++;
        }
    } else {
        size_t i = n;
        for (;;) {
            while (i > 0) {
                size_t b = i - 1;
                while (b > 0 && ((unsigned char)p[b] & 0xC0) == 0x80) b--;
                size_t j = b;
                if (!jx_is_space(jx_decode(p, &j))) break;
                i = b;
            }
            if (i == 0) break;
            if (maxsplit >= 0 && done >= maxsplit) {
                jv rest = jx_str_strip(&(jv){.kind = JV_STR, .s = {p, i}}, NULL, true, false);
                cuts[k++] = (size_t)(rest.s.p - p);
                cuts[k++] = i;
                break;
            }
            size_t end = i;
            while (i > 0) {
                size_t b = i - 1;
                while (b > 0 && ((unsigned char)p[b] & 0xC0) == 0x80) b--;
                size_t j = b;
                if (jx_is_space(jx_decode(p, &j))) break;
                i = b;
            }
            cuts[k++] = i;
            cuts[k++] = end;
            done++;
        }
    }
    size_t parts = k / 2;
    for (size_t q = 0; q < parts; q++) {
        size_t idx = from_right ? parts - 1 - q : q;
        if (!jv_list_push(a, l, jv_str(p + cuts[2 * idx], cuts[2 * idx + 1] - cuts[2 * idx]))) return oom(c, line);
    }
    *out = jv_list_value(l, 0);
    return true;
}

/* Python str.find / rfind / count over code points. */
static int64_t find(const jv *s, const jv *sub, bool last) {
    if (sub->s.n > s->s.n) return -1;
    int64_t best = -1;
    for (size_t i = 0; i + sub->s.n <= s->s.n; i++) {
        if (((unsigned char)s->s.p[i] & 0xC0) == 0x80) continue;
        if (!memcmp(s->s.p + i, sub->s.p, sub->s.n)) {
            best = (int64_t)jx_cp_count(s->s.p, i);
            if (!last) return best;
        }
    }
    return best;
}

static bool affix(jx_ctx *c, const jv *s, const jv *x, bool suffix, int line, bool *out) {
    if (x->kind == JV_LIST && (x->flags & JVF_TUPLE)) {
        *out = false;
        for (size_t i = 0; i < x->list->n && !*out; i++)
            if (!affix(c, s, &x->list->v[i], suffix, line, out)) return false;
        return true;
    }
    if (x->kind != JV_STR)
        return jx_fail(c, LA_ERR_INVALID_ARG, line, "%s first arg must be str or a tuple of str, not %s",
                       suffix ? "endswith" : "startswith", jv_type_name(x));
    *out = x->s.n <= s->s.n && !memcmp(s->s.p + (suffix ? s->s.n - x->s.n : 0), x->s.p, x->s.n);
    return true;
}

/* str.isdigit (approximated by Nd), isalpha (L*), isalnum, isspace, isupper, islower. */
static bool str_is(const jv *s, int id) {
    if (s->s.n == 0) return false;
    bool any_cased = false;
    for (size_t i = 0; i < s->s.n;) {
        uint32_t cp = jx_decode(s->s.p, &i);
        utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)cp);
        bool letter = k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO;
        bool number = k == UTF8PROC_CATEGORY_ND || k == UTF8PROC_CATEGORY_NL || k == UTF8PROC_CATEGORY_NO;
        switch (id) {
        case JM_ISDIGIT: if (k != UTF8PROC_CATEGORY_ND) return false; break;
        case JM_ISALPHA: if (!letter) return false; break;
        case JM_ISALNUM: if (!letter && !number) return false; break;
        case JM_ISSPACE: if (!jx_is_space(cp)) return false; break;
        default: {
            int ck = jx_case_kind(cp);
            if (ck == (id == JM_ISUPPER ? 2 : 1)) return false;
            any_cased = any_cased || ck != 0;
        }
        }
    }
    return id == JM_ISUPPER || id == JM_ISLOWER ? any_cased : true;
}

/* ---- calls -------------------------------------------------------------------------------------- */

static bool str_arg(jx_ctx *c, const jv *v, const char *what, int line) {
    return v->kind == JV_STR || jx_fail(c, LA_ERR_INVALID_ARG, line, "%s must be str, not %s", what, jv_type_name(v));
}

static bool dict_view(jx_ctx *c, const jdict *d, int which, int line, jv *out) {
    jx_arena *a = jx_ctx_arena(c);
    jlist *l = jv_list_new(a, d->n + 1);
    if (!l) return oom(c, line);
    for (size_t i = 0; i < d->n; i++) {
        jv key = jv_str(d->keys[i], d->key_lens[i]), x = which == 1 ? key : d->vals[i];
        if (which == 0) {
            jlist *pair = jv_list_new(a, 2);
            if (!pair || !jv_list_push(a, pair, key) || !jv_list_push(a, pair, d->vals[i])) return oom(c, line);
            x = jv_list_value(pair, JVF_TUPLE);
        }
        if (!jv_list_push(a, l, x)) return oom(c, line);
    }
    *out = jv_list_value(l, JVF_GEN); /* a view: iterable, not printable here */
    return true;
}

bool jx_call_method(jx_ctx *c, const jmethod *m, const jx_args *args, int line, jv *out) {
    static const char *const k_strip[] = {"chars"};
    static const char *const k_split[] = {"sep", "maxsplit"};
    static const char *const k_affix[] = {"prefix"};
    static const char *const k_replace[] = {"old", "new", "count"};
    static const char *const k_sub[] = {"sub"};
    static const char *const k_join[] = {"iterable"};
    static const char *const k_lines[] = {"keepends"};
    static const char *const k_get[] = {"key", "default"};
    jx_arena *a = jx_ctx_arena(c);
    const jv *s = &m->self;
    jv p[3];
    bool given[3];
    jx_buf b = {.arena = a};
    const char *name = m->id < JM_STR_N ? k_str_methods[m->id] : "method";
    switch (m->id) {
    case JM_STRIP: case JM_LSTRIP: case JM_RSTRIP:
        if (!jx_bind_params(c, name, args, k_strip, 1, p, given, line)) return false;
        if (given[0] && p[0].kind != JV_NONE && !str_arg(c, &p[0], "strip arg", line)) return false;
        *out = jx_str_strip(s, given[0] && p[0].kind == JV_STR ? &p[0] : NULL, m->id != JM_RSTRIP, m->id != JM_LSTRIP);
        return true;
    case JM_SPLIT: case JM_RSPLIT: {
        int64_t maxsplit = -1;
        if (!jx_bind_params(c, name, args, k_split, 2, p, given, line)) return false;
        if (given[0] && p[0].kind != JV_NONE && !str_arg(c, &p[0], "sep", line)) return false;
        if (given[1] && !jx_want_int(c, &p[1], "maxsplit", line, &maxsplit)) return false;
        return split(c, s, given[0] && p[0].kind == JV_STR ? &p[0] : NULL, maxsplit, m->id == JM_RSPLIT, line, out);
    }
    case JM_STARTSWITH: case JM_ENDSWITH: {
        bool r;
        if (!jx_bind_params(c, name, args, k_affix, 1, p, given, line)) return false;
        if (!given[0]) return jx_fail(c, LA_ERR_INVALID_ARG, line, "%s takes a prefix", name);
        if (!affix(c, s, &p[0], m->id == JM_ENDSWITH, line, &r)) return false;
        *out = jv_bool(r);
        return true;
    }
    case JM_UPPER: case JM_LOWER: case JM_TITLE: case JM_CAPITALIZE: {
        static const jx_case k_modes[] = {[JM_UPPER] = JX_CASE_UPPER, [JM_LOWER] = JX_CASE_LOWER,
                                          [JM_TITLE] = JX_CASE_TITLE, [JM_CAPITALIZE] = JX_CASE_CAPITALIZE};
        if (!jx_bind_params(c, name, args, NULL, 0, p, given, line)) return false;
        if (!jx_str_case(s, k_modes[m->id], &b)) return oom(c, line);
        *out = jv_str(b.p, b.n);
        return true;
    }
    case JM_REPLACE: {
        int64_t count = -1;
        if (!jx_bind_params(c, name, args, k_replace, 3, p, given, line)) return false;
        if (!given[0] || !given[1]) return jx_fail(c, LA_ERR_INVALID_ARG, line, "replace takes old and new");
        if (!str_arg(c, &p[0], "old", line) || !str_arg(c, &p[1], "new", line)) return false;
        if (given[2] && !jx_want_int(c, &p[2], "count", line, &count)) return false;
        if (!jx_str_replace(s, &p[0], &p[1], count, &b)) return oom(c, line);
        *out = jv_str(b.p, b.n);
        return true;
    }
    case JM_FIND: case JM_RFIND: case JM_COUNT: {
        if (!jx_bind_params(c, name, args, k_sub, 1, p, given, line)) return false;
        if (!given[0] || !str_arg(c, &p[0], "sub", line)) return jx_fail(c, LA_ERR_INVALID_ARG, line, "%s takes a string", name);
        if (m->id != JM_COUNT) {
            *out = jv_int(find(s, &p[0], m->id == JM_RFIND));
            return true;
        }
        int64_t k = 0;
        if (p[0].s.n == 0) {
            k = (int64_t)jx_cp_count(s->s.p, s->s.n) + 1;
        } else {
            for (size_t i = 0; i + p[0].s.n <= s->s.n;)
                if (!memcmp(s->s.p + i, p[0].s.p, p[0].s.n)) {
                    k++;
                    i += p[0].s.n;
                } else {
                    i++;
                }
        }
        *out = jv_int(k);
        return true;
    }
    case JM_JOIN: {
        jlist *items;
        if (!jx_bind_params(c, name, args, k_join, 1, p, given, line)) return false;
        if (!given[0]) return jx_fail(c, LA_ERR_INVALID_ARG, line, "join takes an iterable");
        if (!jx_iterate(c, &p[0], line, &items)) return false;
        if (!jx_buf_add(&b, "", 0)) return oom(c, line);
        for (size_t i = 0; i < items->n; i++) {
            if (items->v[i].kind != JV_STR)
                return jx_fail(c, LA_ERR_INVALID_ARG, line, "sequence item %zu: expected str instance, %s found", i,
                               jv_type_name(&items->v[i]));
            if ((i && !jx_buf_add(&b, s->s.p, s->s.n)) || !jx_buf_add(&b, items->v[i].s.p, items->v[i].s.n))
                return oom(c, line);
        }
        *out = jv_str(b.p, b.n);
        return true;
    }
    case JM_ISDIGIT: case JM_ISALPHA: case JM_ISALNUM: case JM_ISSPACE: case JM_ISUPPER: case JM_ISLOWER:
        if (!jx_bind_params(c, name, args, NULL, 0, p, given, line)) return false;
        *out = jv_bool(str_is(s, m->id));
        return true;
    case JM_SPLITLINES: {
        if (!jx_bind_params(c, name, args, k_lines, 1, p, given, line)) return false;
        jlist *l = jx_str_splitlines(a, s, given[0] && jv_truthy(&p[0]));
        if (!l) return oom(c, line);
        *out = jv_list_value(l, 0);
        return true;
    }
    case JM_DICT_ITEMS: case JM_DICT_KEYS: case JM_DICT_VALUES:
        if (!jx_bind_params(c, "dict method", args, NULL, 0, p, given, line)) return false;
        return dict_view(c, s->dict, m->id - JM_DICT_ITEMS, line, out);
    case JM_DICT_GET: {
        if (!jx_bind_params(c, "get", args, k_get, 2, p, given, line)) return false;
        if (!given[0]) return jx_fail(c, LA_ERR_INVALID_ARG, line, "get takes a key");
        const jv *v = p[0].kind == JV_STR ? jv_dict_get(s->dict, p[0].s.p, p[0].s.n) : NULL;
        *out = v ? *v : given[1] ? p[1] : jv_none();
        return true;
    }
    case JM_LOOP_CYCLE:
        if (args->n_pos == 0 || args->n_kw) return jx_fail(c, LA_ERR_INVALID_ARG, line, "no items for cycling given");
        *out = args->pos[s->loop->index0 % args->n_pos];
        return true;
    default: return jx_fail(c, LA_ERR_INTERNAL, line, "unknown method id %d", m->id);
    }
}
