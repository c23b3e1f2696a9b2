// src/core/enum_names.h: one table per public enum, behind its parse_X /
// X_name pair (parse_algorithm, parse_reduction, ...).
//
// Contract:
//   table.parse(text) returns the value whose name equals text exactly
//     (case-sensitive, no aliases); any other text throws
//     smax::Error(kInvalidArgument, "<parser>: unknown <kind> '<text>'
//     (expected one of: <name>, <name>, ...)"), names in table order.
//   table.name(value) returns the value's name, or "unknown" for a value
//     outside the table (e.g. an integer cast to the enum); never throws.
// Declare a table with name_table<E>(parser, kind, {{E::kA, "a"}, ...}).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "core/errors.h"

namespace smax::detail {

template <typename E>
struct EnumName {
  E value;
  const char* name;
};

template <typename E, std::size_t N>
struct NameTable {
  const char* parser;  // the public parse function, prefix of its error
  const char* kind;    // what the names name, e.g. "reduction"
  EnumName<E> entries[N];

  E parse(std::string_view text) const {
    for (const auto& e : entries) {
      if (text == e.name) return e.value;
    }
    std::string expected;
    for (const auto& e : entries) {
      if (!expected.empty()) expected += ", ";
      expected += e.name;
    }
    fail(parser, "unknown " + std::string(kind) + " '" + std::string(text) +
                     "' (expected one of: " + expected + ")");
  }

  const char* name(E value) const noexcept {
    for (const auto& e : entries) {
      if (e.value == value) return e.name;
    }
    return "unknown";
  }
};

template <typename E, std::size_t N>
constexpr NameTable<E, N> name_table(const char* parser, const char* kind,
                                     const EnumName<E> (&entries)[N]) {
  NameTable<E, N> t{parser, kind, {}};
  for (std::size_t i = 0; i < N; ++i) t.entries[i] = entries[i];
  return t;
}

}  // namespace smax::detail
