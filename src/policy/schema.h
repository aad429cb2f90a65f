// The policy schema as data: one description per field of airlock.task_policy.v1, checked
// against what the parser reads and to_json writes, for the generated reference.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/json_util.h"

namespace airlock::policy {

// One field. `path` is dotted from the document's root, `[]` standing for every item of an
// array ("tools[].argv", "code_network.rules[].host"). `type` is prose ("integer",
// "one of: off, allowlist"). `absent`, when set, is the reference's default column: what an
// omitted field means ("required", "`on_close`"); when empty, the column shows the value the
// built-in default (or, for an array item's field, an item that omits it) has.
struct SchemaField {
  std::string path;
  std::string type;
  std::string absent;
  std::string description;
};

// Every field, in document order. The one place a field's description lives.
std::span<const SchemaField> schema_fields();

// A policy document that sets every field the parser reads (it parses as a task layer over
// the built-in default, with `confinement` as a worker layer would set it).
Json schema_example();

// The field paths present in `j` (the output of to_json), recursively, in the notation above.
std::vector<std::string> json_field_paths(const Json& j);

// Every field path of to_json(builtin_default()) and to_json(<schema_example()>) that has no
// entry in schema_fields(), then every entry no such path matches ("stale: …"). Empty: in step.
std::vector<std::string> schema_problems();

}  // namespace airlock::policy
