// Linked into the tests that run several gloo ranks as threads of one process.
//
// LibTorch 2.x records every collective in one process-wide FlightRecorder, and its
// recordWithResetEnabled inserts a group's status into a map before taking its mutex: process
// groups that record their first collective at the same moment race on that map and crash the
// process now and then (1 run in 40 of state_sync_test here). A worker has one group per
// process (in-process recovery makes a new one per round, used by one thread), so only these
// tests meet the race; they turn the recorder off before the first group reads the setting.
// An explicit TORCH_FR_BUFFER_SIZE in the environment still wins.
#include <cstdlib>

namespace {

const bool kFlightRecorderOff = [] {
  setenv("TORCH_FR_BUFFER_SIZE", "0", /*overwrite=*/0);
  return true;
}();

}  // namespace
