# The two commands of the README: `make demo` and `make test`. Both install what they need.
BUILD_DIR  ?= build
BUILD_TYPE ?= RelWithDebInfo
JOBS       ?= $(shell nproc)
CMAKE_ARGS ?=

.PHONY: all deps configure build test test-unit demo bench package install format clean

all: build

deps:
	@scripts/install-deps.sh

$(BUILD_DIR)/CMakeCache.txt:
	cmake -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) $(CMAKE_ARGS)

configure: deps $(BUILD_DIR)/CMakeCache.txt

build: configure
	cmake --build $(BUILD_DIR) -j $(JOBS)

# Every test: units and real-process integration tests (real torchrun, real data).
test: build
	cd $(BUILD_DIR) && ctest --output-on-failure --timeout 300 -j $(JOBS)

test-unit: build
	cd $(BUILD_DIR) && ctest --output-on-failure -L unit -j $(JOBS)

demo: build
	scripts/demo.sh $(BUILD_DIR)

bench: build
	bench/run_all.sh $(BUILD_DIR)

# build/ddprun_VERSION_amd64.deb (packaging/CMakeLists.txt); scripts/check-package.sh installs it
# on a clean Debian 12 root.
package: build
	cd $(BUILD_DIR) && cpack -G DEB

# Into CMAKE_INSTALL_PREFIX (/usr/local unless configured otherwise); PREFIX=... overrides.
install: build
	cmake --install $(BUILD_DIR) $(if $(PREFIX),--prefix $(PREFIX))

format:
	clang-format -i $$(git ls-files '*.cc' '*.h')

clean:
	rm -rf $(BUILD_DIR)
