// GroupReaper (trainer/train/group_reaper.h): destruction off the caller's thread, in order,
// and an exit that neither waits forever for a stuck destructor nor loses a finished one.
#include "trainer/train/group_reaper.h"

#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <thread>

#include "tests/testing/subprocess.h"

namespace ddprun::trainer {
namespace {

using namespace std::chrono_literals;

// A communicator whose destructor records its thread and can be held up.
class FakeCommunicator final : public Communicator {
 public:
  struct Probe {
    std::atomic<int> destroyed{0};
    std::atomic<bool> on_caller_thread{false};
    std::thread::id caller = std::this_thread::get_id();
    std::shared_future<void> release;  // the destructor waits for it when valid
  };
  explicit FakeCommunicator(Probe* probe) : probe_(probe) {}
  ~FakeCommunicator() override {
    if (std::this_thread::get_id() == probe_->caller) probe_->on_caller_thread = true;
    if (probe_->release.valid()) probe_->release.wait();
    ++probe_->destroyed;
  }
  int rank() const override { return 0; }
  int world_size() const override { return 2; }
  CommBackend backend() const override { return CommBackend::kGloo; }
  c10::intrusive_ptr<c10d::Work> AllReduceSumAsync(torch::Tensor&) override { return {}; }
  absl::Status Barrier() override { return absl::OkStatus(); }

 protected:
  c10::intrusive_ptr<c10d::Work> BroadcastAsync(torch::Tensor&, int) override { return {}; }
  c10::intrusive_ptr<c10d::Work> AllGatherAsync(std::vector<torch::Tensor>&,
                                                torch::Tensor&) override {
    return {};
  }

 private:
  Probe* probe_;
};

TEST(GroupReaperTest, DestroysInTheBackgroundNeverOnTheCallersThread) {
  FakeCommunicator::Probe probe;
  std::promise<void> release;
  probe.release = release.get_future().share();
  GroupReaper reaper;
  reaper.Destroy(std::make_unique<FakeCommunicator>(&probe));
  reaper.Destroy(std::make_unique<FakeCommunicator>(&probe));
  // Destroy returned although the first destructor is held up.
  EXPECT_EQ(probe.destroyed, 0);
  release.set_value();
  EXPECT_TRUE(testing::WaitUntil([&] { return reaper.destroyed() == 2; }, 10s));
  EXPECT_EQ(probe.destroyed, 2);
  EXPECT_FALSE(probe.on_caller_thread);
}

TEST(GroupReaperTest, ExitWaitsForDestructionsUnderWayWithinItsGrace) {
  FakeCommunicator::Probe probe;
  std::promise<void> release;
  probe.release = release.get_future().share();
  std::thread releaser;
  {
    GroupReaper reaper(10s);
    reaper.Destroy(std::make_unique<FakeCommunicator>(&probe));
    releaser = std::thread([&] {
      std::this_thread::sleep_for(200ms);
      release.set_value();
    });
  }  // waits for the held-up destructor
  EXPECT_EQ(probe.destroyed, 1);
  releaser.join();
}

TEST(GroupReaperTest, ExitLeaksWhatIsStuckPastItsGrace) {
  // Leaked on purpose (the reaper's thread stays blocked in it): the probe must outlive it.
  auto* probe = new FakeCommunicator::Probe;
  auto* never = new std::promise<void>;
  probe->release = never->get_future().share();
  const auto start = std::chrono::steady_clock::now();
  {
    GroupReaper reaper(300ms);
    reaper.Destroy(std::make_unique<FakeCommunicator>(probe));
    reaper.Destroy(std::make_unique<FakeCommunicator>(probe));  // queued behind it: leaked
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  EXPECT_EQ(probe->destroyed, 0);
}

}  // namespace
}  // namespace ddprun::trainer
