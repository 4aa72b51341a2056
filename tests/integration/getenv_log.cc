// An LD_PRELOAD library for preload_test: appends the name of every variable the process looks
// up with getenv(3) or secure_getenv(3) to the file named by GETENV_LOG. It shows what a native
// library reads while Python imports it (Python's own os.environ is filled from environ at
// start-up, without getenv).
#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstring>

namespace {

using GetenvFn = char* (*)(const char*);

GetenvFn Real(const char* symbol) { return reinterpret_cast<GetenvFn>(dlsym(RTLD_NEXT, symbol)); }

void Note(const char* name) {
  static int fd = -2;
  if (fd == -2) {
    const char* path = Real("getenv")("GETENV_LOG");
    fd = path != nullptr ? open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644) : -1;
  }
  if (fd < 0 || name == nullptr) return;
  char line[256];
  const size_t n = strnlen(name, sizeof(line) - 1);
  memcpy(line, name, n);
  line[n] = '\n';
  ssize_t ignored = write(fd, line, n + 1);
  (void)ignored;
}

}  // namespace

extern "C" char* getenv(const char* name) {
  Note(name);
  return Real("getenv")(name);
}

extern "C" char* secure_getenv(const char* name) {
  Note(name);
  return Real("secure_getenv")(name);
}
