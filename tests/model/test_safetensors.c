/* Tests for src/model/safetensors.c: reading (single file, sharded), validation of every
 * header field with messages naming file and tensor, the writer, and a fuzz-ish sweep
 * (every truncation, header byte flips) that must never crash. HF reference file:
 * tests/fixtures/safetensors/hf_tiny.safetensors (python3 tools/oracle/
 * safetensors_fixture.py tests/fixtures/safetensors/hf_tiny.safetensors). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/err.h"
#include "base/file.h"
#include "common/test_util.h"
#include "model/safetensors.h"

/* ---- helpers ------------------------------------------------------------------------ */

static char *join(const char *dir, const char *name) { return la_path_join(dir, name); }

/* dir/name = a safetensors file with the given header text (unpadded) and data_len
 * data bytes (0, 1, 2, ...). */
static void write_raw(const char *dir, const char *name, const char *header, size_t data_len) {
    size_t hlen = strlen(header);
    uint8_t *buf = malloc(8 + hlen + data_len + 1);
    for (int i = 0; i < 8; i++) buf[i] = (uint8_t)((uint64_t)hlen >> (8 * i));
    memcpy(buf + 8, header, hlen);
    for (size_t i = 0; i < data_len; i++) buf[8 + hlen + i] = (uint8_t)i;
    char *p = join(dir, name);
    la_test_write_bytes(p, buf, 8 + hlen + data_len);
    free(p);
    free(buf);
}

static const float k_a[6] = {1, 2, 3, 4, 5, 6};
static const uint16_t k_b[4] = {0x3f80, 0xc000, 0x4049, 0x0000}; /* bf16 1, -2, 3.140625, 0 */
static const uint16_t k_c[4] = {0x3c00, 0x3555, 0x7bff, 0x8001};
static const float k_s[1] = {42};

/* The tensors of a small valid checkpoint: every dtype, a scalar and an empty tensor. */
static void small_tensors(la_st_write_tensor t[5]) {
    t[0] = (la_st_write_tensor){"a", LA_DTYPE_F32, 2, {2, 3}, k_a};
    t[1] = (la_st_write_tensor){"b", LA_DTYPE_BF16, 1, {4}, k_b};
    t[2] = (la_st_write_tensor){"c", LA_DTYPE_F16, 3, {1, 2, 2}, k_c};
    t[3] = (la_st_write_tensor){"s", LA_DTYPE_F32, 0, {0}, k_s};
    t[4] = (la_st_write_tensor){"e", LA_DTYPE_F32, 2, {0, 5}, NULL};
}

static void write_small(const char *dir, const char *name) {
    la_st_write_tensor t[5];
    small_tensors(t);
    char *p = join(dir, name);
    la_err err = {0};
    LA_CHECK_OK(la_st_write(p, t, 5, &err), err);
    free(p);
}

/* Open dir expecting `want`; the message must contain needle1 (and needle2 if given). */
static void expect_open_fails(const char *dir, la_status want, const char *needle1,
                              const char *needle2) {
    la_st_file *f = (la_st_file *)0x1;
    la_err err = {0};
    la_status s = la_st_open(dir, &f, &err);
    cr_assert_eq(s, want, "got %s (%s), want %s", la_status_name(s), err.msg,
                 la_status_name(want));
    cr_assert_eq(f, (la_st_file *)0x1, "out-parameter written on error");
    cr_assert(strstr(err.msg, needle1), "message lacks \"%s\": %s", needle1, err.msg);
    if (needle2) cr_assert(strstr(err.msg, needle2), "message lacks \"%s\": %s", needle2, err.msg);
}

/* A model dir whose model.safetensors has this header and data_len data bytes, opened
 * expecting `want` with a message naming model.safetensors and needle. */
static void expect_header_fails(const char *header, size_t data_len, la_status want,
                                const char *needle) {
    char *dir = la_test_tmpdir();
    write_raw(dir, "model.safetensors", header, data_len);
    expect_open_fails(dir, want, "model.safetensors", needle);
    la_test_rm_tree(dir);
}

