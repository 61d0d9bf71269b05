// See cubin_cache.h.
#include "cubin_cache.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <tessera/content_hash.h>

namespace tessera::cuda_fuser {
namespace fs = std::filesystem;

std::string hash_hex(const std::string& bytes) { return content_hash_hex(bytes); }

std::optional<std::string> cache_directory(std::string* error) {
  fs::path dir;
  if (const char* d = secure_getenv("TESSERA_CACHE_DIR"); d && *d)
    dir = fs::path(d) / "cuda";
  else if (const char* x = secure_getenv("XDG_CACHE_HOME"); x && *x)
    dir = fs::path(x) / "tessera" / "cuda";
  else if (const char* h = secure_getenv("HOME"); h && *h)
    dir = fs::path(h) / ".cache" / "tessera" / "cuda";
  else {
    *error = "no cache directory: set TESSERA_CACHE_DIR, XDG_CACHE_HOME or HOME";
    return std::nullopt;
  }
  std::error_code ec;
  if (!fs::exists(dir, ec)) {
    fs::create_directories(dir, ec);
    fs::permissions(dir, fs::perms::owner_all, fs::perm_options::replace, ec);
  }
  struct stat st {};
  if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    *error = "cannot create the CUDA kernel cache directory '" + dir.string() + "' (" + ec.message() +
             "); set TESSERA_CACHE_DIR to a writable directory";
    return std::nullopt;
  }
  if (st.st_uid != geteuid() || (st.st_mode & (S_IWGRP | S_IWOTH))) {
    *error = "the CUDA kernel cache directory '" + dir.string() +
             "' is writable by other users or owned by another user; it would load machine code others can "
             "replace. Run chmod go-w on it or set TESSERA_CACHE_DIR to a private directory";
    return std::nullopt;
  }
  return dir.string();
}

namespace {

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

bool write_file(const fs::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
  return bool(out.flush());
}

// The image of a valid entry, or nullopt.
std::optional<std::string> valid_entry(const fs::path& dir, const std::string& key) {
  std::error_code ec;
  const fs::path image = dir / (key + ".cubin"), meta = dir / (key + ".meta");
  if (!fs::exists(meta, ec) || !fs::exists(image, ec)) return std::nullopt;
  std::istringstream in(read_file(meta));
  std::string magic, version, k_label, k, s_label, h_label, h;
  uint64_t size = 0;
  if (!(in >> magic >> version >> k_label >> k >> s_label >> size >> h_label >> h)) return std::nullopt;
  if (magic != "tessera-cuda-cache" || version != "1" || k != key) return std::nullopt;
  std::string bytes = read_file(image);
  if (bytes.size() != size || hash_hex(bytes) != h) return std::nullopt;
  return bytes;
}

}  // namespace

CacheLookup cached_image(const std::string& dir_text, const std::string& key,
                         const std::function<std::string(std::string* error)>& make) {
  CacheLookup r;
  const fs::path dir(dir_text);
  if (std::optional<std::string> hit = valid_entry(dir, key)) {
    r.image = std::move(*hit);
    r.hit = true;
    return r;
  }
  const fs::path lock_path = dir / (key + ".lock");
  const int fd = open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) {
    r.error = "cannot open the cache lock '" + lock_path.string() + "': " + std::strerror(errno);
    return r;
  }
  while (flock(fd, LOCK_EX) != 0 && errno == EINTR) {
  }
  if (std::optional<std::string> hit = valid_entry(dir, key)) {  // another process finished it meanwhile
    r.image = std::move(*hit);
    r.hit = true;
  } else {
    r.image = make(&r.error);
    if (!r.image.empty()) {
      const std::string stem = key + ".tmp" + std::to_string(getpid());
      std::ostringstream meta;
      meta << "tessera-cuda-cache 1\nkey " << key << "\nsize " << r.image.size() << "\nhash "
           << hash_hex(r.image) << "\n";
      std::error_code ec;
      // A cache that cannot be written still gives the image: the next process compiles again.
      if (write_file(dir / (stem + ".cubin"), r.image) && write_file(dir / (stem + ".meta"), meta.str())) {
        fs::rename(dir / (stem + ".cubin"), dir / (key + ".cubin"), ec);
        if (!ec) fs::rename(dir / (stem + ".meta"), dir / (key + ".meta"), ec);
      }
      fs::remove(dir / (stem + ".cubin"), ec);
      fs::remove(dir / (stem + ".meta"), ec);
    }
  }
  flock(fd, LOCK_UN);
  close(fd);
  return r;
}

}  // namespace tessera::cuda_fuser
