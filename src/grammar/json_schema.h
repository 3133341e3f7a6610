/* JSON Schema -> a JSON grammar (la_json_grammar): the node graph that the byte-level
 * matcher (grammar/json_matcher.h) walks and that token masks (grammar/token_mask.h) are
 * computed from. Structured output of the HTTP API (response_format json_object /
 * json_schema) is built on it.
 *
 * ---- The supported subset ------------------------------------------------------------
 * What tools (OpenAI's strict mode, pydantic, zod) generate:
 *   type       "object" | "array" | "string" | "number" | "integer" | "boolean" | "null",
 *              or an array of them (one alternative each)
 *   object     properties, required, additionalProperties (false or true: only the listed
 *              properties are ever generated, so either validates); without "properties":
 *              any object (string keys, any values)
 *   array      items (one schema; without it: any values)
 *   string     enum
 *   enum       any JSON scalars (each generated as its JSON text)
 *   anyOf      alternatives (a value matches one of them)
 *   annotations title, description, $schema, $comment, default, examples, $id: no effect
 * Any other keyword (minLength, pattern, format, minimum, $ref, oneOf, const, ...) is
 * refused: compile fails naming its path ("properties.age.minimum"), never ignored.
 *
 * ---- What is generated ---------------------------------------------------------------
 * Compact JSON: no whitespace but an optional single space after ':' and ','. Object
 * properties come in the order the schema lists them; an optional property may be left
 * out. Strings hold valid UTF-8 (escapes \" \\ \/ \b \f \n \r \t \uXXXX). Numbers follow
 * RFC 8259 (integer: no fraction, no exponent).
 *
 * Every node knows the length in bytes of its shortest serialization (min_len), which
 * lets the matcher say how many bytes a partial value still needs at least (used to end
 * the value within max_tokens: token_mask.h).
 */
#ifndef LA_GRAMMAR_JSON_SCHEMA_H
#define LA_GRAMMAR_JSON_SCHEMA_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>

#include "lazyattn/status.h"

typedef enum la_jg_kind {
    LA_JG_LITERAL = 0, /* a fixed byte string (enum values, true, false, null, keys) */
    LA_JG_STRING,      /* any JSON string */
    LA_JG_NUMBER,      /* any JSON number */
    LA_JG_INTEGER,     /* a JSON number without fraction or exponent */
    LA_JG_OBJECT,      /* the listed properties, in order, optional ones skippable */
    LA_JG_OBJECT_ANY,  /* any object: string keys, values of node `a` */
    LA_JG_ARRAY,       /* items of node `a` */
    LA_JG_ANY_OF,      /* one of alternatives alts[a, a + n) */
} la_jg_kind;

/* One node. Meaning of a and n per kind:
 *   LITERAL     text[a, a + n)
 *   OBJECT      props[a, a + n)
 *   OBJECT_ANY  a: the value node
 *   ARRAY       a: the item node
 *   ANY_OF      alts[a, a + n) */
typedef struct la_jg_node {
    la_jg_kind kind;
    int32_t a, n;
    int32_t min_len; /* bytes of the shortest value */
} la_jg_node;

/* A property of an OBJECT node. */
typedef struct la_jg_prop {
    int32_t key;      /* LITERAL node of the key as JSON text, quotes included ("\"age\"") */
    int32_t value;    /* node of the value */
    bool required;
    int32_t rest;     /* bytes still needed after this property's value, with no property
                         before it left to emit: R(i + 1) below */
    int32_t commit;   /* bytes needed after a ',' that follows this property: C(i + 1) */
} la_jg_prop;

/* The compiled grammar: nodes, properties, alternatives, literal text. Immutable once
 * built; any number of threads may read it. */
typedef struct la_json_grammar {
    la_jg_node *nodes;
    int32_t n_nodes, cap_nodes;
    la_jg_prop *props;
    int32_t n_props, cap_props;
    int32_t *alts;
    int32_t n_alts, cap_alts;
    char *text;
    int32_t n_text, cap_text;
    int32_t root;
    int32_t any;          /* the node of "any JSON value" (a depth-limited recursion) */
    int32_t string_node;  /* a plain STRING node (keys of OBJECT_ANY) */
    int32_t *obj_first;   /* [n_nodes] OBJECT: bytes needed right after '{' (R(0) with the
                             first property not preceded by a comma); else 0 */
} la_json_grammar;

/* Nesting the matcher allows (objects and arrays, each counting one level, plus the
 * value being typed). A schema that nests deeper is refused at compile time; "any value"
 * stops offering objects and arrays at this depth. */
#define LA_JG_MAX_DEPTH 24

/* Compile a JSON Schema (any object; {} or true: any value).
 *   bad_path  [bad_cap] on failure: the path of the offending keyword, dot-separated
 *             from the schema's root ("properties.age.minimum"), "" for the root itself
 * Caller owns *out; free with la_json_grammar_destroy().
 * Errors (nothing allocated): LA_ERR_UNSUPPORTED (a keyword outside the subset above,
 * naming it), LA_ERR_INVALID_ARG (an ill-formed schema: a "type" that is not a type name,
 * "required" naming no listed property, an empty enum or anyOf, nesting over
 * LA_JG_MAX_DEPTH), LA_ERR_NO_MEMORY. */
la_status la_json_grammar_compile(const cJSON *schema, la_json_grammar **out, char *bad_path,
                                  size_t bad_cap, la_err *err);

/* The grammar of response_format json_object: any JSON object. */
la_status la_json_grammar_object(la_json_grammar **out, la_err *err);

void la_json_grammar_destroy(la_json_grammar *g); /* NULL: nothing */

#endif
