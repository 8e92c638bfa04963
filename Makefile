# inferbench front door.
#   make run    install dependencies, build, run the default benchmark into results/default
#   make test   install dependencies (Chromium too), build (warnings are errors), brief fuzzing,
#               every test (the browser test included)
#   make build | format | clean
PRESET ?= release
BUILD_DIR := build/$(PRESET)
INFERBENCH := $(BUILD_DIR)/bin/inferbench
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
FUZZ_SECONDS ?= 10

# The seed's protocol (batch 8, 32 prompt / 128 output tokens, 3 runs, median reported) on the
# 15M-parameter preset, with the prompt count scaled so the whole benchmark takes about a minute
# on a 2-core CPU (bench/cpu-default.md has the measurement behind the number).
DEFAULT_BENCHMARK := --model tiny-15m --device cpu --batch-size 8 --input-len 32 \
                     --output-len 128 --num-prompts 128 --runs 3 --seed 0

.PHONY: run test build configure deps format clean

BROWSER ?= $(if $(filter test,$(MAKECMDGOALS)),ON,AUTO)

deps:
	scripts/install-deps $(if $(filter ON,$(BROWSER)),--with-browser,)

configure: deps
	cmake --preset $(PRESET) -DINFERBENCH_WERROR=ON -DINFERBENCH_BROWSER_TESTS=$(BROWSER) \
	  -DINFERBENCH_VISION=ON

build: configure
	cmake --build $(BUILD_DIR) -j $(JOBS)

run: build
	$(INFERBENCH) run $(DEFAULT_BENCHMARK) --result-dir results/default --overwrite

test: build
	@if [ -x scripts/fuzz ]; then scripts/fuzz $(FUZZ_SECONDS); fi
	ctest --test-dir $(BUILD_DIR) --output-on-failure -j $(JOBS)

format:
	find src fuzz -name '*.h' -o -name '*.cpp' -o -name '*.cu' -o -name '*.cuh' | \
	  xargs clang-format -i

clean:
	rm -rf build
