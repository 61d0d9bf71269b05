// The system C++ compiler, the disk cache of compiled libraries, and the ISA selection.
//
// Note [Compile cache]
// An entry is <key>.so plus <key>.meta ("tessera-compile-cache 1", the key, the library's size and
// a hash of its bytes). The key hashes the generated source, the compiler's version line, the
// flags, the ISA and TESSERA_GENERATED_ABI_VERSION. A reader trusts an entry only when the meta
// names the same key and the library has exactly that size and hash; anything else (truncated,
// corrupt, half-written) is compiled again. A writer holds flock on <key>.lock, checks again for an
// entry another process finished meanwhile, compiles into a private temporary name and renames the
// library, then the meta, into place: the meta is the commit point, so a crash leaves no entry that
// a reader would load.
#include "backends/cpp/toolchain.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>

#include "tessera/content_hash.h"
#include "tessera/cpu_features.h"
#include "tessera/env.h"
#include "tessera/error.h"
#include "tessera/log.h"

namespace tessera::compiler::codegen {
namespace fs = std::filesystem;

namespace {

// Runs argv with stdout/stderr into `output` (both, truncated to 64 KiB); returns the exit status,
// or -1 when it could not start.
int run_command(const std::vector<std::string>& argv, std::string* output) {
  int fds[2];
  if (pipe(fds) != 0) return -1;
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return -1;
  }
  if (pid == 0) {
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    close(fds[0]);
    close(fds[1]);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execvp(args[0], args.data());
    _exit(127);
  }
  close(fds[1]);
  char buf[4096];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) != 0;) {
    if (n < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (output && output->size() < 65536) output->append(buf, size_t(n));
  }
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::vector<std::string> split_words(const std::string& s) {
  std::vector<std::string> words;
  std::istringstream in(s);
  for (std::string w; in >> w;) words.push_back(w);
  return words;
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

void write_file(const fs::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << text;
  TESSERA_CHECK(out.good(), "could not write '", p.string(), "'; check the directory's permissions and free space");
}

}  // namespace

// The SDK's probe and parser (tessera/cpu_features.h), as the CPU plugin uses them.
CpuIsa select_cpu_isa() {
  static_assert(int(CpuIsa::Default) == int(sdk::CpuCapability::Default) &&
                int(CpuIsa::AVX2) == int(sdk::CpuCapability::AVX2) &&
                int(CpuIsa::AVX512) == int(sdk::CpuCapability::AVX512));
  static const sdk::CpuFeatures features = sdk::CpuFeatures::detect();
  const char* env = env_value("TESSERA_CPU_CAPABILITY");
  sdk::CpuCapability level{};
  std::string error;
  TESSERA_CHECK(sdk::select_cpu_capability(features, env ? env : "", &level, &error), error);
  return CpuIsa(int(level));
}

std::optional<Toolchain> find_toolchain(std::string* why) {
  static std::mutex mu;
  static std::map<std::string, std::optional<Toolchain>> found;
  const char* env = env_value("CXX");
  const std::string cxx = env && *env ? env : "c++";
  std::lock_guard<std::mutex> lock(mu);
  auto it = found.find(cxx);
  if (it == found.end()) {
    std::vector<std::string> argv = split_words(cxx);
    std::optional<Toolchain> t;
    if (!argv.empty()) {
      argv.push_back("--version");
      std::string out;
      if (run_command(argv, &out) == 0 && !out.empty()) t = Toolchain{cxx, out.substr(0, out.find('\n'))};
    }
    it = found.emplace(cxx, t).first;
  }
  if (!it->second && why)
    *why = "no C++ compiler: '" + cxx + " --version' did not run" +
           (env ? std::string(" (from CXX)") : std::string(" (CXX is unset)")) +
           "; install g++ or clang++, or set CXX to one";
  return it->second;
}

std::string cache_directory(const CodegenOptions& options) {
  if (!options.cache_dir.empty()) return options.cache_dir;
  if (const char* d = env_value("TESSERA_CACHE_DIR"); d && *d) return d;
  if (const char* x = env_value("XDG_CACHE_HOME"); x && *x) return (fs::path(x) / "tessera" / "compile").string();
  const char* home = env_value("HOME");
  TESSERA_CHECK(home && *home, "no cache directory: set TESSERA_CACHE_DIR, XDG_CACHE_HOME or HOME");
  return (fs::path(home) / ".cache" / "tessera" / "compile").string();
}

std::string hash_hex(std::string_view bytes) { return content_hash_hex(bytes); }

std::vector<std::string> compile_flags(CpuIsa isa) {
  std::vector<std::string> f = {"-std=c++20", "-O3", "-shared", "-fPIC", "-fopenmp", "-fno-math-errno",
                                "-fno-trapping-math", "-ffp-contract=fast", "-fvisibility=hidden", "-w"};
  switch (isa) {
    case CpuIsa::AVX512:
      for (const char* x : {"-mavx2", "-mfma", "-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq",
                            "-mprefer-vector-width=512"})
        f.push_back(x);
      break;
    case CpuIsa::AVX2:
      f.push_back("-mavx2");
      f.push_back("-mfma");
      break;
    default: break;
  }
  return f;
}

namespace {
bool valid_entry(const fs::path& dir, const std::string& key) {
  std::error_code ec;
  const fs::path so = dir / (key + ".so"), meta = dir / (key + ".meta");
  if (!fs::exists(meta, ec) || !fs::exists(so, ec)) return false;
  std::istringstream in(read_file(meta));
  std::string magic, version, k_label, k, s_label, h_label, h;
  uint64_t size = 0;
  if (!(in >> magic >> version >> k_label >> k >> s_label >> size >> h_label >> h)) return false;
  if (magic != "tessera-compile-cache" || version != "1" || k != key || fs::file_size(so, ec) != size || ec)
    return false;
  return hash_hex(read_file(so)) == h;
}
}  // namespace

void compile_warning(const std::string& message) {
  const std::string line = "[tessera:compile] warning: " + message + "\n";
  std::fwrite(line.data(), 1, line.size(), stderr);
}

CacheResult compile_cached(const std::string& source, CpuIsa isa, const CodegenOptions& options,
                           const std::string& graph_text) {
  std::string why;
  auto tc = find_toolchain(&why);
  if (!tc) {
    static std::once_flag warned;
    std::call_once(warned, [&] { compile_warning(why + "; graphs run through the interpreter"); });
    TESSERA_CHECK_CODE(false, ErrorCode::Unavailable, why);
  }
  const std::vector<std::string> flags = compile_flags(isa);
  std::string key_text = source;
  for (const std::string& part : {tc->version, std::string(cpu_isa_name(isa)),
                                  std::to_string(TESSERA_GENERATED_ABI_VERSION)}) {
    key_text.push_back('\0');
    key_text.append(part);
  }
  for (const auto& f : flags) key_text.append(" ").append(f);
  CacheResult r;
  r.key = hash_hex(key_text);
  const fs::path dir = cache_directory(options);
  std::error_code ec;
  if (!fs::exists(dir, ec)) {
    fs::create_directories(dir, ec);
    fs::permissions(dir, fs::perms::owner_all, fs::perm_options::replace, ec);
  }
  TESSERA_CHECK(fs::is_directory(dir), "cannot create the compile cache directory '", dir.string(), "' (",
                ec.message(), "); set TESSERA_CACHE_DIR to a writable directory");
  // The cache holds libraries this process will load: like plugin folders, refuse one that
  // another user could write to.
  struct stat st {};
  TESSERA_CHECK(stat(dir.c_str(), &st) == 0 && st.st_uid == geteuid() && !(st.st_mode & (S_IWGRP | S_IWOTH)),
                "the compile cache directory '", dir.string(),
                "' is writable by other users or owned by another user; it would load libraries others can "
                "replace. Run chmod go-w on it or set TESSERA_CACHE_DIR to a private directory");
  r.library_path = (dir / (r.key + ".so")).string();

  std::vector<std::string> argv = split_words(tc->cxx);
  for (const auto& f : flags) argv.push_back(f);
  const std::string tmp_stem = r.key + ".tmp" + std::to_string(getpid());
  const fs::path src = dir / (tmp_stem + ".cpp"), tmp_so = dir / (tmp_stem + ".so");
  argv.push_back(src.string());
  argv.push_back("-o");
  argv.push_back(tmp_so.string());
  std::string command;
  for (const auto& a : argv) command += (command.empty() ? "" : " ") + a;

  if (const char* dbg = env_value("TESSERA_COMPILE_DEBUG"); dbg && *dbg) {
    const fs::path d(dbg);
    fs::create_directories(d, ec);
    write_file(d / (r.key + ".graph.txt"), graph_text);
    write_file(d / (r.key + ".cpp"), source);
    write_file(d / (r.key + ".cmd"), command + "\n");
  }

  if (valid_entry(dir, r.key)) {
    r.cache_hit = true;
    return r;
  }
  const fs::path lock_path = dir / (r.key + ".lock");
  const int lock_fd = open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  TESSERA_CHECK(lock_fd >= 0, "cannot open the cache lock '", lock_path.string(), "': ", std::strerror(errno));
  struct Unlock {
    int fd;
    ~Unlock() {
      flock(fd, LOCK_UN);
      close(fd);
    }
  } unlock{lock_fd};
  while (flock(lock_fd, LOCK_EX) != 0) {
    TESSERA_CHECK(errno == EINTR, "cannot lock '", lock_path.string(), "': ", std::strerror(errno));
  }
  if (valid_entry(dir, r.key)) {  // another process finished it while we waited
    r.cache_hit = true;
    return r;
  }
  write_file(src, source);
  std::string output;
  if (log_enabled("compile")) log_message(LogLevel::Info, "compile", "compiling: " + command);
  const bool tty = isatty(STDERR_FILENO) && !log_enabled("compile");
  const auto t0 = std::chrono::steady_clock::now();
  if (tty) std::fprintf(stderr, "tessera: compiling a graph to C++ (%s)...", r.key.substr(0, 8).c_str());
  const int rc = run_command(argv, &output);
  if (tty)
    std::fprintf(stderr, " %.1f s\n", std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  fs::remove(src, ec);
  if (rc != 0) {
    fs::remove(tmp_so, ec);
    TESSERA_CHECK_CODE(false, ErrorCode::Internal, "the C++ compiler failed (exit ", rc, ") on generated code: ",
                       command, "\n", output.substr(0, 4000),
                       "\nset TESSERA_COMPILE_DEBUG=dir to keep the source");
  }
  const std::string bytes = read_file(tmp_so);
  std::ostringstream meta;
  meta << "tessera-compile-cache 1\nkey " << r.key << "\nsize " << bytes.size() << "\nhash " << hash_hex(bytes)
       << "\n";
  const fs::path tmp_meta = dir / (tmp_stem + ".meta");
  write_file(tmp_meta, meta.str());
  fs::rename(tmp_so, r.library_path, ec);
  TESSERA_CHECK(!ec, "cannot move the compiled library into the cache: ", ec.message());
  fs::rename(tmp_meta, dir / (r.key + ".meta"), ec);
  TESSERA_CHECK(!ec, "cannot move the cache entry's meta into place: ", ec.message());
  r.command = command;
  return r;
}

}  // namespace tessera::compiler::codegen
