// libcurl through dlopen: every function airlock uses, resolved once.
#include "egress/curl_api.h"

#include <dlfcn.h>

#include <mutex>

namespace airlock::egress {

Result<const CurlApi*> curl_api() {
  static CurlApi api{};
  static std::optional<Error> failure;
  static std::once_flag once;
  std::call_once(once, [] {
    // RTLD_LOCAL: its symbols (and OpenSSL's under it) stay out of the global scope.
    void* h = ::dlopen("libcurl.so.4", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      failure = Error{Code::ConfigError, fmt::format("libcurl cannot be loaded: {}", ::dlerror()),
                      {{"library", "libcurl.so.4"}}};
      return;
    }
    bool ok = true;
    auto sym = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(::dlsym(h, name));
      if (!fn) ok = false;
    };
    sym(api.global_init, "curl_global_init");
    sym(api.easy_init, "curl_easy_init");
    sym(api.easy_cleanup, "curl_easy_cleanup");
    sym(api.easy_setopt, "curl_easy_setopt");
    sym(api.easy_perform, "curl_easy_perform");
    sym(api.easy_getinfo, "curl_easy_getinfo");
    sym(api.easy_strerror, "curl_easy_strerror");
    sym(api.slist_append, "curl_slist_append");
    sym(api.slist_free_all, "curl_slist_free_all");
    sym(api.url, "curl_url");
    sym(api.url_cleanup, "curl_url_cleanup");
    sym(api.url_set, "curl_url_set");
    sym(api.url_get, "curl_url_get");
    sym(api.free, "curl_free");
    if (!ok) {
      failure = Error{Code::ConfigError, "libcurl.so.4 lacks a function airlock needs (curl 7.62 or newer)", {}};
      return;
    }
    if (api.global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
      failure = Error{Code::ConfigError, "curl_global_init failed", {}};
  });
  if (failure) return std::unexpected(*failure);
  return &api;
}

}  // namespace airlock::egress