/* ---- reading -------------------------------------------------------------------- */

Test(safetensors, write_then_open_round_trips_all_dtypes_and_shapes) {
    char *dir = la_test_tmpdir();
    write_small(dir, "model.safetensors");
    la_st_file *f = NULL;
    la_err err = {0};
    LA_CHECK_OK(la_st_open(dir, &f, &err), err);
    cr_assert_eq(la_st_count(f), 5);
    /* ascending name order */
    const char *names[5] = {"a", "b", "c", "e", "s"};
    for (int i = 0; i < 5; i++) cr_assert_str_eq(la_st_get(f, i)->name, names[i]);
    const la_st_tensor *a = la_st_find(f, "a");
    cr_assert_eq(a->dtype, LA_DTYPE_F32);
    cr_assert_eq(a->n_dims, 2);
    cr_assert_eq(a->shape[0], 2);
    cr_assert_eq(a->shape[1], 3);
    cr_assert_eq(a->n_bytes, 24);
    cr_assert(memcmp(a->data, k_a, 24) == 0);
    cr_assert_eq((uintptr_t)a->data % 8, 0, "data not 8-byte aligned");
    const la_st_tensor *b = la_st_find(f, "b");
    cr_assert_eq(b->dtype, LA_DTYPE_BF16);
    cr_assert(memcmp(b->data, k_b, 8) == 0);
    const la_st_tensor *c = la_st_find(f, "c");
    cr_assert_eq(c->dtype, LA_DTYPE_F16);
    cr_assert_eq(c->n_dims, 3);
    cr_assert(memcmp(c->data, k_c, 8) == 0);
    const la_st_tensor *s = la_st_find(f, "s");
    cr_assert_eq(s->n_dims, 0);
    cr_assert_eq(s->n_bytes, 4);
    cr_assert_eq(*(const float *)s->data, 42.0f);
    const la_st_tensor *e = la_st_find(f, "e");
    cr_assert_eq(e->n_bytes, 0);
    cr_assert_eq(e->shape[0], 0);
    cr_assert_eq(e->shape[1], 5);
    cr_assert_eq(a->file_id, 0);
    cr_assert(strstr(la_st_file_path(f, 0), "model.safetensors"));
    cr_assert_str_eq(la_st_source_path(f), la_st_file_path(f, 0));
    la_st_close(f);
    la_st_close(NULL);
    la_test_rm_tree(dir);
}

Test(safetensors, header_is_space_padded_to_a_multiple_of_8) {
    char *dir = la_test_tmpdir();
    write_small(dir, "model.safetensors");
    char *p = join(dir, "model.safetensors");
    char *text = NULL;
    size_t len = 0;
    la_err err = {0};
    LA_CHECK_OK(la_file_read(p, &text, &len, &err), err);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | (uint8_t)text[i];
    cr_assert_eq(hlen % 8, 0);
    cr_assert_eq(text[8], '{');
    cr_assert(strstr(text + 8, "\"__metadata__\":{\"format\":\"pt\"}"));
    /* data = 24 + 8 + 8 + 4 + 0 bytes after the header */
    cr_assert_eq(len, 8 + hlen + 44);
    size_t last = 8 + hlen - 1;
    while (text[last] == ' ') last--;
    cr_assert_eq(text[last], '}');
    free(text);
    free(p);
    la_test_rm_tree(dir);
}

