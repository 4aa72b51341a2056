// The TCPStore protocol's decoder and the store's semantics, without sockets.
#include "launcher/store/store_protocol.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "launcher/store/store_state.h"

namespace ddprun::launcher::store {
namespace {

Request Req(Command c, std::vector<std::string> keys = {}, std::vector<std::string> values = {}) {
  Request r;
  r.command = c;
  r.keys = std::move(keys);
  r.values = std::move(values);
  return r;
}

// Every request of `bytes`, fed one byte at a time (a client's writes arrive in any split).
std::vector<Request> DecodeByteByByte(const std::string& bytes, RequestDecoder* d) {
  std::vector<Request> out;
  for (char c : bytes) {
    d->Append(std::string(1, c));
    for (;;) {
      auto r = d->Next();
      EXPECT_TRUE(r.ok()) << r.status();
      if (!r.ok() || !r->has_value()) break;
      out.push_back(**r);
    }
  }
  return out;
}

TEST(RequestDecoderTest, Torch22AndLaterValidateFirst) {
  Request add = Req(Command::kAdd, {"k"});
  add.amount = -3;
  Request ping = Req(Command::kPing);
  ping.nonce = 0xabcdef;
  const std::string bytes = EncodeValidation() + EncodeRequest(Dialect::kValidated, ping) +
                            EncodeRequest(Dialect::kValidated, Req(Command::kSet, {"k"}, {"v"})) +
                            EncodeRequest(Dialect::kValidated, add) +
                            EncodeRequest(Dialect::kValidated, Req(Command::kListKeys));
  RequestDecoder d;
  std::vector<Request> got = DecodeByteByByte(bytes, &d);
  EXPECT_EQ(d.dialect(), Dialect::kValidated);
  ASSERT_EQ(got.size(), 4u);
  EXPECT_EQ(got[0].command, Command::kPing);
  EXPECT_EQ(got[0].nonce, 0xabcdefu);
  EXPECT_EQ(got[1].command, Command::kSet);
  EXPECT_EQ(got[1].keys, std::vector<std::string>{"k"});
  EXPECT_EQ(got[1].values, std::vector<std::string>{"v"});
  EXPECT_EQ(got[2].command, Command::kAdd);
  EXPECT_EQ(got[2].amount, -3);
  EXPECT_EQ(got[3].command, Command::kListKeys);
  EXPECT_EQ(d.buffered(), 0u);
}

TEST(RequestDecoderTest, Torch1ClientsSendNoHandshakeAndNumberFromZero) {
  // torch 1.13's first bytes: SET (0), then the key's length.
  const std::string bytes =
      EncodeRequest(Dialect::kUnvalidated, Req(Command::kSet, {"/k"}, {"v"})) +
      EncodeRequest(Dialect::kUnvalidated, Req(Command::kWait, {"a", "b"})) +
      EncodeRequest(Dialect::kUnvalidated, Req(Command::kDeleteKey, {"a"}));
  EXPECT_EQ(bytes[0], '\0');
  RequestDecoder d;
  std::vector<Request> got = DecodeByteByByte(bytes, &d);
  EXPECT_EQ(d.dialect(), Dialect::kUnvalidated);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].command, Command::kSet);
  EXPECT_EQ(got[0].keys[0], "/k");
  EXPECT_EQ(got[1].command, Command::kWait);
  EXPECT_EQ(got[1].keys, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(got[2].command, Command::kDeleteKey);
}

TEST(RequestDecoderTest, RefusesWatchKeyUnknownCommandsAndOversizedRequests) {
  {
    RequestDecoder d;
    d.Append(std::string(1, '\x07'));  // torch <= 2.0's WATCH_KEY
    EXPECT_FALSE(d.Next().ok());
  }
  {
    RequestDecoder d;
    d.Append(EncodeValidation() + std::string(1, '\x40'));
    EXPECT_FALSE(d.Next().ok());
  }
  {
    ProtocolLimits limits;
    limits.max_key_bytes = 8;
    RequestDecoder d(limits);
    d.Append(EncodeValidation() +
             EncodeRequest(Dialect::kValidated, Req(Command::kGet, {"a key over eight"})));
    auto r = d.Next();
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("over 8 bytes"), std::string::npos);
  }
  {
    // A value's length is refused as soon as it is read, before its bytes arrive.
    ProtocolLimits limits;
    limits.max_value_bytes = 100;
    RequestDecoder d(limits);
    std::string set = EncodeRequest(Dialect::kValidated, Req(Command::kSet, {"k"}, {""}));
    set.resize(set.size() - 8);
    set += EncodeInt64(1000);
    d.Append(EncodeValidation() + set);
    EXPECT_FALSE(d.Next().ok());
  }
  {
    ProtocolLimits limits;
    limits.max_keys = 2;
    RequestDecoder d(limits);
    d.Append(EncodeValidation() +
             EncodeRequest(Dialect::kValidated, Req(Command::kMultiGet, {"a", "b", "c"})));
    EXPECT_FALSE(d.Next().ok());
  }
}

