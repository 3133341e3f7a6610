"""The C ABI of liblazyattn (include/lazyattn/abi.h) and the ctypes mirrors of the bindings.

  - liblazyattn.so exports exactly the LA_API functions of include/lazyattn/*.h, each tagged
    LAZYATTN_<major>, and its SONAME carries the major version (nm -D, readelf -d);
  - every field of python/lazyattn/_capi.py's structs sits at the C offset (a C program built
    against the headers prints them); frozen structs have the C size, sized ones are a prefix;
  - the sized-struct rules: a shorter caller struct gets the library's defaults, a longer one
    with a set unknown byte is refused, an uninitialized one is refused, a shorter output
    struct is written only as far as its size.
"""

import ctypes
import glob
import os
import re
import subprocess

import pytest

from conftest import BUILD, MODEL, ROOT, run

HEADERS = sorted(glob.glob(os.path.join(ROOT, "include", "lazyattn", "*.h")))
SO = os.path.join(BUILD, "liblazyattn.so")


def api_functions():
    names = set()
    for h in HEADERS:
        names |= set(re.findall(r"^LA_API\s[^;]*?\b(la_\w+)\s*\(", open(h).read(), re.M))
    return names


def test_every_public_function_is_declared_la_api():
    """A declaration at the start of a line in a public header that names a la_ function must
    carry LA_API, or liblazyattn.so would not export it."""
    missing = []
    for h in HEADERS:
        for line in open(h):
            if re.match(r"^(?!LA_API|#|typedef|\s|/\*|\*)[A-Za-z_][\w \*]*\bla_\w+\s*\(", line):
                missing.append(f"{os.path.basename(h)}: {line.strip()}")
    assert not missing, missing


def test_exports_are_the_public_api():
    want = api_functions()
    assert len(want) >= 30
    r = run(["nm", "-D", "--defined-only", SO])
    assert r.returncode == 0, r.stderr
    got, other = set(), []
    for line in r.stdout.splitlines():
        addr, kind, sym = line.split()
        if kind == "A":
            other.append(sym)
            continue
        name, _, version = sym.partition("@@")
        assert version == "LAZYATTN_0", sym
        got.add(name)
    assert got == want, (sorted(got - want), sorted(want - got))
    assert other == ["LAZYATTN_0"]
    d = run(["readelf", "-d", SO]).stdout
    assert "Library soname: [liblazyattn.so.0]" in d


def test_versions_agree(lazyattn_pkg):
    h = open(os.path.join(ROOT, "include", "lazyattn", "abi.h")).read()
    version = re.search(r'#define LA_VERSION_STRING "([^"]+)"', h).group(1)
    major = int(re.search(r"#define LA_VERSION_MAJOR (\d+)", h).group(1))
    assert lazyattn_pkg.__version__ == version == lazyattn_pkg.library_version()
    assert lazyattn_pkg._capi.ABI_MAJOR == major
    assert os.path.realpath(SO).endswith(f"liblazyattn.so.{version}")


FROZEN = ["la_err", "la_segment", "la_chat_message", "la_sampling_params", "la_logit_bias"]
SIZED = ["la_engine_options", "la_request_params", "la_engine_stats"]
LIBRARY_ALLOCATED = ["la_event", "la_request_stats"]


def test_ctypes_mirrors_match_the_headers(lazyattn_pkg, tmp_path):
    capi = lazyattn_pkg._capi
    lines = ['#include <stdio.h>', '#include <stddef.h>', '#include "lazyattn/lazyattn.h"', "int main(void) {"]
    for s in FROZEN + SIZED + LIBRARY_ALLOCATED:
        lines.append(f'printf("{s} %zu\\n", sizeof({s}));')
        for f, _ in getattr(capi, s)._fields_:
            lines.append(f'printf("{s}.{f} %zu\\n", offsetof({s}, {f}));')
    lines += ["return 0;", "}"]
    src = tmp_path / "layout.c"
    src.write_text("\n".join(lines) + "\n")
    exe = tmp_path / "layout"
    r = run(["cc", "-std=c17", "-I", os.path.join(ROOT, "include"), str(src), "-o", str(exe)])
    assert r.returncode == 0, r.stderr
    c = dict(line.rsplit(" ", 1) for line in run([str(exe)]).stdout.splitlines())
    for s in FROZEN + SIZED + LIBRARY_ALLOCATED:
        cls = getattr(capi, s)
        for f, _ in cls._fields_:
            assert getattr(cls, f).offset == int(c[f"{s}.{f}"]), f"{s}.{f}"
        if s in FROZEN:
            assert ctypes.sizeof(cls) == int(c[s]), s
        else:
            assert ctypes.sizeof(cls) <= int(c[s]), s  # a prefix: the library handles the rest


def _create(capi, opts):
    """la_engine_create on a caller struct of any layout: (status, message)."""
    lib = capi.lib()
    e, err = ctypes.c_void_p(), capi.la_err()
    p = ctypes.cast(ctypes.byref(opts), ctypes.POINTER(capi.la_engine_options))
    st = lib.la_engine_create(p, ctypes.byref(e), ctypes.byref(err))
    if st == 0:
        lib.la_engine_destroy(e)
    return st, err.msg.decode()


def test_sized_structs_follow_the_abi_rules(lazyattn_pkg):
    capi = lazyattn_pkg._capi
    lib = capi.lib()
    full = capi.la_engine_options

    # an older caller: only struct_size and model_dir; the library's defaults for the rest
    class Short(ctypes.Structure):
        _fields_ = full._fields_[:2]

    short = Short()
    lib.la_engine_options_init_sized(ctypes.cast(ctypes.byref(short), ctypes.POINTER(full)), ctypes.sizeof(short))
    assert short.struct_size == ctypes.sizeof(short) == 16
    short.model_dir = MODEL.encode()
    assert _create(capi, short) == (0, "")

    # a newer caller with a field this library does not know set
    class Long(ctypes.Structure):
        _fields_ = full._fields_ + [("pad", ctypes.c_char * 256), ("future_field", ctypes.c_int64)]

    long_ = Long()
    lib.la_engine_options_init_sized(ctypes.cast(ctypes.byref(long_), ctypes.POINTER(full)), ctypes.sizeof(long_))
    long_.model_dir = MODEL.encode()
    assert _create(capi, long_) == (0, "")  # unknown bytes all zero: accepted
    long_.future_field = 1
    st, msg = _create(capi, long_)
    assert capi.STATUS_NAMES[st] == "unsupported" and "a field it does not know" in msg, msg

    # never initialized
    st, msg = _create(capi, full())
    assert capi.STATUS_NAMES[st] == "invalid_arg"
    assert msg == "la_engine_options.struct_size=0: initialize it with la_engine_options_init()"


def test_sized_output_is_written_only_as_far_as_its_size(llm, lazyattn_pkg):
    capi = lazyattn_pkg._capi
    buf = (ctypes.c_int64 * 4)(-1, -1, -1, -1)
    capi.lib().la_engine_get_stats_sized(llm._e, ctypes.cast(buf, ctypes.POINTER(capi.la_engine_stats)), 16)
    assert buf[0] == 0 and buf[1] == 0  # n_waiting, n_running
    assert buf[2] == -1 and buf[3] == -1  # past the 16 bytes: untouched
