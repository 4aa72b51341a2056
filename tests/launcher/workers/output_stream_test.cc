#include "launcher/workers/output_stream.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "common/log.h"

namespace ddprun::launcher {
namespace {

// Captures what an OutputStream writes to its console fd through a pipe.
class Pipe {
 public:
  Pipe() { EXPECT_EQ(pipe(fds_), 0); }
  ~Pipe() {
    close(fds_[0]);
    if (fds_[1] >= 0) close(fds_[1]);
  }
  int write_fd() const { return fds_[1]; }
  std::string Drain() {
    close(fds_[1]);
    fds_[1] = -1;
    std::string out;
    char buf[4096];
    ssize_t n;
    while ((n = read(fds_[0], buf, sizeof(buf))) > 0) out.append(buf, n);
    return out;
  }

 private:
  int fds_[2];
};

TEST(OutputStreamTest, PrefixesWholeLinesOnly) {
  Pipe console;
  OutputStream s({console.write_fd(), "[default1]:", -1, 0});
  s.Feed("hel");
  s.Feed("lo\nwor");
  s.Feed("ld\n\nlast");
  s.Finish();
  // On a pipe only prefixes are added: the unfinished last line stays unfinished.
  EXPECT_EQ(console.Drain(), "[default1]:hello\n[default1]:world\n[default1]:\n[default1]:last");
}

TEST(OutputStreamTest, OnATerminalTheLastLineIsEnded) {
  Pipe console;
  OutputStream::Config c{console.write_fd(), "[default1]:", -1, 0};
  c.console = OutputStream::Console::kTerminal;
  OutputStream s(c);
  s.Feed("hello\nlast");
  s.Finish();
  EXPECT_EQ(console.Drain(), "[default1]:hello\n[default1]:last\n");
}

// issue 28: `ddprun --no-python /bin/cat FILE > out` must give FILE back byte for byte.
TEST(OutputStreamTest, WithoutPrefixAStreamGetsTheBytesUnchanged) {
  FILE* console = tmpfile();
  ASSERT_NE(console, nullptr);
  std::string bytes = "a\rb\nabc\r\n\r\n\rprogress\r";
  bytes += std::string(3 * OutputStream::kMaxLine + 7, 'x');  // a line longer than kMaxLine
  unsigned state = 12345;
  for (int i = 0; i < 1 << 20; ++i) {  // 1 MiB of arbitrary bytes, NULs and \r included
    state = state * 1103515245u + 12345u;
    bytes.push_back(static_cast<char>(state >> 16));
  }
  OutputStream s({fileno(console), "", -1, 3});
  for (size_t at = 0; at < bytes.size(); at += 4093) s.Feed(bytes.substr(at, 4093));
  s.Finish();
  std::string got(bytes.size() + 1, '\0');
  rewind(console);
  got.resize(fread(got.data(), 1, got.size(), console));
  fclose(console);
  EXPECT_EQ(got.size(), bytes.size());
  EXPECT_TRUE(got == bytes);
}

TEST(OutputStreamTest, WithAPrefixOnlyThePrefixesAreAdded) {
  // A file, not a pipe: the output is larger than a pipe's buffer.
  FILE* console = tmpfile();
  ASSERT_NE(console, nullptr);
  OutputStream s({fileno(console), "[p]:", -1, 0});
  s.Feed("abc\r\nplain\n");
  s.Feed(std::string(OutputStream::kMaxLine + 2, 'y'));
  s.Feed("z\n");
  s.Finish();
  std::string got(4 * OutputStream::kMaxLine, '\0');
  rewind(console);
  got.resize(fread(got.data(), 1, got.size(), console));
  fclose(console);
  EXPECT_TRUE(got ==
              "[p]:abc\r\n[p]:plain\n[p]:" + std::string(OutputStream::kMaxLine + 2, 'y') + "z\n");
}

TEST(OutputStreamTest, InterleavedRanksNeverCutALine) {
  Pipe console;
  OutputStream a({console.write_fd(), "[default0]:", -1, 0});
  OutputStream b({console.write_fd(), "[default1]:", -1, 0});
  a.Feed("rank zero ");
  b.Feed("rank one ");
  a.Feed("line\n");
  b.Feed("line\n");
  EXPECT_EQ(console.Drain(), "[default0]:rank zero line\n[default1]:rank one line\n");
}

TEST(OutputStreamTest, FilteredLinesGoWholeToTheSharedFilteredFile) {
  Pipe console, filtered;
  OutputStream::Config c{console.write_fd(), "", -1, 0};
  c.filtered_fd = filtered.write_fd();
  c.filters = {"loss", "acc"};
  c.filtered_prefix = "[default0]:";
  OutputStream s(c);
  s.Feed("step 1 lo");
  s.Feed("ss 0.5\nnoise\nac");
  s.Feed("c 0.9");
  s.Finish();
  EXPECT_EQ(filtered.Drain(), "[default0]:step 1 loss 0.5\n[default0]:acc 0.9\n");
  EXPECT_EQ(console.Drain(), "step 1 loss 0.5\nnoise\nacc 0.9");  // unchanged bytes
}

TEST(OutputStreamTest, CarriageReturnUpdatesAreShownAsTheyComeEachWhole) {
  Pipe console;
  OutputStream::Config c{console.write_fd(), "[default0]:", -1, 2};
  c.console = OutputStream::Console::kTerminal;
  OutputStream s(c);
  s.Feed("\r  0%|");
  s.Feed("     |\r 50%|##");  // the 0% update is superseded within this read
  s.Feed("###|");
  s.Feed("\r100%|#####|\n");
  s.Feed("done\r\n");  // CRLF is a plain line end
  EXPECT_EQ(console.Drain(),
            "\r[default0]:  0%|"
            "\r[default0]: 50%|##"
            "\r[default0]: 50%|#####|"
            "\r[default0]:100%|#####|\n"
            "[default0]:done\n");
  EXPECT_EQ(s.Tail(), (std::vector<std::string>{"100%|#####|", "done"}));
}

TEST(OutputStreamTest, LogFileGetsRawBytesAndTailKeepsLastLines) {
  Pipe log;
  OutputStream s({-1, "", log.write_fd(), 2});
  s.Feed("a\nb\nc\npartial");
  s.Finish();
  EXPECT_EQ(log.Drain(), "a\nb\nc\npartial");
  EXPECT_EQ(s.Tail(), (std::vector<std::string>{"c", "partial"}));
}

// issue 28, point 18: a full disk truncates a log file; ddprun says so once, naming it.
TEST(OutputStreamTest, ALogFileThatCannotBeWrittenIsReportedOnce) {
  struct Capture : LogSink {
    void WriteLine(std::string line) override { lines.push_back(std::move(line)); }
    std::vector<std::string> lines;
  } capture;
  const int full = open("/dev/full", O_WRONLY);
  ASSERT_GE(full, 0);
  OutputStream::Config c{-1, "", full, 0};
  c.log_path = "/logs/attempt_0/0/stdout.log";
  OutputStream s(c);
  SetLogSink(&capture);
  s.Feed("one\n");
  s.Feed("two\n");
  SetLogSink(nullptr);
  close(full);
  ASSERT_EQ(capture.lines.size(), 1u);
  EXPECT_NE(capture.lines[0].find("cannot write the worker's log /logs/attempt_0/0/stdout.log: "
                                  "No space left on device"),
            std::string::npos)
      << capture.lines[0];
}

TEST(OutputStreamTest, OverlongLineIsEmittedInPieces) {
  // A file, not a pipe: the output is larger than a pipe's buffer.
  FILE* console = tmpfile();
  ASSERT_NE(console, nullptr);
  OutputStream s({fileno(console), "", -1, 0});
  s.Feed(std::string(OutputStream::kMaxLine + 10, 'x'));
  // Emitted without waiting for a newline that may never come: buffering is bounded.
  fseek(console, 0, SEEK_END);
  // The kMaxLine bytes went out; the piece added no newline (issue 28: it used to).
  EXPECT_EQ(static_cast<size_t>(ftell(console)), OutputStream::kMaxLine + 10);
  s.Feed("tail\n");
  s.Finish();
  fseek(console, 0, SEEK_END);
  EXPECT_EQ(static_cast<size_t>(ftell(console)), OutputStream::kMaxLine + 10 + 5);
  fclose(console);
}

}  // namespace
}  // namespace ddprun::launcher