Test(safetensors, reads_file_written_by_hf_safetensors) {
    char *src = la_test_path("tests/fixtures/safetensors/hf_tiny.safetensors");
    char *dir = la_test_tmpdir();
    char *dst = join(dir, "model.safetensors");
    char *bytes = NULL;
    size_t len = 0;
    la_err err = {0};
    LA_CHECK_OK(la_file_read(src, &bytes, &len, &err), err);
    la_test_write_bytes(dst, bytes, len);
    la_st_file *f = NULL;
    LA_CHECK_OK(la_st_open(dir, &f, &err), err);
    cr_assert_eq(la_st_count(f), 3);
    const la_st_tensor *w = la_st_find(f, "w"), *h = la_st_find(f, "h"), *b = la_st_find(f, "b");
    cr_assert(w && h && b);
    cr_assert(w->dtype == LA_DTYPE_F32 && w->n_dims == 2 && w->shape[0] == 2 && w->shape[1] == 3);
    cr_assert(h->dtype == LA_DTYPE_F16 && h->n_dims == 1 && h->shape[0] == 3);
    cr_assert(b->dtype == LA_DTYPE_BF16 && b->n_dims == 2 && b->shape[0] == 2);
    float v[6];
    la_convert_to_f32(v, w->data, w->dtype, 6);
    for (int i = 0; i < 6; i++) cr_assert_eq(v[i], (float)i);
    la_convert_to_f32(v, h->data, h->dtype, 3);
    cr_assert(v[0] == 0.5f && v[1] == -2.0f && v[2] == 65504.0f);
    la_convert_to_f32(v, b->data, b->dtype, 4);
    cr_assert(v[0] == 1.0f && v[1] == -1.5f && v[2] == 3.140625f && v[3] == 0.0f);
    la_st_close(f);
    free(bytes);
    free(src);
    free(dst);
    la_test_rm_tree(dir);
}

Test(safetensors, find_returns_null_for_absent_names_and_get_checks_bounds) {
    char *dir = la_test_tmpdir();
    write_small(dir, "model.safetensors");
    la_st_file *f = NULL;
    la_err err = {0};
    LA_CHECK_OK(la_st_open(dir, &f, &err), err);
    cr_assert_null(la_st_find(f, "zz"));
    cr_assert_null(la_st_find(f, ""));
    cr_assert_null(la_st_find(f, "__metadata__"));
    cr_assert_null(la_st_get(f, -1));
    cr_assert_null(la_st_get(f, 5));
    la_st_close(f);
    la_test_rm_tree(dir);
}

/* ---- sharded ------------------------------------------------------------------------ */

/* shard 1: a, b; shard 2: c, s, e; index maps them. */
static char *sharded_dir(const char *index_json) {
    char *dir = la_test_tmpdir();
    la_st_write_tensor t[5];
    small_tensors(t);
    la_err err = {0};
    char *p1 = join(dir, "model-00001-of-00002.safetensors");
    char *p2 = join(dir, "model-00002-of-00002.safetensors");
    LA_CHECK_OK(la_st_write(p1, t, 2, &err), err);
    LA_CHECK_OK(la_st_write(p2, t + 2, 3, &err), err);
    free(p1);
    free(p2);
    la_test_write_text(dir, "model.safetensors.index.json", index_json);
    return dir;
}

#define INDEX_OK                                                                           \
    "{\"metadata\": {\"total_size\": 44}, \"weight_map\": {"                             \
    "\"a\": \"model-00001-of-00002.safetensors\", \"b\": \"model-00001-of-00002.safetensors\"," \
    "\"c\": \"model-00002-of-00002.safetensors\", \"s\": \"model-00002-of-00002.safetensors\"," \
    "\"e\": \"model-00002-of-00002.safetensors\"}}"

Test(safetensors, sharded_checkpoint_opens_every_shard) {
    char *dir = sharded_dir(INDEX_OK);
    la_st_file *f = NULL;
    la_err err = {0};
    LA_CHECK_OK(la_st_open(dir, &f, &err), err);
    cr_assert_eq(la_st_count(f), 5);
    const la_st_tensor *a = la_st_find(f, "a"), *c = la_st_find(f, "c");
    cr_assert(memcmp(a->data, k_a, 24) == 0);
    cr_assert(memcmp(c->data, k_c, 8) == 0);
    cr_assert(strstr(la_st_file_path(f, a->file_id), "model-00001-of-00002.safetensors"));
    cr_assert(strstr(la_st_file_path(f, c->file_id), "model-00002-of-00002.safetensors"));
    cr_assert(strstr(la_st_source_path(f), "model.safetensors.index.json"));
    la_st_close(f);
    la_test_rm_tree(dir);
}

