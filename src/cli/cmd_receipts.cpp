// `airlock receipts verify FILE` checks the hash chain; `airlock receipts show FILE` prints a table;
// `airlock receipts repair FILE` applies the torn-tail rule to an ended session's log.
#include <sys/stat.h>

#include <cstdio>

#include "base/fs.h"
#include "cli/verbs.h"
#include "ledger/receipts.h"

namespace airlock::cli {
namespace {

// The one thing a person wants to see of an action: its path, URL, tool or command.
std::string detail_of(const Json& r) {
  const Json& a = r.contains("args") && r["args"].is_object() ? r["args"] : Json::object();
  for (const char* key : {"path", "url", "tool"})
    if (a.contains(key) && a[key].is_string()) {
      std::string d = a[key].get<std::string>();
      if (a.contains("args") && a["args"].is_array() && !a["args"].empty()) d += " " + a["args"].dump();
      return d;
    }
  if (r.contains("argv")) return r["argv"].dump();
  if (r.contains("executor") && r["executor"].is_string())
    return fmt::format("executor {} (tier {})", r["executor"].get<std::string>(), r.value("tier", 0));
  if (r.contains("how") && r["how"].is_string()) return r["how"].get<std::string>();
  return "";
}

int show(const std::string& file, bool json) {
  auto text = read_file(file, Code::LedgerCorrupt);
  if (!text) return refuse(text.error(), json);
  auto chain = ledger::verify_chain(file);
  Json all = Json::array();
  size_t pos = 0;
  while (pos < text->size()) {
    size_t nl = text->find('\n', pos);
    if (nl == std::string::npos) nl = text->size();
    auto j = parse_json(std::string_view(*text).substr(pos, nl - pos), Code::LedgerCorrupt, "a receipt",
                        ledger::kReceiptLineLimits);
    pos = nl + 1;
    if (!j) return refuse(j.error(), json);
    all.push_back(std::move(*j));
  }
  if (json) {
    std::printf("%s\n", Json({{"receipts", all}, {"chain_ok", chain.has_value()}}).dump(2).c_str());
  } else {
    std::printf("%-4s %-26s %-15s %-9s %-27s %10s  %s\n", "SEQ", "TIME", "KIND", "DECISION", "CODE", "µs", "DETAIL");
    for (const auto& r : all) {
      std::string code = r.contains("error") && r["error"].is_object() ? r["error"].value("code", "") : "";
      std::string us = r.contains("duration_us") ? std::to_string(r["duration_us"].get<int64_t>()) : "";
      std::printf("%-4s %-26s %-15s %-9s %-27s %10s  %s\n", r.value("seq", Json()).dump().c_str(),
                  r.value("ts", "").c_str(), r.value("kind", "").c_str(), r.value("decision", "").c_str(),
                  code.c_str(), us.c_str(), detail_of(r).c_str());
    }
  }
  if (!chain) {
    std::fprintf(stderr, "airlock: the chain is broken: %s\n", chain.error().message.c_str());
    return kRefusedExit;
  }
  return 0;
}

int verify(const std::string& file, bool json) {
  auto chain = ledger::verify_chain(file);
  if (!chain) return refuse(chain.error(), json);
  if (json)
    std::printf("%s\n", Json({{"ok", true}, {"receipts", chain->receipts}, {"last_sha256", chain->last_hash}}).dump(2).c_str());
  else
    std::printf("receipts ok: %llu receipt(s), chain intact, last sha256 %s\n",
                static_cast<unsigned long long>(chain->receipts), chain->last_hash.c_str());
  return 0;
}

int repair(const std::string& file, bool json) {
  auto rep = ledger::repair_torn_tail(file);
  if (!rep) return refuse(rep.error(), json);
  std::string what = rep->terminated    ? "the last receipt lacked only its newline: terminated"
                     : rep->quarantined ? "the torn tail was kept in a receipts.torn_tail receipt"
                                        : "no torn tail: nothing to repair";
  if (json)
    std::printf("%s\n", Json({{"receipts", rep->receipts},
                               {"terminated", rep->terminated},
                               {"quarantined", rep->quarantined},
                               {"torn_tail", {{"offset", rep->offset}, {"length", rep->length}}}})
                            .dump()
                            .c_str());
  else
    std::printf("%s; %llu receipt(s)%s\n", what.c_str(), static_cast<unsigned long long>(rep->receipts),
                rep->quarantined ? fmt::format(" ({} byte(s) from offset {})", rep->length, rep->offset).c_str() : "");
  return 0;
}

// FILE, or a session id (what `airlock run` prints): that session's log in the state directory.
Result<std::string> receipts_file(const Globals& g, const std::string& arg) {
  // An id is looked up in the state directory first: a file in the current directory named after
  // a session (a confined command knows its own id) must never stand in for its receipts.
  bool id = !arg.empty() && arg.size() <= 64 && arg.find_first_not_of("0123456789abcdef") == std::string::npos;
  if (!id) return arg;
  auto state = TRY(resolve_state_dir(g.state_dir));
  std::string file = state + "/receipts/" + arg + ".jsonl";
  struct stat st{};
  if (::stat(file.c_str(), &st) == 0) return file;
  if (::stat(arg.c_str(), &st) == 0)
    return fail(Code::SessionUnknown,
                fmt::format("no session {} has receipts in {}; to read a file of that name, write ./{}", arg, state, arg),
                {{"session", arg}, {"state_dir", state}});
  return fail(Code::SessionUnknown, fmt::format("no session {} has receipts in {}", arg, state),
              {{"session", arg}, {"state_dir", state}});
}

int with_file(const Globals& g, const std::string& arg, int (*verb)(const std::string&, bool)) {
  auto file = receipts_file(g, arg);
  if (!file) return refuse(file.error(), g.json);
  return verb(*file, g.json);
}

}  // namespace

void add_receipts(CLI::App& app, Globals& g, Action& run) {
  auto* cmd = app.add_subcommand("receipts", "check and read a session's receipts");
  cmd->require_subcommand(1);
  static std::string file;
  auto* v = cmd->add_subcommand("verify", "check the hash chain; say where it breaks");
  constexpr const char* kFile = "receipts file (JSONL), or the id of a session on this state directory";
  v->add_option("FILE", file, kFile)->required();
  v->add_flag("--json", g.json, "print JSON");
  v->callback([&g, &run] { run = [&g] { return with_file(g, file, verify); }; });
  auto* r = cmd->add_subcommand("repair", "close a chain a cut-short write left torn: its bytes kept in a receipt");
  r->add_option("FILE", file, "receipts file (JSONL), or session id, of a session that has ended")->required();
  r->add_flag("--json", g.json, "print JSON");
  r->callback([&g, &run] { run = [&g] { return with_file(g, file, repair); }; });
  auto* s = cmd->add_subcommand("show", "print the receipts as a table");
  s->add_option("FILE", file, kFile)->required();
  s->add_flag("--json", g.json, "print JSON");
  s->callback([&g, &run] { run = [&g] { return with_file(g, file, show); }; });
}

}  // namespace airlock::cli
