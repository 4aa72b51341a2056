// launcher/process/stack_text: the innermost frames of a stacks file, in both of its formats.
#include "launcher/process/stack_text.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ddprun::launcher {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

constexpr char kFaulthandler[] =
    "Thread 0x00007f (most recent call first):\n"
    "  File \"/w/train.py\", line 12 in inner\n"
    "  File \"/w/train.py\", line 30 in step\n"
    "  File \"/w/train.py\", line 44 in <module>\n"
    "\n"
    "Thread 0x00007e (most recent call first):\n"
    "  File \"/w/loader.py\", line 3 in fetch\n";

constexpr char kEuStack[] =
    "PID 42 - process\n"
    "TID 42:\n"
    "#0  0x00007f0 clock_nanosleep\n"
    "#1  0x00007f1 nanosleep\n"
    "#2  0x00007f2 main\n"
    "TID 43:\n"
    "#0  0x00007f3 epoll_wait\n";

TEST(StackTextTest, PythonFramesOfTheFirstThreadInnermostFirst) {
  EXPECT_THAT(InnermostFrames(kFaulthandler, 2),
              ElementsAre("File \"/w/train.py\", line 12 in inner",
                          "File \"/w/train.py\", line 30 in step"));
  EXPECT_EQ(InnermostFrames(kFaulthandler, 10).size(), 3u);  // the second thread is not read
}

TEST(StackTextTest, NativeFramesWhenThereIsNoPythonDump) {
  EXPECT_THAT(InnermostFrames(kEuStack, 2),
              ElementsAre("#0  0x00007f0 clock_nanosleep", "#1  0x00007f1 nanosleep"));
  EXPECT_EQ(InnermostFrames(kEuStack, 10).size(), 3u);
}

TEST(StackTextTest, PythonFramesWinOverNativeOnesAnywhereInTheFile) {
  const std::string both = std::string(kEuStack) + "\n" + kFaulthandler;
  EXPECT_THAT(InnermostFrames(both, 1), ElementsAre("File \"/w/train.py\", line 12 in inner"));
}

TEST(StackTextTest, NothingRecognisableGivesNoFrames) {
  EXPECT_THAT(InnermostFrames("", 3), IsEmpty());
  EXPECT_THAT(InnermostFrames("eu-stack: dwfl_linux_proc_attach pid 42: Operation not permitted\n"
                              "#include <x>\n#\n",
                              3),
              IsEmpty());
  EXPECT_THAT(InnermostFrames(kFaulthandler, 0), IsEmpty());
}

TEST(StackTextTest, LinesAreTrimmedAndCarriageReturnsDropped) {
  EXPECT_THAT(InnermostFrames("\t#0  0x1 f  \r\n#1 0x2 g\r\n", 5),
              ElementsAre("#0  0x1 f", "#1 0x2 g"));
}

}  // namespace
}  // namespace ddprun::launcher