Test(safetensors, index_naming_a_missing_shard_is_io_error_naming_it) {
    char *dir = sharded_dir("{\"weight_map\": {\"a\": \"model-00001-of-00002.safetensors\","
                            " \"x\": \"model-00009-of-00009.safetensors\"}}");
    expect_open_fails(dir, LA_ERR_IO, "model-00009-of-00009.safetensors",
                      "model.safetensors.index.json");
    la_test_rm_tree(dir);
}

Test(safetensors, index_mapping_a_tensor_to_the_wrong_shard_is_format_error) {
    char *dir = sharded_dir("{\"weight_map\": {\"a\": \"model-00002-of-00002.safetensors\","
                            " \"c\": \"model-00001-of-00002.safetensors\"}}");
    expect_open_fails(dir, LA_ERR_FORMAT, "tensor a", "model-00002-of-00002.safetensors");
    la_test_rm_tree(dir);
}

Test(safetensors, index_mapping_an_absent_tensor_is_format_error) {
    char *dir = sharded_dir("{\"weight_map\": {\"a\": \"model-00001-of-00002.safetensors\","
                            " \"ghost\": \"model-00002-of-00002.safetensors\"}}");
    expect_open_fails(dir, LA_ERR_FORMAT, "tensor ghost", NULL);
    la_test_rm_tree(dir);
}

Test(safetensors, bad_index_files_are_format_errors_naming_the_index) {
    const char *bad[] = {
        "{\"weight_map\": {\"a\": ",
        "{\"metadata\": {}}",
        "[1, 2]",
        "{\"weight_map\": {}}",
        "{\"weight_map\": {\"a\": 3}}",
        "{\"weight_map\": {\"a\": \"../model-00001-of-00002.safetensors\"}}",
        "{\"weight_map\": {\"a\": \"/etc/passwd\"}}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *dir = sharded_dir(bad[i]);
        expect_open_fails(dir, LA_ERR_FORMAT, "model.safetensors.index.json", NULL);
        la_test_rm_tree(dir);
    }
}

Test(safetensors, a_tensor_in_two_shards_is_format_error) {
    char *dir = sharded_dir("{\"weight_map\": {\"a\": \"model-00001-of-00002.safetensors\","
                            " \"c\": \"model-00002-of-00002.safetensors\"}}");
    la_st_write_tensor t[5];
    small_tensors(t);
    la_err err = {0};
    char *p2 = join(dir, "model-00002-of-00002.safetensors");
    la_st_write_tensor both[2] = {t[2], t[0]}; /* shard 2 also holds "a" */
    LA_CHECK_OK(la_st_write(p2, both, 2, &err), err);
    free(p2);
    expect_open_fails(dir, LA_ERR_FORMAT, "tensor a appears twice", NULL);
    la_test_rm_tree(dir);
}

/* ---- bad files ---------------------------------------------------------------------- */

Test(safetensors, missing_model_safetensors_is_io_error_naming_it) {
    char *dir = la_test_tmpdir();
    expect_open_fails(dir, LA_ERR_IO, "model.safetensors", NULL);
    la_test_rm_tree(dir);
}

Test(safetensors, truncated_data_is_format_error_naming_file_and_tensor) {
    expect_header_fails("{\"t\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 12,
                        LA_ERR_FORMAT, "tensor t");
}