class StoreStateTest : public ::testing::Test {
 protected:
  std::vector<StoreState::Reply> Apply(StoreState::ConnectionId from, const Request& r) {
    std::vector<StoreState::Reply> replies;
    EXPECT_TRUE(state_.Apply(from, r, &replies).ok());
    return replies;
  }
  StoreState state_;
};

TEST_F(StoreStateTest, WaitBlocksUntilEveryKeyIsSetThenWakesOnlyThatConnection) {
  EXPECT_TRUE(Apply(1, Req(Command::kWait, {"a", "b"})).empty());
  EXPECT_EQ(state_.num_waiting(), 1u);
  EXPECT_TRUE(Apply(2, Req(Command::kSet, {"a"}, {"1"})).empty());
  Request add = Req(Command::kAdd, {"b"});
  add.amount = 2;
  std::vector<StoreState::Reply> r = Apply(2, add);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].to, 2u);
  EXPECT_EQ(r[0].bytes, EncodeInt64(2));
  EXPECT_EQ(r[1].to, 1u);
  EXPECT_EQ(r[1].bytes, EncodeStopWaiting());
  EXPECT_EQ(state_.num_waiting(), 0u);
}

TEST_F(StoreStateTest, CancelWaitAndAClosedConnectionDropTheWait) {
  Apply(1, Req(Command::kWait, {"x"}));
  std::vector<StoreState::Reply> r = Apply(1, Req(Command::kCancelWait));
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].bytes, EncodeWaitCanceled());
  Apply(3, Req(Command::kWait, {"x"}));
  state_.Forget(3);
  EXPECT_EQ(state_.num_waiting(), 0u);
  EXPECT_TRUE(Apply(2, Req(Command::kSet, {"x"}, {"v"})).empty());  // nobody to wake
}

TEST_F(StoreStateTest, CompareSetAddAndDelete) {
  EXPECT_EQ(Apply(1, Req(Command::kCompareSet, {"c"}, {"", "one"}))[0].bytes, EncodeBytes("one"));
  EXPECT_EQ(Apply(1, Req(Command::kCompareSet, {"c"}, {"x", "two"}))[0].bytes, EncodeBytes("one"));
  EXPECT_EQ(Apply(1, Req(Command::kCompareSet, {"z"}, {"e", "d"}))[0].bytes, EncodeBytes("e"));
  EXPECT_EQ(Apply(1, Req(Command::kNumKeys))[0].bytes, EncodeInt64(1));
  Apply(1, Req(Command::kSet, {"t"}, {"text"}));
  std::vector<StoreState::Reply> replies;
  EXPECT_FALSE(state_.Apply(1, Req(Command::kAdd, {"t"}), &replies).ok());
  EXPECT_EQ(Apply(1, Req(Command::kDeleteKey, {"t"}))[0].bytes, EncodeInt64(1));
  EXPECT_EQ(Apply(1, Req(Command::kDeleteKey, {"t"}))[0].bytes, EncodeInt64(0));
}

TEST_F(StoreStateTest, QueuePushWakesOnePopperAndPopSaysTheLength) {
  Apply(1, Req(Command::kWait, {"q"}));
  Apply(2, Req(Command::kWait, {"q"}));
  std::vector<StoreState::Reply> r = Apply(3, Req(Command::kQueuePush, {"q"}, {"item"}));
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].to, 1u);
  EXPECT_EQ(Apply(1, Req(Command::kQueuePop, {"q"}))[0].bytes,
            EncodeInt64(1) + EncodeBytes("item"));
  EXPECT_EQ(Apply(1, Req(Command::kQueuePop, {"q"}))[0].bytes, EncodeInt64(0));
  EXPECT_EQ(Apply(1, Req(Command::kQueueLen, {"q"}))[0].bytes, EncodeInt64(0));
}

TEST_F(StoreStateTest, ClearEmptiesTheStoreForANewRound) {
  Apply(1, Req(Command::kSet, {"/worker/attempt_0/k"}, {"v"}));
  Apply(1, Req(Command::kQueuePush, {"q"}, {"v"}));
  state_.Clear();
  EXPECT_EQ(state_.num_keys(), 0u);
  EXPECT_EQ(Apply(1, Req(Command::kCheck, {"/worker/attempt_0/k"}))[0].bytes, EncodeCheck(false));
  EXPECT_EQ(Apply(1, Req(Command::kQueueLen, {"q"}))[0].bytes, EncodeInt64(0));
}

}  // namespace
}  // namespace ddprun::launcher::store
