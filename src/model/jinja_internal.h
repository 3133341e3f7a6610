/* The parts of la_jinja (model/jinja.h), private to src/model/jinja_*.c:
 *   jinja_lex.c       template text -> tokens (whitespace control applied)
 *   jinja_parse.c     tokens -> syntax tree; unsupported names refused here
 *   jinja_value.c     values: arena, Python str()/repr(), json.dumps, ==, <, arithmetic
 *   jinja_eval.c      rendering: scopes, statements, expressions
 *   jinja_builtins.c  filters, tests, global functions, methods
 * Everything a template or a rendering allocates lives in an arena freed at once.
 */
#ifndef LA_MODEL_JINJA_INTERNAL_H
#define LA_MODEL_JINJA_INTERNAL_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "lazyattn/status.h"

/* ---- arena -------------------------------------------------------------------------------- */

typedef struct jx_chunk jx_chunk;
typedef struct jx_arena {
    jx_chunk *head;
    size_t bytes, limit_bytes; /* allocated so far; 0: no limit */
    bool failed;               /* out of memory or over the limit */
} jx_arena;

void *jx_alloc(jx_arena *a, size_t n); /* zeroed, 16-byte aligned; NULL: a->failed */
char *jx_strdup(jx_arena *a, const char *s, size_t n); /* NUL-terminated copy */
void jx_arena_free(jx_arena *a);

/* A growable byte string in an arena. */
typedef struct jx_buf {
    jx_arena *arena;
    char *p;
    size_t n, cap;
} jx_buf;
bool jx_buf_add(jx_buf *b, const char *s, size_t n);
bool jx_buf_str(jx_buf *b, const char *s);
bool jx_buf_cp(jx_buf *b, uint32_t cp);

/* ---- values ------------------------------------------------------------------------------- */

typedef enum jv_kind {
    JV_UNDEF,  /* jinja2 Undefined; s.p names what was missing (may be NULL) */
    JV_NONE,
    JV_BOOL,
    JV_INT,
    JV_FLOAT,
    JV_STR,    /* s: UTF-8 bytes */
    JV_LIST,   /* list, tuple (flag JVF_TUPLE) or a generator-like result (JVF_GEN) */
    JV_DICT,   /* string keys, insertion order */
    JV_NS,     /* namespace(): a mutable dict */
    JV_LOOP,   /* the loop variable of a for */
    JV_FUNC,   /* a global function (fn) */
    JV_METHOD, /* a bound method (method) */
    JV_MACRO,  /* a {% macro %} (macro) */
} jv_kind;

#define JVF_TUPLE 1u  /* a tuple: repr (a, b), never == a list */
#define JVF_GEN 2u    /* a generator / iterator / view: not printable, no len, no [i] */
#define JVF_UNSAFE 4u /* JV_UNDEF for an attribute the sandbox forbids (list.append) */
#define JVF_RANGE 8u  /* a range(): a list, but Python prints it as range(a, b) */

typedef struct jlist jlist;
typedef struct jdict jdict;
typedef struct jloop jloop;
typedef struct jmethod jmethod;
typedef struct jnode jnode;

typedef struct jv {
    uint8_t kind;
    uint8_t flags;
    int16_t fn; /* JV_FUNC: global function id */
    union {
        bool b;
        int64_t i;
        double f;
        struct {
            const char *p;
            size_t n;
        } s;
        jlist *list;
        jdict *dict;
        jloop *loop;
        jmethod *method;
        const jnode *macro;
    };
} jv;

struct jlist {
    jv *v;
    size_t n, cap;
};

struct jdict {
    const char **keys;
    size_t *key_lens;
    jv *vals;
    size_t n, cap;
};

struct jloop {
    jlist *items; /* what the loop runs over (after its `if` filter) */
    int64_t index0;
};

struct jmethod {
    jv self;
    int id; /* JM_* (jinja_builtins.c) */
};

