# Sourced by the device scripts' `prepare` (here, where the Debian -dev libraries are):
# la_pack_libs DEST BINARY...  copies into DEST every shared library the binaries resolve
# except glibc's, the C++ runtime (newer on the GPU machine), the CUDA toolkit's (the GPU
# machine has its own cuBLAS 13) and the driver's.
la_pack_libs() {
    local dest=$1
    shift
    mkdir -p "$dest"
    for b in "$@"; do ldd "$b"; done | awk '/=>/ {print $3}' | sort -u |
        grep -v -E '/(libc|libm|libdl|librt|libpthread|libresolv|libstdc\+\+|libgcc_s|ld-linux[^/]*)\.so|cuda|libcublas' |
        while read -r lib; do cp -L "$lib" "$dest/"; done
}
