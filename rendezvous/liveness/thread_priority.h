// The priority of the liveness path's threads (sender and receiver): a heartbeat thread starved
// by busy cores is silent like a dead host, so both ask for SCHED_FIFO priority 1. It is granted
// to root or with CAP_SYS_NICE; otherwise the thread keeps its priority, and the caller learns
// so (to warn once). The threads sleep in poll between packets: a real-time priority makes them
// run on time, not run more.
#ifndef DDPRUN_RENDEZVOUS_LIVENESS_THREAD_PRIORITY_H_
#define DDPRUN_RENDEZVOUS_LIVENESS_THREAD_PRIORITY_H_

namespace ddprun::rendezvous {

// For the calling thread; true when granted.
bool RaiseToRealtimePriority();

}  // namespace ddprun::rendezvous

#endif  // DDPRUN_RENDEZVOUS_LIVENESS_THREAD_PRIORITY_H_
