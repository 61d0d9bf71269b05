// The layout the CUDA tensor-core kernel reads a 2:4 weight in, built on the host from the
// canonical form (Note [2:4 canonical form] in tessera/semi_structured.h). Plain C++ (no CUDA
// headers), so that it is built and tested on every machine.
//
// Note [CUDA mma.sp layout]
// The kernel computes y^T = W x^T with W (rows, cols) in the A position of
// `mma.sp::ordered_metadata.sync.aligned.m16n8k32.row.col.f32.{f16,bf16}`: per warp and per tile
// of 16 rows x 32 columns of W, A is 16 x 16 kept values (four 32-bit registers a lane) plus one
// 32-bit metadata register a lane, and the PTX ISA ("Matrix fragments for sparse mma.m16n8k32
// with .f16/.bf16", "Sparse matrix storage") fixes which lane holds what. With
// groupID g = lane / 4 and threadID_in_group t = lane % 4:
// - values: register 0 holds the two kept values of row g, group t (columns 4t..4t+3 of the
//   tile), register 1 those of row g + 8, group t, register 2 row g, group 4 + t, register 3
//   row g + 8, group 4 + t; the value of the lower position in the low 16 bits;
// - metadata (sparsity selector 0: lanes with t = 0 and t = 1 supply it): the low 16 bits hold
//   the eight 2-bit positions of row g, groups 4t..4t+3, the high 16 bits those of row g + 8;
//   group 4t + j in bits 4j..4j+3, its first position in the low two bits. Lanes with t = 2, 3
//   read the word of t - 2 (the hardware ignores it).
// The layout stores, tile after tile (row tile major, then column tile), the 32 lanes' four value
// registers (512 bytes, one 16-byte load a lane) and, after all values, the 16 metadata words of
// each tile (index 2g + t). Rows are padded to a multiple of 16 and columns to a multiple of 32
// with zero values at positions 0 and 1 (the hardware rejects a group whose two positions are
// equal); a value at a column past `cols` (the short last group) is stored as zero. The block
// is released with std::free.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#if defined(__CUDACC__)
#define TESSERA_MMA_HD __host__ __device__
#else
#define TESSERA_MMA_HD
#endif

namespace tessera::sparse_cuda {

constexpr int64_t kMmaTileRows = 16;
constexpr int64_t kMmaTileCols = 32;
constexpr int64_t kMmaTileValueBytes = 32 * 16;  // 32 lanes x four 32-bit registers
constexpr int64_t kMmaTileMetaWords = 16;

struct MmaLayout {
  int64_t rows = 0, cols = 0;            // the dense shape
  int64_t row_tiles = 0, col_tiles = 0;  // ceil(rows / 16), ceil(cols / 32)
  uint64_t values_offset = 0;            // bytes from the start of the block
  uint64_t meta_offset = 0;
  uint64_t total_bytes = 0;  // the whole block, this header included
};

// The sizes of the layout of a (rows, cols) weight of 16-bit values; false with *error when a
// size is negative or a byte count overflows.
bool mma_layout_plan(int64_t rows, int64_t cols, MmaLayout* out, std::string* error);

// Builds the layout from the canonical parts of a 16-bit (f16 or bf16) weight: `values` (rows,
// 2 * groups) and `indices` (rows, ceil(groups / 2) bytes) as Note [2:4 canonical form] lays them
// out. Returns one block from std::malloc (an MmaLayout header, then the values and metadata at
// its offsets), or null with *error for sizes that overflow or a group whose positions are not
// distinct and increasing.
MmaLayout* build_mma_layout(const uint8_t* values, const uint8_t* indices, int64_t rows, int64_t cols,
                            std::string* error);

// Where value `slot` (0..255: lane * 8 + register * 2 + half) of tile (rt, ct) lies in the dense
// (rows, cols) weight, read back from the tile's 16 metadata words `tile_meta` by the rules of
// Note [CUDA mma.sp layout]: the inverse of build_mma_layout, used to rebuild the dense pruned weight
// on the GPU (the input cuSPARSELt compresses, Note [2:4 on cuSPARSELt]). A slot of the padding
// gives a row >= rows or a column >= cols.
struct MmaSlot {
  int64_t row, col;
};
TESSERA_MMA_HD inline MmaSlot mma_slot_position(int64_t rt, int64_t ct, int slot, const uint32_t* tile_meta) {
  const int lane = slot / 8, reg = (slot % 8) / 2, half = slot % 2;
  const int gid = lane / 4, t = lane % 4;
  const int row_in_tile = gid + 8 * (reg % 2), group_in_tile = reg < 2 ? t : 4 + t;
  const uint32_t word = tile_meta[2 * gid + group_in_tile / 4];
  const unsigned pos = (word >> (16 * (reg % 2) + 4 * (group_in_tile % 4) + 2 * half)) & 3u;
  return MmaSlot{rt * kMmaTileRows + row_in_tile, ct * kMmaTileCols + 4 * group_in_tile + int64_t(pos)};
}

}  // namespace tessera::sparse_cuda
