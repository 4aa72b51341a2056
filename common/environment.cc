#include "common/environment.h"

#include <cstring>

extern char** environ;

namespace ddprun {

Environment CurrentEnvironment() {
  Environment env;
  for (char** e = environ; *e != nullptr; ++e) {
    const char* eq = strchr(*e, '=');
    if (eq != nullptr) env[std::string(*e, eq - *e)] = eq + 1;
  }
  return env;
}

}  // namespace ddprun
