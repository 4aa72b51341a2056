#include "launcher/config/template_macros.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace ddprun::launcher {
namespace {

// Python's string.Template identifier: [_a-zA-Z][_a-zA-Z0-9]* (ASCII, as Template's flags say).
size_t IdentifierLength(absl::string_view s) {
  if (s.empty() || !(absl::ascii_isalpha(s[0]) || s[0] == '_')) return 0;
  size_t n = 1;
  while (n < s.size() && (absl::ascii_isalnum(s[n]) || s[n] == '_')) ++n;
  return n;
}

}  // namespace

std::string SubstituteTemplate(absl::string_view text,
                               const std::map<std::string, std::string>& values,
                               std::vector<std::string>* unknown) {
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    if (text[i] != '$') {
      out.push_back(text[i++]);
      continue;
    }
    absl::string_view rest = text.substr(i + 1);
    if (!rest.empty() && rest[0] == '$') {  // $$ -> $
      out.push_back('$');
      i += 2;
      continue;
    }
    const bool braced = !rest.empty() && rest[0] == '{';
    const size_t n = IdentifierLength(rest.substr(braced ? 1 : 0));
    if (n > 0 && (!braced || (rest.size() > n + 1 && rest[n + 1] == '}'))) {
      const std::string name(rest.substr(braced ? 1 : 0, n));
      auto it = values.find(name);
      if (it != values.end()) {
        out += it->second;
        i += 1 + n + (braced ? 2 : 0);
        continue;
      }
      if (unknown != nullptr) unknown->push_back(name);
    }
    out.push_back('$');  // left as written
    ++i;
  }
  return out;
}

std::map<std::string, std::string> LogLinePrefixValues(const std::string& role_name, int rank,
                                                       int local_rank,
                                                       const std::string& hostname) {
  return {{"role_name", role_name},
          {"rank", absl::StrCat(rank)},
          {"local_rank", absl::StrCat(local_rank)},
          {"hostname", hostname}};
}

std::string SubstituteMacros(absl::string_view arg, int local_rank) {
  return SubstituteTemplate(arg, {{"local_rank", absl::StrCat(local_rank)}});
}

}  // namespace ddprun::launcher
