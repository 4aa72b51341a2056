#include "launcher/cmd/agent_secrets.h"

#include <sys/prctl.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "launcher/workers/worker_env.h"

extern char** environ;

namespace ddprun::launcher {
namespace {

// Overwrites the value of every `name=` entry where it lies (the initial block at start-up),
// then sets the variable again from a heap copy (the first value, as getenv would have read).
bool HideVariable(const char* name) {
  const size_t name_len = strlen(name);
  std::string first;
  bool found = false;
  for (char** e = environ; *e != nullptr; ++e) {
    if (strncmp(*e, name, name_len) != 0 || (*e)[name_len] != '=') continue;
    char* value = *e + name_len + 1;
    if (!found) first = value;
    found = true;
    memset(value, '*', strlen(value));
  }
  // setenv replaces the first entry's pointer with a copy of its own: /proc/PID/environ, which
  // reads the initial block, keeps the stars.
  if (found) setenv(name, first.c_str(), 1);
  return found;
}

}  // namespace

bool HideAgentSecrets(const AgentSecretsOptions& options) {
  bool from_env = false;
  for (const char* name : kAgentOnlyVariables) from_env = HideVariable(name) || from_env;
  if (!from_env && !options.token_file) return false;
  return prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0;
}

}  // namespace ddprun::launcher
