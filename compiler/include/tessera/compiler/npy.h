// NumPy's .npy and .npz files, so that program inputs and outputs compare with NumPy directly.
// .npy: the magic "\x93NUMPY", a version (1.0, 2.0 or 3.0), a header dict
// {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), } and the data. Read and written:
// little-endian, C order, dtypes bool, u8, i8, i16, i32, i64, f16, f32, f64, and bfloat16 as
// 2-byte void '<V2' (NumPy has no bfloat16; ml_dtypes saves its bfloat16 so: load such a file with
// np.load(f).view(ml_dtypes.bfloat16)). Other dtypes are refused with a hint. .npz: a zip archive of NAME.npy entries (stored or deflated
// when read, stored when written).
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "tessera/compiler/export_macros.h"
#include "tessera/tensor.h"

namespace tessera::compiler {

// Parses .npy bytes into a new CPU tensor. `what` names the source in messages.
TESSERA_COMPILER_API Tensor npy_parse(std::span<const uint8_t> data, const std::string& what);
// The .npy bytes of `t` (a CPU tensor; written in C order).
TESSERA_COMPILER_API std::vector<uint8_t> npy_serialize(const Tensor& t);

TESSERA_COMPILER_API Tensor read_npy(const std::string& path);
TESSERA_COMPILER_API void write_npy(const std::string& path, const Tensor& t);
// The arrays of an .npz file in archive order, named without the ".npy" suffix.
TESSERA_COMPILER_API std::vector<std::pair<std::string, Tensor>> read_npz(const std::string& path);
TESSERA_COMPILER_API void write_npz(const std::string& path,
                                    const std::vector<std::pair<std::string, Tensor>>& arrays);

}  // namespace tessera::compiler
