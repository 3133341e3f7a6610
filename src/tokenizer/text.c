#include "tokenizer/text.h"

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

/* ---- growable buffers --------------------------------------------------------------- */

bool la_tok_buf_reserve(la_tok_buf *b, size_t n) {
    if (b->len + n + 1 <= b->cap) return true;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < b->len + n + 1) {
        if (cap > SIZE_MAX / 2) return false;
        cap *= 2;
    }
    char *p = realloc(b->data, cap);
    if (!p) return false;
    b->data = p;
    b->cap = cap;
    return true;
}

bool la_tok_buf_append(la_tok_buf *b, const void *p, size_t n) {
    if (!la_tok_buf_reserve(b, n)) return false;
    if (n) memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = '\0';
    return true;
}

bool la_tok_buf_append_cp(la_tok_buf *b, uint32_t cp) {
    char s[4];
    size_t n;
    if (cp < 0x80) {
        s[0] = (char)cp;
        n = 1;
    } else if (cp < 0x800) {
        s[0] = (char)(0xC0 | (cp >> 6));
        s[1] = (char)(0x80 | (cp & 0x3F));
        n = 2;
    } else if (cp < 0x10000) {
        s[0] = (char)(0xE0 | (cp >> 12));
        s[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        s[2] = (char)(0x80 | (cp & 0x3F));
        n = 3;
    } else {
        s[0] = (char)(0xF0 | (cp >> 18));
        s[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        s[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
        s[3] = (char)(0x80 | (cp & 0x3F));
        n = 4;
    }
    return la_tok_buf_append(b, s, n);
}

void la_tok_buf_free(la_tok_buf *b) {
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

bool la_tok_replace_all(const char *s, size_t n, const char *a, size_t a_len, const char *b,
                        size_t b_len, la_tok_buf *out) {
    size_t i = 0, run = 0;
    while (a_len && i + a_len <= n) {
        if (memcmp(s + i, a, a_len) == 0) {
            if (!la_tok_buf_append(out, s + run, i - run) || !la_tok_buf_append(out, b, b_len))
                return false;
            i += a_len;
            run = i;
        } else {
            i++;
        }
    }
    return la_tok_buf_append(out, s + run, n - run);
}

bool la_tok_ids_append(la_tok_ids *v, const int32_t *ids, size_t n) {
    if (v->len + n > v->cap) {
        size_t cap = v->cap ? v->cap : 64;
        while (cap < v->len + n) {
            if (cap > SIZE_MAX / 2 / sizeof(int32_t)) return false;
            cap *= 2;
        }
        int32_t *p = realloc(v->data, cap * sizeof *p);
        if (!p) return false;
        v->data = p;
        v->cap = cap;
    }
    if (n) memcpy(v->data + v->len, ids, n * sizeof *ids);
    v->len += n;
    return true;
}

bool la_tok_ids_push(la_tok_ids *v, int32_t id) { return la_tok_ids_append(v, &id, 1); }

/* ---- UTF-8 -------------------------------------------------------------------------- */

/* Unicode Table 3-7 "Well-Formed UTF-8 Byte Sequences": the lead byte fixes the length
 * and the range of the second byte; later bytes are 80..BF. */
int la_utf8_step(const uint8_t *s, size_t n) {
    uint8_t b = s[0];
    if (b < 0x80) return 1;
    int need;
    uint8_t lo = 0x80, hi = 0xBF;
    if (b >= 0xC2 && b <= 0xDF) {
        need = 1;
    } else if (b >= 0xE0 && b <= 0xEF) {
        need = 2;
        if (b == 0xE0) lo = 0xA0;
        if (b == 0xED) hi = 0x9F;
    } else if (b >= 0xF0 && b <= 0xF4) {
        need = 3;
        if (b == 0xF0) lo = 0x90;
        if (b == 0xF4) hi = 0x8F;
    } else {
        return -1;
    }
    for (int k = 1; k <= need; k++) {
        if ((size_t)k >= n) return 0;
        uint8_t c = s[k];
        uint8_t l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
        if (c < l || c > h) return -k;
    }
    return need + 1;
}

int la_utf8_decode(const uint8_t *s, uint32_t *cp) {
    uint8_t b = s[0];
    if (b < 0x80) {
        *cp = b;
        return 1;
    }
    if (b < 0xE0) {
        *cp = ((uint32_t)(b & 0x1F) << 6) | (s[1] & 0x3F);
        return 2;
    }
    if (b < 0xF0) {
        *cp = ((uint32_t)(b & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
        return 3;
    }
    *cp = ((uint32_t)(b & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) |
          ((uint32_t)(s[2] & 0x3F) << 6) | (s[3] & 0x3F);
    return 4;
}

size_t la_utf8_invalid_at(const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        int k = la_utf8_step(s + i, n - i);
        if (k <= 0) return i;
        i += (size_t)k;
    }
    return n;
}

size_t la_utf8_lossy_append(la_tok_buf *out, const uint8_t *s, size_t n, bool at_end) {
    static const char k_fffd[3] = {(char)0xEF, (char)0xBF, (char)0xBD};
    if (n == 0) return 0;
    if (!la_tok_buf_reserve(out, n)) return SIZE_MAX;
    size_t i = 0, run = 0; /* s[run..i) is well-formed and not yet copied */
    while (i < n) {
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        int k = la_utf8_step(s + i, n - i);
        if (k > 0) {
            i += (size_t)k;
            continue;
        }
        if (!la_tok_buf_append(out, s + run, i - run)) return SIZE_MAX;
        if (k == 0 && !at_end) return i; /* an unfinished character: keep it */
        if (!la_tok_buf_append(out, k_fffd, 3)) return SIZE_MAX;
        i += k == 0 ? n - i : (size_t)-k;
        run = i;
    }
    if (!la_tok_buf_append(out, s + run, i - run)) return SIZE_MAX;
    return n;
}

bool la_unicode_is_white_space(uint32_t cp) {
    if (cp <= 0x20) return cp == 0x20 || (cp >= 0x09 && cp <= 0x0D);
    if (cp < 0x85) return false;
    switch (cp) {
    case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F:
    case 0x3000:
        return true;
    default:
        return cp >= 0x2000 && cp <= 0x200A;
    }
}

/* ---- general categories (utf8proc) ------------------------------------------------------ */

static utf8proc_category_t category(uint32_t cp) {
    return cp > 0x10FFFF ? UTF8PROC_CATEGORY_CN : utf8proc_category((utf8proc_int32_t)cp);
}

bool la_unicode_is_numeric(uint32_t cp) {
    utf8proc_category_t c = category(cp);
    return c == UTF8PROC_CATEGORY_ND || c == UTF8PROC_CATEGORY_NL || c == UTF8PROC_CATEGORY_NO;
}

bool la_unicode_is_punctuation(uint32_t cp) {
    if (cp < 0x80) return (cp >= 0x21 && cp <= 0x2F) || (cp >= 0x3A && cp <= 0x40) ||
                          (cp >= 0x5B && cp <= 0x60) || (cp >= 0x7B && cp <= 0x7E);
    utf8proc_category_t c = category(cp);
    return c >= UTF8PROC_CATEGORY_PC && c <= UTF8PROC_CATEGORY_PO;
}

bool la_unicode_is_mark(uint32_t cp) {
    utf8proc_category_t c = category(cp);
    return c == UTF8PROC_CATEGORY_MN || c == UTF8PROC_CATEGORY_MC || c == UTF8PROC_CATEGORY_ME;
}

bool la_unicode_is_mark_nonspacing(uint32_t cp) { return category(cp) == UTF8PROC_CATEGORY_MN; }

bool la_unicode_is_other(uint32_t cp) {
    utf8proc_category_t c = category(cp);
    return c == UTF8PROC_CATEGORY_CC || c == UTF8PROC_CATEGORY_CF || c == UTF8PROC_CATEGORY_CS ||
           c == UTF8PROC_CATEGORY_CO;
}

bool la_tok_buf_append_lower(la_tok_buf *b, uint32_t cp) {
    if (cp == 0x130) return la_tok_buf_append(b, "i\xCC\x87", 3);
    if (cp < 0x80) return la_tok_buf_append_cp(b, cp >= 'A' && cp <= 'Z' ? cp + 32 : cp);
    return la_tok_buf_append_cp(b, (uint32_t)utf8proc_tolower((utf8proc_int32_t)cp));
}

bool la_unicode_normalize(const char *s, size_t n, la_unicode_form form, la_tok_buf *out) {
    if (n == 0) return la_tok_buf_append(out, "", 0);
    int opts = UTF8PROC_STABLE;
    if (form == LA_UNICODE_NFC || form == LA_UNICODE_NFKC) opts |= UTF8PROC_COMPOSE;
    else opts |= UTF8PROC_DECOMPOSE;
    if (form == LA_UNICODE_NFKC || form == LA_UNICODE_NFKD) opts |= UTF8PROC_COMPAT;
    utf8proc_uint8_t *dst = NULL;
    utf8proc_ssize_t len = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &dst,
                                        (utf8proc_option_t)opts);
    if (len < 0) return false; /* only UTF8PROC_ERROR_NOMEM for valid input */
    bool ok = la_tok_buf_append(out, dst, (size_t)len);
    free(dst);
    return ok;
}

/* ---- ByteLevel alphabet ---------------------------------------------------------------- */

static bool byte_is_printable(unsigned b) {
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

/* The 68 other bytes in order: 0x00..0x20 (k = 0..32), 0x7F..0xA0 (k = 33..66), 0xAD (67). */
uint32_t la_byte_level_char(uint8_t b) {
    if (byte_is_printable(b)) return b;
    if (b <= 0x20) return 0x100u + b;
    if (b <= 0xA0) return 0x100u + 33 + (b - 0x7Fu);
    return 0x100u + 67; /* 0xAD */
}

int la_byte_level_byte(uint32_t cp) {
    if (cp < 0x100) return byte_is_printable(cp) ? (int)cp : -1;
    if (cp >= 0x100 + 68) return -1;
    uint32_t k = cp - 0x100;
    if (k <= 32) return (int)k;
    if (k <= 66) return (int)(0x7F + k - 33);
    return 0xAD;
}
