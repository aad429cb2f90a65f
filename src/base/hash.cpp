// SHA-256 and random ids through OpenSSL.
//
// SHA-256 goes through OpenSSL's SHA256_* functions, not EVP: the first EVP digest loads
// the default provider and builds its algorithm name tables, about half a millisecond that every
// short `airlock run` paid before its first receipt (bench/README.md, "Spawn cost"). The
// functions are deprecated in OpenSSL 3 in favour of EVP, but remain, with the same assembly.
#define OPENSSL_SUPPRESS_DEPRECATED
#include "base/hash.h"

#include <fcntl.h>
#include <sys/random.h>
#include <openssl/rand.h>
#include <openssl/sha.h>
#include <unistd.h>

#include <array>
#include <cerrno>

#include "base/unique_fd.h"

namespace airlock {
namespace {
std::string to_hex(const unsigned char* p, size_t n) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s(n * 2, '0');
  for (size_t i = 0; i < n; ++i) {
    s[2 * i] = kHex[p[i] >> 4];
    s[2 * i + 1] = kHex[p[i] & 15];
  }
  return s;
}
}  // namespace

std::string sha256_hex(std::string_view bytes) {
  std::array<unsigned char, SHA256_DIGEST_LENGTH> md{};
  SHA256_CTX ctx;
  SHA256_Init(&ctx);
  SHA256_Update(&ctx, bytes.data(), bytes.size());
  SHA256_Final(md.data(), &ctx);
  return to_hex(md.data(), md.size());
}

Result<std::string> sha256_file(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return fail_errno(Code::IoError, "open " + path, errno);
  SHA256_CTX ctx;
  SHA256_Init(&ctx);
  std::array<char, 65536> buf;
  for (;;) {
    ssize_t n = ::read(fd.get(), buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fail_errno(Code::IoError, "read " + path, errno);
    if (n == 0) break;
    SHA256_Update(&ctx, buf.data(), static_cast<size_t>(n));
  }
  std::array<unsigned char, SHA256_DIGEST_LENGTH> md{};
  SHA256_Final(md.data(), &ctx);
  return to_hex(md.data(), md.size());
}

std::string random_id() {
  // getrandom(2) directly: OpenSSL's DRBG costs milliseconds to seed on first use, which
  // every short `airlock run` would pay.
  std::array<unsigned char, 16> b{};
  size_t got = 0;
  while (got < b.size()) {
    ssize_t n = ::getrandom(b.data() + got, b.size() - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      RAND_bytes(b.data(), static_cast<int>(b.size()));  // kernels without getrandom(2)
      break;
    }
    got += static_cast<size_t>(n);
  }
  return to_hex(b.data(), b.size());
}

}  // namespace airlock
