/* lazyattn: the library's ABI: its version, which symbols it exports, and the rules that
 * keep a program built against one release working with a later library of the same major
 * version (liblazyattn.so.<MAJOR>, README "C library").
 *
 * Versions. LA_VERSION_* are this header's; la_version() is the loaded library's. The
 * shared library's SONAME carries the major version, so a program linked against major N
 * loads only a major-N library. A change that breaks a rule below bumps LA_VERSION_MAJOR
 * (and with it the SONAME and the symbol version LAZYATTN_<MAJOR>). Within a major version:
 *
 *   - functions are added, never removed, renamed or changed in signature;
 *   - enum values are appended before their _COUNT, never renumbered;
 *   - la_engine is opaque: its layout is not part of the ABI;
 *   - a struct the caller allocates and passes in (la_engine_options, la_request_params)
 *     starts with `size_t struct_size`, which its _init() writes with the caller's sizeof
 *     (the macro of that name passes it). The library reads only struct_size bytes and
 *     takes its defaults for the fields after them, so a program built against an older
 *     header keeps working; a larger struct (a newer header than the library) is accepted
 *     when the bytes the library does not know are zero, else refused with
 *     LA_ERR_UNSUPPORTED (the rule of Linux's copy_struct_from_user for openat2/clone3).
 *     New fields go at the end, never between existing ones;
 *   - a struct the caller allocates for the library to fill (la_engine_stats,
 *     la_engine_store_stats, la_model_info) is filled by a *_sized function that takes the
 *     caller's sizeof (the macro of the plain name passes it, as zlib's deflateInit passes
 *     sizeof(z_stream)); the library writes that many bytes, zeros past its own fields.
 *     New fields go at the end;
 *   - a struct the library allocates and the caller reads (la_event, la_request_stats,
 *     la_kv_event) only grows at its end;
 *   - la_err, la_segment, la_chat_message, la_sampling_params and la_engine_tier_stats are
 *     frozen once 1.0 is out: callers index arrays of la_segment and la_chat_message with
 *     their own sizeof, la_err is a fixed buffer, la_sampling_params lies inside
 *     la_request_params and la_engine_tier_stats (an array) inside la_engine_store_stats,
 *     where growing them would move the fields after them. Changing one of them is a new
 *     major version; before 1.0 a minor one may (0.1 grew la_sampling_params for the OpenAI
 *     fields of issue 21: the Python mirrors in python/lazyattn/_capi.py follow it).
 *
 * Exports. Only the functions declared LA_API are exported from liblazyattn.so: the library
 * is compiled with -fvisibility=hidden, and its version script (cmake/lazyattn.map.in) tags the
 * exports LAZYATTN_<MAJOR> and hides every other symbol, those of static libraries linked in
 * (cudart_static) included. Checked by tests/python/test_install.py (nm -D).
 */
#ifndef LAZYATTN_ABI_H
#define LAZYATTN_ABI_H

#define LA_VERSION_MAJOR 0
#define LA_VERSION_MINOR 1
#define LA_VERSION_PATCH 0
#define LA_VERSION_STRING "0.1.0"

#if defined(__GNUC__) || defined(__clang__)
#define LA_API __attribute__((visibility("default")))
#else
#define LA_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* The loaded library's version, "MAJOR.MINOR.PATCH" (static storage); *major, *minor, *patch
 * receive its parts when not NULL. Compare the major with LA_VERSION_MAJOR to check that a
 * library loaded at run time (dlopen, ctypes) has this header's ABI. */
LA_API const char *la_version(int *major, int *minor, int *patch);

#ifdef __cplusplus
}
#endif
#endif
