// The safetensors layout (the weights of a program file), so that other tools read the weights:
//   8 bytes: N, the header's length (little-endian u64)
//   N bytes: a JSON object {name: {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]},
//            "__metadata__": {string: string}}, padded with spaces
//   the data: each tensor's bytes, C order, little-endian, at [begin, end) counted from the data start
// The reader checks every field before use: a known dtype, non-negative sizes, offsets inside the
// data and end - begin == numel * itemsize (overflow-checked), no two tensors overlapping.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tessera/compiler/export_macros.h"
#include "tessera/compiler/zip_archive.h"
#include "tessera/tensor.h"

namespace tessera::compiler {

// "F32", "BF16", "BOOL", ...; and back (throws naming the spelling and the known ones).
TESSERA_COMPILER_API const char* safetensors_dtype_name(DType t);
TESSERA_COMPILER_API DType safetensors_dtype(const std::string& name);

// The file's bytes for `tensors` (CPU tensors; non-contiguous ones are written in C order).
// Tensors are laid out by decreasing item size, then name, so each starts aligned to its item size
// when the data start is (the header is padded so that the data start is a multiple of 64).
TESSERA_COMPILER_API std::vector<uint8_t> safetensors_serialize(
    const std::map<std::string, Tensor>& tensors, const std::map<std::string, std::string>& metadata = {});

struct SafetensorsFile {
  std::map<std::string, Tensor> tensors;
  std::map<std::string, std::string> metadata;
};

// Reads `data`, which lies inside `owner`'s bytes. Each tensor views `owner`'s memory without a copy
// when its data is aligned to its item size (it keeps `owner` alive), and is a copy otherwise.
// `what` names the file in messages. Throws a one-line tessera::Error naming the entry and field.
TESSERA_COMPILER_API SafetensorsFile safetensors_parse(std::span<const uint8_t> data,
                                                       std::shared_ptr<const Bytes> owner,
                                                       const std::string& what);

}  // namespace tessera::compiler
