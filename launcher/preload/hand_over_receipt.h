// What ddprun keeps of a --preload hand-over until the worker exits: its own copy of the spare's
// end of the hand-over socket. The spare's exit then does not destroy that socket, so a start
// message the worker never read is still queued there, and says so. Move-only; owns the copy
// and closes it when settled or destroyed (with it go the descriptors of an unread start).
// Thread-compatible.
#ifndef DDPRUN_LAUNCHER_PRELOAD_HAND_OVER_RECEIPT_H_
#define DDPRUN_LAUNCHER_PRELOAD_HAND_OVER_RECEIPT_H_

namespace ddprun::launcher {

// How a worker's start reached it.
enum class HandOver {
  kNone,    // a cold start (or already settled): nothing to tell
  kTaken,   // a spare read the start handed to it
  kUnread,  // a spare ended without reading the start handed to it: it never began that start
};

class HandOverReceipt {
 public:
  HandOverReceipt() = default;  // a cold start
  // `spare_end`: a descriptor of the spare's end of the socket the start was sent on (owned).
  explicit HandOverReceipt(int spare_end) : spare_end_(spare_end) {}
  ~HandOverReceipt();
  HandOverReceipt(HandOverReceipt&& other) noexcept;
  HandOverReceipt& operator=(HandOverReceipt&& other) noexcept;
  HandOverReceipt(const HandOverReceipt&) = delete;
  HandOverReceipt& operator=(const HandOverReceipt&) = delete;

  // Once the worker has exited: whether it read its start. Closes the copy; kNone after that.
  // (While the worker runs the answer could still change.)
  HandOver Settle();

 private:
  void Close();

  int spare_end_ = -1;
};

}  // namespace ddprun::launcher

#endif  // DDPRUN_LAUNCHER_PRELOAD_HAND_OVER_RECEIPT_H_
