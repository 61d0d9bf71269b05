// Parser for operator schemas in PyTorch's syntax. See schema.h.
#include "tessera/schema.h"

#include <algorithm>
#include <cctype>
#include <string>
#include <unordered_set>

#include "tessera/error.h"

namespace tessera {
namespace {

class SchemaParser {
 public:
  explicit SchemaParser(std::string_view text) : text_(text) {}

  FunctionSchema parse() {
    FunctionSchema s;
    skip_ws();
    s.name = identifier("operator name");
    if (peek() == '.') {
      ++pos_;
      s.overload = identifier("overload name");
    }
    skip_ws();
    expect('(');
    std::unordered_set<std::string> names;  // a linear-time duplicate check
    bool kwarg_only = false;
    skip_ws();
    if (peek() != ')') {
      while (true) {
        skip_ws();
        if (peek() == '*') {
          if (kwarg_only) fail("a second '*'");
          ++pos_;
          kwarg_only = true;
          skip_ws();
          if (peek() == ')') fail("an argument after '*'");
          expect(',');
          continue;
        }
        if (s.arguments.size() == kMaxSchemaArguments)
          fail_at(pos_, "more than " + std::to_string(kMaxSchemaArguments) + " arguments; pass a list (int[] or "
                        "Tensor[]) instead of many single arguments");
        Argument a = argument(/*is_return=*/false);
        a.kwarg_only = kwarg_only;
        if (!names.insert(a.name).second) fail_at(arg_start_, "argument name '" + a.name + "' used twice");
        s.arguments.push_back(std::move(a));
        skip_ws();
        if (peek() == ',') {
          ++pos_;
          continue;
        }
        break;
      }
    }
    expect(')');
    skip_ws();
    expect('-');
    expect('>');
    skip_ws();
    if (peek() == '(') {
      ++pos_;
      skip_ws();
      if (peek() != ')') {
        while (true) {
          skip_ws();
          if (s.returns.size() == kMaxSchemaArguments)
            fail_at(pos_, "more than " + std::to_string(kMaxSchemaArguments) + " returns; return a Tensor[] instead");
          s.returns.push_back(argument(/*is_return=*/true));
          skip_ws();
          if (peek() == ',') {
            ++pos_;
            continue;
          }
          break;
        }
      }
      expect(')');
    } else {
      s.returns.push_back(argument(/*is_return=*/true));
    }
    skip_ws();
    if (pos_ != text_.size()) fail("end of schema");
    return s;
  }

 private:
  char peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }
  void skip_ws() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\n')) ++pos_;
  }

  std::string describe_here() const {
    if (pos_ >= text_.size()) return "end of schema";
    char c = text_[pos_];
    if (std::isprint(static_cast<unsigned char>(c))) return std::string("'") + c + "'";
    return "byte " + std::to_string(int(static_cast<unsigned char>(c)));
  }

  // The message shows at most kContext characters either side of the problem, so that an error in a
  // huge schema stays short.
  [[noreturn]] void fail_at(size_t pos, const std::string& what) const {
    constexpr size_t kContext = 60;
    const size_t from = pos > kContext ? pos - kContext : 0;
    const size_t to = std::min(text_.size(), pos + kContext);
    std::string line = (from > 0 ? "..." : "") + std::string(text_.substr(from, to - from)) + (to < text_.size() ? "..." : "");
    for (char& c : line)
      if (c == '\n' || c == '\t' || !std::isprint(static_cast<unsigned char>(c))) c = ' ';
    detail::throw_error(ErrorCode::InvalidArgument, "schema: " + what + " at column " +
                                                        std::to_string(pos + 1) + "\n" + line + "\n" +
                                                        std::string(pos - from + (from > 0 ? 3 : 0), ' ') + "^");
  }
  [[noreturn]] void fail(const std::string& expected) const {
    fail_at(pos_, "expected " + expected + ", got " + describe_here());
  }
  void expect(char c) {
    if (peek() != c) fail(std::string("'") + c + "'");
    ++pos_;
  }

  static bool ident_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
  static bool ident_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

  std::string identifier(const char* what) {
    if (!ident_start(peek())) fail(what);
    size_t start = pos_;
    while (ident_char(peek())) ++pos_;
    return std::string(text_.substr(start, pos_ - start));
  }

