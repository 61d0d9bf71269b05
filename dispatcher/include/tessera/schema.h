// Operator schemas in PyTorch's syntax:
//   "add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor"
//   "fill_(Tensor(a!) self, Scalar value) -> Tensor(a!)"
// parse_schema throws tessera::Error whose message points at the column of the problem.
#pragma once
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/export.h"

namespace tessera {

enum class ArgType { Tensor, OptionalTensor, TensorList, Int, OptionalInt, Float, OptionalFloat, Bool,
                     Scalar, IntList, String, OptionalString, DType, OptionalDType,
                     OptionalIntList,  // int[]?
                     OptionalScalar };  // Scalar?

struct Argument {
  std::string name;
  ArgType type;
  std::optional<std::string> default_value;  // as written ("1", "None", "[1, 1]", "\"none\"")
  bool kwarg_only = false;
  std::optional<std::string> alias;          // "a" for Tensor(a!)
  bool is_write = false;                     // the "!" of Tensor(a!)
  std::optional<int64_t> list_size;          // int[2]
};

struct FunctionSchema {
  std::string name;      // "add"
  std::string overload;  // "Tensor" ("" when none)
  std::vector<Argument> arguments;
  std::vector<Argument> returns;
  std::string full_name() const { return overload.empty() ? name : name + "." + overload; }
  TESSERA_API std::string str() const;  // canonical text, re-parses to the same schema
};

// At most this many arguments, and as many returns, in one schema (parse_schema refuses more).
constexpr size_t kMaxSchemaArguments = 1024;

TESSERA_API FunctionSchema parse_schema(std::string_view text);
TESSERA_API const char* arg_type_name(ArgType t);

}  // namespace tessera
