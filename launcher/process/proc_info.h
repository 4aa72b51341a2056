// What /proc says about a process: its scheduler state, its process group and, for a task stuck
// in the kernel, where it sleeps. Linux only; best effort (unreadable entries read as '?' or
// empty).
#ifndef DDPRUN_LAUNCHER_PROCESS_PROC_INFO_H_
#define DDPRUN_LAUNCHER_PROCESS_PROC_INFO_H_

#include <sys/types.h>

#include <string>
#include <vector>

namespace ddprun::launcher {

// The thread ids of a process (/proc/PID/task); empty when it is gone.
std::vector<pid_t> ThreadsOf(pid_t pid);

// The state letter of /proc/PID/stat ('R', 'S', 'D', 'Z', ...); '?' when unreadable.
char ProcessState(pid_t pid);

// The process group of a process (/proc/PID/stat's pgrp); 0 when it is gone or unreadable.
pid_t ProcessGroupOf(pid_t pid);

// The parent of a process (/proc/PID/stat's ppid); 0 when it is gone or unreadable.
pid_t ParentOf(pid_t pid);

// Where a process sleeps in the kernel: state and wchan of every thread, and the kernel stack
// where readable (root). Multi-line text for a stacks file.
std::string KernelSideOf(pid_t pid);

}  // namespace ddprun::launcher

#endif  // DDPRUN_LAUNCHER_PROCESS_PROC_INFO_H_
