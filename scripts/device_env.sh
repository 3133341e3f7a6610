# Sourced by the device scripts (device_gpu.sh, device_kernels.sh, device_store.sh) on the GPU
# machine, from the repository root with $root set to it: unpack the bundle that
# `scripts/device_gpu.sh prepare` made (or $LA_BUNDLE: device_paper.sh's, device_fuzz.sh's) into /tmp/la, make the source path the tests were
# built with (/work/main) point here, and put the bundle's libraries and the machine's
# cuBLAS 13 on LD_LIBRARY_PATH. Sets bin (/tmp/la/bin) and orig_ld (LD_LIBRARY_PATH before).
mkdir -p /tmp/la && tar -C /tmp/la -xJf "${LA_BUNDLE:-.carry/dev/bundle.tar.xz}"
# tests find their fixtures under the source path they were built with
if [ ! -e /work/main/tests ]; then mkdir -p /work && ln -sfn "$root" /work/main; fi
cublas=""
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
    "$(python3 -c 'import nvidia.cublas, os; print(os.path.dirname(nvidia.cublas.__file__) + "/lib")' 2>/dev/null)"; do
    if [ -n "$d" ] && [ -e "$d/libcublasLt.so.13" ]; then cublas=$d; break; fi
done
orig_ld=${LD_LIBRARY_PATH:-}
export LD_LIBRARY_PATH=/tmp/la/lib${cublas:+:$cublas}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export LA_REQUIRE_GPU=1 # a GPU test that finds no GPU here fails instead of skipping
bin=/tmp/la/bin
