// Levenshtein distance, for "did you mean" suggestions (an unknown op name in a registration, an ONNX
// op type no converter takes). Header-only, like text_escape.h.
#pragma once
#include <algorithm>
#include <cctype>
#include <cstddef>
#include <string_view>
#include <vector>

namespace tessera {

// Insertions, deletions and substitutions that turn `a` into `b`; letters compare case-insensitively
// when `ignore_case`.
inline size_t edit_distance(std::string_view a, std::string_view b, bool ignore_case = false) {
  auto same = [&](char x, char y) {
    return ignore_case ? std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y))
                       : x == y;
  };
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (same(a[i - 1], b[j - 1]) ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

}  // namespace tessera
