// libcurl, loaded when the first URL is parsed or fetched: a run that fetches nothing never pays
// for mapping libcurl and the dozen libraries it needs (several milliseconds per start here).
#pragma once

#include <curl/curl.h>

#include "base/error.h"

namespace airlock::egress {

struct CurlApi {
  decltype(&curl_global_init) global_init;
  decltype(&curl_easy_init) easy_init;
  decltype(&curl_easy_cleanup) easy_cleanup;
  decltype(&curl_easy_setopt) easy_setopt;
  decltype(&curl_easy_perform) easy_perform;
  decltype(&curl_easy_getinfo) easy_getinfo;
  decltype(&curl_easy_strerror) easy_strerror;
  decltype(&curl_slist_append) slist_append;
  decltype(&curl_slist_free_all) slist_free_all;
  decltype(&curl_url) url;
  decltype(&curl_url_cleanup) url_cleanup;
  decltype(&curl_url_set) url_set;
  decltype(&curl_url_get) url_get;
  decltype(&curl_free) free;
};

// The loaded and initialised library (once per process), or AIRLOCK_CONFIG_ERROR naming what
// is missing. The result lives until the process ends.
Result<const CurlApi*> curl_api();

}  // namespace airlock::egress
