#include "base/err.h"
#include "base/dtype.h"
#include "base/hash.h"
#include "common/test_util.h"

Test(err, set_formats_message_and_returns_code) {
    la_err e;
    la_status s = la_err_set(&e, LA_ERR_IO, "%s: %d", "file", 7);
    cr_assert_eq(s, LA_ERR_IO);
    cr_assert_str_eq(e.msg, "file: 7");
    la_err_prefix(&e, "loading %s", "x");
    cr_assert_str_eq(e.msg, "loading x: file: 7");
}

Test(err, every_status_has_a_name) {
    for (int s = 0; s < LA_STATUS_COUNT; s++) cr_assert_neq(la_status_name(s)[0], '\0');
    cr_assert_str_eq(la_status_name(LA_ERR_NO_SPACE), "no_space");
}

Test(dtype, bf16_round_trip_rounds_to_nearest_even) {
    cr_assert_eq(la_f32_to_bf16(1.0f), 0x3f80);
    cr_assert_float_eq(la_bf16_to_f32(la_f32_to_bf16(3.140625f)), 3.140625f, 0);
    /* 1 + 2^-8 is exactly halfway between two bf16 values: ties to even (1.0). */
    cr_assert_eq(la_f32_to_bf16(1.00390625f), 0x3f80);
}

Test(dtype, f16_round_trip_matches_ieee) {
    cr_assert_eq(la_f32_to_f16(1.0f), 0x3c00);
    cr_assert_float_eq(la_f16_to_f32(0x3555), 0.333251953125f, 0);
    cr_assert_float_eq(la_f16_to_f32(0x0001), 5.9604644775390625e-8f, 0); /* subnormal */
    cr_assert_eq(la_f32_to_f16(65504.0f), 0x7bff);
}

Test(hash, same_input_same_hash_different_input_differs) {
    la_hasher a, b;
    la_hasher_init(&a);
    la_hasher_init(&b);
    la_hasher_update(&a, "abc", 3);
    la_hasher_update(&b, "abc", 3);
    cr_assert(la_hash128_eq(la_hasher_digest(&a), la_hasher_digest(&b)));
    la_hasher_update(&b, "d", 1);
    cr_assert(!la_hash128_eq(la_hasher_digest(&a), la_hasher_digest(&b)));
}