  Argument argument(bool is_return) {
    Argument a;
    arg_start_ = pos_;
    size_t type_pos = pos_;
    std::string base = identifier("a type");
    if (base == "SymInt") base = "int";
    // Tensor(a!) / Tensor(a)
    if (peek() == '(') {
      if (base != "Tensor") fail_at(pos_, "alias annotation on non-Tensor type '" + base + "'");
      ++pos_;
      if (!std::islower(static_cast<unsigned char>(peek()))) fail("an alias set name (a lower-case letter)");
      a.alias = identifier("an alias set name");
      if (peek() == '!') {
        ++pos_;
        a.is_write = true;
      }
      expect(')');
    }
    bool list = false;
    if (peek() == '[') {
      ++pos_;
      list = true;
      if (std::isdigit(static_cast<unsigned char>(peek()))) {
        size_t start = pos_;
        int64_t n = 0;
        while (std::isdigit(static_cast<unsigned char>(peek()))) {
          if (n > 1000000) fail_at(start, "list size too large");
          n = n * 10 + (peek() - '0');
          ++pos_;
        }
        if (n == 0) fail_at(start, "list size must be positive");
        a.list_size = n;
      }
      expect(']');
    }
    bool optional = false;
    if (peek() == '?') {
      ++pos_;
      optional = true;
    }
    a.type = resolve_type(type_pos, base, list, optional, a.list_size.has_value());
    // A written list (`Tensor(a!)[]`, an argument only) is the other annotated type: an op that
    // writes every element in place and returns nothing for them (the list optimizer steps).
    const bool written_list = a.type == ArgType::TensorList && a.is_write && !is_return;
    if (a.alias && a.type != ArgType::Tensor && !written_list)
      fail_at(type_pos, "alias annotation on '" + std::string(arg_type_name(a.type)) + "'" +
                            (a.type == ArgType::TensorList ? " (a list may only be written: Tensor(a!)[])" : ""));
    // name (optional for returns)
    bool had_space = false;
    size_t before = pos_;
    skip_ws();
    had_space = pos_ != before;
    if (ident_start(peek())) {
      if (!had_space) fail("a space before the argument name");
      a.name = identifier("an argument name");
    } else if (!is_return) {
      fail("an argument name");
    }
    skip_ws();
    if (peek() == '=') {
      if (is_return) fail_at(pos_, "default value on a return");
      ++pos_;
      skip_ws();
      a.default_value = default_value(a);
    }
    return a;
  }

  ArgType resolve_type(size_t pos, const std::string& base, bool list, bool optional, bool sized) {
    auto bad = [&]() -> ArgType {
      std::string t = base + (list ? "[]" : "") + (optional ? "?" : "");
      fail_at(pos,
              "unsupported type '" + t +
                  "' (known: Tensor, Tensor?, Tensor[], int, int?, int[], int[N], int[]?, float, float?, "
                  "bool, Scalar, Scalar?, str, str?, ScalarType, ScalarType?)");
    };
    if (base == "Tensor") {
      if (list) return optional || sized ? bad() : ArgType::TensorList;
      return optional ? ArgType::OptionalTensor : ArgType::Tensor;
    }
    if (base == "int") {
      if (list) return optional ? ArgType::OptionalIntList : ArgType::IntList;
      return optional ? ArgType::OptionalInt : ArgType::Int;
    }
    if (list) return bad();
    if (base == "float") return optional ? ArgType::OptionalFloat : ArgType::Float;
    if (base == "bool") return optional ? bad() : ArgType::Bool;
    if (base == "Scalar") return optional ? ArgType::OptionalScalar : ArgType::Scalar;
    if (base == "str") return optional ? ArgType::OptionalString : ArgType::String;
    if (base == "ScalarType") return optional ? ArgType::OptionalDType : ArgType::DType;
    return bad();
  }

  static bool is_optional(ArgType t) {
    return t == ArgType::OptionalTensor || t == ArgType::OptionalInt || t == ArgType::OptionalFloat ||
           t == ArgType::OptionalString || t == ArgType::OptionalDType || t == ArgType::OptionalIntList ||
           t == ArgType::OptionalScalar;
  }

  // Parses one number; returns its text. `is_float` says whether it has a '.' or exponent.
  std::string number(bool* is_float) {
    size_t start = pos_;
    if (peek() == '-' || peek() == '+') ++pos_;
    if (!std::isdigit(static_cast<unsigned char>(peek()))) fail("a number");
    while (std::isdigit(static_cast<unsigned char>(peek()))) ++pos_;
    *is_float = false;
    if (peek() == '.') {
      *is_float = true;
      ++pos_;
      while (std::isdigit(static_cast<unsigned char>(peek()))) ++pos_;
    }
    if (peek() == 'e' || peek() == 'E') {
      *is_float = true;
      ++pos_;
      if (peek() == '-' || peek() == '+') ++pos_;
      if (!std::isdigit(static_cast<unsigned char>(peek()))) fail("exponent digits");
      while (std::isdigit(static_cast<unsigned char>(peek()))) ++pos_;
    }
    if (pos_ - start > 64) fail_at(start, "number too long");
    return std::string(text_.substr(start, pos_ - start));
  }

