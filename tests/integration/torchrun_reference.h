// The real torchrun as the reference of ddprun's tests: which one (Debian's 1.13, or 2.11 from
// the torch 2.x venv), with which Python, and the side-by-side comparison of what each launcher
// gives its workers.
#ifndef DDPRUN_TESTS_INTEGRATION_TORCHRUN_REFERENCE_H_
#define DDPRUN_TESTS_INTEGRATION_TORCHRUN_REFERENCE_H_

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/testing/torchrun_ports_lock.h"

namespace ddprun::testing {

struct TorchrunReference {
  std::string torchrun;  // the launcher to run
  std::string python;    // PYTHON_EXEC for both launchers: the Python whose torch the workers use
  bool torch2 = false;   // torch 2.x (changes what torchrun sets, see CompareWithTorchrun)
};

// Debian's torchrun 1.13 with /usr/bin/python3: $DDPRUN_TORCHRUN, else
// ../shared/tools/torchrun113 beside the checkout, else our wrapper with the same Python 3.11
// fix (tests/integration/scripts/torchrun_py311.py).
TorchrunReference Torchrun113();

nlohmann::json LoadJson(const std::string& path);

// Every variable torchrun sets for its workers (2 of them, dumped by dump_env.py), ddprun sets to
// the same value; the differences are the documented ones only. Fails the test (gtest
// expectations) otherwise; skips when the reference torchrun is not there.
void CompareWithTorchrun(const TorchrunReference& ref,
                         const std::vector<std::string>& torchrun_flags,
                         const std::vector<std::string>& ddprun_flags, bool ports_random);

}  // namespace ddprun::testing

#endif  // DDPRUN_TESTS_INTEGRATION_TORCHRUN_REFERENCE_H_
