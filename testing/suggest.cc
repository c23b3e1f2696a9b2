// testing/suggest.cc: "did you mean" (contract in suggest.h).
#include "suggest.h"

#include <algorithm>
#include <cctype>

namespace smax_cli {
namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

int edit_distance(const std::string& a_in, const std::string& b_in) {
  const std::string a = lower(a_in), b = lower(b_in);
  const size_t n = a.size(), m = b.size();
  std::vector<std::vector<int>> d(n + 1, std::vector<int>(m + 1, 0));
  for (size_t i = 0; i <= n; ++i) d[i][0] = static_cast<int>(i);
  for (size_t j = 0; j <= m; ++j) d[0][j] = static_cast<int>(j);
  for (size_t i = 1; i <= n; ++i) {
    for (size_t j = 1; j <= m; ++j) {
      const int cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[n][m];
}

std::string closest(const std::string& word, const std::vector<std::string>& candidates) {
  if (word.empty()) return "";
  const int limit = std::min<int>(2, static_cast<int>(word.size() / 2));
  std::string best;
  int best_d = limit + 1;
  for (const std::string& c : candidates) {
    const int d = edit_distance(word, c);
    if (d < best_d) {
      best_d = d;
      best = c;
    }
  }
  if (!best.empty()) return best;
  if (word.size() < 3) return "";
  const std::string w = lower(word);
  std::string only;
  for (const std::string& c : candidates) {
    if (lower(c).compare(0, w.size(), w) == 0) {
      if (!only.empty()) return "";
      only = c;
    }
  }
  return only;
}

std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates,
                         const std::string& prefix) {
  const std::string best = closest(word, candidates);
  return best.empty() ? "" : "; did you mean '" + prefix + best + "'?";
}

std::string join_names(const std::vector<std::string>& names, const std::string& sep) {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) out += (i ? sep : "") + names[i];
  return out;
}

}  // namespace smax_cli
