// testing/suggest.h: "did you mean" for the CLI's error messages (unknown
// commands, options, ops, parameters, algorithms).
#pragma once

#include <string>
#include <vector>

namespace smax_cli {

/// Optimal-string-alignment distance (Levenshtein plus adjacent
/// transpositions), case-insensitive: "sofmax" -> "softmax" is 1,
/// "rnu" -> "run" is 1.
int edit_distance(const std::string& a, const std::string& b);

/// The candidate closest to `word`, or "" when none is close: a candidate
/// qualifies at distance <= 2 and <= word.size() / 2 (so a one-letter typo
/// never suggests an unrelated one-letter name), or when `word` (3 letters
/// or more) is a prefix of exactly one candidate. Ties go to the earlier
/// candidate.
std::string closest(const std::string& word, const std::vector<std::string>& candidates);

/// "; did you mean 'PREFIXbest'?" when closest() finds one, else "".
std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates,
                         const std::string& prefix = "");

/// "a, b, c" (for "expected one of ..." lists).
std::string join_names(const std::vector<std::string>& names, const std::string& sep = ", ");

}  // namespace smax_cli
