# Thin wrapper over CMake (DESIGN.md §7b). Every target installs missing Debian
# packages first (scripts/install-deps.sh), so a fresh machine needs only `make run`
# or `make test`.
BUILD    ?= build
JOBS     ?= $(shell nproc)
MODEL    ?=
CMAKE_ARGS ?=

.PHONY: all deps configure run test test-asan test-cuda clean

all: configure
	cmake --build $(BUILD) -j $(JOBS)

deps:
	@./scripts/install-deps.sh

configure: deps
	@test -f $(BUILD)/CMakeCache.txt || cmake -S . -B $(BUILD) $(CMAKE_ARGS) >/dev/null

run: all
	./scripts/demo.sh $(BUILD)/lazyattn

test: all
	cd $(BUILD) && ctest --output-on-failure -LE gpu

test-asan:
	$(MAKE) test BUILD=build-asan CMAKE_ARGS="-DLA_SANITIZE=ON -DLA_CUDA=OFF"

test-cuda: all
	cd $(BUILD) && ctest --output-on-failure -L gpu

clean:
	rm -rf $(BUILD) build-asan