  std::string default_value(const Argument& a) {
    size_t start = pos_;
    char c = peek();
    auto type_error = [&](const char* got) {
      fail_at(start, std::string("default ") + got + " does not fit type '" + arg_type_name(a.type) + "'");
    };
    if (ident_start(c)) {
      std::string word = identifier("a default value");
      if (word == "None") {
        if (!is_optional(a.type)) type_error("None");
        return word;
      }
      if (word == "True" || word == "False") {
        if (a.type != ArgType::Bool && a.type != ArgType::Scalar && a.type != ArgType::OptionalScalar)
          type_error(word.c_str());
        return word;
      }
      if (a.type == ArgType::DType || a.type == ArgType::OptionalDType) return word;  // e.g. float32
      fail_at(start, "unknown default value '" + word +
                         "' (expected a number, True, False, None, a list or a string)");
    }
    if (c == '"' || c == '\'') {
      if (a.type != ArgType::String && a.type != ArgType::OptionalString) type_error("string");
      char quote = c;
      ++pos_;
      std::string value;
      while (peek() != quote) {
        if (pos_ >= text_.size()) fail_at(start, "unterminated string");
        char ch = text_[pos_];
        if (ch == '\\' || !std::isprint(static_cast<unsigned char>(ch)) || ch == '"' || ch == '\'')
          fail_at(pos_, "unsupported character in string default");
        value += ch;
        ++pos_;
      }
      ++pos_;
      return "\"" + value + "\"";
    }
    if (c == '[') {
      if (a.type != ArgType::IntList && a.type != ArgType::OptionalIntList) type_error("list");
      ++pos_;
      std::string out = "[";
      skip_ws();
      bool first = true;
      while (peek() != ']') {
        if (!first) {
          expect(',');
          skip_ws();
        }
        bool is_float = false;
        std::string n = number(&is_float);
        if (is_float) fail_at(start, "list default must hold integers");
        out += (first ? "" : ", ") + n;
        first = false;
        skip_ws();
      }
      ++pos_;
      return out + "]";
    }
    bool is_float = false;
    std::string n = number(&is_float);
    switch (a.type) {
      case ArgType::Int:
      case ArgType::OptionalInt:
      case ArgType::IntList:
      case ArgType::OptionalIntList:
        if (is_float) type_error("floating number");
        break;
      case ArgType::Float:
      case ArgType::OptionalFloat:
      case ArgType::Scalar:
      case ArgType::OptionalScalar:
        break;
      default:
        type_error("number");
    }
    return n;
  }

  std::string_view text_;
  size_t pos_ = 0;
  size_t arg_start_ = 0;
};

std::string type_str(const Argument& a) {
  std::string t;
  switch (a.type) {
    case ArgType::Tensor:
      t = "Tensor";
      if (a.alias) t += "(" + *a.alias + (a.is_write ? "!" : "") + ")";
      return t;
    case ArgType::TensorList:
      return a.alias ? "Tensor(" + *a.alias + "!)[]" : "Tensor[]";
    case ArgType::IntList:
      return a.list_size ? "int[" + std::to_string(*a.list_size) + "]" : "int[]";
    case ArgType::OptionalIntList:
      return a.list_size ? "int[" + std::to_string(*a.list_size) + "]?" : "int[]?";
    default:
      return arg_type_name(a.type);
  }
}

}  // namespace

const char* arg_type_name(ArgType t) {
  switch (t) {
    case ArgType::Tensor:
      return "Tensor";
    case ArgType::OptionalTensor:
      return "Tensor?";
    case ArgType::TensorList:
      return "Tensor[]";
    case ArgType::Int:
      return "int";
    case ArgType::OptionalInt:
      return "int?";
    case ArgType::Float:
      return "float";
    case ArgType::OptionalFloat:
      return "float?";
    case ArgType::Bool:
      return "bool";
    case ArgType::Scalar:
      return "Scalar";
    case ArgType::IntList:
      return "int[]";
    case ArgType::String:
      return "str";
    case ArgType::OptionalString:
      return "str?";
    case ArgType::DType:
      return "ScalarType";
    case ArgType::OptionalDType:
      return "ScalarType?";
    case ArgType::OptionalIntList:
      return "int[]?";
    case ArgType::OptionalScalar:
      return "Scalar?";
  }
  return "?";
}

FunctionSchema parse_schema(std::string_view text) { return SchemaParser(text).parse(); }

std::string FunctionSchema::str() const {
  std::string s = full_name() + "(";
  bool kw = false;
  for (size_t i = 0; i < arguments.size(); ++i) {
    const Argument& a = arguments[i];
    if (i) s += ", ";
    if (a.kwarg_only && !kw) {
      s += "*, ";
      kw = true;
    }
    s += type_str(a) + " " + a.name;
    if (a.default_value) s += "=" + *a.default_value;
  }
  s += ") -> ";
  auto ret = [](const Argument& r) { return r.name.empty() ? type_str(r) : type_str(r) + " " + r.name; };
  if (returns.size() == 1) {
    s += ret(returns[0]);
  } else {
    s += "(";
    for (size_t i = 0; i < returns.size(); ++i) s += (i ? ", " : "") + ret(returns[i]);
    s += ")";
  }
  return s;
}

}  // namespace tessera
