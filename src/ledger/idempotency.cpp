// Idempotency keys: sha256 over length-prefixed fields, so no two field lists give the same bytes.
#include "ledger/idempotency.h"

#include "base/hash.h"

namespace airlock::ledger {
namespace {

void put(std::string& out, std::string_view field) {
  out += std::to_string(field.size());
  out += ':';
  out += field;
}

}  // namespace

Json RunKeying::to_json() const {
  return {{"run_id", run_id}, {"generation", generation}, {"key_derivation", derivation_version}};
}

Result<RunKeying> RunKeying::from_json(const Json& j) {
  auto bad = [](std::string what) { return fail(Code::LedgerCorrupt, "run keying: " + what); };
  if (!j.is_object()) return bad("not an object");
  for (const auto& [k, v] : j.items())
    if (k != "run_id" && k != "generation" && k != "key_derivation") return bad("unknown key \"" + k + "\"");
  if (!j.contains("run_id") || !j["run_id"].is_string()) return bad("run_id must be a string");
  if (!j.contains("generation") || !j["generation"].is_string()) return bad("generation must be a string");
  // A run recorded before the derivation was stamped derives version-1 keys for its whole life:
  // no stamp is version 1, never corrupt. A stamp that is there must be an integer.
  int version = kKeyDerivationV1;
  if (j.contains("key_derivation")) {
    if (!j["key_derivation"].is_number_integer()) return bad("key_derivation must be an integer");
    version = j["key_derivation"].get<int>();
  }
  RunKeying r{j["run_id"].get<std::string>(), j["generation"].get<std::string>(), version};
  if (r.derivation_version != kKeyDerivationV1 && r.derivation_version != kKeyDerivationCurrent)
    return fail(Code::KeyDerivationUnknown,
                fmt::format("the run {} records key derivation version {}, which this build does not know "
                            "(it knows {} and {})",
                            r.run_id, r.derivation_version, kKeyDerivationV1, kKeyDerivationCurrent),
                {{"run_id", r.run_id}, {"key_derivation", r.derivation_version}});
  return r;
}

RunKeying start_run(std::string run_id) { return {std::move(run_id), random_id(), kKeyDerivationCurrent}; }

Result<std::string> derive_key(const RunKeying& run, Invocation call, std::string_view tool, const Json& args) {
  std::string material;
  switch (run.derivation_version) {
    case kKeyDerivationV1:
      put(material, "airlock.idempotency.v1");
      put(material, run.run_id);
      break;
    case kKeyDerivationCurrent:
      put(material, "airlock.idempotency.v2");
      put(material, run.run_id);
      put(material, run.generation);
      break;
    default:
      return fail(Code::KeyDerivationUnknown,
                  fmt::format("key derivation version {} is unknown to this build", run.derivation_version),
                  {{"run_id", run.run_id}, {"key_derivation", run.derivation_version}});
  }
  put(material, std::to_string(call.step));
  put(material, std::to_string(call.ordinal));
  put(material, tool);
  try {
    put(material, canonical_json(args));
  } catch (const Json::exception& e) {
    return fail(Code::ToolArgsDenied, fmt::format("the arguments cannot be put in canonical form: {}", e.what()));
  }
  return fmt::format("ik{}-{}", run.derivation_version, sha256_hex(material));
}

}  // namespace airlock::ledger