static inline jv jv_undef(const char *name) {
    jv v = {.kind = JV_UNDEF};
    v.s.p = name;
    v.s.n = name ? strlen(name) : 0;
    return v;
}
static inline jv jv_none(void) { return (jv){.kind = JV_NONE}; }
static inline jv jv_bool(bool b) { return (jv){.kind = JV_BOOL, .b = b}; }
static inline jv jv_int(int64_t i) { return (jv){.kind = JV_INT, .i = i}; }
static inline jv jv_float(double f) { return (jv){.kind = JV_FLOAT, .f = f}; }
static inline jv jv_str(const char *p, size_t n) {
    jv v = {.kind = JV_STR};
    v.s.p = p;
    v.s.n = n;
    return v;
}

jlist *jv_list_new(jx_arena *a, size_t cap);
bool jv_list_push(jx_arena *a, jlist *l, jv v);
jv jv_list_value(jlist *l, uint8_t flags);
jdict *jv_dict_new(jx_arena *a);
bool jv_dict_set(jx_arena *a, jdict *d, const char *k, size_t kn, jv v); /* replace or append */
const jv *jv_dict_get(const jdict *d, const char *k, size_t kn);         /* NULL if absent */

const char *jv_type_name(const jv *v); /* Python's type name: "str", "list", "NoneType" */

/* Python str(v) appended to b; false on OOM or when v cannot be printed (*why set). */
bool jv_to_str(const jv *v, jx_buf *b, const char **why);
/* Python repr(v). */
bool jv_repr(const jv *v, jx_buf *b, const char **why);
/* json.dumps(v, ensure_ascii, indent (NULL: none), separators, sort_keys). */
typedef struct jx_json_opts {
    bool ensure_ascii, sort_keys;
    const char *indent; /* NULL: no indent (one line) */
    const char *item_sep, *key_sep;
} jx_json_opts;
bool jv_to_json(const jv *v, const jx_json_opts *o, jx_buf *b, const char **why);

bool jv_truthy(const jv *v);
bool jv_eq(const jv *a, const jv *b);
/* a < b as Python: *ok false when the types do not compare (TypeError). */
bool jv_lt(const jv *a, const jv *b, bool *ok);

/* UTF-8 helpers on well-formed text. */
size_t jx_cp_count(const char *s, size_t n);
size_t jx_cp_offset(const char *s, size_t n, size_t k); /* byte offset of code point k */
uint32_t jx_decode(const char *s, size_t *i);          /* code point at s[*i], advances */
bool jx_is_space(uint32_t cp);                          /* Python str.isspace() */

/* ---- tokens -------------------------------------------------------------------------------- */

typedef enum jt_kind {
    JT_DATA,        /* text outside tags (s, n) */
    JT_VAR_BEGIN,   /* {{ */
    JT_VAR_END,     /* }} */
    JT_BLOCK_BEGIN, /* {% */
    JT_BLOCK_END,   /* %} */
    JT_NAME,
    JT_STRING,      /* s, n: the value, escapes resolved */
    JT_INT,
    JT_FLOAT,
    JT_OP,          /* op: JO_* */
    JT_EOF,
} jt_kind;

typedef enum jo_op {
    JO_ADD, JO_SUB, JO_MUL, JO_DIV, JO_FLOORDIV, JO_MOD, JO_POW, JO_TILDE,
    JO_LBRACKET, JO_RBRACKET, JO_LPAREN, JO_RPAREN, JO_LBRACE, JO_RBRACE,
    JO_EQ, JO_NE, JO_GT, JO_GE, JO_LT, JO_LE, JO_ASSIGN, JO_DOT, JO_COLON, JO_PIPE,
    JO_COMMA, JO_SEMICOLON,
    /* expression-only operators (no token) */
    JO_AND, JO_OR, JO_NOT, JO_IN, JO_NOTIN, JO_NEG, JO_POS,
} jo_op;

typedef struct jtoken {
    uint8_t kind;
    uint8_t op;
    int line;
    const char *s; /* DATA, NAME, STRING: arena text */
    size_t n;
    int64_t i;     /* INT */
    double f;      /* FLOAT */
} jtoken;

/* Lex text[len] into *toks[*n] (arena memory). Errors: LA_ERR_FORMAT / LA_ERR_UNSUPPORTED
 * with the message in err (name as the prefix). */
