/* lazyattn tokenize [-m DIR] [--jsonl] [--no-special] [TEXT]   (DESIGN.md §7b)
 *
 * Prints the token ids of TEXT as one JSON array, e.g. [128000,9906,1917]. With --jsonl,
 * reads one JSON string per line on stdin and prints one JSON array per line, in order.
 * DIR (default: the bundled model) may hold only tokenizer files. --no-special encodes
 * without the post-processor (no BOS), as HF's add_special_tokens=False; special tokens
 * written in the text are still matched.
 * Exit status: 0 success, 2 usage error, 1 any other error (one message on stderr).
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "tokenizer/tokenizer.h"

static void usage(FILE *out) {
    fprintf(out,
            "usage: lazyattn tokenize [-m DIR] [--jsonl] [--no-special] [TEXT]\n"
            "\n"
            "Print the token ids of TEXT as a JSON array.\n"
            "\n"
            "  -m, --model DIR  model or tokenizer directory (default: %s)\n"
            "  --jsonl          read one JSON string per line on stdin, print one array per line\n"
            "  --no-special     do not add BOS (HF add_special_tokens=False)\n"
            "  -h, --help       this help\n",
            la_cli_default_model_dir());
}

static int usage_error(const char *msg, const char *arg) {
    fprintf(stderr, "lazyattn tokenize: %s%s\n", msg, arg ? arg : "");
    usage(stderr);
    return LA_EXIT_USAGE;
}

static int print_ids(const la_tokenizer *tok, const char *text, size_t len, bool add_special,
                     const char *where) {
    int32_t *ids = NULL, n = 0;
    la_err err = {0};
    la_status s = la_tokenizer_encode(tok, text, len, add_special, &ids, &n, &err);
    if (s != LA_OK) {
        fprintf(stderr, "lazyattn tokenize: %s%s\n", where, err.msg);
        return LA_EXIT_ERROR;
    }
    putchar('[');
    for (int32_t i = 0; i < n; i++) printf(i ? ",%d" : "%d", ids[i]);
    puts("]");
    free(ids);
    return LA_EXIT_OK;
}

static bool is_json_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

static int hex4(const char *s) {
    int v = 0;
    for (int i = 0; i < 4; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

static void put_utf8(char **o, unsigned cp) {
    unsigned char *p = (unsigned char *)*o;
    if (cp < 0x80) {
        *p++ = (unsigned char)cp;
    } else if (cp < 0x800) {
        *p++ = (unsigned char)(0xC0 | (cp >> 6));
        *p++ = (unsigned char)(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        *p++ = (unsigned char)(0xE0 | (cp >> 12));
        *p++ = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        *p++ = (unsigned char)(0x80 | (cp & 0x3F));
    } else {
        *p++ = (unsigned char)(0xF0 | (cp >> 18));
        *p++ = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
        *p++ = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        *p++ = (unsigned char)(0x80 | (cp & 0x3F));
    }
    *o = (char *)p;
}

/* Decode one JSON string literal (RFC 8259 §7, optional surrounding white space) in
 * place; *len receives its length. Our own few lines rather than cJSON because cJSON's
 * strings end at the first NUL, and "\u0000" is valid text to tokenize. Returns false
 * for anything else, a lone surrogate included. */
static bool json_string_in_place(char *s, size_t n, size_t *len) {
    size_t i = 0;
    while (i < n && is_json_space(s[i])) i++;
    if (i == n || s[i++] != '"') return false;
    char *o = s;
    for (;;) {
        if (i == n) return false;
        unsigned char c = (unsigned char)s[i++];
        if (c == '"') break;
        if (c < 0x20) return false;
        if (c != '\\') {
            *o++ = (char)c;
            continue;
        }
        if (i == n) return false;
        char e = s[i++];
        const char *simple = strchr("\"\\/bfnrt", e);
        if (simple && e) {
            *o++ = "\"\\/\b\f\n\r\t"[simple - "\"\\/bfnrt"];
            continue;
        }
        if (e != 'u' || i + 4 > n) return false;
        int cp = hex4(s + i);
        i += 4;
        if (cp < 0 || (cp >= 0xDC00 && cp <= 0xDFFF)) return false;
        if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (i + 6 > n || s[i] != '\\' || s[i + 1] != 'u') return false;
            int lo = hex4(s + i + 2);
            if (lo < 0xDC00 || lo > 0xDFFF) return false;
            i += 6;
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        }
        put_utf8(&o, (unsigned)cp);
    }
    while (i < n && is_json_space(s[i])) i++;
    if (i != n) return false;
    *len = (size_t)(o - s);
    return true;
}

/* One JSON string per line, one JSON array per line out (flushed, so a caller may talk
 * to us line by line). */
static int run_jsonl(const la_tokenizer *tok, bool add_special) {
    char *line = NULL;
    size_t cap = 0;
    ssize_t got;
    long line_no = 0;
    int rc = LA_EXIT_OK;
    while (rc == LA_EXIT_OK && (got = getline(&line, &cap, stdin)) >= 0) {
        line_no++;
        char where[64];
        snprintf(where, sizeof where, "stdin line %ld: ", line_no);
        size_t len;
        if (!json_string_in_place(line, (size_t)got, &len)) {
            fprintf(stderr, "lazyattn tokenize: %snot a JSON string\n", where);
            rc = LA_EXIT_ERROR;
        } else {
            rc = print_ids(tok, line, len, add_special, where);
            fflush(stdout);
        }
    }
    free(line);
    return rc;
}

int la_cli_tokenize(int argc, char **argv) {
    const char *dir = NULL, *text = NULL;
    bool jsonl = false, add_special = true;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return LA_EXIT_OK;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            if (++i == argc) return usage_error("missing value for ", a);
            dir = argv[i];
        } else if (!strcmp(a, "--jsonl")) {
            jsonl = true;
        } else if (!strcmp(a, "--no-special")) {
            add_special = false;
        } else if (!strcmp(a, "--")) {
            if (i + 1 < argc) text = argv[++i];
            if (i + 1 < argc) return usage_error("more than one TEXT", NULL);
        } else if (a[0] == '-' && a[1] != '\0') {
            return usage_error("unknown option ", a);
        } else if (text) {
            return usage_error("more than one TEXT (quote it)", NULL);
        } else {
            text = a;
        }
    }
    if (jsonl == (text != NULL))
        return usage_error(jsonl ? "TEXT and --jsonl exclude each other" : "missing TEXT", NULL);
    if (!dir) dir = la_cli_default_model_dir();

    la_tokenizer *tok = NULL;
    la_err err = {0};
    if (la_tokenizer_load(dir, &tok, &err) != LA_OK) {
        fprintf(stderr, "lazyattn tokenize: %s\n", err.msg);
        return LA_EXIT_ERROR;
    }
    int rc = jsonl ? run_jsonl(tok, add_special) : print_ids(tok, text, strlen(text), add_special, "");
    la_tokenizer_destroy(tok);
    return rc;
}
