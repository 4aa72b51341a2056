#include "rendezvous/liveness/silence_decision.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/log.h"

namespace ddprun::rendezvous {

bool SilenceDecision::Lost(const std::string& node, SilenceVerdict verdict, size_t suspected,
                           size_t watched, TimePoint now) {
  if (suspected >= 2 && 2 * suspected > watched) {
    if (!std::exchange(mass_silence_logged_, true)) {
      LogWarning(absl::StrCat("liveness: ", suspected, " of ", watched,
                              " agents fell silent at once: more likely this server's own "
                              "network or cores than theirs; nobody is lost by silence while "
                              "so many are (their leases still decide)"));
    }
    return false;
  }
  mass_silence_logged_ = false;
  if (verdict != SilenceVerdict::kBySilence) return false;
  confirmation_.Suspect("server", node, Evidence::kSilence, now);
  if (!confirmation_.Decide(node, /*observers_available=*/1, now).lost) return false;
  confirmation_.Forget(node);
  return true;
}

void SilenceDecision::Heard(const std::string& node) { confirmation_.Withdraw("server", node); }

void SilenceDecision::Forget(const std::string& node) { confirmation_.Forget(node); }

}  // namespace ddprun::rendezvous
