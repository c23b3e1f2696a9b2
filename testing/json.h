// testing/json.h: just enough JSON writing for the CLI's reports.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace smax_cli {

/// Quoted and escaped JSON string.
std::string json_string(const std::string& text);
/// Shortest round-trip-ish form ("%.6g"); null for NaN / inf (JSON has none).
std::string json_number(double value);
std::string json_int_array(const std::vector<int64_t>& values);
std::string json_string_array(const std::vector<std::string>& values);

/// Builds one JSON object: `"key": value` pairs in insertion order, on one
/// line (compact) or one per line (pretty, two-space indent).
class JsonObject {
 public:
  JsonObject& raw(const std::string& key, const std::string& json_value);
  JsonObject& str(const std::string& key, const std::string& value) {
    return raw(key, json_string(value));
  }
  JsonObject& num(const std::string& key, double value) { return raw(key, json_number(value)); }
  JsonObject& integer(const std::string& key, int64_t value) {
    return raw(key, std::to_string(value));
  }
  JsonObject& boolean(const std::string& key, bool value) {
    return raw(key, value ? "true" : "false");
  }
  JsonObject& null(const std::string& key) { return raw(key, "null"); }
  std::string compact() const;
  std::string pretty(int indent = 0) const;

 private:
  std::vector<std::pair<std::string, std::string>> fields_;
};

}  // namespace smax_cli
