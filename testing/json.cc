// testing/json.cc
#include "json.h"

#include <cmath>
#include <cstdio>

namespace smax_cli {

std::string json_string(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

std::string json_number(double value) {
  if (!std::isfinite(value)) return "null";
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.6g", value);
  return buf;
}

std::string json_int_array(const std::vector<int64_t>& values) {
  std::string out = "[";
  for (size_t i = 0; i < values.size(); ++i) {
    if (i != 0) out += ", ";
    out += std::to_string(values[i]);
  }
  return out + "]";
}

std::string json_string_array(const std::vector<std::string>& values) {
  std::string out = "[";
  for (size_t i = 0; i < values.size(); ++i) {
    if (i != 0) out += ", ";
    out += json_string(values[i]);
  }
  return out + "]";
}

JsonObject& JsonObject::raw(const std::string& key, const std::string& json_value) {
  fields_.emplace_back(key, json_value);
  return *this;
}

std::string JsonObject::compact() const {
  std::string out = "{";
  for (size_t i = 0; i < fields_.size(); ++i) {
    if (i != 0) out += ", ";
    out += json_string(fields_[i].first) + ": " + fields_[i].second;
  }
  return out + "}";
}

std::string JsonObject::pretty(int indent) const {
  const std::string pad(static_cast<size_t>(indent), ' ');
  std::string out = "{\n";
  for (size_t i = 0; i < fields_.size(); ++i) {
    out += pad + "  " + json_string(fields_[i].first) + ": " + fields_[i].second;
    out += i + 1 < fields_.size() ? ",\n" : "\n";
  }
  return out + pad + "}";
}

}  // namespace smax_cli
