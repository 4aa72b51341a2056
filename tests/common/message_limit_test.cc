// The one message-size limit and the one way to cut a message to it.
#include "common/message_limit.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ddprun {
namespace {

using ::testing::EndsWith;
using ::testing::StartsWith;

TEST(MessageLimitTest, AShortMessageIsKept) {
  EXPECT_EQ(AbbreviateMessage("short"), "short");
  const std::string exact(kMaxMessageBytes, 'x');
  EXPECT_EQ(AbbreviateMessage(exact), exact);
}

TEST(MessageLimitTest, ALongMessageIsCutAndSaysHowMuchMoreThereWas) {
  const std::string text(kMaxMessageBytes + 100, 'x');
  const std::string cut = AbbreviateMessage(text);
  EXPECT_THAT(cut, StartsWith(std::string(kMaxMessageBytes, 'x') + " ... (100 more bytes)"));
  EXPECT_EQ(cut.size(), kMaxMessageBytes + std::string(" ... (100 more bytes)").size());
  EXPECT_THAT(AbbreviateMessage(text, "the whole text is in the error file", 10),
              EndsWith(" ... (4186 more bytes; the whole text is in the error file)"));
}

TEST(MessageLimitTest, NeverCutsACharacterInTwo) {
  // "é" is two bytes: a cut at an odd byte would leave half of one (invalid UTF-8, which a
  // protobuf string field and JSON refuse).
  std::string text;
  for (int i = 0; i < 10; ++i) text += "\xc3\xa9";
  const std::string cut = AbbreviateMessage(text, "", 5);
  EXPECT_THAT(cut, StartsWith("\xc3\xa9\xc3\xa9 ... (16 more bytes)"));
}

}  // namespace
}  // namespace ddprun
