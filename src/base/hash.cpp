// SHA-256 and random ids through OpenSSL.
#include "base/hash.h"

#include <fcntl.h>
#include <sys/random.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
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

namespace {
// OpenSSL reads its configuration file on first use unless told not to; hashing needs none.
void init_crypto_once() {
  static const bool done = OPENSSL_init_crypto(OPENSSL_INIT_NO_LOAD_CONFIG, nullptr) == 1;
  (void)done;
}
}  // namespace

std::string sha256_hex(std::string_view bytes) {
  init_crypto_once();
  std::array<unsigned char, EVP_MAX_MD_SIZE> md{};
  unsigned int len = 0;
  EVP_Digest(bytes.data(), bytes.size(), md.data(), &len, EVP_sha256(), nullptr);
  return to_hex(md.data(), len);
}

Result<std::string> sha256_file(const std::string& path) {
  init_crypto_once();
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return fail_errno(Code::IoError, "open " + path, errno);
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr);
  std::array<char, 65536> buf;
  for (;;) {
    ssize_t n = ::read(fd.get(), buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      EVP_MD_CTX_free(ctx);
      return fail_errno(Code::IoError, "read " + path, errno);
    }
    if (n == 0) break;
    EVP_DigestUpdate(ctx, buf.data(), static_cast<size_t>(n));
  }
  std::array<unsigned char, EVP_MAX_MD_SIZE> md{};
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx, md.data(), &len);
  EVP_MD_CTX_free(ctx);
  return to_hex(md.data(), len);
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