Test(safetensors, header_length_past_the_end_is_format_error) {
    char *dir = la_test_tmpdir();
    uint8_t buf[16] = {0xff, 0xff, 0, 0, 0, 0, 0, 0, '{', '}'};
    char *p = join(dir, "model.safetensors");
    la_test_write_bytes(p, buf, sizeof buf);
    expect_open_fails(dir, LA_ERR_FORMAT, "model.safetensors", "header length 65535");
    la_test_write_bytes(p, buf, 5);
    expect_open_fails(dir, LA_ERR_FORMAT, "model.safetensors", "too short");
    la_test_write_bytes(p, buf, 0);
    expect_open_fails(dir, LA_ERR_FORMAT, "model.safetensors", "too short");
    free(p);
    la_test_rm_tree(dir);
}

Test(safetensors, offsets_past_the_end_name_the_tensor) {
    expect_header_fails("{\"ok\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                        "\"far\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[100,108]}}",
                        8, LA_ERR_FORMAT, "tensor far");
}

Test(safetensors, overlapping_tensors_are_named) {
    expect_header_fails("{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                        "\"y\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[6,10]}}",
                        10, LA_ERR_FORMAT, "tensors x and y overlap");
    /* touching is fine; empty tensors may sit anywhere */
    char *dir = la_test_tmpdir();
    write_raw(dir, "model.safetensors",
              "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
              "\"z\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,4]},"
              "\"y\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[8,12]}}",
              12);
    la_st_file *f = NULL;
    la_err err = {0};
    LA_CHECK_OK(la_st_open(dir, &f, &err), err);
    la_st_close(f);
    la_test_rm_tree(dir);
}

Test(safetensors, other_dtypes_are_unsupported_naming_tensor_and_dtype) {
    expect_header_fails("{\"ids\":{\"dtype\":\"I64\",\"shape\":[2],\"data_offsets\":[0,16]}}", 16,
                        LA_ERR_UNSUPPORTED, "tensor ids: dtype I64");
    expect_header_fails("{\"q\":{\"dtype\":\"Q4_K\",\"shape\":[2],\"data_offsets\":[0,1]}}", 1,
                        LA_ERR_FORMAT, "tensor q: unknown dtype");
}

Test(safetensors, shape_times_dtype_size_must_equal_the_byte_span) {
    expect_header_fails("{\"m\":{\"dtype\":\"BF16\",\"shape\":[2,3],\"data_offsets\":[0,8]}}", 8,
                        LA_ERR_FORMAT, "tensor m: data_offsets span 8 bytes but shape x BF16 needs 12");
}

Test(safetensors, malformed_entries_are_format_errors_naming_the_tensor) {
    static const struct {
        const char *header;
        la_status want;
        const char *needle;
    } k[] = {
        {"{\"t\":{\"shape\":[1],\"data_offsets\":[0,4]}}", LA_ERR_FORMAT, "tensor t: dtype"},
        {"{\"t\":{\"dtype\":4,\"shape\":[1],\"data_offsets\":[0,4]}}", LA_ERR_FORMAT, "tensor t: dtype"},
        {"{\"t\":{\"dtype\":\"F32\",\"shape\":1,\"data_offsets\":[0,4]}}", LA_ERR_FORMAT, "tensor t: shape"},
        {"{\"t\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", LA_ERR_FORMAT, "tensor t: shape[0]"},
        {"{\"t\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", LA_ERR_FORMAT, "tensor t: shape[0]"},
        {"{\"t\":{\"dtype\":\"F32\",\"shape\":[\"1\"],\"data_offsets\":[0,4]}}", LA_ERR_FORMAT, "tensor t: shape[0]"},
        {"{\"t\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1],\"data_offsets\":[0,4]}}", LA_ERR_UNSUPPORTED, "tensor t: 5 dims"},
        {"{\"t\":{\"dtype\":\"F32\",\"shape\":[1]}}", LA_ERR_FORMAT, "tensor t: data_offsets"},
        {"{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}", LA_ERR_FORMAT, "tensor t: data_offsets"},
        {"{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0.5,4]}}", LA_ERR_FORMAT, "tensor t: data_offsets"},
        {"{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,4]}}", LA_ERR_FORMAT, "tensor t: data_offsets"},
        {"{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,0]}}", LA_ERR_FORMAT, "tensor t: data_offsets"},
        {"{\"t\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4294967296],\"data_offsets\":[0,4]}}", LA_ERR_FORMAT, "tensor t: shape overflows"},
        {"{\"t\":[1,2]}", LA_ERR_FORMAT, "tensor t: entry is not an object"},
        {"{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
         "\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", LA_ERR_FORMAT, "tensor t appears twice"},
        {"{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}} x", LA_ERR_FORMAT, "bytes after"},
        {"{\"t\":{\"dtype\":\"F32\",", LA_ERR_FORMAT, "not valid JSON"},
        {" {}", LA_ERR_FORMAT, "start with '{'"},
        {"[1]", LA_ERR_FORMAT, "start with '{'"},
    };
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++)
        expect_header_fails(k[i].header, 8, k[i].want, k[i].needle);
}

