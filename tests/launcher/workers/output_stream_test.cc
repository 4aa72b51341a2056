#include "launcher/workers/output_stream.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <pty.h>
#include <termios.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "common/log.h"
#include "launcher/workers/console_writer.h"

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

// issue 43, point 1: a line in progress (a tqdm bar, "loading...") reaches a pipe or a file as
// it is written, not when its line ends; without a prefix the bytes stay exactly the worker's.
TEST(OutputStreamTest, ALineInProgressIsShownUnchangedOnAStreamWithoutPrefix) {
  Pipe console;
  OutputStream s({console.write_fd(), "", -1, 0});
  s.Feed("epoch 1\n\r  0%|");
  EXPECT_TRUE(s.HasLineInProgress());
  s.FlushLineInProgress();
  EXPECT_FALSE(s.HasLineInProgress());
  s.Feed("\r 50%|##");
  s.FlushLineInProgress();
  s.FlushLineInProgress();  // nothing new: writes nothing
  s.Feed("\r100%|####|\ndone\n");
  s.Finish();
  EXPECT_EQ(console.Drain(), "epoch 1\n\r  0%|\r 50%|##\r100%|####|\ndone\n");
}

TEST(OutputStreamTest, ALineInProgressGetsItsPrefixOnceOnAStream) {
  Pipe console;
  OutputStream s({console.write_fd(), "[default0]:", -1, 1});
  s.Feed("loading");
  ASSERT_TRUE(s.HasLineInProgress());
  s.FlushLineInProgress();
  s.Feed("...");
  s.FlushLineInProgress();
  s.Feed(" done\nnext\n");
  s.Finish();
  EXPECT_EQ(console.Drain(), "[default0]:loading... done\n[default0]:next\n");
  EXPECT_EQ(s.Tail(), std::vector<std::string>{"next"});
}

TEST(OutputStreamTest, ARedrawnLineIsNotHeldForTheDelay) {
  // Redraws are shown at once (ShowUpdate): nothing waits for FlushLineInProgress.
  Pipe console;
  OutputStream s({console.write_fd(), "[default0]:", -1, 0});
  s.Feed("\r 10%");
  EXPECT_FALSE(s.HasLineInProgress());
  s.Finish();
  EXPECT_EQ(console.Drain(), "\r[default0]: 10%");
}

// Several ranks on one console (a ConsoleWriter): a rank's line in progress is ended before
// another rank's line, which never lands inside it; the rest of the first line starts a line of
// its own, with its prefix.
TEST(OutputStreamTest, AnotherRanksLineNeverLandsInsideALineInProgress) {
  for (const std::string prefix0 : {"", "[default0]:"}) {
    const std::string prefix1 = prefix0.empty() ? "" : "[default1]:";
    Pipe console;
    std::string got;
    {
      ConsoleWriter writer(console.write_fd(), "test");
      OutputStream::Config c0{console.write_fd(), prefix0, -1, 0};
      c0.console_writer = &writer;
      OutputStream::Config c1 = c0;
      c1.prefix = prefix1;
      OutputStream a(c0), b(c1);
      a.Feed("rank0 step");
      a.FlushLineInProgress();
      b.Feed("rank1 line\n");
      a.Feed(" 1 done\n");
      b.Feed("rank1 again\n");
      writer.WriteLine("[ddprun] a line of its own\n");
      ASSERT_TRUE(writer.FlushFor(std::chrono::seconds(5)));
    }
    got = console.Drain();
    EXPECT_EQ(got, prefix0 + "rank0 step\n" + prefix1 + "rank1 line\n" + prefix0 + " 1 done\n" +
                       prefix1 + "rank1 again\n[ddprun] a line of its own\n")
        << prefix0;
  }
}

