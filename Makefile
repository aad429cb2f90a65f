# airlock: the two commands a newcomer types (make run, make test), and a few more.
BUILD ?= build
ASAN_BUILD ?= build-asan
FUZZ_BUILD ?= build-fuzz
# Seconds each fuzz target runs in `make fuzz` (CI: 30 each).
FUZZ_SECONDS ?= 60
FUZZ_TARGETS = policy protocol mcp http door dns ledger receipts
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?= -DCMAKE_BUILD_TYPE=RelWithDebInfo

.PHONY: all deps build install uninstall deb run test test-asan fuzz bench clean docs

all: build

deps:
	@scripts/install-deps

$(BUILD)/build.ninja:
	cmake -S . -B $(BUILD) -G Ninja $(CMAKE_FLAGS)

build: deps $(BUILD)/build.ninja
	ninja -C $(BUILD) -j $(JOBS)

# The executables into $(PREFIX)/bin, their debug information into $(PREFIX)/lib/debug, the man
# pages, the bash and zsh completions and the agent profiles into $(PREFIX)/share.
PREFIX ?= /usr/local
# Its list of files is kept as $(BUILD)/installed-files.txt (install_manifest.txt is rewritten
# by every install from the build, the tests' and `make deb`'s too).
install: build
	cmake --install $(BUILD) --prefix $(PREFIX)
	cp $(BUILD)/install_manifest.txt $(BUILD)/installed-files.txt

# Every file the last `make install` wrote.
uninstall:
	@test -f $(BUILD)/installed-files.txt || { echo "uninstall: no $(BUILD)/installed-files.txt: nothing was installed from $(BUILD)" >&2; exit 1; }
	xargs -d '\n' rm -f -- < $(BUILD)/installed-files.txt
	@# The directories of airlock's own it leaves empty (share/airlock, a debug file's .build-id/NN).
	@sed -n 's|/[^/]*$$||p' $(BUILD)/installed-files.txt | sort -ru | grep -E '/share/airlock(/|$$)|/lib/debug/\.build-id/[0-9a-f]{2}$$' | \
	  while IFS= read -r d; do rmdir -- "$$d" 2>/dev/null || true; done
	@rmdir -- "$(PREFIX)/share/airlock" 2>/dev/null || true
	rm $(BUILD)/installed-files.txt

# A Debian package of the same files under /usr, in $(BUILD): airlock_VERSION_ARCH.deb.
deb: build
	cd $(BUILD) && cpack -G DEB

# The demo: a small Python test suite run under examples/policies/demo.json on the Landlock tier.
run: build
	@examples/demo.sh $(BUILD)/src/airlock

# The generated references in docs/reference/, from the code's own tables (the docs_reference
# test fails when they differ from what the code generates).
docs: $(BUILD)/build.ninja
	ninja -C $(BUILD) -j $(JOBS) airlock
	$(BUILD)/src/airlock reference codes > docs/reference/refusal-codes.md
	$(BUILD)/src/airlock reference policy > docs/reference/policy.md

# Every test, through CTest. AIRLOCK_REQUIRE_ALL_TIERS=1 turns a missing-feature skip into a failure.
test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# Unit and component tests once more under ASan + UBSan (only what they run is built).
test-asan: deps
	cmake -S . -B $(ASAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Debug -DAIRLOCK_SANITIZE=ON
	ninja -C $(ASAN_BUILD) -j $(JOBS) unit_and_component_tests
	cd $(ASAN_BUILD) && ctest --output-on-failure -j $(JOBS) -L 'unit|component'

# Every libFuzzer target (fuzz/) for FUZZ_SECONDS under ASan + UBSan, built with clang, only the
# libraries the targets link. Each starts from its seed corpus in fuzz/corpus/TARGET (read, never
# written: what the run learns goes to $(FUZZ_BUILD)/corpus); a crash is kept in
# $(FUZZ_BUILD)/crashes and fails the run: add it to fuzz/corpus/TARGET, with a unit test.
fuzz: deps
	cmake -S . -B $(FUZZ_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DAIRLOCK_FUZZ=ON \
	  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++
	ninja -C $(FUZZ_BUILD) -j $(JOBS) fuzzers
	@set -e; for t in $(FUZZ_TARGETS); do \
	  mkdir -p $(FUZZ_BUILD)/corpus/$$t $(FUZZ_BUILD)/crashes; \
	  echo "fuzz: $$t for $(FUZZ_SECONDS) s"; \
	  $(FUZZ_BUILD)/fuzz/fuzz_$$t -max_total_time=$(FUZZ_SECONDS) -timeout=30 -rss_limit_mb=2560 -max_len=65536 \
	    -print_final_stats=1 -artifact_prefix=$(FUZZ_BUILD)/crashes/$$t- \
	    $(FUZZ_BUILD)/corpus/$$t fuzz/corpus/$$t 2>$(FUZZ_BUILD)/fuzz-$$t.log \
	    || { tail -n 60 $(FUZZ_BUILD)/fuzz-$$t.log; exit 1; }; \
	  grep -E '^stat::number_of_executed_units|^stat::new_units_added' $(FUZZ_BUILD)/fuzz-$$t.log; \
	done

# Installs the peers (Debian, and sandbox-runtime from npm into $(BUILD)/bench-peers), runs every
# benchmark in bench/bench.py, writes bench/results/latest.md and a PNG per benchmark.
bench: build
	scripts/install-deps --bench $(BUILD)/bench-peers
	bench/bench.py --build $(BUILD)

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(FUZZ_BUILD)