la_status jx_lex(jx_arena *a, const char *name, const char *text, size_t len, jtoken **toks,
                 size_t *n, la_err *err);

/* ---- syntax tree ---------------------------------------------------------------------------- */

typedef enum jn_kind {
    /* expressions */
    JN_CONST, JN_NAME, JN_GETATTR, JN_GETITEM, JN_SLICE, JN_CALL, JN_FILTER, JN_TEST,
    JN_UNARY, JN_BINARY, JN_COMPARE, JN_CONCAT, JN_COND, JN_LIST, JN_TUPLE, JN_DICT,
    /* statements */
    JN_DATA, JN_PRINT, JN_IF, JN_FOR, JN_SET, JN_SET_BLOCK, JN_MACRO, JN_BREAK, JN_CONTINUE,
    JN_BODY,
} jn_kind;

struct jnode {
    uint8_t kind;
    uint8_t op;     /* UNARY / BINARY: JO_*; TEST: negated */
    int16_t id;     /* FILTER / TEST / CALL of a global: the builtin's id */
    int line;
    const char *name; /* NAME, GETATTR, FILTER, TEST, SET / MACRO / SET_BLOCK target */
    size_t name_len;
    jv value;         /* CONST */
    jnode *a, *b, *c, *d;
    /* CALL / FILTER / TEST args; LIST / TUPLE / DICT items (DICT: keys then values);
     * COMPARE operands (ops in ops); BODY statements; FOR / SET targets in targets */
    jnode **args;
    int n_args;
    const char **kw_names; /* CALL / FILTER / TEST keyword args, values in kw_vals */
    size_t *kw_lens;
    jnode **kw_vals;
    int n_kw;
    uint8_t *ops;  /* COMPARE */
    const char **targets; /* FOR / SET: names; SET with a namespace: targets[0].name */
    size_t *target_lens;
    int n_targets;
    /* IF: a cond, b body, c else (an IF for elif, or a BODY, or NULL)
     * FOR: a iter, b body, c else, d filter
     * SET: a value (name/targets; namespace attribute: attr in name, ns in targets[0])
     * SET_BLOCK / MACRO: b body; MACRO params in targets, defaults in args (NULL: none)
     * GETATTR: a obj; GETITEM: a obj, b key; SLICE: a obj, b start, c stop, d step
     * CALL: a callee; FILTER / TEST: a the value; COND: a cond, b then, c else
     * UNARY: a; BINARY: a, b */
};

/* Parse toks into *root (a JN_BODY). Errors as jx_lex. */
la_status jx_parse(jx_arena *a, const char *name, const jtoken *toks, size_t n, jnode **root,
                   la_err *err);

/* ---- builtins ----------------------------------------------------------------------------- */

/* Ids of the supported filters / tests / functions / methods by name; -1 if unsupported. */
int jx_filter_id(const char *name, size_t n);
int jx_test_id(const char *name, size_t n);
int jx_function_id(const char *name, size_t n);
bool jx_method_known(const char *name, size_t n);

typedef struct jx_ctx jx_ctx; /* a rendering (jinja_eval.c) */

/* A call's evaluated arguments. */
typedef struct jx_args {
    jv *pos;
    int n_pos;
    const char **kw;
    size_t *kw_lens;
    jv *kw_vals;
    int n_kw;
} jx_args;

/* Run a builtin: value is the filtered / tested value (unused for functions). On failure
 * the message is set through jx_fail and the functions return false. */
bool jx_call_filter(jx_ctx *c, int id, const jv *value, const jx_args *args, int line, jv *out);
bool jx_call_test(jx_ctx *c, int id, const jv *value, const jx_args *args, int line, bool *out);
bool jx_call_function(jx_ctx *c, int id, const jx_args *args, int line, jv *out);
bool jx_call_method(jx_ctx *c, const jmethod *m, const jx_args *args, int line, jv *out);
/* obj.name as jinja2's sandboxed getattr: a method, a key or an attribute, else Undefined;
 * false (error set) when obj is Undefined. */
