# airlock: the two commands a newcomer types (make run, make test), and a few more.
BUILD ?= build
ASAN_BUILD ?= build-asan
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?= -DCMAKE_BUILD_TYPE=RelWithDebInfo

.PHONY: all deps build run test test-asan bench clean

all: build

deps:
	@scripts/install-deps

$(BUILD)/build.ninja:
	cmake -S . -B $(BUILD) -G Ninja $(CMAKE_FLAGS)

build: deps $(BUILD)/build.ninja
	ninja -C $(BUILD) -j $(JOBS)

# The demo: a small Python test suite run under examples/policies/demo.json on the Landlock tier.
run: build
	@examples/demo.sh $(BUILD)/src/airlock

# Every test, through CTest. AIRLOCK_REQUIRE_ALL_TIERS=1 turns a missing-feature skip into a failure.
test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# Unit and component tests once more under ASan + UBSan.
test-asan: deps
	cmake -S . -B $(ASAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Debug -DAIRLOCK_SANITIZE=ON
	ninja -C $(ASAN_BUILD) -j $(JOBS)
	cd $(ASAN_BUILD) && ctest --output-on-failure -j $(JOBS) -L 'unit|component'

# Installs the peers (Debian, and sandbox-runtime from npm into $(BUILD)/bench-peers), runs every
# benchmark in bench/bench.py, writes bench/results/latest.md and a PNG per benchmark.
bench: build
	scripts/install-deps --bench $(BUILD)/bench-peers
	bench/bench.py --build $(BUILD)

clean:
	rm -rf $(BUILD) $(ASAN_BUILD)
