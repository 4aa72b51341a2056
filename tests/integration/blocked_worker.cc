// A worker that stops making progress inside the kernel, for the hang tests.
//   blocked_worker read    blocks in read(2) on a pipe nobody writes (interruptible: 'S')
//   blocked_worker vfork   sits in uninterruptible sleep ('D') as the parent of a vfork child
//                          that never execs; SIGKILL still ends it
// Prints "blocked <pid>" first so that tests know it got there.
#include <stdio.h>
#include <string.h>
#include <unistd.h>

__attribute__((noinline)) void wait_for_data_that_never_comes(void) {
  int fds[2];
  char c;
  if (pipe(fds) != 0) return;
  (void)!read(fds[0], &c, 1);
}

__attribute__((noinline)) void sleep_uninterruptibly(void) {
  pid_t child = vfork();
  if (child == 0) {
    pause();
    _exit(0);
  }
}

int main(int argc, char** argv) {
  printf("blocked %d\n", (int)getpid());
  fflush(stdout);
  if (argc > 1 && strcmp(argv[1], "vfork") == 0) {
    sleep_uninterruptibly();
  } else {
    wait_for_data_that_never_comes();
  }
  return 0;
}
