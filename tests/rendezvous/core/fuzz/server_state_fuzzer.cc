// libFuzzer target: the fuzzer's bytes choose the run's options and every event StateDriver
// feeds to ServerState; any violated invariant aborts. Built only with clang
// (tests/rendezvous/core/fuzz/run_fuzzer.sh); the seeded randomized test covers the same ground in
// `make test`.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "tests/rendezvous/core/state_driver.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider input(data, size);
  auto uniform = [&input](int lo, int hi) { return input.ConsumeIntegralInRange<int>(lo, hi); };
  ddprun::rendezvous::testing::DriverParams p;
  p.min_nodes = uniform(1, 4);
  p.max_nodes = p.min_nodes + uniform(0, 4);
  p.nproc = uniform(1, 3);
  p.max_restarts = uniform(0, 5);
  ddprun::rendezvous::testing::StateDriver driver(p, uniform);
  while (input.remaining_bytes() > 0) {
    const std::string violation = driver.Step();
    if (!violation.empty()) {
      std::fprintf(stderr, "invariant violated: %s\n", violation.c_str());
      std::abort();
    }
  }
  return 0;
}
