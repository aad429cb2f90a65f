// `airlock ledger scan FILE...`: effect ledgers' rows, orphaned intents, torn artifacts and
// corruption, for a person (or as JSON). Several ledgers (one per worker) make one report, each
// orphan attributed to its file.
#include <cstdio>

#include "base/clock.h"
#include "cli/verbs.h"
#include "ledger/effect_ledger.h"

namespace airlock::cli {
namespace {

std::string utc(int64_t ms) { return utc_text(ms * 1000, 3); }

void print_scan(const std::string& file, const ledger::LedgerScan& s) {
  std::printf("ledger %s: %llu line(s), %zu row(s), %zu orphaned intent(s), %zu torn, %zu corrupt\n", file.c_str(),
              static_cast<unsigned long long>(s.lines), s.rows.size(), s.orphans.size(), s.torn.size(),
              s.corrupt.size());
  if (!s.rows.empty()) std::printf("\nrows:\n");
  for (const auto& r : s.rows)
    std::printf("  line %-6llu %-5s %-16s key %s  attempt %s  %.1f ms%s%s%s\n", static_cast<unsigned long long>(r.line),
                r.outcome.ok ? "ok" : "error", r.intent.tool.c_str(), r.intent.key.c_str(),
                r.intent.attempt_id.c_str(), r.outcome.wall_ms, r.single ? "  (single record)" : "",
                r.intent.approval_id.empty() ? "" : fmt::format("  approval {}", r.intent.approval_id).c_str(),
                r.outcome.error ? fmt::format("  {}: {}", to_name(r.outcome.error->code), r.outcome.error->message).c_str()
                                : "");
  if (!s.orphans.empty())
    std::printf("\norphaned intents (recorded, no outcome: the effect may have happened; reconcile before retrying):\n");
  for (const auto& o : s.orphans)
    std::printf("  line %llu (byte %llu): tool %s, key %s, attempt %s, run %s, span %s, args sha256 %s,\n"
                "    workdir %s, started %s%s\n",
                static_cast<unsigned long long>(o.line), static_cast<unsigned long long>(o.offset),
                o.intent.tool.c_str(), o.intent.key.c_str(), o.intent.attempt_id.c_str(), o.intent.run_id.c_str(),
                o.intent.span.c_str(), o.intent.args_hash.c_str(), o.intent.workdir.c_str(),
                utc(o.intent.started_at).c_str(),
                o.intent.approval_id.empty() ? "" : fmt::format(", approval {}", o.intent.approval_id).c_str());
  if (!s.torn.empty()) std::printf("\ntorn tails quarantined by a repair:\n");
  for (const auto& t : s.torn)
    std::printf("  line %llu: %llu byte(s) once at byte %llu, sha256 %s, repaired %s\n",
                static_cast<unsigned long long>(t.line), static_cast<unsigned long long>(t.length),
                static_cast<unsigned long long>(t.offset), t.sha256.c_str(), utc(t.repaired_at).c_str());
  if (!s.corrupt.empty()) std::printf("\ncorrupt lines:\n");
  for (const auto& c : s.corrupt)
    std::printf("  line %llu (byte %llu, %llu bytes, sha256 %s): %s\n", static_cast<unsigned long long>(c.line),
                static_cast<unsigned long long>(c.offset), static_cast<unsigned long long>(c.length),
                c.sha256.c_str(), c.reason.c_str());
  if (s.tail)
    std::printf("\nunterminated tail: %llu byte(s) at byte %llu (%s), sha256 %s\n",
                static_cast<unsigned long long>(s.tail->length), static_cast<unsigned long long>(s.tail->offset),
                s.tail->complete_record ? "a complete record without its newline" : "a writer may be mid-line",
                s.tail->sha256.c_str());
}

// Several ledgers in one report: each one's scan under its file, then every orphaned intent of
// them all, attributed to its file (the list an operator reconciles).
Json several_json(const std::vector<std::string>& files, const std::vector<ledger::LedgerScan>& scans) {
  Json ledgers = Json::array(), orphans = Json::array();
  size_t rows = 0, torn = 0, corrupt = 0;
  for (size_t i = 0; i < files.size(); ++i) {
    Json one = scans[i].to_json();
    for (auto o : one["orphans"]) {
      o["file"] = files[i];
      orphans.push_back(std::move(o));
    }
    one["file"] = files[i];
    ledgers.push_back(std::move(one));
    rows += scans[i].rows.size();
    torn += scans[i].torn.size();
    corrupt += scans[i].corrupt.size();
  }
  return {{"ledgers", ledgers},
          {"orphans", orphans},
          {"totals", {{"ledgers", files.size()}, {"rows", rows}, {"orphans", orphans.size()}, {"torn", torn},
                      {"corrupt", corrupt}}}};
}

}  // namespace

void add_ledger(CLI::App& app, Globals& g, Action& run) {
  auto* led = app.add_subcommand("ledger", "read effect ledgers");
  led->require_subcommand(1);
  auto* scan = led->add_subcommand(
      "scan", "list effect ledgers' rows, orphaned intents, torn tails and corruption (several: one report)");
  static std::vector<std::string> files;
  static bool tolerant = false;
  scan->add_option("FILE", files, "the effect ledgers (JSONL), one or more")->required();
  scan->add_flag("--tolerant", tolerant, "report corrupt lines as data instead of refusing");
  scan->add_flag("--json", g.json, "print JSON");
  scan->callback([&g, &run] {
    run = [&g] {
      std::vector<ledger::LedgerScan> scans;
      for (const auto& file : files) {
        auto s = ledger::scan_ledger(file, tolerant);
        if (!s) {
          int rc = refuse(s.error(), g.json);
          if (!g.json)
            for (const auto& p : s.error().facts.value("problems", Json::array()))
              std::fprintf(stderr, "  line %s (byte %s, %s bytes, sha256 %s): %s\n", p["line"].dump().c_str(),
                           p["offset"].dump().c_str(), p["length"].dump().c_str(),
                           p["sha256"].get<std::string>().c_str(), p["reason"].get<std::string>().c_str());
          return rc;
        }
        scans.push_back(std::move(*s));
      }
      if (g.json) {
        std::printf("%s\n", (files.size() == 1 ? scans[0].to_json() : several_json(files, scans)).dump().c_str());
        return 0;
      }
      for (size_t i = 0; i < files.size(); ++i) {
        if (i) std::printf("\n");
        print_scan(files[i], scans[i]);
      }
      if (files.size() > 1) {
        Json all = several_json(files, scans);
        std::printf("\n%zu ledgers: %s row(s), %s orphaned intent(s), %s torn, %s corrupt\n", files.size(),
                    all["totals"]["rows"].dump().c_str(), all["totals"]["orphans"].dump().c_str(),
                    all["totals"]["torn"].dump().c_str(), all["totals"]["corrupt"].dump().c_str());
        for (const auto& o : all["orphans"])
          std::printf("  orphan %s line %s: tool %s, key %s, attempt %s\n", o["file"].get<std::string>().c_str(),
                      o["line"].dump().c_str(), o["tool"].get<std::string>().c_str(),
                      o["key"].get<std::string>().c_str(), o["attempt_id"].get<std::string>().c_str());
      }
      return 0;
    };
  });
}

}  // namespace airlock::cli
