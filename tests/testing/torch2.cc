#include "tests/testing/torch2.h"

#include <unistd.h>

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "tests/testing/subprocess.h"

namespace ddprun::testing {
namespace {

Torch2 Find() {
  Torch2 t;
  const char* venv = getenv("DDPRUN_TORCH2_VENV");
  const char* home = getenv("HOME");
  t.venv = venv != nullptr ? venv
                           : absl::StrCat(home != nullptr ? home : "/root",
                                          "/.cache/ddprun/venv-torch-", kTorch2Version);
  t.python = t.venv + "/bin/python";
  t.torchrun = t.venv + "/bin/torchrun";
  const char* no = getenv("DDPRUN_NO_TORCH2");
  if (no != nullptr && std::string(no) == "1") {
    t.opted_out = "DDPRUN_NO_TORCH2=1: the torch 2.x tests are opted out";
    return t;
  }
  const std::string fix = " (scripts/install-deps.sh makes it; DDPRUN_NO_TORCH2=1 opts out)";
  if (access(t.python.c_str(), X_OK) != 0 || access(t.torchrun.c_str(), X_OK) != 0) {
    t.error = absl::StrCat("no torch ", kTorch2Version, " venv at ", t.venv, fix);
    return t;
  }
  Subprocess p({t.python, "-c", "import torch; print(torch.__version__.split('+')[0])"});
  const auto st = p.Wait(std::chrono::seconds(60));
  const std::string version(absl::StripAsciiWhitespace(p.out()));
  if (!st.has_value() || st->exit_code != 0) {
    t.error = absl::StrCat(t.python, " cannot import torch", fix);
  } else if (version != kTorch2Version) {
    t.error = absl::StrCat(t.venv, " holds torch ", version, ", not ", kTorch2Version, fix);
  }
  return t;
}

}  // namespace

const Torch2& FindTorch2() {
  static const Torch2 t = Find();
  return t;
}

}  // namespace ddprun::testing
