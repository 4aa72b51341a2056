// launcher/preload/hand_over_receipt: a real socket pair as the pool makes it (ddprun's end, the
// spare's end and the receipt's copy of the spare's end), with the spare's side played by hand.
#include "launcher/preload/hand_over_receipt.h"

#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include "absl/strings/string_view.h"
#include "common/fd_passing.h"
#include "gtest/gtest.h"

namespace ddprun::launcher {
namespace {

constexpr absl::string_view kStart("start\0A=1", 9);

// ends[0]: ddprun's; ends[1]: the spare's; the receipt holds a copy of ends[1].
struct HandOverSockets {
  HandOverSockets() {
    EXPECT_EQ(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, ends), 0);
    receipt = HandOverReceipt(dup(ends[1]));
  }
  ~HandOverSockets() {
    for (int fd : ends) {
      if (fd >= 0) close(fd);
    }
  }
  // ddprun hands the start over and closes its end, as SparePool::Launch does.
  void HandOver() {
    EXPECT_EQ(SendWithFds(ends[0], kStart, {}), static_cast<ssize_t>(kStart.size()));
    close(ends[0]);
    ends[0] = -1;
  }
  // The spare exits: its descriptor of its end goes (the receipt's copy stays).
  void SpareExits() {
    close(ends[1]);
    ends[1] = -1;
  }
  int ends[2] = {-1, -1};
  HandOverReceipt receipt;
};

TEST(HandOverReceiptTest, AStartTheSpareReadIsTaken) {
  HandOverSockets s;
  s.HandOver();
  ReceivedMessage m = ReceiveWithFds(s.ends[1], 1 << 16, 2);
  EXPECT_EQ(m.message, kStart);
  s.SpareExits();
  EXPECT_EQ(s.receipt.Settle(), HandOver::kTaken);
}

TEST(HandOverReceiptTest, AStartStillQueuedWhenTheSpareIsGoneIsUnread) {
  HandOverSockets s;
  s.HandOver();
  s.SpareExits();
  EXPECT_EQ(s.receipt.Settle(), HandOver::kUnread);
  EXPECT_EQ(s.receipt.Settle(), HandOver::kNone) << "settled once";
}

// The issue 40 race: ddprun closed its end with the spare's "ready" unread, so the kernel
// reports ECONNRESET on the spare's end before the queued start; still unread.
TEST(HandOverReceiptTest, AnUnreadStartBehindAConnectionResetIsUnread) {
  HandOverSockets s;
  ASSERT_EQ(SendWithFds(s.ends[1], "ready", {}), 5);
  s.HandOver();
  s.SpareExits();
  EXPECT_EQ(s.receipt.Settle(), HandOver::kUnread);
}

TEST(HandOverReceiptTest, AColdStartHasNothingToTell) {
  HandOverReceipt cold;
  EXPECT_EQ(cold.Settle(), HandOver::kNone);
  HandOverSockets s;
  HandOverReceipt moved = std::move(s.receipt);
  EXPECT_EQ(s.receipt.Settle(), HandOver::kNone) << "moved from";
  s.HandOver();
  s.SpareExits();
  EXPECT_EQ(moved.Settle(), HandOver::kUnread);
}

}  // namespace
}  // namespace ddprun::launcher
