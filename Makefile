# Thin wrapper over CMake (DESIGN.md §7b). Every target installs missing Debian
# packages first (scripts/install-deps.sh), so a fresh machine needs only `make run`
# or `make test`.
BUILD    ?= build
JOBS     ?= $(shell nproc)
MODEL    ?=
CMAKE_ARGS ?=
PREFIX   ?= /usr/local

FUZZ_SECONDS ?= 60

.PHONY: all deps configure run test test-asan test-cuda fuzz install clean

all: configure
	cmake --build $(BUILD) -j $(JOBS)

deps:
	@./scripts/install-deps.sh

configure: deps
	@test -f $(BUILD)/CMakeCache.txt || cmake -S . -B $(BUILD) $(CMAKE_ARGS) >/dev/null

run: all
	./scripts/demo.sh $(BUILD)/lazyattn

# FUZZ=0 leaves the fuzzers out (test-asan: they have their own sanitized build)
FUZZ ?= 1
test: all
	cd $(BUILD) && ctest --output-on-failure -LE gpu
	@if [ "$(FUZZ)" = 1 ]; then $(MAKE) --no-print-directory fuzz; fi

test-asan:
	$(MAKE) test BUILD=build-asan CMAKE_ARGS="-DLA_SANITIZE=ON -DLA_CUDA=OFF" FUZZ=0

# the libFuzzer harnesses (tests/fuzz, README "Fuzzing"), FUZZ_SECONDS each, two at a time;
# clang builds the engine library with ASan and UBSan in build-fuzz
fuzz: deps
	@test -f build-fuzz/CMakeCache.txt || CC=clang cmake -S . -B build-fuzz -DLA_FUZZ=ON >/dev/null
	cmake -S . -B build-fuzz -DLA_FUZZ_SECONDS=$(FUZZ_SECONDS) >/dev/null
	cmake --build build-fuzz -j $(JOBS)
	cd build-fuzz && ctest --output-on-failure -L fuzz -j 2

test-cuda: all
	cd $(BUILD) && LA_REQUIRE_GPU=1 ctest --output-on-failure -L gpu

# the library, headers, the lazyattn binary, lazyattn.pc and the CMake package (README "C library")
install: all
	cmake --install $(BUILD) --prefix $(PREFIX)

clean:
	rm -rf $(BUILD) build-asan build-fuzz
