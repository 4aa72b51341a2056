// ddprun-reference: writes the generated reference pages, docs/reference/flags.md from the flag
// table (launcher/config/flag_table.h) and docs/reference/environment.md from the table of
// environment variables (common/env_variables.h). Run by `make flag-reference`; a build tool,
// not installed. Usage: ddprun-reference DOCS_REFERENCE_DIR, or ddprun-reference flags|environment
// to print one page.
#include <cstdio>
#include <fstream>
#include <string>

#include "common/env_variables.h"
#include "launcher/config/cli.h"

namespace {

bool Write(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) {
    std::fprintf(stderr, "ddprun-reference: error: cannot write %s\n", path.c_str());
    return false;
  }
  std::printf("wrote %s\n", path.c_str());
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: ddprun-reference DOCS_REFERENCE_DIR | flags | environment\n");
    return 2;
  }
  const std::string arg = argv[1];
  if (arg == "flags") {
    std::fputs(ddprun::launcher::FlagReferenceMarkdown().c_str(), stdout);
    return 0;
  }
  if (arg == "environment") {
    std::fputs(ddprun::EnvironmentReferenceMarkdown().c_str(), stdout);
    return 0;
  }
  const bool ok = Write(arg + "/flags.md", ddprun::launcher::FlagReferenceMarkdown()) &&
                  Write(arg + "/environment.md", ddprun::EnvironmentReferenceMarkdown());
  return ok ? 0 : 1;
}
