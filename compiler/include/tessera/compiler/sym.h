// Symbolic sizes for exported programs.
//
// Note [Symbolic sizes]
// A SymSize is an integer constant or an expression over named dimensions ("batch", "seq"). Sums
// and products are kept as a canonical polynomial (integer coefficients over monomials of atoms),
// so `batch*seq` and `seq*batch` are the same size and print the same way; floor division and
// modulo that cannot be simplified become opaque atoms `(a)//(b)` and `(a)%(b)`. str() is the
// canonical text, parse() reads it back (the program file stores sizes as these strings), and
// evaluate() binds the symbols to integers. Coefficient arithmetic is overflow-checked: a size
// from a file or a user never wraps silently.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tessera/compiler/export_macros.h"

namespace tessera::compiler {

struct SymPoly;  // the canonical polynomial (sym.cpp)
struct SymbolRange;

class TESSERA_COMPILER_API SymSize {
 public:
  SymSize() : SymSize(int64_t(0)) {}
  SymSize(int64_t value);  // NOLINT(google-explicit-constructor): sizes mix with integers freely
  SymSize(int value) : SymSize(int64_t(value)) {}
  // A named dimension. The name must be an identifier ([A-Za-z_][A-Za-z0-9_]*); throws otherwise.
  static SymSize symbol(std::string_view name);
  // Reads str()'s syntax: integers, identifiers, + - * // %, parentheses, unary minus. Throws
  // tessera::Error naming the text and the position of the first problem.
  static SymSize parse(std::string_view text);

  bool is_constant() const { return !poly_; }
  // The constant value; throws tessera::Error when the size is symbolic.
  int64_t constant() const;
  std::optional<int64_t> maybe_constant() const {
    return poly_ ? std::nullopt : std::optional<int64_t>(value_);
  }
  // Canonical text: "512", "batch", "2*batch*seq + 1", "(seq + 1)//2".
  std::string str() const;
  // Binds every symbol; throws naming a symbol missing from `bindings`, and on division by zero or
  // overflow.
  int64_t evaluate(const std::map<std::string, int64_t>& bindings) const;
  // The symbols the size mentions, sorted, each once.
  std::vector<std::string> symbols() const;
  // The name when the size is one plain symbol ("s0"); nullopt for a constant or an expression
  // ("2*s0", "s0 + 1"). Such a dim of an input binds its symbol (Note [Binding symbols]).
  std::optional<std::string> plain_symbol() const;
  // The interval [lo, hi] the size takes when every symbol lies in its range in `ranges` (a symbol
  // not listed is unbounded). Conservative, saturating at the int64 limits.
  std::pair<int64_t, int64_t> bounds(const std::map<std::string, SymbolRange>& ranges) const;
  // Structural equality of the canonical forms (not a proof that two expressions are equal for
  // every binding; e.g. (2*b)//2 and b are equal only after simplification).
  bool same_as(const SymSize& other) const;

  friend TESSERA_COMPILER_API SymSize operator+(const SymSize& a, const SymSize& b);
  friend TESSERA_COMPILER_API SymSize operator-(const SymSize& a, const SymSize& b);
  friend TESSERA_COMPILER_API SymSize operator*(const SymSize& a, const SymSize& b);
  friend TESSERA_COMPILER_API SymSize operator-(const SymSize& a);
  // Floor division and modulo (Python semantics); both throw on a constant zero divisor.
  friend TESSERA_COMPILER_API SymSize floordiv(const SymSize& a, const SymSize& b);
  friend TESSERA_COMPILER_API SymSize mod(const SymSize& a, const SymSize& b);

  // For the canonical ordering inside sym.cpp.
  const std::shared_ptr<const SymPoly>& poly() const { return poly_; }
  static SymSize from_poly(SymPoly p);

 private:
  std::shared_ptr<const SymPoly> poly_;  // null: a constant
  int64_t value_ = 0;
};

inline std::ostream& operator<<(std::ostream& os, const SymSize& s) { return os << s.str(); }

// The closed range [min, max] a symbol may take.
struct SymbolRange {
  int64_t min = 0;
  int64_t max = INT64_MAX;
};

}  // namespace tessera::compiler
