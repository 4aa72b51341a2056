// The checkpoint/restart model of Young and Daly: how often to checkpoint, and what share of the
// wall time then goes to training, for a job that fails at random (exponentially distributed
// times between failures, mean M), spends δ to save a checkpoint and R to restart, and redoes
// the work since its last checkpoint after each failure.
//
//   J. W. Young, "A first order approximation to the optimum checkpoint interval", CACM 17(9),
//   1974: τ = sqrt(2 δ M).
//   J. T. Daly, "A higher order estimate of the optimum checkpoint interval for restart dumps",
//   Future Generation Computer Systems 22(3), 2006: the expected wall time of a job of T_s of
//   work checkpointed every τ of work,
//       T_w = M e^{R/M} (e^{(τ + δ)/M} − 1) T_s / τ,                                  (Daly eq. 13)
//   and its minimum, for δ < 2M,
//       τ_opt = sqrt(2 δ M) [1 + (1/3) sqrt(δ / 2M) + (1/9) (δ / 2M)] − δ,          (Daly eq. 37)
//   else τ_opt = M. R does not move the optimum; it lowers the efficiency.
//
// Pure functions of seconds.
#ifndef DDPRUN_RENDEZVOUS_CHECKPOINTS_DALY_MODEL_H_
#define DDPRUN_RENDEZVOUS_CHECKPOINTS_DALY_MODEL_H_

namespace ddprun::rendezvous {

// Young's first-order interval, sqrt(2 δ M).
double YoungInterval(double save_s, double mtbf_s);
// Daly's higher-order optimum (eq. 37): the work between checkpoints that minimises the expected
// wall time; never below `save_s` (checkpointing more often than a save takes is no interval).
double DalyInterval(double save_s, double mtbf_s);
// T_s / T_w (eq. 13): the share of the wall time spent on work that counts, checkpointing every
// `interval_s` of work, in (0, 1].
double DalyEfficiency(double interval_s, double save_s, double restart_s, double mtbf_s);

}  // namespace ddprun::rendezvous

#endif  // DDPRUN_RENDEZVOUS_CHECKPOINTS_DALY_MODEL_H_
