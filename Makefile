# gpuemu: the two commands a user needs are `make demo` and `make test`.
SHELL := /bin/bash
BUILD_DIR ?= build
VENV ?= .venv
PY := $(VENV)/bin/python
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?= -DCMAKE_BUILD_TYPE=RelWithDebInfo

.PHONY: all deps venv configure build demo package wheel test test-cpp test-fuzz test-python test-ext bench format check clean

all: build

deps:
	@bash scripts/install-deps.sh

$(PY):
	@/usr/bin/python3 -m venv --system-site-packages $(VENV)

venv: deps $(PY)

configure: venv
	@cmake -S . -B $(BUILD_DIR) -G Ninja $(CMAKE_FLAGS) -DPython_EXECUTABLE=$(abspath $(PY)) >/dev/null

build: configure
	@cmake --build $(BUILD_DIR) -j $(JOBS)
	@bash scripts/install-python.sh $(PY)

# The demo needs only the CLI and the daemon: `make test` builds the rest.
demo: configure
	@cmake --build $(BUILD_DIR) -j $(JOBS) --target gpuemu gpuemu-daemon
	@bash scripts/demo.sh

# The .deb of the CLI and the daemon (CPack): build/gpuemu_<version>_<arch>.deb
package: configure
	@cmake --build $(BUILD_DIR) -j $(JOBS) --target gpuemu gpuemu-daemon
	@cd $(BUILD_DIR) && cpack -G DEB

# The wheel (the compiled module, the facade, the CLI and the daemon, the schemas): dist/
wheel: venv
	@$(PY) -m pip wheel --no-build-isolation --no-deps -w dist .

test: build test-cpp test-fuzz test-python test-ext

test-cpp:
	@cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS)

# libFuzzer under ASan + UBSan: the protocol decoder, op schemas, PTX and gpuemu.toml, 15 s each
# (docs/reliability.md; `tests/fuzz/run.sh --runs N` is the long run)
test-fuzz:
	@BUILD_DIR=$(BUILD_DIR) bash tests/fuzz/run.sh 15

# pytest-xdist: one worker per core (every test has its own daemon home and temp files)
test-python:
	@GPUEMU_STRICT_TESTS=1 GPUEMU_BIN_DIR=$(abspath $(BUILD_DIR))/bin $(PY) -m pytest -q -rs -n $(JOBS) tests/python

test-ext:
	@bash scripts/test-ext.sh

bench: build
	@bash scripts/bench.sh
	@bash scripts/bench_protocol.sh

format:
	@clang-format -i $$(git ls-files '*.cpp' '*.hpp')

check:
	@clang-format --dry-run --Werror $$(git ls-files '*.cpp' '*.hpp')

clean:
	@rm -rf $(BUILD_DIR)
