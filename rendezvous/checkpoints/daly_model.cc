#include "rendezvous/checkpoints/daly_model.h"

#include <algorithm>
#include <cmath>

namespace ddprun::rendezvous {

double YoungInterval(double save_s, double mtbf_s) { return std::sqrt(2.0 * save_s * mtbf_s); }

double DalyInterval(double save_s, double mtbf_s) {
  if (save_s >= 2.0 * mtbf_s) return std::max(mtbf_s, save_s);
  const double x = save_s / (2.0 * mtbf_s);
  const double tau = YoungInterval(save_s, mtbf_s) * (1.0 + std::sqrt(x) / 3.0 + x / 9.0) - save_s;
  return std::max(tau, save_s);
}

double DalyEfficiency(double interval_s, double save_s, double restart_s, double mtbf_s) {
  if (interval_s <= 0) return 0;
  // expm1 keeps the small-exponent case (M much larger than τ + δ) exact: the ratio tends to
  // τ / (τ + δ) there.
  const double wall_per_work = mtbf_s * std::exp(restart_s / mtbf_s) *
                               std::expm1((interval_s + save_s) / mtbf_s) / interval_s;
  return std::clamp(1.0 / wall_per_work, 0.0, 1.0);
}

}  // namespace ddprun::rendezvous
