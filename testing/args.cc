// testing/args.cc: command-line parsing for the smax CLI.
#include "args.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include "suggest.h"

namespace smax_cli {
namespace {

const OptionSpec* find_spec(const std::vector<OptionSpec>& specs, const std::string& name) {
  for (const OptionSpec& spec : specs) {
    if (spec.name == name) return &spec;
  }
  return nullptr;
}

// Multiply with an overflow check; false on overflow.
bool checked_mul(int64_t a, int64_t b, int64_t* out) {
  return !__builtin_mul_overflow(a, b, out);
}

}  // namespace

Args::Args(const std::string& command, const std::vector<OptionSpec>& specs, int argc,
           char** argv, int first) {
  for (int i = first; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.size() < 3 || arg.compare(0, 2, "--") != 0) {
      throw UsageError("unexpected argument '" + arg + "' for '" + command +
                       "' (options start with --; see " + command + " --help)");
    }
    std::string name = arg.substr(2);
    std::string value;
    bool inline_value = false;
    const size_t eq = name.find('=');
    if (eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      inline_value = true;
    }
    const OptionSpec* spec = find_spec(specs, name);
    if (spec == nullptr) {
      std::vector<std::string> names;
      for (const OptionSpec& s : specs) names.push_back(s.name);
      throw UsageError("unknown option '--" + name + "' for '" + command + "'" +
                       did_you_mean(name, names, "--") + " (see " + command + " --help)");
    }
    if (spec->takes_value && !inline_value) {
      // The next word is the value, whatever it looks like ("--axis -1").
      if (i + 1 >= argc) throw UsageError("option '--" + name + "' needs a value");
      value = argv[++i];
    } else if (!spec->takes_value && inline_value) {
      throw UsageError("option '--" + name + "' takes no value (got '" + value + "')");
    }
    if (values_.count(name) != 0) {
      throw UsageError("option '--" + name + "' given more than once");
    }
    values_[name] = value;
  }
}

std::string Args::get(const std::string& name, const std::string& fallback) const {
  auto it = values_.find(name);
  return it == values_.end() ? fallback : it->second;
}

int64_t parse_int(const std::string& what, const std::string& text, bool allow_suffix) {
  if (text.empty()) throw UsageError(what + ": expected an integer, got ''");
  std::string digits = text;
  int64_t multiplier = 1;
  if (allow_suffix) {
    const char last = digits.back();
    if (last == 'K' || last == 'k') multiplier = int64_t{1} << 10;
    if (last == 'M' || last == 'm') multiplier = int64_t{1} << 20;
    if (last == 'G' || last == 'g') multiplier = int64_t{1} << 30;
    if (multiplier != 1) digits.pop_back();
  }
  size_t pos = 0;
  if (pos < digits.size() && (digits[pos] == '-' || digits[pos] == '+')) ++pos;
  if (pos == digits.size()) throw UsageError(what + ": expected an integer, got '" + text + "'");
  for (size_t i = pos; i < digits.size(); ++i) {
    if (digits[i] < '0' || digits[i] > '9') {
      throw UsageError(what + ": expected an integer, got '" + text + "'");
    }
  }
  errno = 0;
  char* end = nullptr;
  const long long value = std::strtoll(digits.c_str(), &end, 10);
  int64_t result = 0;
  if (errno == ERANGE || !checked_mul(static_cast<int64_t>(value), multiplier, &result)) {
    throw UsageError(what + ": integer '" + text + "' is out of range");
  }
  return result;
}

double parse_double(const std::string& what, const std::string& text) {
  errno = 0;
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size()) {
    throw UsageError(what + ": expected a number, got '" + text + "'");
  }
  if (errno == ERANGE || !std::isfinite(value)) {
    throw UsageError(what + ": number '" + text + "' is not finite");
  }
  return value;
}

std::vector<int64_t> parse_shape(const std::string& text) {
  std::vector<int64_t> shape;
  size_t start = 0;
  while (true) {
    const size_t x = text.find_first_of("x,", start);
    const std::string dim = text.substr(start, x == std::string::npos ? std::string::npos
                                                                      : x - start);
    if (dim.empty() || dim[0] == '-' || dim[0] == '+') {
      throw UsageError("--shape: malformed shape '" + text +
                       "' (expected positive sizes separated by 'x', e.g. 256x32000)");
    }
    int64_t value = 0;
    try {
      value = parse_int("--shape", dim, /*allow_suffix=*/true);
    } catch (const UsageError&) {
      throw UsageError("--shape: malformed shape '" + text +
                       "' (expected positive sizes separated by 'x', e.g. 256x32000)");
    }
    if (value < 1) {
      throw UsageError("--shape: every size must be >= 1, got " + std::to_string(value) +
                       " in '" + text + "'");
    }
    shape.push_back(value);
    if (x == std::string::npos) break;
    start = x + 1;
  }
  if (shape.size() > 8) {
    throw UsageError("--shape: rank " + std::to_string(shape.size()) +
                     " is above the maximum of 8 in '" + text + "'");
  }
  int64_t total = 1;
  for (int64_t d : shape) {
    if (!checked_mul(total, d, &total) || total > (int64_t{1} << 40)) {
      throw UsageError("--shape: '" + text + "' has too many elements");
    }
  }
  return shape;
}

std::string format_shape(const std::vector<int64_t>& shape) {
  std::string out;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i != 0) out += 'x';
    out += std::to_string(shape[i]);
  }
  return out;
}

std::vector<int64_t> parse_sizes(const std::string& text) {
  std::vector<int64_t> sizes;
  auto parse_one = [&](const std::string& word) {
    const int64_t n = parse_int("--sizes", word, /*allow_suffix=*/true);
    if (n < 1) throw UsageError("--sizes: sizes must be >= 1, got '" + word + "'");
    return n;
  };
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    const std::string item = text.substr(start, comma - start);
    if (item.empty()) throw UsageError("--sizes: empty entry in '" + text + "'");
    const size_t dots = item.find("..");
    if (dots == std::string::npos) {
      sizes.push_back(parse_one(item));
    } else {
      const int64_t lo = parse_one(item.substr(0, dots));
      const int64_t hi = parse_one(item.substr(dots + 2));
      if (lo > hi) throw UsageError("--sizes: range '" + item + "' is empty (lo > hi)");
      int64_t n = lo;
      while (n <= hi) {
        sizes.push_back(n);
        if (n > hi / 4) break;
        n *= 4;
      }
      if (sizes.back() != hi) sizes.push_back(hi);
    }
    start = comma + 1;
  }
  return sizes;
}

std::string format_number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

std::string format_size(int64_t n) {
  if (n >= (int64_t{1} << 30) && n % (int64_t{1} << 30) == 0) {
    return std::to_string(n >> 30) + "G";
  }
  if (n >= (int64_t{1} << 20) && n % (int64_t{1} << 20) == 0) {
    return std::to_string(n >> 20) + "M";
  }
  if (n >= (int64_t{1} << 10) && n % (int64_t{1} << 10) == 0) {
    return std::to_string(n >> 10) + "K";
  }
  return std::to_string(n);
}

Format parse_format(const std::string& text) {
  if (text == "text") return Format::kText;
  if (text == "json") return Format::kJson;
  throw UsageError("--format: unknown format '" + text + "' (expected text or json)");
}

}  // namespace smax_cli