bool jx_getattr(jx_ctx *c, const jv *obj, const char *name, size_t n, int line, jv *out);
/* obj[key] as jinja2's getitem (then the attribute of a string key), else Undefined. */
bool jx_getitem(jx_ctx *c, const jv *obj, const jv *key, int line, jv *out);

/* Shared helpers of the builtins (jinja_builtins.c). */
/* Bind a call's arguments to the named parameters names[n] (Python's rules): slots[i] is
 * the i-th positional or the keyword names[i], given[i] whether it was passed. Errors for
 * extra positionals and unknown or repeated keywords. */
bool jx_bind_params(jx_ctx *c, const char *what, const jx_args *a, const char *const *names, int n,
                    jv *slots, bool *given, int line);
/* jinja2's make_attrgetter: attr "a.b" / "0" walked part by part through getitem. */
bool jx_get_path(jx_ctx *c, const jv *item, const jv *attr, int line, jv *out);
/* str(v) as a string value (jinja2's soft_str). */
bool jx_str_value(jx_ctx *c, const jv *v, int line, jv *out);
bool jx_want_int(jx_ctx *c, const jv *v, const char *what, int line, int64_t *out);

/* Methods (jinja_methods.c): ids, what they do to strings. */
enum {
    JM_STRIP, JM_LSTRIP, JM_RSTRIP, JM_SPLIT, JM_RSPLIT, JM_STARTSWITH, JM_ENDSWITH, JM_UPPER,
    JM_LOWER, JM_TITLE, JM_CAPITALIZE, JM_REPLACE, JM_FIND, JM_RFIND, JM_COUNT, JM_JOIN,
    JM_ISDIGIT, JM_ISALPHA, JM_ISALNUM, JM_ISSPACE, JM_ISUPPER, JM_ISLOWER, JM_SPLITLINES,
    JM_STR_N,
    JM_DICT_ITEMS = JM_STR_N, JM_DICT_KEYS, JM_DICT_VALUES, JM_DICT_GET, JM_LOOP_CYCLE, JM_N
};
int jx_str_method_id(const char *name, size_t n); /* JM_* of a str method, or -1 */
/* 0: uncased, 1: upper or title case (Lu, Lt), 2: lower case (Ll). */
int jx_case_kind(uint32_t cp);
typedef enum jx_case {
    JX_CASE_UPPER,      /* str.upper() */
    JX_CASE_LOWER,      /* str.lower() */
    JX_CASE_TITLE,      /* str.title() */
    JX_CASE_CAPITALIZE, /* str.capitalize() */
} jx_case;
bool jx_str_case(const jv *s, jx_case mode, jx_buf *out);
/* Python str.strip / lstrip / rstrip: chars NULL strips white space. */
jv jx_str_strip(const jv *s, const jv *chars, bool left, bool right);
/* Python str.replace(old, new, count < 0: all) appended to out. */
bool jx_str_replace(const jv *s, const jv *old, const jv *new_, int64_t count, jx_buf *out);
/* Python str.splitlines() parts (ends kept when keepends). */
jlist *jx_str_splitlines(jx_arena *a, const jv *s, bool keepends);

/* Shared by eval and builtins (jinja_eval.c). */
jx_arena *jx_ctx_arena(jx_ctx *c);
/* err = code, "<name> line <line>: <fmt...>": the one message shape of compile (parser)
 * and render (jx_fail) errors. */
void jx_set_error(la_err *err, la_status code, const char *name, int line, const char *fmt, va_list ap);
bool jx_fail(jx_ctx *c, la_status code, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Fail for an Undefined value used where jinja2 raises UndefinedError. */
bool jx_fail_undefined(jx_ctx *c, const jv *v, int line);
/* The items iterating v gives (list: itself; dict: keys; str: characters; Undefined:
 * none); false (error set) when v is not iterable. */
bool jx_iterate(jx_ctx *c, const jv *v, int line, jlist **out);
/* Call a macro or function value with args. */
bool jx_call_value(jx_ctx *c, const jv *callee, const jx_args *args, int line, jv *out);
/* Count one unit of work against the rendering's budget; false (error set) when spent. */
bool jx_tick(jx_ctx *c, int line);

#endif
