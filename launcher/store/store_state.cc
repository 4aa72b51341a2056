#include "launcher/store/store_state.h"

#include <algorithm>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace ddprun::launcher::store {

bool StoreState::Present(const std::string& key) const {
  if (data_.count(key) > 0) return true;
  auto q = queues_.find(key);
  return q != queues_.end() && !q->second.empty();
}

void StoreState::Wake(const std::string& key, bool just_one, std::vector<Reply>* replies) {
  auto it = waiting_.find(key);
  if (it == waiting_.end()) return;
  std::vector<ConnectionId>& waiters = it->second;
  for (size_t i = 0; i < waiters.size(); ++i) {
    auto left = awaited_.find(waiters[i]);
    if (left == awaited_.end() || --left->second > 0) continue;
    replies->push_back({waiters[i], EncodeStopWaiting()});
    awaited_.erase(left);
    if (just_one) {
      // QUEUE_PUSH wakes one waiter: the others keep waiting for the next item.
      waiters.erase(waiters.begin(), waiters.begin() + static_cast<std::ptrdiff_t>(i) + 1);
      if (waiters.empty()) waiting_.erase(it);
      return;
    }
  }
  waiting_.erase(it);
}

void StoreState::Wait(ConnectionId from, const std::vector<std::string>& keys,
                      std::vector<Reply>* replies) {
  if (std::all_of(keys.begin(), keys.end(), [this](const std::string& k) { return Present(k); })) {
    replies->push_back({from, EncodeStopWaiting()});
    return;
  }
  size_t missing = 0;
  for (const std::string& k : keys) {
    if (data_.count(k) > 0) continue;
    waiting_[k].push_back(from);
    ++missing;
  }
  awaited_[from] = missing;
}

std::string StoreState::CompareSet(const std::string& key, const std::string& expected,
                                   const std::string& desired) {
  auto it = data_.find(key);
  if (it == data_.end()) {
    // An absent key is set only when the caller expected it absent (an empty value); else
    // the caller gets its own expectation back, as torch's servers answer.
    if (expected.empty()) data_[key] = desired;
    return EncodeBytes(expected.empty() ? desired : expected);
  }
  if (it->second == expected) it->second = desired;
  return EncodeBytes(it->second);
}

std::string StoreState::MultiGet(const std::vector<std::string>& keys) const {
  std::string out;
  for (const std::string& k : keys) {
    auto it = data_.find(k);
    out += EncodeBytes(it == data_.end() ? "" : it->second);
  }
  return out;
}

absl::StatusOr<std::string> StoreState::Add(const std::string& key, int64_t amount) {
  int64_t now = 0;
  auto it = data_.find(key);
  if (it != data_.end() && !absl::SimpleAtoi(it->second, &now)) {
    return absl::InvalidArgumentError(
        absl::StrCat("ADD to key '", key, "', whose value is not an integer"));
  }
  // Wraps on overflow (two's complement) instead of torch's undefined behaviour.
  now = static_cast<int64_t>(static_cast<uint64_t>(now) + static_cast<uint64_t>(amount));
  data_[key] = absl::StrCat(now);
  return EncodeInt64(now);
}

std::string StoreState::QueuePop(const std::string& key) {
  // The queue's length before the pop, then the item when there was one.
  auto q = queues_.find(key);
  const size_t len = q == queues_.end() ? 0 : q->second.size();
  std::string out = EncodeInt64(static_cast<int64_t>(len));
  if (len > 0) {
    out += EncodeBytes(q->second.front());
    q->second.pop_front();
    if (q->second.empty()) queues_.erase(q);
  }
  return out;
}

std::string StoreState::ListKeys() const {
  std::string out = EncodeInt64(static_cast<int64_t>(data_.size()));
  for (const auto& [k, v] : data_) out += EncodeBytes(k);
  return out;
}

absl::Status StoreState::Apply(ConnectionId from, const Request& r, std::vector<Reply>* replies) {
  auto reply = [&](std::string bytes) { replies->push_back({from, std::move(bytes)}); };
  switch (r.command) {
    case Command::kSet:
      data_[r.keys[0]] = r.values[0];
      Wake(r.keys[0], false, replies);
      break;
    case Command::kMultiSet:
      for (size_t i = 0; i < r.keys.size(); ++i) {
        data_[r.keys[i]] = r.values[i];
        Wake(r.keys[i], false, replies);
      }
      break;
    case Command::kCompareSet:
      reply(CompareSet(r.keys[0], r.values[0], r.values[1]));
      Wake(r.keys[0], false, replies);  // libuv's server wakes waiters here; classic does not
      break;
    case Command::kGet: {
      auto it = data_.find(r.keys[0]);
      reply(EncodeBytes(it == data_.end() ? "" : it->second));  // clients WAIT first
      break;
    }
    case Command::kMultiGet:
      reply(MultiGet(r.keys));
      break;
    case Command::kAdd: {
      absl::StatusOr<std::string> sum = Add(r.keys[0], r.amount);
      if (!sum.ok()) return sum.status();
      reply(*std::move(sum));
      Wake(r.keys[0], false, replies);
      break;
    }
    case Command::kCheck:
      reply(EncodeCheck(std::all_of(r.keys.begin(), r.keys.end(),
                                    [this](const std::string& k) { return Present(k); })));
      break;
    case Command::kWait:
      Wait(from, r.keys, replies);
      break;
    case Command::kCancelWait:
      Forget(from);
      reply(EncodeWaitCanceled());
      break;
    case Command::kNumKeys:
      reply(EncodeInt64(static_cast<int64_t>(data_.size())));
      break;
    case Command::kDeleteKey:
      reply(EncodeInt64(static_cast<int64_t>(data_.erase(r.keys[0]))));
      break;
    case Command::kAppend:
      data_[r.keys[0]] += r.values[0];
      Wake(r.keys[0], false, replies);
      break;
    case Command::kPing:
      reply(EncodeUint32(r.nonce));
      break;
    case Command::kQueuePush:
      queues_[r.keys[0]].push_back(r.values[0]);
      Wake(r.keys[0], true, replies);
      break;
    case Command::kQueuePop:
      reply(QueuePop(r.keys[0]));
      break;
    case Command::kQueueLen: {
      auto q = queues_.find(r.keys[0]);
      reply(EncodeInt64(q == queues_.end() ? 0 : static_cast<int64_t>(q->second.size())));
      break;
    }
    case Command::kListKeys:
      reply(ListKeys());
      break;
  }
  return absl::OkStatus();
}

void StoreState::Forget(ConnectionId connection) {
  if (awaited_.erase(connection) == 0) return;
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    std::vector<ConnectionId>& w = it->second;
    w.erase(std::remove(w.begin(), w.end(), connection), w.end());
    it = w.empty() ? waiting_.erase(it) : std::next(it);
  }
}

void StoreState::Clear() {
  data_.clear();
  queues_.clear();
}

}  // namespace ddprun::launcher::store
