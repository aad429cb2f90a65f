// Ed25519 through OpenSSL's EVP one-shot signing (the only form it offers for Ed25519).
#include "base/signing.h"

#include <openssl/evp.h>
#include <openssl/rand.h>
#include <sys/random.h>

#include <memory>

namespace airlock {
namespace {

struct PkeyFree {
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
};
struct MdCtxFree {
  void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
};
using Pkey = std::unique_ptr<EVP_PKEY, PkeyFree>;
using MdCtx = std::unique_ptr<EVP_MD_CTX, MdCtxFree>;

const unsigned char* bytes(std::string_view s) { return reinterpret_cast<const unsigned char*>(s.data()); }

Result<Pkey> private_key(std::string_view seed) {
  if (seed.size() != kEd25519SeedBytes)
    return fail(Code::ConfigError, fmt::format("an Ed25519 key is {} bytes, not {}", kEd25519SeedBytes, seed.size()));
  Pkey k(EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, nullptr, bytes(seed), seed.size()));
  if (!k) return fail(Code::InternalError, "OpenSSL refused an Ed25519 private key");
  return k;
}

}  // namespace

Result<std::string> ed25519_new_seed() {
  std::string seed(kEd25519SeedBytes, '\0');
  size_t got = 0;
  while (got < seed.size()) {
    ssize_t n = ::getrandom(seed.data() + got, seed.size() - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fail_errno(Code::InternalError, "getrandom for a signing key", errno);
    got += static_cast<size_t>(n);
  }
  return seed;
}

Result<std::string> ed25519_public_key(std::string_view seed) {
  auto k = TRY(private_key(seed));
  std::string pub(kEd25519PublicBytes, '\0');
  size_t len = pub.size();
  if (EVP_PKEY_get_raw_public_key(k.get(), reinterpret_cast<unsigned char*>(pub.data()), &len) != 1 ||
      len != kEd25519PublicBytes)
    return fail(Code::InternalError, "OpenSSL gave no Ed25519 public key");
  return pub;
}

Result<std::string> ed25519_sign(std::string_view seed, std::string_view message) {
  auto k = TRY(private_key(seed));
  MdCtx ctx(EVP_MD_CTX_new());
  std::string sig(kEd25519SignatureBytes, '\0');
  size_t len = sig.size();
  if (!ctx || EVP_DigestSignInit(ctx.get(), nullptr, nullptr, nullptr, k.get()) != 1 ||
      EVP_DigestSign(ctx.get(), reinterpret_cast<unsigned char*>(sig.data()), &len, bytes(message), message.size()) != 1 ||
      len != kEd25519SignatureBytes)
    return fail(Code::InternalError, "OpenSSL could not sign with Ed25519");
  return sig;
}

bool ed25519_verify(std::string_view public_key, std::string_view message, std::string_view signature) {
  if (public_key.size() != kEd25519PublicBytes || signature.size() != kEd25519SignatureBytes) return false;
  Pkey k(EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, nullptr, bytes(public_key), public_key.size()));
  MdCtx ctx(EVP_MD_CTX_new());
  return k && ctx && EVP_DigestVerifyInit(ctx.get(), nullptr, nullptr, nullptr, k.get()) == 1 &&
         EVP_DigestVerify(ctx.get(), bytes(signature), signature.size(), bytes(message), message.size()) == 1;
}

}  // namespace airlock
