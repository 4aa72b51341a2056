// FifoChannel on a real named pipe and a real EventLoop: whole lines only, partial writes
// joined, oversized lines dropped whole, a flood never starves the loop, bad paths refused.
#include "launcher/hangs/fifo_channel.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

namespace ddprun::launcher {
namespace {

class FifoChannelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/fifo_channel_test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/pipe";
  }
  void TearDown() override { std::system(("rm -rf " + dir_).c_str()); }

  // Runs the loop until `done` holds or 5 s pass.
  void RunUntil(const std::function<bool()>& done) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    std::function<void()> check = [&] {
      if (done() || std::chrono::steady_clock::now() > deadline) {
        loop_.Stop();
      } else {
        loop_.AddTimerAfter(std::chrono::milliseconds(5), check);
      }
    };
    loop_.AddTimerAfter(std::chrono::milliseconds(0), check);
    loop_.Run();
  }

  std::string dir_, path_;
  EventLoop loop_;
  std::vector<std::string> lines_;
  int oversized_ = 0;
};

TEST_F(FifoChannelTest, WholeLinesFromWritersThatComeAndGo) {
  auto channel = FifoChannel::Open(&loop_, path_, [&](absl::string_view l, bool big) {
    if (big)
      ++oversized_;
    else
      lines_.emplace_back(l);
  });
  ASSERT_TRUE(channel.ok()) << channel.status();
  struct stat st;
  ASSERT_EQ(stat(path_.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
  // Like torch's client: open, write one line, close; then a writer splitting a line in two.
  for (const char* msg : {"first\n", "second\nthird\n"}) {
    int fd = open(path_.c_str(), O_WRONLY | O_NONBLOCK);
    ASSERT_GE(fd, 0);
    ASSERT_GT(write(fd, msg, strlen(msg)), 0);
    close(fd);
  }
  RunUntil([&] { return lines_.size() == 3; });
  // A line split over two writes (and two reads) arrives whole, once.
  int fd = open(path_.c_str(), O_WRONLY | O_NONBLOCK);
  ASSERT_EQ(write(fd, "four", 4), 4);
  (*channel)->Drain();
  EXPECT_EQ(lines_.size(), 3u);
  ASSERT_EQ(write(fd, "th\n\n", 4), 4);
  close(fd);
  (*channel)->Drain();
  EXPECT_EQ(lines_, (std::vector<std::string>{"first", "second", "third", "fourth"}));
  // Removed when the agent is done with it, because it created it.
  channel->reset();
  EXPECT_NE(access(path_.c_str(), F_OK), 0);
}

TEST_F(FifoChannelTest, OversizedLinesAreDroppedWholeAndReadingGoesOn) {
  auto channel = FifoChannel::Open(&loop_, path_, [&](absl::string_view l, bool big) {
    if (big)
      ++oversized_;
    else
      lines_.emplace_back(l);
  });
  ASSERT_TRUE(channel.ok());
  int fd = open(path_.c_str(), O_WRONLY | O_NONBLOCK);
  std::string huge(FifoChannel::kMaxLine * 3, 'x');
  std::thread writer([&] {
    // Blocking writes from another thread: more than the pipe holds.
    int wfd = open(path_.c_str(), O_WRONLY);
    std::string data = "before\n" + huge + "\nafter\n";
    size_t off = 0;
    while (off < data.size()) {
      ssize_t n = write(wfd, data.data() + off, data.size() - off);
      if (n <= 0) break;
      off += static_cast<size_t>(n);
    }
    close(wfd);
  });
  RunUntil([&] { return lines_.size() == 2; });
  writer.join();
  close(fd);
  EXPECT_EQ(lines_, (std::vector<std::string>{"before", "after"}));
  EXPECT_EQ(oversized_, 1);
}

TEST_F(FifoChannelTest, AFloodingWriterDoesNotStarveTheLoop) {
  size_t count = 0;
  auto channel = FifoChannel::Open(&loop_, path_, [&](absl::string_view, bool) { ++count; });
  ASSERT_TRUE(channel.ok());
  std::atomic<bool> stop{false};
  std::atomic<bool> flood_done{false};
  std::thread flood([&] {
    int fd = open(path_.c_str(), O_WRONLY);
    const std::string junk(100, 'j');
    const std::string line = junk + "\n";
    while (!stop.load()) {
      if (write(fd, line.data(), line.size()) < 0) break;
    }
    close(fd);
    flood_done.store(true);
  });
  // Timers keep firing on time while the pipe never runs dry.
  int ticks = 0;
  const auto start = std::chrono::steady_clock::now();
  RunUntil([&] { return ++ticks >= 20; });
  const auto took = std::chrono::steady_clock::now() - start;
  stop.store(true);
  // The writer may be blocked on a full pipe, where it cannot see `stop`: the loop reads on until
  // it has (a slow machine, or qemu, fills the pipe before `stop` is set).
  RunUntil([&] { return flood_done.load(); });
  flood.join();
  EXPECT_GE(ticks, 20);
  EXPECT_LT(took, std::chrono::seconds(3));
  EXPECT_GT(count, 100u);
}

TEST_F(FifoChannelTest, AnExistingFifoIsUsedAndKeptAnythingElseIsRefused) {
  ASSERT_EQ(mkfifo(path_.c_str(), 0600), 0);
  {
    auto channel = FifoChannel::Open(&loop_, path_, [](absl::string_view, bool) {});
    ASSERT_TRUE(channel.ok());
  }
  EXPECT_EQ(access(path_.c_str(), F_OK), 0);  // not ours: left in place
  const std::string file = dir_ + "/plain";
  close(open(file.c_str(), O_CREAT | O_WRONLY, 0600));
  auto refused = FifoChannel::Open(&loop_, file, [](absl::string_view, bool) {});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find(file + ": exists and is not a FIFO"),
            std::string::npos);
  auto missing_dir =
      FifoChannel::Open(&loop_, dir_ + "/no/such/dir/p", [](absl::string_view, bool) {});
  EXPECT_FALSE(missing_dir.ok());
}

}  // namespace
}  // namespace ddprun::launcher
