// Note [Stored entries] in tessera/compiler/zip_archive.h.
#include "tessera/compiler/zip_archive.h"

#include <fcntl.h>
#include <minizip/unzip.h>
#include <minizip/zip.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <set>

#include "tessera/error.h"
#include "serialize/untrusted.h"

namespace tessera::compiler {

std::shared_ptr<const Bytes> Bytes::map_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  TESSERA_CHECK(fd >= 0, "cannot open '", path, "': ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    TESSERA_CHECK(false, "cannot read '", path, "': not a regular file");
  }
  std::shared_ptr<Bytes> b(new Bytes());
  b->size_ = size_t(st.st_size);
  if (b->size_ > 0) {
    void* p = ::mmap(nullptr, b->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    int err = errno;
    ::close(fd);
    TESSERA_CHECK(p != MAP_FAILED, "cannot map '", path, "': ", std::strerror(err));
    b->data_ = static_cast<const uint8_t*>(p);
    b->mapped_ = true;
  } else {
    ::close(fd);
  }
  return b;
}

std::shared_ptr<const Bytes> Bytes::copy_of(std::span<const uint8_t> data) {
  std::shared_ptr<Bytes> b(new Bytes());
  b->owned_.assign(data.begin(), data.end());
  b->data_ = b->owned_.data();
  b->size_ = b->owned_.size();
  return b;
}

Bytes::~Bytes() {
  if (mapped_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

namespace {

// minizip reads through these callbacks from the bytes in memory.
struct MemoryStream {
  const uint8_t* data;
  uint64_t size;
  uint64_t pos;
};

voidpf ZCALLBACK mem_open(voidpf opaque, const void*, int) { return opaque; }
uLong ZCALLBACK mem_read(voidpf, voidpf stream, void* buf, uLong size) {
  auto* s = static_cast<MemoryStream*>(stream);
  uint64_t n = s->pos >= s->size ? 0 : std::min<uint64_t>(size, s->size - s->pos);
  if (n) std::memcpy(buf, s->data + s->pos, n);
  s->pos += n;
  return uLong(n);
}
uLong ZCALLBACK mem_write(voidpf, voidpf, const void*, uLong) { return 0; }
ZPOS64_T ZCALLBACK mem_tell(voidpf, voidpf stream) { return static_cast<MemoryStream*>(stream)->pos; }
long ZCALLBACK mem_seek(voidpf, voidpf stream, ZPOS64_T offset, int origin) {
  auto* s = static_cast<MemoryStream*>(stream);
  uint64_t base = origin == ZLIB_FILEFUNC_SEEK_SET ? 0 : origin == ZLIB_FILEFUNC_SEEK_CUR ? s->pos : s->size;
  uint64_t target = 0;
  if (__builtin_add_overflow(base, offset, &target) || target > s->size) return -1;
  s->pos = target;
  return 0;
}
int ZCALLBACK mem_close(voidpf, voidpf) { return 0; }
int ZCALLBACK mem_error(voidpf, voidpf) { return 0; }

struct Unz {
  MemoryStream stream;
  unzFile f = nullptr;
  Unz(const Bytes& b) : stream{b.data(), b.size(), 0} {
    zlib_filefunc64_def def{};
    def.zopen64_file = mem_open;
    def.zread_file = mem_read;
    def.zwrite_file = mem_write;
    def.ztell64_file = mem_tell;
    def.zseek64_file = mem_seek;
    def.zclose_file = mem_close;
    def.zerror_file = mem_error;
    def.opaque = &stream;
    f = unzOpen2_64("memory", &def);
  }
  ~Unz() {
    if (f) unzClose(f);
  }
};

// Not a limit of the format: no archive this runtime reads needs more, and it bounds the work a
// malformed central directory can cause.
constexpr uint64_t kMaxEntries = 1 << 16;

}  // namespace

namespace {

// True when the archive ends with a complete end-of-central-directory record (22 bytes and its
// comment). minizip finds a record that lost its last bytes too; a file cut there is truncated.
bool ends_with_eocd(const Bytes& b) {
  const uint8_t* d = b.data();
  if (b.size() < 22) return false;
  size_t lowest = b.size() - 22 > 0xffff ? b.size() - 22 - 0xffff : 0;
  for (size_t p = b.size() - 22 + 1; p-- > lowest;) {
    if (d[p] == 'P' && d[p + 1] == 'K' && d[p + 2] == 5 && d[p + 3] == 6) {
      size_t comment = size_t(d[p + 20]) | size_t(d[p + 21]) << 8;
      if (p + 22 + comment == b.size()) return true;
    }
  }
  return false;
}

}  // namespace

ZipReader::ZipReader(std::shared_ptr<const Bytes> bytes, std::string what)
    : bytes_(std::move(bytes)), what_(std::move(what)) {
  with_printable_errors([&] { read_directory(); });
}

void ZipReader::read_directory() {
  Unz unz(*bytes_);
  TESSERA_CHECK(ends_with_eocd(*bytes_), what_, ": not a zip archive, or truncated (it does not end with an ",
                "end-of-central-directory record; ", bytes_->size(), " bytes)");
  TESSERA_CHECK(unz.f, what_,
                ": not a zip archive, or truncated (no readable end-of-central-directory record in ",
                bytes_->size(), " bytes); write it again with tessera::save");
  unz_global_info64 gi{};
  TESSERA_CHECK(unzGetGlobalInfo64(unz.f, &gi) == UNZ_OK, what_, ": unreadable central directory");
  TESSERA_CHECK(gi.number_entry <= kMaxEntries, what_, ": ", gi.number_entry, " entries (at most ",
                kMaxEntries, " are read)");
  std::set<std::string> names;
  int rc = unzGoToFirstFile(unz.f);
  while (rc == UNZ_OK) {
    unz_file_info64 info{};
    char name[1024];
    TESSERA_CHECK(unzGetCurrentFileInfo64(unz.f, &info, name, sizeof(name), nullptr, 0, nullptr, 0) == UNZ_OK,
                  what_, ": unreadable central directory entry ", entries_.size());
    TESSERA_CHECK(info.size_filename < sizeof(name), what_, ": entry ", entries_.size(), " has a name of ",
                  info.size_filename, " bytes (at most ", sizeof(name) - 1, ")");
    ZipEntry e;
    e.name.assign(name, info.size_filename);
    TESSERA_CHECK(e.name.find('\0') == std::string::npos, what_, ": entry ", entries_.size(),
                  " has a name with a NUL byte");
    TESSERA_CHECK(names.insert(e.name).second, what_, ": entry '", e.name, "' appears twice");
    TESSERA_CHECK((info.flag & 1) == 0, what_, ": entry '", e.name, "' is encrypted");
    TESSERA_CHECK(info.compression_method == 0 || info.compression_method == Z_DEFLATED, what_, ": entry '",
                  e.name, "' uses compression method ", info.compression_method,
                  " (stored or deflate are read)");
    e.stored = info.compression_method == 0;
    e.size = info.uncompressed_size;
    e.stored_size = info.compressed_size;
    e.crc32 = uint32_t(info.crc);
    TESSERA_CHECK(!e.stored || e.size == e.stored_size, what_, ": stored entry '", e.name, "' has size ",
                  e.size, " but ", e.stored_size, " bytes stored");
    TESSERA_CHECK(unzOpenCurrentFile(unz.f) == UNZ_OK, what_, ": entry '", e.name,
                  "': its local header is missing or does not match the central directory (truncated file?)");
    e.offset = unzGetCurrentFileZStreamPos64(unz.f);
    unzCloseCurrentFile(unz.f);
    uint64_t end = 0;
    TESSERA_CHECK(!__builtin_add_overflow(e.offset, e.stored_size, &end) && end <= bytes_->size(), what_,
                  ": entry '", e.name, "' claims bytes [", e.offset, ", ", e.offset, " + ", e.stored_size,
                  ") but the file has ", bytes_->size(), " bytes (truncated file?)");
    entries_.push_back(std::move(e));
    rc = unzGoToNextFile(unz.f);
  }
  TESSERA_CHECK(rc == UNZ_END_OF_LIST_OF_FILE, what_, ": unreadable central directory after entry ",
                entries_.size());
}

const ZipEntry* ZipReader::find(std::string_view name) const {
  for (const ZipEntry& e : entries_)
    if (e.name == name) return &e;
  return nullptr;
}

namespace {

uint32_t crc_of(const uint8_t* p, uint64_t n) {
  uLong crc = crc32(0L, Z_NULL, 0);
  while (n > 0) {
    uInt chunk = uInt(std::min<uint64_t>(n, 1u << 30));
    crc = crc32(crc, p, chunk);
    p += chunk;
    n -= chunk;
  }
  return uint32_t(crc);
}

}  // namespace

std::span<const uint8_t> ZipReader::stored_data(const ZipEntry& e) const {
  return with_printable_errors([&] { return stored_data_unescaped(e); });
}

std::span<const uint8_t> ZipReader::stored_data_unescaped(const ZipEntry& e) const {
  TESSERA_CHECK(e.stored, what_, ": entry '", e.name,
                "' is compressed; the program file keeps its entries stored (write it with tessera::save)");
  const uint8_t* p = bytes_->data() + e.offset;
  TESSERA_CHECK(crc_of(p, e.size) == e.crc32, what_, ": entry '", e.name,
                "' fails its CRC-32 check (corrupt file)");
  return {p, size_t(e.size)};
}

std::vector<uint8_t> ZipReader::read(const ZipEntry& e) const {
  return with_printable_errors([&] { return read_unescaped(e); });
}

std::vector<uint8_t> ZipReader::read_unescaped(const ZipEntry& e) const {
  if (e.stored) {
    auto d = stored_data(e);
    return {d.begin(), d.end()};
  }
  // A deflated entry inflates to at most 1032 times its stored size; refusing more bounds what a
  // forged size can make us allocate.
  uint64_t bound = 0;
  TESSERA_CHECK(!__builtin_mul_overflow(e.stored_size, uint64_t(1032), &bound) && e.size <= bound + 64, what_,
                ": entry '", e.name, "' claims ", e.size, " bytes from ", e.stored_size, " compressed");
  std::vector<uint8_t> out(e.size);
  z_stream zs{};
  TESSERA_INTERNAL_ASSERT(inflateInit2(&zs, -MAX_WBITS) == Z_OK);
  const uint8_t* in = bytes_->data() + e.offset;
  uint64_t in_left = e.stored_size, out_done = 0;
  int zrc = Z_OK;
  while (zrc == Z_OK) {
    uInt in_chunk = uInt(std::min<uint64_t>(in_left, 1u << 30));
    uInt out_chunk = uInt(std::min<uint64_t>(e.size - out_done, 1u << 30));
    zs.next_in = const_cast<Bytef*>(in);
    zs.avail_in = in_chunk;
    zs.next_out = out.data() + out_done;
    zs.avail_out = out_chunk;
    zrc = inflate(&zs, Z_NO_FLUSH);
    uint64_t used_in = in_chunk - zs.avail_in, made = out_chunk - zs.avail_out;
    in += used_in;
    in_left -= used_in;
    out_done += made;
    if (zrc == Z_OK && used_in == 0 && made == 0) zrc = Z_BUF_ERROR;
  }
  inflateEnd(&zs);
  TESSERA_CHECK(zrc == Z_STREAM_END && out_done == e.size, what_, ": entry '", e.name,
                "' does not inflate to its recorded size ", e.size, " (corrupt file)");
  TESSERA_CHECK(crc_of(out.data(), out.size()) == e.crc32, what_, ": entry '", e.name,
                "' fails its CRC-32 check (corrupt file)");
  return out;
}

// ---- writer

ZipWriter::ZipWriter(std::string path) : path_(std::move(path)), tmp_(path_ + ".tmp") {
  zip_ = zipOpen64(tmp_.c_str(), APPEND_STATUS_CREATE);
  TESSERA_CHECK(zip_, "cannot create '", tmp_, "': ", std::strerror(errno));
}

ZipWriter::~ZipWriter() {
  if (zip_) {
    zipClose(zip_, nullptr);
    std::remove(tmp_.c_str());
  }
}

void ZipWriter::add(std::string_view name, const std::vector<std::span<const uint8_t>>& pieces,
                    size_t align) {
  TESSERA_INTERNAL_ASSERT(zip_ && align > 0 && align <= 4096 && name.size() < 1024);
  uint64_t size = 0;
  for (auto p : pieces)
    TESSERA_CHECK(!__builtin_add_overflow(size, uint64_t(p.size()), &size), "entry too large");
  bool zip64 = size >= 0xffffffffu;
  // The local header is 30 bytes, then the name, then the extra fields (minizip adds 20 bytes of
  // zip64 sizes when zip64 is set); a padding extra field (id 0xD935, as zipalign writes) aligns
  // what follows.
  uint64_t header = 30 + name.size() + (zip64 ? 20 : 0) + 4;
  uint64_t pad = (align - (pos_ + header) % align) % align;
  std::vector<uint8_t> extra(4 + pad, 0);
  extra[0] = 0x35;
  extra[1] = 0xD9;
  extra[2] = uint8_t(pad & 0xff);
  extra[3] = uint8_t(pad >> 8);
  zip_fileinfo zi{};
  std::string n(name);
  int rc = zipOpenNewFileInZip4_64(zip_, n.c_str(), &zi, extra.data(), uInt(extra.size()), nullptr, 0,
                                   nullptr, 0 /* stored */, 0, 0, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY, nullptr,
                                   0, 0, 0, zip64 ? 1 : 0);
  TESSERA_CHECK(rc == ZIP_OK, "cannot write entry '", n, "' of '", tmp_, "' (zip error ", rc, ")");
  for (auto p : pieces) {
    const uint8_t* d = p.data();
    size_t left = p.size();
    while (left > 0) {
      unsigned chunk = unsigned(std::min<size_t>(left, 1u << 30));
      rc = zipWriteInFileInZip(zip_, d, chunk);
      TESSERA_CHECK(rc == ZIP_OK, "cannot write entry '", n, "' of '", tmp_, "': ", std::strerror(errno));
      d += chunk;
      left -= chunk;
    }
  }
  rc = zipCloseFileInZip(zip_);
  TESSERA_CHECK(rc == ZIP_OK, "cannot write entry '", n, "' of '", tmp_, "' (zip error ", rc, ")");
  pos_ += header + pad + size;
}

void ZipWriter::finish() {
  int rc = zipClose(zip_, nullptr);
  zip_ = nullptr;
  if (rc != ZIP_OK) {
    std::remove(tmp_.c_str());
    TESSERA_CHECK(false, "cannot finish '", tmp_, "' (zip error ", rc, ")");
  }
  std::error_code ec;
  std::filesystem::rename(tmp_, path_, ec);
  if (ec) std::remove(tmp_.c_str());
  TESSERA_CHECK(!ec, "cannot rename '", tmp_, "' to '", path_, "': ", ec.message());
}

}  // namespace tessera::compiler