TEST(OutputStreamTest, ALogLineDoesNotLandOnAnOpenProgressBar) {
  Pipe console;
  {
    ConsoleWriter writer(console.write_fd(), "test");
    OutputStream::Config c{console.write_fd(), "[default0]:", -1, 0};
    c.console_writer = &writer;
    OutputStream s(c);
    s.Feed("\r 10%");
    writer.WriteLine("[ddprun] note\n");
    s.Feed("\r 20%\n");
    ASSERT_TRUE(writer.FlushFor(std::chrono::seconds(5)));
  }
  EXPECT_EQ(console.Drain(), "\r[default0]: 10%\n[ddprun] note\n\r[default0]: 20%\n");
}

// ddprun's stdout and stderr on one file (2>&1, a Slurm output file): a line on one never lands
// inside a bar left open on the other; on two different files nothing is added.
TEST(OutputStreamTest, StdoutAndStderrOnOneFileNeverShareALine) {
  for (const bool same_file : {true, false}) {
    FILE* file = tmpfile();
    FILE* other = tmpfile();
    ASSERT_NE(file, nullptr);
    ASSERT_NE(other, nullptr);
    const int err_fd = same_file ? dup(fileno(file)) : fileno(other);
    {
      ConsoleWriter out(fileno(file), "stdout");
      ConsoleWriter err(err_fd, "stderr", &out);
      OutputStream::Config bar_config{err_fd, "", -1, 0};
      bar_config.console_writer = &err;
      OutputStream bar(bar_config);
      OutputStream::Config line_config{fileno(file), "", -1, 0};
      line_config.console_writer = &out;
      OutputStream line(line_config);
      bar.Feed("\r 10%");
      bar.FlushLineInProgress();
      line.Feed("@@0 finished\n");
      bar.Feed("\r100%\n");
      ASSERT_TRUE(out.FlushFor(std::chrono::seconds(5)));
      ASSERT_TRUE(err.FlushFor(std::chrono::seconds(5)));
    }
    auto contents = [](FILE* f) {
      std::string got(4096, '\0');
      rewind(f);
      got.resize(fread(got.data(), 1, got.size(), f));
      return got;
    };
    if (same_file) {
      EXPECT_EQ(contents(file), "\r 10%\n@@0 finished\n\r100%\n");
      close(err_fd);
    } else {
      EXPECT_EQ(contents(file), "@@0 finished\n");
      EXPECT_EQ(contents(other), "\r 10%\r100%\n");
    }
    fclose(file);
    fclose(other);
  }
}

// On a terminal two ranks' bars take turns on one line (a redraw replaces the line shown, as
// when workers write to the terminal themselves) instead of scrolling it a line per update; a
// whole line still gets a line of its own.
TEST(OutputStreamTest, OnATerminalTwoRanksRedrawsTakeTurnsOnOneLine) {
  int master = -1, slave = -1;
  ASSERT_EQ(openpty(&master, &slave, nullptr, nullptr, nullptr), 0);
  termios raw{};
  tcgetattr(slave, &raw);
  cfmakeraw(&raw);  // bytes as written, no \n -> \r\n
  tcsetattr(slave, TCSANOW, &raw);
  {
    ConsoleWriter writer(slave, "test");
    OutputStream::Config c{slave, "", -1, 0};
    c.console = OutputStream::Console::kTerminal;
    c.console_writer = &writer;
    OutputStream a(c), b(c), other(c);
    a.Feed("\r@0 10%");
    b.Feed("\r@1 10%");
    a.Feed("\r@0 20%");
    other.Feed("done\n");
    ASSERT_TRUE(writer.FlushFor(std::chrono::seconds(5)));
  }
  close(slave);
  std::string seen;
  char buf[256];
  ssize_t n;
  while ((n = read(master, buf, sizeof(buf))) > 0) seen.append(buf, static_cast<size_t>(n));
  close(master);
  EXPECT_EQ(seen, "\r@0 10%\r@1 10%\r@0 20%\ndone\n");
}

}  // namespace
}  // namespace ddprun::launcher
