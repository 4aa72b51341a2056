// The control channel's wire format: every message survives a round trip, and every line that
// is not a valid message is refused with a kInvalidArgument naming what is wrong.
#include "control/control_message.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "absl/strings/str_cat.h"

namespace ddprun::control {
namespace {

using ::testing::HasSubstr;

// Parses `line`, expecting a refusal whose message contains `what`.
void ExpectRefused(const std::string& line, const std::string& what) {
  absl::StatusOr<ControlMessage> m = ParseControlMessage(line);
  ASSERT_FALSE(m.ok()) << line;
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument) << line;
  EXPECT_THAT(std::string(m.status().message()), HasSubstr(what)) << line;
}

template <typename T>
T RoundTrip(const T& message) {
  const std::string line = EncodeControlMessage(message);
  EXPECT_EQ(line.find('\n'), std::string::npos) << line;
  absl::StatusOr<ControlMessage> parsed = ParseControlMessage(line);
  EXPECT_TRUE(parsed.ok()) << parsed.status() << ": " << line;
  if (!parsed.ok()) return T{};
  const T* m = std::get_if<T>(&*parsed);
  EXPECT_NE(m, nullptr) << line;
  return m ? *m : T{};
}

// A valid round message with `field` replaced by `value` (raw JSON).
std::string RoundWith(const std::string& field, const std::string& value) {
  const std::pair<const char*, const char*> fields[] = {{"round", "3"},
                                                        {"rank", "5"},
                                                        {"world_size", "8"},
                                                        {"local_rank", "1"},
                                                        {"local_world_size", "2"},
                                                        {"group_rank", "2"},
                                                        {"group_world_size", "4"},
                                                        {"master_addr", "\"10.0.0.1\""},
                                                        {"master_port", "29500"},
                                                        {"restart_count", "1"},
                                                        {"store_prefix", "\"/ddprun/round_3/\""},
                                                        {"deadline_ms", "60000"}};
  std::string line = "{\"type\":\"round\"";
  for (const auto& [name, v] : fields) {
    if (name == field && value.empty()) continue;  // the field left out
    absl::StrAppend(&line, ",\"", name, "\":", name == field ? value : v);
  }
  return line + "}";
}

TEST(ControlMessageTest, HelloRoundTrips) {
  HelloMessage hello;
  hello.local_rank = 3;
  hello.pid = 4242;
  const HelloMessage back = RoundTrip(hello);
  EXPECT_EQ(back.version, kControlProtocolVersion);
  EXPECT_EQ(back.local_rank, 3);
  EXPECT_EQ(back.pid, 4242);
}

TEST(ControlMessageTest, AHelloSaysWhetherItTakesAdviceAndAdviceRoundTrips) {
  HelloMessage hello;
  hello.local_rank = 0;
  hello.pid = 7;
  EXPECT_FALSE(RoundTrip(hello).advice) << "an older worker's hello says nothing";
  hello.advice = true;
  EXPECT_TRUE(RoundTrip(hello).advice);
  EXPECT_DOUBLE_EQ(RoundTrip(AdviceMessage{42.5}).checkpoint_interval_s, 42.5);
  for (const char* bad : {R"({"type":"advice"})", R"({"type":"advice","checkpoint_interval_s":0})",
                          R"({"type":"advice","checkpoint_interval_s":"soon"})"}) {
    EXPECT_FALSE(ParseControlMessage(bad).ok()) << bad;
  }
}

TEST(ControlMessageTest, ReadyRoundTripsWithAndWithoutState) {
  ReadyMessage ready;
  ready.round = 7;
  ready.step = 1234;
  ReadyMessage back = RoundTrip(ready);
  EXPECT_EQ(back.round, 7);
  EXPECT_EQ(back.step, 1234);
  ready.step = -1;  // no state yet
  EXPECT_EQ(RoundTrip(ready).step, -1);
}

TEST(ControlMessageTest, RoundRoundTripsEveryField) {
  RoundMessage round;
  round.round = 3;
  round.rank = 5;
  round.world_size = 8;
  round.local_rank = 1;
  round.local_world_size = 2;
  round.group_rank = 2;
  round.group_world_size = 4;
  round.master_addr = "node-1.cluster";
  round.master_port = 65535;
  round.restart_count = 9;
  round.store_prefix = RoundStorePrefix(3);
  round.deadline_ms = 60000;
  const RoundMessage back = RoundTrip(round);
  EXPECT_EQ(back.round, 3);
  EXPECT_EQ(back.rank, 5);
  EXPECT_EQ(back.world_size, 8);
  EXPECT_EQ(back.local_rank, 1);
  EXPECT_EQ(back.local_world_size, 2);
  EXPECT_EQ(back.group_rank, 2);
  EXPECT_EQ(back.group_world_size, 4);
  EXPECT_EQ(back.master_addr, "node-1.cluster");
  EXPECT_EQ(back.master_port, 65535);
  EXPECT_EQ(back.restart_count, 9);
  EXPECT_EQ(back.store_prefix, "/ddprun/round_3/");
  EXPECT_EQ(back.deadline_ms, 60000);
}

TEST(ControlMessageTest, AbortRoundTripsAReasonWithNewlinesAndQuotes) {
  AbortMessage abort;
  abort.round = 2;
  abort.reason = "rank 3 exited 1:\n  \"Traceback\"\t\\";
  const AbortMessage back = RoundTrip(abort);  // one line: the newline is escaped
  EXPECT_EQ(back.round, 2);
  EXPECT_EQ(back.reason, abort.reason);
}

TEST(ControlMessageTest, TheLargestRoundIsExactInEveryReader) {
  ReadyMessage ready;
  ready.round = int64_t{1} << 53;
  ready.step = int64_t{1} << 53;
  EXPECT_EQ(RoundTrip(ready).round, int64_t{1} << 53);
  ExpectRefused(R"({"type":"ready","round":9007199254740993,"step":0})", "\"round\"");
}

TEST(ControlMessageTest, InvalidUtf8InAReasonIsReplacedNotThrown) {
  AbortMessage abort;
  abort.round = 1;
  abort.reason = "worker said \xff\xfe\x80 and died";
  std::string line;
  ASSERT_NO_THROW(line = EncodeControlMessage(abort));
  const AbortMessage back = RoundTrip(abort);
  EXPECT_THAT(back.reason, HasSubstr("worker said "));
  EXPECT_THAT(back.reason, HasSubstr(" and died"));
  EXPECT_THAT(back.reason, HasSubstr("\xEF\xBF\xBD"));  // U+FFFD
  // Invalid UTF-8 on the wire is refused, not thrown.
  ExpectRefused("{\"type\":\"abort\",\"round\":1,\"reason\":\"\xff\"}", "not JSON");
}

TEST(ControlMessageTest, UnknownFieldsAreIgnored) {
  absl::StatusOr<ControlMessage> m = ParseControlMessage(
      R"({"type":"ready","round":4,"step":9,"future":{"x":[1,2]},"note":"hi"})");
  ASSERT_TRUE(m.ok()) << m.status();
  const ReadyMessage* ready = std::get_if<ReadyMessage>(&*m);
  ASSERT_NE(ready, nullptr);
  EXPECT_EQ(ready->round, 4);
  EXPECT_EQ(ready->step, 9);
  std::string round = RoundWith("", "");  // every field as it is
  round.insert(1, R"("zzz":{"nested":[null]},)");
  EXPECT_TRUE(ParseControlMessage(round).ok()) << round;
}

TEST(ControlMessageTest, RefusesWhatIsNotAMessage) {
  ExpectRefused("", "not JSON");
  ExpectRefused("{\"type\":", "not JSON");
  ExpectRefused("hello", "not JSON");
  ExpectRefused("[1,2]", "not a JSON object");
  ExpectRefused("\"hello\"", "not a JSON object");
  ExpectRefused("42", "not a JSON object");
  ExpectRefused(R"({"round":1,"step":2})", "no \"type\"");
  ExpectRefused(R"({"type":5,"round":1,"step":2})", "no \"type\"");
  ExpectRefused(R"({"type":"goodbye"})", "unknown message type \"goodbye\"");
}

TEST(ControlMessageTest, RefusesAMissingFieldNamingIt) {
  ExpectRefused(R"({"type":"hello","version":1,"local_rank":0})", "no \"pid\"");
  ExpectRefused(R"({"type":"hello","local_rank":0,"pid":5})", "no \"version\"");
  ExpectRefused(R"({"type":"ready","round":1})", "no \"step\"");
  ExpectRefused(R"({"type":"abort","round":1})", "no \"reason\"");
  for (const char* field : {"round", "rank", "world_size", "local_rank", "local_world_size",
                            "group_rank", "group_world_size", "master_addr", "master_port",
                            "restart_count", "store_prefix", "deadline_ms"}) {
    ExpectRefused(RoundWith(field, ""), absl::StrCat("no \"", field, "\""));
  }
}

TEST(ControlMessageTest, RefusesAFieldOfTheWrongTypeNamingIt) {
  ExpectRefused(R"({"type":"ready","round":"1","step":2})", "\"round\" is not an integer");
  ExpectRefused(R"({"type":"ready","round":1.5,"step":2})", "\"round\" is not an integer");
  ExpectRefused(R"({"type":"ready","round":1,"step":true})", "\"step\" is not an integer");
  ExpectRefused(R"({"type":"ready","round":1,"step":null})", "\"step\" is not an integer");
  ExpectRefused(R"({"type":"hello","version":1,"local_rank":[0],"pid":5})",
                "\"local_rank\" is not an integer");
  ExpectRefused(R"({"type":"abort","round":1,"reason":7})", "\"reason\" is not a string");
  ExpectRefused(RoundWith("master_addr", "1"), "\"master_addr\" is not a string");
  ExpectRefused(RoundWith("store_prefix", "{}"), "\"store_prefix\" is not a string");
  ExpectRefused(RoundWith("master_port", "\"29500\""), "\"master_port\" is not an integer");
}

TEST(ControlMessageTest, RefusesAFieldOutOfRangeNamingIt) {
  // rank >= world_size, local_rank >= local_world_size, group_rank >= group_world_size.
  ExpectRefused(RoundWith("rank", "8"), "\"rank\"=8 is outside [0, 7]");
  ExpectRefused(RoundWith("rank", "-1"), "\"rank\"=-1");
  ExpectRefused(RoundWith("local_rank", "2"), "\"local_rank\"=2 is outside [0, 1]");
  ExpectRefused(RoundWith("group_rank", "4"), "\"group_rank\"=4 is outside [0, 3]");
  ExpectRefused(RoundWith("world_size", "0"), "\"world_size\"=0");
  ExpectRefused(RoundWith("master_port", "65536"), "\"master_port\"=65536 is outside [0, 65535]");
  ExpectRefused(RoundWith("master_port", "-1"), "\"master_port\"=-1");
  ExpectRefused(RoundWith("deadline_ms", "-5"), "\"deadline_ms\"=-5");
  ExpectRefused(RoundWith("restart_count", "2147483648"), "\"restart_count\"=2147483648");
  ExpectRefused(RoundWith("master_addr", absl::StrCat("\"", std::string(257, 'a'), "\"")),
                "\"master_addr\" is longer than 256");
  ExpectRefused(R"({"type":"hello","version":1,"local_rank":0,"pid":-5})", "\"pid\"=-5");
  ExpectRefused(R"({"type":"hello","version":1,"local_rank":0,"pid":0})", "\"pid\"=0");
  ExpectRefused(R"({"type":"hello","version":0,"local_rank":0,"pid":5})", "\"version\"=0");
  ExpectRefused(R"({"type":"hello","version":1,"local_rank":-1,"pid":5})", "\"local_rank\"=-1");
  ExpectRefused(R"({"type":"ready","round":-1,"step":0})", "\"round\"=-1");
  ExpectRefused(R"({"type":"ready","round":1,"step":-2})", "\"step\"=-2");
}

TEST(ControlMessageTest, RefusesIntegersBeyondInt64RatherThanWrappingThem) {
  // 2^64-1 is an unsigned JSON integer: read as int64 it would be -1, a valid "no state" step.
  ExpectRefused(R"({"type":"ready","round":1,"step":18446744073709551615})", "\"step\"");
  ExpectRefused(R"({"type":"ready","round":18446744073709551615,"step":0})", "\"round\"");
  ExpectRefused(R"({"type":"hello","version":1,"local_rank":0,"pid":18446744073709551611})",
                "\"pid\"");
  // Beyond 2^64 nlohmann reads a double: not an integer.
  ExpectRefused(R"({"type":"ready","round":1,"step":184467440737095516150})",
                "\"step\" is not an integer");
}

TEST(ControlMessageTest, RefusesALineOverTheLimit) {
  // Padding an unknown field to exactly the limit is fine; one byte more is not.
  const std::string head = R"({"type":"ready","round":1,"step":2,"pad":")";
  const std::string tail = "\"}";
  const std::string exact =
      head + std::string(kMaxControlLineBytes - head.size() - tail.size(), 'p') + tail;
  ASSERT_EQ(exact.size(), kMaxControlLineBytes);
  EXPECT_TRUE(ParseControlMessage(exact).ok());
  const std::string over =
      head + std::string(exact.size() - head.size() - tail.size() + 1, 'p') + tail;
  ExpectRefused(over, absl::StrCat("a line of ", kMaxControlLineBytes + 1, " bytes"));
}

TEST(ControlMessageTest, RefusesANulByteAnywhere) {
  const std::string ready = R"({"type":"ready","round":1,"step":2})";
  ExpectRefused(ready + std::string(1, '\0'), "a NUL byte at offset 35");
  ExpectRefused(std::string(1, '\0') + ready, "a NUL byte at offset 0");
  ExpectRefused(R"({"type":"ready","round":1,"step":2,"x":")" + std::string(1, '\0') + "\"}",
                "a NUL byte");
}

TEST(ControlMessageTest, RoundStorePrefix) {
  EXPECT_EQ(RoundStorePrefix(0), "/ddprun/round_0/");
  EXPECT_EQ(RoundStorePrefix(12), "/ddprun/round_12/");
}

}  // namespace
}  // namespace ddprun::control