Test(safetensors, metadata_is_ignored_and_padding_accepted) {
    char *dir = la_test_tmpdir();
    write_raw(dir, "model.safetensors",
              "{\"__metadata__\":{\"format\":\"pt\",\"odd\":[1]},"
              "\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}      ",
              4);
    la_st_file *f = NULL;
    la_err err = {0};
    LA_CHECK_OK(la_st_open(dir, &f, &err), err);
    cr_assert_eq(la_st_count(f), 1);
    la_st_close(f);
    la_test_rm_tree(dir);
}

/* ---- fuzz-ish: truncations and header byte flips -------------------------------------- */

static void read_small_file(char **bytes, size_t *len, char **dir, char **path) {
    *dir = la_test_tmpdir();
    write_small(*dir, "model.safetensors");
    *path = join(*dir, "model.safetensors");
    la_err err = {0};
    LA_CHECK_OK(la_file_read(*path, bytes, len, &err), err);
}

Test(safetensors, every_truncation_fails_cleanly_naming_the_file) {
    char *bytes, *dir, *path;
    size_t len;
    read_small_file(&bytes, &len, &dir, &path);
    for (size_t n = 0; n < len; n++) {
        la_test_write_bytes(path, bytes, n);
        la_st_file *f = NULL;
        la_err err = {0};
        la_status s = la_st_open(dir, &f, &err);
        cr_assert_neq(s, LA_OK, "truncated to %zu of %zu bytes but opened", n, len);
        cr_assert_null(f);
        cr_assert(strstr(err.msg, "model.safetensors"), "at %zu: %s", n, err.msg);
    }
    free(bytes);
    free(path);
    la_test_rm_tree(dir);
}

Test(safetensors, header_byte_flips_fail_cleanly_or_open_consistently) {
    char *bytes, *dir, *path;
    size_t len;
    read_small_file(&bytes, &len, &dir, &path);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | (uint8_t)bytes[i];
    static const uint8_t k_flips[] = {0x01, 0x02, 0x10, 0x20, 0x80, 0xff};
    int n_ok = 0, n_err = 0;
    for (size_t at = 0; at < 8 + hlen; at++)
        for (size_t k = 0; k < sizeof k_flips; k++) {
            bytes[at] ^= (char)k_flips[k];
            la_test_write_bytes(path, bytes, len);
            bytes[at] ^= (char)k_flips[k];
            la_st_file *f = NULL;
            la_err err = {0};
            la_status s = la_st_open(dir, &f, &err);
            if (s != LA_OK) {
                n_err++;
                cr_assert_null(f);
                cr_assert(strstr(err.msg, "model.safetensors"), "flip %zu^%x: %s", at,
                          k_flips[k], err.msg);
                continue;
            }
            n_ok++;
            /* whatever opened must be consistent: every tensor's bytes readable */
            for (int64_t i = 0; i < la_st_count(f); i++) {
                const la_st_tensor *t = la_st_get(f, i);
                size_t want = la_dtype_size(t->dtype);
                for (int d = 0; d < t->n_dims; d++) want *= (size_t)t->shape[d];
                cr_assert_eq(t->n_bytes, want);
                volatile uint8_t sink = 0;
                for (size_t b = 0; b < t->n_bytes; b++) sink ^= ((const uint8_t *)t->data)[b];
                (void)sink;
            }
            la_st_close(f);
        }
    cr_assert_gt(n_err, 0);
    cr_log_info("header flips: %d opened, %d rejected", n_ok, n_err);
    free(bytes);
    free(path);
    la_test_rm_tree(dir);
}

