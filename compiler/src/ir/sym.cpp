// Note [Symbolic sizes] in tessera/compiler/sym.h.
#include "tessera/compiler/sym.h"

#include <algorithm>
#include <cctype>
#include <functional>
#include <set>

#include "tessera/checked_math.h"
#include "tessera/error.h"

namespace tessera::compiler {

namespace {

enum class AtomKind { Symbol, FloorDiv, Mod };

struct Atom {
  AtomKind kind = AtomKind::Symbol;
  std::string name;  // Symbol
  SymSize lhs, rhs;  // FloorDiv, Mod
  std::string key;   // canonical text; atoms order by it
};
using AtomPtr = std::shared_ptr<const Atom>;

struct AtomLess {
  bool operator()(const AtomPtr& a, const AtomPtr& b) const { return a->key < b->key; }
};

// A monomial: atoms in canonical order, repeated for powers. The empty monomial is the constant term.
using Monomial = std::vector<AtomPtr>;

struct MonomialLess {
  bool operator()(const Monomial& a, const Monomial& b) const {
    // Higher degree first, then by the atoms' keys: "batch*seq + batch + 1".
    if (a.size() != b.size()) return a.size() > b.size();
    for (size_t i = 0; i < a.size(); ++i)
      if (a[i]->key != b[i]->key) return a[i]->key < b[i]->key;
    return false;
  }
};

int64_t add_or_throw(int64_t a, int64_t b) {
  int64_t r;
  TESSERA_CHECK(!__builtin_add_overflow(a, b, &r), "symbolic size: ", a, " + ", b, " overflows int64");
  return r;
}
int64_t mul_or_throw(int64_t a, int64_t b) {
  int64_t r;
  TESSERA_CHECK(!__builtin_mul_overflow(a, b, &r), "symbolic size: ", a, " * ", b, " overflows int64");
  return r;
}
int64_t floordiv_int(int64_t a, int64_t b) {
  TESSERA_CHECK(b != 0, "symbolic size: division by zero");
  TESSERA_CHECK(!(a == INT64_MIN && b == -1), "symbolic size: ", a, " // ", b, " overflows int64");
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}
int64_t mod_int(int64_t a, int64_t b) {
  TESSERA_CHECK(b != 0, "symbolic size: modulo by zero");
  if (b == -1) return 0;
  int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

bool is_identifier(std::string_view s) {
  if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  return std::all_of(s.begin(), s.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
}

}  // namespace

struct SymPoly {
  std::map<Monomial, int64_t, MonomialLess> terms;  // no zero coefficients
};

namespace {

SymPoly poly_of(const SymSize& s) {
  if (s.poly()) return *s.poly();
  SymPoly p;
  if (s.constant() != 0) p.terms[{}] = s.constant();
  return p;
}

SymSize atom_size(AtomPtr atom) {
  SymPoly p;
  p.terms[{std::move(atom)}] = 1;
  return SymSize::from_poly(std::move(p));
}

// `bare`: the monomial is the whole term (coefficient 1, one factor), so a // or % atom needs no
// parentheses; elsewhere they keep "2*((seq + 1)//2)" from reading back as "(2*(seq + 1))//2".
std::string monomial_str(const Monomial& m, bool bare) {
  std::string out;
  for (const auto& a : m) {
    if (!out.empty()) out += "*";
    if (a->kind == AtomKind::Symbol || bare)
      out += a->key;
    else
      out += "(" + a->key + ")";
  }
  return out;
}

// A // or % operand: bare when it is a constant or one symbol.
std::string operand_str(const SymSize& s) {
  std::string t = s.str();
  bool simple = std::all_of(t.begin(), t.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
  return simple ? t : "(" + t + ")";
}

// The greatest common divisor of every coefficient (0 for the zero polynomial).
int64_t content(const SymPoly& p) {
  int64_t g = 0;
  for (const auto& [m, c] : p.terms) {
    int64_t a = c < 0 ? -c : c, b = g;
    while (b) { int64_t t = a % b; a = b; b = t; }
    g = a;
  }
  return g;
}

AtomPtr make_binary_atom(AtomKind kind, const SymSize& a, const SymSize& b) {
  auto atom = std::make_shared<Atom>();
  atom->kind = kind;
  atom->lhs = a;
  atom->rhs = b;
  atom->key = operand_str(a) + (kind == AtomKind::FloorDiv ? "//" : "%") + operand_str(b);
  return atom;
}

}  // namespace

SymSize::SymSize(int64_t value) : value_(value) {}

SymSize SymSize::from_poly(SymPoly p) {
  if (p.terms.empty()) return SymSize(int64_t(0));
  if (p.terms.size() == 1 && p.terms.begin()->first.empty()) return SymSize(p.terms.begin()->second);
  SymSize s;
  s.poly_ = std::make_shared<const SymPoly>(std::move(p));
  return s;
}

SymSize SymSize::symbol(std::string_view name) {
  TESSERA_CHECK(is_identifier(name), "symbolic size: '", std::string(name),
                "' is not a valid dimension name; use letters, digits and '_', not starting with a digit");
  auto atom = std::make_shared<Atom>();
  atom->kind = AtomKind::Symbol;
  atom->name = std::string(name);
  atom->key = atom->name;
  return atom_size(std::move(atom));
}

int64_t SymSize::constant() const {
  TESSERA_CHECK(!poly_, "symbolic size ", str(), " has no constant value");
  return value_;
}

std::string SymSize::str() const {
  if (!poly_) return std::to_string(value_);
  std::string out;
  for (const auto& [m, c] : poly_->terms) {
    const std::string mag = c == INT64_MIN ? "9223372036854775808" : std::to_string(c < 0 ? -c : c);
    std::string body;
    if (m.empty())
      body = mag;
    else if (c == 1 || c == -1)
      body = monomial_str(m, m.size() == 1 && (c == 1 || !out.empty()));
    else
      body = mag + "*" + monomial_str(m, false);
    if (out.empty())
      out = (c < 0 ? "-" : "") + body;
    else
      out += (c < 0 ? " - " : " + ") + body;
  }
  return out;
}

int64_t SymSize::evaluate(const std::map<std::string, int64_t>& bindings) const {
  if (!poly_) return value_;
  int64_t total = 0;
  for (const auto& [m, c] : poly_->terms) {
    int64_t term = c;
    for (const auto& a : m) {
      int64_t v = 0;
      switch (a->kind) {
        case AtomKind::Symbol: {
          auto it = bindings.find(a->name);
          TESSERA_CHECK(it != bindings.end(), "symbolic size ", str(), ": no value for dimension '", a->name, "'");
          v = it->second;
          break;
        }
        case AtomKind::FloorDiv: v = floordiv_int(a->lhs.evaluate(bindings), a->rhs.evaluate(bindings)); break;
        case AtomKind::Mod: v = mod_int(a->lhs.evaluate(bindings), a->rhs.evaluate(bindings)); break;
      }
      term = mul_or_throw(term, v);
    }
    total = add_or_throw(total, term);
  }
  return total;
}

std::optional<std::string> SymSize::plain_symbol() const {
  if (is_constant()) return std::nullopt;
  std::vector<std::string> names = symbols();
  if (names.size() == 1 && same_as(SymSize::symbol(names[0]))) return names[0];
  return std::nullopt;
}

std::vector<std::string> SymSize::symbols() const {
  std::set<std::string> out;
  if (poly_)
    for (const auto& [m, c] : poly_->terms)
      for (const auto& a : m) {
        if (a->kind == AtomKind::Symbol) {
          out.insert(a->name);
        } else {
          for (auto& s : a->lhs.symbols()) out.insert(s);
          for (auto& s : a->rhs.symbols()) out.insert(s);
        }
      }
  return {out.begin(), out.end()};
}

namespace {
using Interval = std::pair<long double, long double>;
Interval interval_mul(Interval a, Interval b) {
  long double c[4] = {a.first * b.first, a.first * b.second, a.second * b.first, a.second * b.second};
  return {*std::min_element(c, c + 4), *std::max_element(c, c + 4)};
}
}  // namespace

std::pair<int64_t, int64_t> SymSize::bounds(const std::map<std::string, SymbolRange>& ranges) const {
  constexpr long double kLo = -9.3e18L, kHi = 9.3e18L;  // beyond int64: saturate
  auto clamp = [](long double v) -> int64_t {
    if (v <= (long double)INT64_MIN) return INT64_MIN;
    if (v >= (long double)INT64_MAX) return INT64_MAX;
    return int64_t(v);
  };
  if (!poly_) return {value_, value_};
  std::function<Interval(const Atom&)> atom_bounds = [&](const Atom& a) -> Interval {
    switch (a.kind) {
      case AtomKind::Symbol: {
        auto it = ranges.find(a.name);
        if (it == ranges.end()) return {kLo, kHi};
        return {(long double)it->second.min, (long double)it->second.max};
      }
      case AtomKind::FloorDiv: {
        auto d = a.rhs.maybe_constant();
        if (!d || *d <= 0) return {kLo, kHi};
        auto [lo, hi] = a.lhs.bounds(ranges);
        return {(long double)floordiv_int(lo, *d), (long double)floordiv_int(hi, *d)};
      }
      case AtomKind::Mod: {
        auto d = a.rhs.maybe_constant();
        if (!d || *d <= 0) return {kLo, kHi};
        return {0.0L, (long double)(*d - 1)};
      }
    }
    return {kLo, kHi};
  };
  Interval total{0, 0};
  for (const auto& [m, c] : poly_->terms) {
    Interval term{(long double)c, (long double)c};
    for (const auto& a : m) term = interval_mul(term, atom_bounds(*a));
    total = {total.first + term.first, total.second + term.second};
  }
  return {clamp(std::max(total.first, kLo)), clamp(std::min(total.second, kHi))};
}

bool SymSize::same_as(const SymSize& other) const {
  if (!poly_ || !other.poly_) return !poly_ && !other.poly_ && value_ == other.value_;
  return str() == other.str();
}

SymSize operator+(const SymSize& a, const SymSize& b) {
  if (a.is_constant() && b.is_constant()) return SymSize(add_or_throw(a.constant(), b.constant()));
  SymPoly p = poly_of(a);
  for (const auto& [m, c] : poly_of(b).terms) {
    int64_t v = add_or_throw(p.terms.count(m) ? p.terms[m] : 0, c);
    if (v == 0)
      p.terms.erase(m);
    else
      p.terms[m] = v;
  }
  return SymSize::from_poly(std::move(p));
}

SymSize operator-(const SymSize& a) { return a * SymSize(int64_t(-1)); }

SymSize operator-(const SymSize& a, const SymSize& b) {
  if (a.is_constant() && b.is_constant()) {
    int64_t r;
    TESSERA_CHECK(!__builtin_sub_overflow(a.constant(), b.constant(), &r), "symbolic size: ", a.constant(), " - ",
                  b.constant(), " overflows int64");
    return SymSize(r);
  }
  return a + (-b);
}

SymSize operator*(const SymSize& a, const SymSize& b) {
  if (a.is_constant() && b.is_constant()) return SymSize(mul_or_throw(a.constant(), b.constant()));
  SymPoly pa = poly_of(a), pb = poly_of(b), out;
  for (const auto& [ma, ca] : pa.terms)
    for (const auto& [mb, cb] : pb.terms) {
      Monomial m = ma;
      m.insert(m.end(), mb.begin(), mb.end());
      std::sort(m.begin(), m.end(), AtomLess());
      int64_t v = add_or_throw(out.terms.count(m) ? out.terms[m] : 0, mul_or_throw(ca, cb));
      if (v == 0)
        out.terms.erase(m);
      else
        out.terms[m] = v;
    }
  return SymSize::from_poly(std::move(out));
}

SymSize floordiv(const SymSize& a, const SymSize& b) {
  if (b.is_constant()) {
    int64_t d = b.constant();
    TESSERA_CHECK(d != 0, "symbolic size: ", a.str(), " // 0 is a division by zero");
    if (a.is_constant()) return SymSize(floordiv_int(a.constant(), d));
    if (d == 1) return a;
    // Exact division: every coefficient is a multiple of d.
    SymPoly p = poly_of(a);
    if (d > 0 && content(p) % d == 0) {
      for (auto& [m, c] : p.terms) c /= d;
      return SymSize::from_poly(std::move(p));
    }
  } else if (a.same_as(b)) {
    return SymSize(int64_t(1));  // sizes are non-negative; a // a for a > 0 (a == 0 is an error at run time)
  }
  return atom_size(make_binary_atom(AtomKind::FloorDiv, a, b));
}

SymSize mod(const SymSize& a, const SymSize& b) {
  if (b.is_constant()) {
    int64_t d = b.constant();
    TESSERA_CHECK(d != 0, "symbolic size: ", a.str(), " % 0 is a modulo by zero");
    if (a.is_constant()) return SymSize(mod_int(a.constant(), d));
    if (d == 1 || d == -1) return SymSize(int64_t(0));
    SymPoly p = poly_of(a);
    if (d > 0 && content(p) % d == 0) return SymSize(int64_t(0));
  } else if (a.same_as(b)) {
    return SymSize(int64_t(0));
  }
  return atom_size(make_binary_atom(AtomKind::Mod, a, b));
}

// ---- parsing ----

namespace {

class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  SymSize parse_all() {
    SymSize s = parse_sum();
    skip_space();
    if (pos_ != text_.size()) fail("unexpected '" + std::string(1, text_[pos_]) + "'");
    return s;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    TESSERA_CHECK(false, "symbolic size '", std::string(text_), "': ", what, " at position ", pos_,
                  "; sizes are integers and dimension names joined by + - * // % and parentheses");
    __builtin_unreachable();
  }
  void skip_space() {
    while (pos_ < text_.size() && text_[pos_] == ' ') ++pos_;
  }
  bool eat(std::string_view tok) {
    skip_space();
    if (text_.substr(pos_, tok.size()) == tok) {
      pos_ += tok.size();
      return true;
    }
    return false;
  }
  SymSize parse_sum() {
    SymSize s = parse_product();
    for (;;) {
      if (eat("+"))
        s = s + parse_product();
      else if (eat("-"))
        s = s - parse_product();
      else
        return s;
    }
  }
  SymSize parse_product() {
    SymSize s = parse_unary();
    for (;;) {
      if (eat("//"))
        s = floordiv(s, parse_unary());
      else if (eat("*"))
        s = s * parse_unary();
      else if (eat("%"))
        s = mod(s, parse_unary());
      else
        return s;
    }
  }
  SymSize parse_unary() {
    if (eat("-")) return -parse_unary();
    return parse_atom();
  }
  SymSize parse_atom() {
    if (++depth_ > 64) fail("nesting deeper than 64");
    skip_space();
    SymSize out;
    if (eat("(")) {
      out = parse_sum();
      if (!eat(")")) fail("missing ')'");
    } else if (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) {
      uint64_t v = 0;
      while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) {
        if (v > (uint64_t(INT64_MAX) - 9) / 10 + 1) fail("integer out of range");
        v = v * 10 + uint64_t(text_[pos_++] - '0');
      }
      if (v > uint64_t(INT64_MAX)) fail("integer out of range");
      out = SymSize(int64_t(v));
    } else if (pos_ < text_.size() && (std::isalpha(static_cast<unsigned char>(text_[pos_])) || text_[pos_] == '_')) {
      size_t start = pos_;
      while (pos_ < text_.size() && (std::isalnum(static_cast<unsigned char>(text_[pos_])) || text_[pos_] == '_')) ++pos_;
      out = SymSize::symbol(text_.substr(start, pos_ - start));
    } else {
      fail(pos_ < text_.size() ? "unexpected '" + std::string(1, text_[pos_]) + "'" : "unexpected end");
    }
    --depth_;
    return out;
  }

  std::string_view text_;
  size_t pos_ = 0;
  int depth_ = 0;
};

}  // namespace

SymSize SymSize::parse(std::string_view text) {
  TESSERA_CHECK(text.size() <= 4096, "symbolic size of ", text.size(), " characters is longer than the 4096 allowed");
  return Parser(text).parse_all();
}

}  // namespace tessera::compiler
