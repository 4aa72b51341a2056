#include "common/event_loop.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>

#include "common/log.h"

namespace ddprun {

EventLoop::EventLoop() {
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (epoll_fd_ < 0 || wake_fd_ < 0) {
    LogError(std::string("event loop: ") + strerror(errno));
    abort();
  }
  AddFd(wake_fd_, EPOLLIN, [this](uint32_t) {
    uint64_t count;
    while (read(wake_fd_, &count, sizeof(count)) > 0) {
    }
    DrainPosted();
  });
}

EventLoop::~EventLoop() {
  close(wake_fd_);
  close(epoll_fd_);
}

void EventLoop::AddFd(int fd, uint32_t events, FdCallback callback) {
  RemoveFd(fd);
  const uint64_t id = next_registration_++;
  fds_[id] = FdEntry{fd, std::make_shared<FdCallback>(std::move(callback))};
  registration_of_[fd] = id;
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = id;
  if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
    LogError(std::string("epoll_ctl add: ") + strerror(errno));
  }
}

void EventLoop::RemoveFd(int fd) {
  auto it = registration_of_.find(fd);
  if (it == registration_of_.end()) return;
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
  fds_.erase(it->second);
  registration_of_.erase(it);
}

EventLoop::TimerId EventLoop::AddTimer(TimePoint deadline, std::function<void()> callback) {
  const TimerId id = next_timer_++;
  timers_[id] = std::move(callback);
  timer_queue_.emplace(deadline, id);
  return id;
}

void EventLoop::CancelTimer(TimerId id) { timers_.erase(id); }

void EventLoop::Post(std::function<void()> fn) {
  {
    absl::MutexLock lock(&mu_);
    posted_.push_back(std::move(fn));
  }
  Wake();
}

void EventLoop::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopped_ = true;
  }
  Wake();
}

void EventLoop::Wake() {
  const uint64_t one = 1;
  ssize_t ignored = write(wake_fd_, &one, sizeof(one));
  (void)ignored;
}

void EventLoop::DrainPosted() {
  std::vector<std::function<void()>> batch;
  {
    absl::MutexLock lock(&mu_);
    batch.swap(posted_);
  }
  for (auto& fn : batch) fn();
}

int EventLoop::NextTimeoutMs() const {
  // Skip cancelled timers at the front without mutating (they are dropped when fired).
  for (const auto& [deadline, id] : timer_queue_) {
    if (timers_.count(id) == 0) continue;
    const auto now = std::chrono::steady_clock::now();
    if (deadline <= now) return 0;
    const auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count() + 1;
    return ms > INT_MAX ? INT_MAX : static_cast<int>(ms);
  }
  return -1;
}

void EventLoop::FireDueTimers() {
  const auto now = std::chrono::steady_clock::now();
  while (!timer_queue_.empty() && timer_queue_.begin()->first <= now) {
    const TimerId id = timer_queue_.begin()->second;
    timer_queue_.erase(timer_queue_.begin());
    auto it = timers_.find(id);
    if (it == timers_.end()) continue;
    auto callback = std::move(it->second);
    timers_.erase(it);
    callback();
  }
}

void EventLoop::Run() {
  epoll_event events[64];
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (stopped_) return;
    }
    const int n = epoll_wait(epoll_fd_, events, 64, NextTimeoutMs());
    if (n < 0 && errno != EINTR) {
      LogError(std::string("epoll_wait: ") + strerror(errno));
      abort();
    }
    for (int i = 0; i < n; ++i) {
      auto it = fds_.find(events[i].data.u64);
      if (it == fds_.end()) continue;  // removed by an earlier callback in this batch
      std::shared_ptr<FdCallback> callback = it->second.callback;
      (*callback)(events[i].events);
    }
    FireDueTimers();
  }
}

}  // namespace ddprun
