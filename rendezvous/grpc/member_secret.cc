#include "rendezvous/grpc/member_secret.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ddprun::rendezvous {
namespace {

constexpr size_t kMinSecretBytes = 16;
constexpr size_t kMaxSecretBytes = 4096;

std::string Errno(const std::string& what, const std::string& path) {
  return absl::StrCat("cannot ", what, " secret file ", path, ": ", std::strerror(errno));
}

// Reads the whole of an open file (bounded by kMaxSecretBytes + 1).
absl::StatusOr<std::string> ReadAll(int fd, const std::string& path) {
  std::string data;
  char buf[1024];
  while (data.size() <= kMaxSecretBytes) {
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return absl::UnavailableError(Errno("read", path));
    if (n == 0) break;
    data.append(buf, static_cast<size_t>(n));
  }
  return data;
}

absl::StatusOr<std::string> CreateSecretFile(const std::string& path) {
  absl::StatusOr<std::string> secret = RandomMemberSecret();
  if (!secret.ok()) return secret.status();
  const std::string tmp = absl::StrCat(path, ".tmp.", getpid());
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return absl::UnavailableError(Errno("create", tmp));
  const bool written =
      write(fd, secret->data(), secret->size()) == static_cast<ssize_t>(secret->size()) &&
      fsync(fd) == 0;
  const int saved = errno;
  close(fd);
  if (!written) {
    unlink(tmp.c_str());
    errno = saved;
    return absl::UnavailableError(Errno("write", tmp));
  }
  // link() instead of rename(): a secret another process created meanwhile is kept, not replaced.
  if (link(tmp.c_str(), path.c_str()) != 0) {
    const int link_errno = errno;
    unlink(tmp.c_str());
    if (link_errno == EEXIST) return LoadOrCreateMemberSecret(path);
    errno = link_errno;
    return absl::UnavailableError(Errno("create", path));
  }
  unlink(tmp.c_str());
  const std::string dir = path.find('/') == std::string::npos
                              ? std::string(".")
                              : path.substr(0, std::max<size_t>(1, path.rfind('/')));
  if (const int dfd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dfd >= 0) {
    fsync(dfd);
    close(dfd);
  }
  return *std::move(secret);
}

}  // namespace

HmacMemberKeys::HmacMemberKeys(std::string secret)
    : secret_(std::move(secret)), durable_(!secret_.empty()) {
  if (secret_.empty()) {
    absl::StatusOr<std::string> random = RandomMemberSecret();
    // RAND_bytes fails only without an entropy source; a server without one cannot run safely.
    if (!random.ok()) std::abort();
    secret_ = *std::move(random);
  }
}

std::string HmacMemberKeys::KeyFor(const std::string& run_id, const std::string& node_id) const {
  return HmacSha256Hex(secret_, "ddprun-member-key-v1" + LengthPrefixed({run_id, node_id}));
}

std::string LengthPrefixed(std::initializer_list<std::string_view> parts) {
  std::string out;
  for (std::string_view s : parts) {
    const uint64_t n = s.size();
    for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
    out.append(s);
  }
  return out;
}

std::string HmacSha256Hex(std::string_view key, std::string_view message) {
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int mac_len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(message.data()), message.size(), mac, &mac_len);
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(mac), static_cast<size_t>(mac_len)));
}

absl::StatusOr<std::string> RandomMemberSecret() {
  std::string secret(kMemberSecretBytes, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(secret.data()),
                 static_cast<int>(secret.size())) != 1) {
    return absl::UnavailableError("no random bytes for the member-key secret (RAND_bytes failed)");
  }
  return secret;
}

absl::StatusOr<std::string> LoadOrCreateMemberSecret(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0 && errno == ENOENT) return CreateSecretFile(path);
  if (fd < 0) return absl::UnavailableError(Errno("open", path));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    close(fd);
    return absl::UnavailableError(Errno("stat", path));
  }
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    return absl::InvalidArgumentError(absl::StrCat("secret file ", path, " is not a regular file"));
  }
  if ((st.st_mode & 077) != 0) {
    close(fd);
    return absl::InvalidArgumentError(absl::StrCat(
        "secret file ", path, " is readable or writable by others (mode ",
        absl::StrFormat("%04o", st.st_mode & 0777), "); make it 0600 (chmod 600 ", path, ")"));
  }
  absl::StatusOr<std::string> data = ReadAll(fd, path);
  close(fd);
  if (!data.ok()) return data.status();
  if (data->size() < kMinSecretBytes || data->size() > kMaxSecretBytes) {
    return absl::InvalidArgumentError(absl::StrCat("secret file ", path, " holds ", data->size(),
                                                   " bytes; it needs ", kMinSecretBytes, " to ",
                                                   kMaxSecretBytes));
  }
  return data;
}

}  // namespace ddprun::rendezvous
