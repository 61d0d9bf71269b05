// Zip archives for the program file and .npz files. Note [Stored entries]
// The program file keeps its entries stored (not compressed) so that the weights are used in place:
// the reader maps the whole file read-only and hands out views of a stored entry's bytes, which stay
// valid while any holder of the archive's bytes (ZipReader::bytes()) lives. Locating entries goes
// through minizip; every size and offset it reports is checked against the file size again here
// (overflow-checked), and each entry's CRC-32 is checked before its bytes are handed out.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/compiler/export_macros.h"

namespace tessera::compiler {

// Read-only bytes: a file mapped with mmap, or a copy of caller's bytes. Thread-safe to read.
class TESSERA_COMPILER_API Bytes {
 public:
  // Maps `path` read-only. Throws naming the file and the reason.
  static std::shared_ptr<const Bytes> map_file(const std::string& path);
  static std::shared_ptr<const Bytes> copy_of(std::span<const uint8_t> data);
  ~Bytes();
  Bytes(const Bytes&) = delete;
  Bytes& operator=(const Bytes&) = delete;
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  Bytes() = default;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  bool mapped_ = false;
  std::vector<uint8_t> owned_;
};

struct ZipEntry {
  std::string name;
  uint64_t offset = 0;       // of the entry's data in the archive (stored entries)
  uint64_t size = 0;         // uncompressed size
  uint64_t stored_size = 0;  // compressed size as stored
  bool stored = true;        // method 0 (no compression)
  uint32_t crc32 = 0;
};

class TESSERA_COMPILER_API ZipReader {
 public:
  // Reads the central directory of `bytes`; `what` names the archive in messages ("model.tsr").
  // Throws a one-line tessera::Error when the archive is truncated or malformed.
  ZipReader(std::shared_ptr<const Bytes> bytes, std::string what);
  const std::vector<ZipEntry>& entries() const { return entries_; }
  const ZipEntry* find(std::string_view name) const;
  // The bytes of a stored entry, in place, after a CRC-32 check. Throws for a compressed entry.
  std::span<const uint8_t> stored_data(const ZipEntry& e) const;
  // The bytes of any entry (stored or deflated), copied and CRC-checked.
  std::vector<uint8_t> read(const ZipEntry& e) const;
  const std::shared_ptr<const Bytes>& bytes() const { return bytes_; }
  const std::string& what() const { return what_; }

 private:
  void read_directory();
  std::span<const uint8_t> stored_data_unescaped(const ZipEntry& e) const;
  std::vector<uint8_t> read_unescaped(const ZipEntry& e) const;
  std::shared_ptr<const Bytes> bytes_;
  std::string what_;
  std::vector<ZipEntry> entries_;
};

// Writes an archive of stored entries. Each entry's data starts at a multiple of `align` bytes of
// the file (a zip extra field pads the local header), so that mapped data is aligned. The file is
// written to `path`.tmp and renamed over `path` on finish().
class TESSERA_COMPILER_API ZipWriter {
 public:
  explicit ZipWriter(std::string path);
  ~ZipWriter();
  ZipWriter(const ZipWriter&) = delete;
  ZipWriter& operator=(const ZipWriter&) = delete;
  // Writes one stored entry from several pieces of data (written in order).
  void add(std::string_view name, const std::vector<std::span<const uint8_t>>& pieces, size_t align = 64);
  void add(std::string_view name, std::span<const uint8_t> data, size_t align = 64) {
    add(name, std::vector<std::span<const uint8_t>>{data}, align);
  }
  void finish();

 private:
  std::string path_, tmp_;
  void* zip_ = nullptr;
  uint64_t pos_ = 0;  // bytes written so far (the next local header's offset)
};

}  // namespace tessera::compiler