/* ---- writer ------------------------------------------------------------------------- */

Test(safetensors, write_rejects_bad_arguments_and_creates_no_file) {
    char *dir = la_test_tmpdir();
    char *p = join(dir, "model.safetensors");
    float x[2] = {1, 2};
    la_err err = {0};
    la_st_write_tensor dup[2] = {{"x", LA_DTYPE_F32, 1, {2}, x}, {"x", LA_DTYPE_F32, 1, {2}, x}};
    cr_assert_eq(la_st_write(p, dup, 2, &err), LA_ERR_INVALID_ARG);
    cr_assert(strstr(err.msg, "tensor x given twice"), "%s", err.msg);
    la_st_write_tensor dims = {"x", LA_DTYPE_F32, 5, {1, 1, 1, 1}, x};
    cr_assert_eq(la_st_write(p, &dims, 1, &err), LA_ERR_INVALID_ARG);
    la_st_write_tensor neg = {"x", LA_DTYPE_F32, 1, {-2}, x};
    cr_assert_eq(la_st_write(p, &neg, 1, &err), LA_ERR_INVALID_ARG);
    la_st_write_tensor meta = {"__metadata__", LA_DTYPE_F32, 1, {2}, x};
    cr_assert_eq(la_st_write(p, &meta, 1, &err), LA_ERR_INVALID_ARG);
    la_st_write_tensor nodata = {"x", LA_DTYPE_F32, 1, {2}, NULL};
    cr_assert_eq(la_st_write(p, &nodata, 1, &err), LA_ERR_INVALID_ARG);
    cr_assert(!la_file_exists(p));
    char *bad_path = join(dir, "no/such/dir/model.safetensors");
    la_st_write_tensor ok = {"x", LA_DTYPE_F32, 1, {2}, x};
    cr_assert_eq(la_st_write(bad_path, &ok, 1, &err), LA_ERR_IO);
    cr_assert(strstr(err.msg, "no/such/dir"), "%s", err.msg);
    free(bad_path);
    free(p);
    la_test_rm_tree(dir);
}

static la_status failing_fill(void *user, int64_t tensor_id, void *buf, size_t offset_bytes,
                              size_t n_bytes, la_err *err) {
    (void)user, (void)buf, (void)offset_bytes, (void)n_bytes;
    if (tensor_id == 1) return la_err_set(err, LA_ERR_INTERNAL, "fill failed on purpose");
    memset(buf, 0, n_bytes);
    return LA_OK;
}

Test(safetensors, stream_fill_error_is_returned_and_leaves_no_file) {
    char *dir = la_test_tmpdir();
    char *p = join(dir, "model.safetensors");
    la_st_write_tensor t[2] = {{"x", LA_DTYPE_F32, 1, {2}, NULL}, {"y", LA_DTYPE_BF16, 1, {3}, NULL}};
    la_err err = {0};
    cr_assert_eq(la_st_write_stream(p, t, 2, failing_fill, NULL, &err), LA_ERR_INTERNAL);
    cr_assert_str_eq(err.msg, "fill failed on purpose");
    cr_assert(!la_file_exists(p));
    /* nothing else left behind (no temporary file) */
    la_st_file *f = NULL;
    cr_assert_eq(la_st_open(dir, &f, &err), LA_ERR_IO);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "test -z \"$(ls -A %s)\"", dir);
    cr_assert_eq(system(cmd), 0, "temporary file left in %s", dir);
    free(p);
    la_test_rm_tree(dir);
}
