#include "mma_layout.h"

#include <cstdlib>
#include <cstring>
#include <new>

namespace tessera::sparse_cuda {
namespace {

constexpr unsigned kPaddingNibble = 0x4u;  // positions 0 and 1

bool checked_mul(uint64_t a, uint64_t b, uint64_t* out) { return !__builtin_mul_overflow(a, b, out); }
bool checked_add(uint64_t a, uint64_t b, uint64_t* out) { return !__builtin_add_overflow(a, b, out); }

}  // namespace

bool mma_layout_plan(int64_t rows, int64_t cols, MmaLayout* out, std::string* error) {
  if (rows < 0 || cols < 0) {
    *error = "mma layout: negative shape (" + std::to_string(rows) + ", " + std::to_string(cols) + ")";
    return false;
  }
  MmaLayout l;
  l.rows = rows;
  l.cols = cols;
  l.row_tiles = rows / kMmaTileRows + (rows % kMmaTileRows != 0);
  l.col_tiles = cols / kMmaTileCols + (cols % kMmaTileCols != 0);
  uint64_t tiles = 0, value_bytes = 0, meta_bytes = 0, end = 0;
  l.values_offset = (sizeof(MmaLayout) + 255) / 256 * 256;
  if (!checked_mul(uint64_t(l.row_tiles), uint64_t(l.col_tiles), &tiles) ||
      !checked_mul(tiles, uint64_t(kMmaTileValueBytes), &value_bytes) ||
      !checked_mul(tiles, uint64_t(kMmaTileMetaWords) * 4, &meta_bytes) ||
      !checked_add(l.values_offset, value_bytes, &l.meta_offset) ||
      !checked_add(l.meta_offset, meta_bytes, &end) || end > uint64_t(PTRDIFF_MAX)) {
    *error = "mma layout: the layout of a (" + std::to_string(rows) + ", " + std::to_string(cols) +
             ") weight overflows the address space";
    return false;
  }
  l.total_bytes = end;
  *out = l;
  return true;
}

MmaLayout* build_mma_layout(const uint8_t* values, const uint8_t* indices, int64_t rows, int64_t cols,
                            std::string* error) {
  MmaLayout plan;
  if (!mma_layout_plan(rows, cols, &plan, error)) return nullptr;
  const int64_t groups = (cols + 3) / 4, index_row = (groups + 1) / 2;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < groups; ++g) {
      const unsigned nibble = (indices[r * index_row + g / 2] >> (4 * (g % 2))) & 0xfu;
      if ((nibble & 3u) >= (nibble >> 2)) {
        *error = "mma layout: row " + std::to_string(r) + ", group " + std::to_string(g) +
                 " keeps positions " + std::to_string(nibble & 3u) + " and " + std::to_string(nibble >> 2) +
                 "; they must be distinct and increasing";
        return nullptr;
      }
    }
  auto* block = static_cast<uint8_t*>(std::malloc(plan.total_bytes));
  if (!block) {
    *error = "mma layout: out of host memory for " + std::to_string(plan.total_bytes) + " bytes";
    return nullptr;
  }
  std::memset(block, 0, plan.total_bytes);
  auto* layout = new (block) MmaLayout(plan);
  auto* out_values = reinterpret_cast<uint16_t*>(block + plan.values_offset);
  auto* out_meta = reinterpret_cast<uint32_t*>(block + plan.meta_offset);

  // The nibble and the two values of (row, group); padding past the weight.
  auto group_of = [&](int64_t r, int64_t g, uint16_t* v) -> unsigned {
    v[0] = v[1] = 0;
    if (r >= rows || g >= groups) return kPaddingNibble;
    const unsigned nibble = (indices[r * index_row + g / 2] >> (4 * (g % 2))) & 0xfu;
    for (int j = 0; j < 2; ++j)
      if (4 * g + ((nibble >> (2 * j)) & 3u) < cols)
        std::memcpy(&v[j], values + size_t(r * 2 * groups + 2 * g + j) * 2, 2);
    return nibble;
  };

  for (int64_t rt = 0; rt < plan.row_tiles; ++rt)
    for (int64_t ct = 0; ct < plan.col_tiles; ++ct) {
      const int64_t tile = rt * plan.col_tiles + ct;
      uint16_t* tv = out_values + tile * (kMmaTileValueBytes / 2);
      uint32_t* tm = out_meta + tile * kMmaTileMetaWords;
      const int64_t r0 = rt * kMmaTileRows, g0 = ct * (kMmaTileCols / 4);
      for (int lane = 0; lane < 32; ++lane) {
        const int gid = lane / 4, t = lane % 4;
        const int64_t reg_row[4] = {r0 + gid, r0 + gid + 8, r0 + gid, r0 + gid + 8};
        const int64_t reg_group[4] = {g0 + t, g0 + t, g0 + 4 + t, g0 + 4 + t};
        for (int reg = 0; reg < 4; ++reg) group_of(reg_row[reg], reg_group[reg], tv + lane * 8 + reg * 2);
      }
      for (int gid = 0; gid < 8; ++gid)
        for (int t = 0; t < 2; ++t) {
          uint32_t word = 0;
          uint16_t unused[2];
          for (int half = 0; half < 2; ++half)
            for (int j = 0; j < 4; ++j)
              word |= uint32_t(group_of(r0 + gid + 8 * half, g0 + 4 * t + j, unused)) << (16 * half + 4 * j);
          tm[2 * gid + t] = word;
        }
    }
  return layout;
}

}  // namespace tessera::sparse_cuda
