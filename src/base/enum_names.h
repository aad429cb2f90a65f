// One mechanism for enum names: an enum declared with AIRLOCK_ENUM lists each enumerator beside
// its stable name, once. to_string, parsing and the list of every value come from that list, so
// a new enumerator cannot lack a name and a name cannot drift between printing and parsing.
//
//   #define AIRLOCK_WRITE_BACKS(X) X(OnClose, "on_close") X(Immediate, "immediate")
//   AIRLOCK_ENUM(WriteBack, AIRLOCK_WRITE_BACKS)
//
// declares `enum class WriteBack { OnClose, Immediate };` and, in the same namespace,
// `to_string(WriteBack)`. `enum_from_string<WriteBack>("on_close")`, `enum_entries<WriteBack>()`
// and `enum_name_list<WriteBack>()` ("on_close, immediate") work for every such enum.
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace airlock {

template <typename E>
struct EnumName {
  E value;
  std::string_view name;
};

// Every enumerator of E with its name, in declaration order (found by argument-dependent lookup
// of the `enum_names(E)` that AIRLOCK_ENUM declares beside the enum).
template <typename E>
constexpr std::span<const EnumName<E>> enum_entries() {
  return enum_names(E{});
}

template <typename E>
constexpr std::string_view enum_name(E value) {
  for (const auto& n : enum_entries<E>())
    if (n.value == value) return n.name;
  return "?";  // only a value cast from outside the enum's range
}

template <typename E>
constexpr std::optional<E> enum_from_string(std::string_view name) {
  for (const auto& n : enum_entries<E>())
    if (n.name == name) return n.value;
  return std::nullopt;
}

// The names joined by ", ": the "allowed:" hint of a parse error.
template <typename E>
std::string enum_name_list() {
  std::string out;
  for (const auto& n : enum_entries<E>()) {
    if (!out.empty()) out += ", ";
    out += n.name;
  }
  return out;
}

}  // namespace airlock

#define AIRLOCK_ENUM_VALUE_(e, name) e,
#define AIRLOCK_ENUM_ENTRY_(e, name) {e, name},

// Declares `enum class Type` from LIST(X) (X(Enumerator, "name") per value), its name table and
// `to_string(Type)` in the current namespace.
#define AIRLOCK_ENUM(Type, LIST) AIRLOCK_ENUM_OF(Type, int, LIST)

// The same with the enum's underlying type given (an enum that crosses a pipe as an integer).
#define AIRLOCK_ENUM_OF(Type, Underlying, LIST)                                        \
  enum class Type : Underlying { LIST(AIRLOCK_ENUM_VALUE_) };                          \
  struct Type##Names_ {                                                                \
    using enum Type;                                                                   \
    static constexpr ::airlock::EnumName<Type> all[] = {LIST(AIRLOCK_ENUM_ENTRY_)};    \
  };                                                                                   \
  constexpr std::span<const ::airlock::EnumName<Type>> enum_names(Type) { return Type##Names_::all; } \
  constexpr std::string_view to_string(Type value) { return ::airlock::enum_name(value); }
