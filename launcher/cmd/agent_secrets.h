// Keeps the agent's rendezvous token from the other processes of the same user, its own workers
// among them (issue 43 D1).
//
// The token reaches ddprun in its environment (DDPRUN_RDZV_TOKEN). /proc/PID/environ shows the
// initial environment block to every process of the user for the life of the process, and a
// child forked without exec (the orphan guard) has a copy of it; unsetenv() changes neither.
// And a process of the same user may read a dumpable process's memory (/proc/PID/mem, ptrace).
#ifndef DDPRUN_LAUNCHER_CMD_AGENT_SECRETS_H_
#define DDPRUN_LAUNCHER_CMD_AGENT_SECRETS_H_

namespace ddprun::launcher {

struct AgentSecretsOptions {
  // The agent will read a token from a file (--rdzv-conf token_file): it holds one in memory
  // even when the environment has none.
  bool token_file = false;
};

// Call once at the start of main, before any other thread or child exists:
//  - the value of every agent-only variable (launcher/workers/worker_env.h's
//    kAgentOnlyVariables: DDPRUN_RDZV_TOKEN) is overwritten in place in the initial environment
//    block ('*'), and the variable set again from a copy on the heap, so getenv() still finds
//    it;
//  - when the agent holds a token (the variable was set, or `options.token_file`), the process
//    becomes non-dumpable (PR_SET_DUMPABLE 0): its /proc/PID/{environ,mem,maps,fd,...} belong to
//    root and a process of the same user can neither ptrace it nor read its memory; a core dump
//    is not written. Children that exec a program (the workers) are dumpable again; the orphan
//    guard, forked without exec, stays non-dumpable.
// Returns whether the process was made non-dumpable.
bool HideAgentSecrets(const AgentSecretsOptions& options);

}  // namespace ddprun::launcher

#endif  // DDPRUN_LAUNCHER_CMD_AGENT_SECRETS_H_
