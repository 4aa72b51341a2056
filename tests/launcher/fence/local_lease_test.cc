// LocalLease (the agent's side) and LeaseView (the workers' side) on one real memfd page.
#include "launcher/fence/local_lease.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <optional>

#include "absl/strings/str_cat.h"
#include "common/lease_page.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ddprun::launcher::fence {
namespace {

using ::testing::HasSubstr;
using namespace std::chrono_literals;

int64_t Ns(TimePoint t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

std::unique_ptr<LocalLease> NewLease(Duration length,
                                     std::optional<Duration> liveness_length = std::nullopt) {
  absl::StatusOr<std::unique_ptr<LocalLease>> lease = LocalLease::Create(length, liveness_length);
  EXPECT_TRUE(lease.ok()) << lease.status();
  return lease.ok() ? *std::move(lease) : nullptr;
}

TEST(LocalLeaseTest, IsNeverValidBeforeTheServerFirstVouches) {
  auto lease = NewLease(2s);
  ASSERT_NE(lease, nullptr);
  EXPECT_EQ(lease->valid_until_ns(), 0);
  EXPECT_FALSE(lease->ValidAt(TimePoint(1s)));
}

TEST(LocalLeaseTest, LastsItsLengthFromWhenTheAnsweredMessageWasSent) {
  auto lease = NewLease(1500ms);
  ASSERT_NE(lease, nullptr);
  const TimePoint sent(100s);
  lease->Renew(sent);
  EXPECT_TRUE(lease->ValidAt(sent));
  EXPECT_TRUE(lease->ValidAt(sent + 1500ms - 1ns));
  EXPECT_FALSE(lease->ValidAt(sent + 1500ms));
  EXPECT_EQ(lease->valid_until_ns(), Ns(sent + 1500ms));
}

TEST(LocalLeaseTest, AnOlderAnswerNeverShortensIt) {
  auto lease = NewLease(1s);
  ASSERT_NE(lease, nullptr);
  lease->Renew(TimePoint(50s));
  lease->Renew(TimePoint(40s));  // an answer to an earlier call, read late
  EXPECT_EQ(lease->valid_until_ns(), Ns(TimePoint(51s)));
  lease->Renew(TimePoint(52s));
  EXPECT_EQ(lease->valid_until_ns(), Ns(TimePoint(53s)));
}

// With the liveness path on, the stream's answers keep the lease (with its long length) until
// a liveness ack offers the silence verdict, which replaces their end with the short one; after
// it the stream renews nothing, or a frozen node's workers could commit for the stream's length
// after a wake.
TEST(LocalLeaseTest, AnAckOfferingTheSilenceVerdictTakesOverFromTheStream) {
  auto lease = NewLease(12500ms, 232ms);
  ASSERT_NE(lease, nullptr);
  lease->Renew(TimePoint(10s), Voucher::kStream);
  EXPECT_EQ(lease->valid_until_ns(), Ns(TimePoint(10s) + 12500ms));
  lease->Renew(TimePoint(11s), Voucher::kLivenessBySilence);
  EXPECT_EQ(lease->valid_until_ns(), Ns(TimePoint(11s) + 232ms));
  lease->Renew(TimePoint(12s), Voucher::kStream);  // no longer renews
  EXPECT_EQ(lease->valid_until_ns(), Ns(TimePoint(11s) + 232ms));
  lease->Renew(TimePoint(11s) + 20ms, Voucher::kLivenessBySilence);
  EXPECT_EQ(lease->valid_until_ns(), Ns(TimePoint(11s) + 252ms));
}

// Acks under the lease's verdict (liveness=auto with no spare ready) leave the stream in
// charge: its answers every keep_alive_interval keep the workers' lease valid in between.
TEST(LocalLeaseTest, AcksUnderTheLeasesVerdictLeaveTheStreamsLease) {
  auto lease = NewLease(12500ms, 232ms);
  ASSERT_NE(lease, nullptr);
  lease->Renew(TimePoint(10s), Voucher::kStream);
  lease->Renew(TimePoint(11s), Voucher::kLivenessByLease);
  EXPECT_EQ(lease->valid_until_ns(), Ns(TimePoint(10s) + 12500ms));
  lease->Renew(TimePoint(15s), Voucher::kStream);
  EXPECT_EQ(lease->valid_until_ns(), Ns(TimePoint(15s) + 12500ms));
}

// The offer withdrawn (the spare was taken): the lease follows the stream again, from its latest
// answer, including one that came while the liveness acks ruled; the server's lease of this node
// runs from no earlier than that answer's heartbeat.
TEST(LocalLeaseTest, AWithdrawnOfferHandsTheLeaseBackToTheStream) {
  auto lease = NewLease(12500ms, 232ms);
  ASSERT_NE(lease, nullptr);
  lease->Renew(TimePoint(10s), Voucher::kStream);
  lease->Renew(TimePoint(11s), Voucher::kLivenessBySilence);
  lease->Renew(TimePoint(15s), Voucher::kStream);  // remembered, not applied
  EXPECT_EQ(lease->valid_until_ns(), Ns(TimePoint(11s) + 232ms));
  lease->Renew(TimePoint(16s), Voucher::kLivenessByLease);
  EXPECT_EQ(lease->valid_until_ns(), Ns(TimePoint(15s) + 12500ms));
  // Offered again: the short lease replaces the stream's end at once.
  lease->Renew(TimePoint(17s), Voucher::kLivenessBySilence);
  EXPECT_EQ(lease->valid_until_ns(), Ns(TimePoint(17s) + 232ms));
}

// Datagrams that never get through (an older server, UDP filtered): the stream's answers go on
// keeping the workers' lease valid between heartbeats.
TEST(LocalLeaseTest, ALivenessPathThatNeverAnswersLeavesTheStreamsLease) {
  auto lease = NewLease(12500ms, 232ms);
  ASSERT_NE(lease, nullptr);
  for (int i = 0; i < 3; ++i) {
    const TimePoint sent = TimePoint(10s) + i * 5s;
    lease->Renew(sent, Voucher::kStream);
    EXPECT_TRUE(lease->ValidAt(sent + 5s + 100ms));  // until the next heartbeat's answer
  }
}

TEST(LocalLeaseTest, WorkersSeeEveryRenewalThroughTheirReadOnlyDescriptor) {
  auto lease = NewLease(3s);
  ASSERT_NE(lease, nullptr);
  const int fd = lease->worker_fd();
  // Inherited by the workers the agent spawns, at the same number.
  EXPECT_EQ(fcntl(fd, F_GETFD) & FD_CLOEXEC, 0);
  // ... and never writable by them.
  EXPECT_EQ(mmap(nullptr, kLeasePageSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0), MAP_FAILED);
  EXPECT_EQ(errno, EACCES);
  absl::StatusOr<std::unique_ptr<LeaseView>> view = LeaseView::FromVariable(std::to_string(fd));
  ASSERT_TRUE(view.ok()) << view.status();
  ASSERT_NE(*view, nullptr);
  EXPECT_FALSE((*view)->ValidNow());
  lease->Renew(std::chrono::steady_clock::now());
  EXPECT_TRUE((*view)->ValidNow());
  EXPECT_EQ((*view)->valid_until_ns(), lease->valid_until_ns());
}

TEST(LeaseViewTest, NoVariableNoLease) {
  absl::StatusOr<std::unique_ptr<LeaseView>> view = LeaseView::FromVariable("");
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_EQ(*view, nullptr);
}

TEST(LeaseViewTest, ABadValueIsAnErrorNamingTheVariable) {
  for (const char* value : {"x", "-1", "12abc"}) {
    absl::StatusOr<std::unique_ptr<LeaseView>> view = LeaseView::FromVariable(value);
    ASSERT_FALSE(view.ok()) << value;
    EXPECT_THAT(view.status().message(), HasSubstr(absl::StrCat("DDPRUN_LEASE_FD=", value)));
  }
  // A descriptor that is not a lease page (a plain memfd of zeros).
  const int fd = memfd_create("not-a-lease", MFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, kLeasePageSize), 0);
  absl::StatusOr<std::unique_ptr<LeaseView>> view = LeaseView::FromVariable(std::to_string(fd));
  ASSERT_FALSE(view.ok());
  EXPECT_THAT(view.status().message(), HasSubstr("not a ddprun lease page"));
  close(fd);
}

TEST(LeaseLengthTest, EndsHalfAnIntervalBeforeTheServersLease) {
  rendezvous::RunTimeouts t;
  t.keep_alive_interval = 5s;
  t.keep_alive_max_attempt = 3;  // the server gives the node up after 15 s of silence
  EXPECT_EQ(LeaseLength(t), 12500ms);
  t.keep_alive_interval = 1s;
  t.keep_alive_max_attempt = 2;
  EXPECT_EQ(LeaseLength(t), 1500ms);
  // One attempt leaves no room: never shorter than an interval and a half (no stall between
  // heartbeats).
  t.keep_alive_max_attempt = 1;
  EXPECT_EQ(LeaseLength(t), 1500ms);
}

TEST(LeaseLengthTest, WithLivenessItEndsBeforeTheDetectorCanDeclareTheNode) {
  rendezvous::RunTimeouts t;
  t.liveness.mode = rendezvous::LivenessMode::kAuto;
  // pause 120 ms + z(phi 8) = 5.61 x the 20 ms floor: the server's detector suspects no sooner
  // after a heartbeat's arrival, so a lease from that heartbeat's send time ends first.
  const Duration length = LeaseLength(t);
  EXPECT_GE(length, 231ms);
  EXPECT_LE(length, 233ms);
  // Several acks at 20 ms within it, and far below the stream's lease.
  EXPECT_GT(length, 5 * t.liveness.interval);
  t.liveness.pause = 300ms;
  EXPECT_GE(LeaseLength(t), 411ms);
}

}  // namespace
}  // namespace ddprun::launcher::fence
