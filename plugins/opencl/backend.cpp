#include "backend.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "tessera/text_escape.h"

namespace tessera::opencl {

namespace {

thread_local int32_t t_current_device = 0;

const char* env(const char* name) {
  const tessera_host_api_t* host = sdk::host_api();
  if (host && host->getenv) return host->getenv(name);
  return secure_getenv(name);
}

std::string device_info_string(cl_device_id id, cl_device_info what) {
  size_t size = 0;
  if (cl().clGetDeviceInfo(id, what, 0, nullptr, &size) != CL_SUCCESS || size == 0) return {};
  std::string s(size, '\0');
  if (cl().clGetDeviceInfo(id, what, size, s.data(), nullptr) != CL_SUCCESS) return {};
  while (!s.empty() && (s.back() == '\0' || s.back() == ' ')) s.pop_back();
  return s;
}

template <typename T>
T device_info(cl_device_id id, cl_device_info what) {
  T value{};
  cl().clGetDeviceInfo(id, what, sizeof(T), &value, nullptr);
  return value;
}

std::string platform_info_string(cl_platform_id id, cl_platform_info what) {
  size_t size = 0;
  if (cl().clGetPlatformInfo(id, what, 0, nullptr, &size) != CL_SUCCESS || size == 0) return {};
  std::string s(size, '\0');
  if (cl().clGetPlatformInfo(id, what, size, s.data(), nullptr) != CL_SUCCESS) return {};
  while (!s.empty() && s.back() == '\0') s.pop_back();
  return s;
}

// Runs `fn`, turning exceptions into a status for the C ABI.
template <typename Fn>
tessera_status_t guarded(const char* what, Fn&& fn) noexcept {
  try {
    fn();
    return nullptr;
  } catch (const sdk::Error& e) {
    return sdk::make_status(e.code(), e.what());
  } catch (const std::bad_alloc&) {
    return sdk::make_status(TESSERA_STATUS_OUT_OF_MEMORY, std::string(what) + ": out of host memory");
  } catch (const std::exception& e) {
    return sdk::make_status(TESSERA_STATUS_INTERNAL, std::string(what) + ": " + e.what());
  }
}

constexpr char kCacheMagic[8] = {'T', 'S', 'C', 'L', 'B', 'I', 'N', '1'};
constexpr const char* kBuildOptions = "";

}  // namespace

void log_info(const std::string& message) { sdk::log(TESSERA_LOG_INFO, "opencl", message); }
void log_warning(const std::string& message) { sdk::log(TESSERA_LOG_WARNING, "opencl", message); }

uint64_t fnv1a64(const void* data, size_t size, uint64_t seed) {
  uint64_t h = seed;
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < size; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

void check_cl(cl_int code, const std::string& what) {
  if (code == CL_SUCCESS) return;
  tessera_status_code_t status = TESSERA_STATUS_INTERNAL;
  if (code == CL_MEM_OBJECT_ALLOCATION_FAILURE || code == CL_OUT_OF_RESOURCES ||
      code == CL_OUT_OF_HOST_MEMORY || code == CL_INVALID_BUFFER_SIZE)
    status = TESSERA_STATUS_OUT_OF_MEMORY;
  throw sdk::Error(status, "opencl: " + what + " failed with " + cl_error_name(code));
}

// ---------------------------------------------------------------- allocator

uint64_t CachingAllocator::size_class(uint64_t nbytes) {
  constexpr uint64_t kMin = 256, kPowerLimit = 4ull << 20, kLargeStep = 2ull << 20;
  if (nbytes <= kMin) return kMin;
  if (nbytes <= kPowerLimit) {
    uint64_t c = kMin;
    while (c < nbytes) c <<= 1;
    return c;
  }
  return (nbytes + kLargeStep - 1) / kLargeStep * kLargeStep;
}

namespace {
// The markers of the stream-ordered frees (Note [Stream-ordered allocation]); ctx: the allocator's
// default queue.
sdk::StreamEventOps marker_ops(cl_command_queue* default_queue) {
  sdk::StreamEventOps ops;
  ops.ctx = default_queue;
  ops.record = [](void* ctx, int, void* stream) -> void* {
    cl_command_queue q = stream ? static_cast<Stream*>(stream)->queue : *static_cast<cl_command_queue*>(ctx);
    cl_event marker = nullptr;
    if (cl().clEnqueueMarkerWithWaitList(q, 0, nullptr, &marker) != CL_SUCCESS) return nullptr;
    cl().clFlush(q);
    return marker;
  };
  ops.query = [](void*, int, void* event) {
    cl_int status = CL_COMPLETE;
    const cl_int err = cl().clGetEventInfo(static_cast<cl_event>(event), CL_EVENT_COMMAND_EXECUTION_STATUS,
                                           sizeof(status), &status, nullptr);
    return err != CL_SUCCESS || status <= CL_COMPLETE;  // negative: the command failed, nothing runs
  };
  ops.synchronize = [](void*, int, void* event) {
    cl_event e = static_cast<cl_event>(event);
    cl().clWaitForEvents(1, &e);
  };
  ops.destroy = [](void*, int, void* event) { cl().clReleaseEvent(static_cast<cl_event>(event)); };
  return ops;
}
}  // namespace

CachingAllocator::CachingAllocator() : frees_(marker_ops(&default_queue_)) {}

void CachingAllocator::collect_locked() {
  frees_.collect([&](cl_mem b) {
    auto it = pending_.find(b);
    free_lists_[it->second].push_back(b);
    pending_.erase(it);
  });
}

bool CachingAllocator::record_stream(cl_mem buffer, void* stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!live_.count(buffer)) return false;
  if (stream) frees_.record_use(buffer, stream);  // the default queue is the buffer's own
  return true;
}

cl_mem CachingAllocator::allocate(uint64_t nbytes) {
  const uint64_t cls = size_class(nbytes);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!pending_.empty()) collect_locked();
    auto it = free_lists_.find(cls);
    if (it != free_lists_.end() && !it->second.empty()) {
      cl_mem buffer = it->second.back();
      it->second.pop_back();
      stats_.cached -= cls;
      stats_.allocated += cls;
      stats_.peak = std::max(stats_.peak, stats_.allocated);
      ++stats_.hits;
      live_.emplace(buffer, cls);
      return buffer;
    }
  }
  cl_int err = CL_SUCCESS;
  cl_mem buffer = cl().clCreateBuffer(context_, CL_MEM_READ_WRITE, cls, nullptr, &err);
  if (err != CL_SUCCESS) {
    log_info("allocation of " + std::to_string(cls) + " bytes failed (" + cl_error_name(err) +
             "); emptying the cache and retrying");
    empty_cache();
    buffer = cl().clCreateBuffer(context_, CL_MEM_READ_WRITE, cls, nullptr, &err);
  }
  if (err != CL_SUCCESS || !buffer) {
    throw sdk::Error(TESSERA_STATUS_OUT_OF_MEMORY,
                     "opencl: cannot allocate " + std::to_string(nbytes) + " bytes (" + cl_error_name(err) +
                         "); free tensors or use a smaller size");
  }
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.allocated += cls;
  stats_.peak = std::max(stats_.peak, stats_.allocated);
  ++stats_.misses;
  live_.emplace(buffer, cls);
  return buffer;
}

void CachingAllocator::free(cl_mem buffer) {
  if (!buffer) return;
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = live_.find(buffer);
  if (it == live_.end()) {
    log_warning("memory_free of a buffer this allocator did not hand out; ignored");
    return;
  }
  const uint64_t cls = it->second;
  live_.erase(it);
  stats_.allocated -= cls;
  stats_.cached += cls;
  if (!frees_.defer_free(0, buffer, nullptr)) {
    pending_.emplace(buffer, cls);
    return;
  }
  free_lists_[cls].push_back(buffer);
}

void CachingAllocator::empty_cache() {
  std::map<uint64_t, std::vector<cl_mem>> lists;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    frees_.drain([&](cl_mem b) {
      auto it = pending_.find(b);
      free_lists_[it->second].push_back(b);
      pending_.erase(it);
    });
    lists.swap(free_lists_);
    stats_.cached = 0;
  }
  for (auto& [cls, buffers] : lists)
    for (cl_mem b : buffers) cl().clReleaseMemObject(b);
}

CachingAllocator::Stats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  Stats s = stats_;
  s.live = live_.size();
  return s;
}

void CachingAllocator::release_all() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    frees_.abandon([&](cl_mem b) { cl().clReleaseMemObject(b); });
    pending_.clear();
  }
  empty_cache();
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [b, cls] : live_) cl().clReleaseMemObject(b);
  live_.clear();
  stats_.allocated = 0;
}

// ---------------------------------------------------------------- backend

Backend& Backend::instance() {
  static Backend backend;
  return backend;
}

void Backend::discover() {
  devices_.clear();
  reason_.clear();
  if (!cl().load()) {
    reason_ = cl().error();
    log_info("no devices: " + reason_);
    return;
  }
  cl_uint num_platforms = 0;
  cl_int err = cl().clGetPlatformIDs(0, nullptr, &num_platforms);
  if (err != CL_SUCCESS || num_platforms == 0) {
    reason_ = "no OpenCL platform found (" + cl_error_name(err) +
              "); install an ICD such as pocl-opencl-icd (or check OCL_ICD_VENDORS)";
    log_info("no devices: " + reason_);
    return;
  }
  std::vector<cl_platform_id> platforms(num_platforms);
  cl().clGetPlatformIDs(num_platforms, platforms.data(), nullptr);
  std::string skipped;
  for (cl_platform_id platform : platforms) {
    cl_uint num_devices = 0;
    if (cl().clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, 0, nullptr, &num_devices) != CL_SUCCESS ||
        num_devices == 0)
      continue;
    std::vector<cl_device_id> ids(num_devices);
    cl().clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, num_devices, ids.data(), nullptr);
    for (cl_device_id id : ids) {
      auto dev = std::make_unique<DeviceState>();
      dev->index = int32_t(devices_.size());
      dev->platform = platform;
      dev->id = id;
      dev->name = device_info_string(id, CL_DEVICE_NAME);
      dev->vendor = device_info_string(id, CL_DEVICE_VENDOR);
      dev->driver_version = device_info_string(id, CL_DRIVER_VERSION);
      dev->device_version = device_info_string(id, CL_DEVICE_VERSION);
      dev->platform_name = platform_info_string(platform, CL_PLATFORM_NAME);
      dev->global_memory = device_info<cl_ulong>(id, CL_DEVICE_GLOBAL_MEM_SIZE);
      dev->max_alloc = device_info<cl_ulong>(id, CL_DEVICE_MAX_MEM_ALLOC_SIZE);
      dev->max_work_group_size = device_info<size_t>(id, CL_DEVICE_MAX_WORK_GROUP_SIZE);
      dev->compute_units = device_info<cl_uint>(id, CL_DEVICE_MAX_COMPUTE_UNITS);
      const std::string ext = device_info_string(id, CL_DEVICE_EXTENSIONS);
      dev->fp64 = ext.find("cl_khr_fp64") != std::string::npos;
      dev->fp16 = ext.find("cl_khr_fp16") != std::string::npos;
      if (dev->device_version.rfind("OpenCL 1.0", 0) == 0 || dev->device_version.rfind("OpenCL 1.1", 0) == 0) {
        skipped += " " + dev->name + " (" + dev->device_version + ", needs 1.2)";
        continue;
      }
      cl_context_properties props[] = {CL_CONTEXT_PLATFORM, cl_context_properties(platform), 0};
      dev->context = cl().clCreateContext(props, 1, &id, nullptr, nullptr, &err);
      if (err != CL_SUCCESS) {
        skipped += " " + dev->name + " (clCreateContext: " + cl_error_name(err) + ")";
        continue;
      }
      dev->default_stream.device = dev->index;
      dev->default_stream.queue = cl().clCreateCommandQueue(dev->context, id, 0, &err);
      if (err != CL_SUCCESS) {
        cl().clReleaseContext(dev->context);
        skipped += " " + dev->name + " (clCreateCommandQueue: " + cl_error_name(err) + ")";
        continue;
      }
      dev->allocator.set_context(dev->context, dev->default_stream.queue);
      log_info("opencl:" + std::to_string(dev->index) + " = " + dev->name + " [" + dev->platform_name +
               ", driver " + dev->driver_version + (dev->fp64 ? ", fp64" : "") + (dev->fp16 ? ", fp16" : "") +
               "]");
      devices_.push_back(std::move(dev));
    }
  }
  if (!skipped.empty()) log_warning("skipped OpenCL devices:" + skipped);
  if (devices_.empty()) {
    reason_ = "no usable OpenCL device on " + std::to_string(num_platforms) + " platform(s)" +
              (skipped.empty() ? std::string() : " (skipped:" + skipped + ")") +
              "; install an ICD such as pocl-opencl-icd";
    log_info("no devices: " + reason_);
  }
}

DeviceState& Backend::device(int32_t index) {
  if (index < 0 || index >= count()) {
    throw sdk::Error(TESSERA_STATUS_INVALID_ARGUMENT,
                     "opencl: device index " + std::to_string(index) + " out of range; valid: 0.." +
                         std::to_string(count() - 1) + (count() == 0 ? " (no devices: " + reason_ + ")" : ""));
  }
  return *devices_[size_t(index)];
}

bool Backend::all_devices_have_fp64() const {
  if (devices_.empty()) return false;
  for (const auto& d : devices_)
    if (!d->fp64) return false;
  return true;
}

int32_t Backend::current_device() const { return t_current_device; }
void Backend::set_current_device(int32_t index) {
  (void)device(index);
  t_current_device = index;
}

std::string Backend::cache_dir() const {
  namespace fs = std::filesystem;
  if (const char* d = env("TESSERA_CACHE_DIR"); d && *d) return (fs::path(d) / "opencl").string();
  if (const char* d = env("XDG_CACHE_HOME"); d && *d) return (fs::path(d) / "tessera" / "opencl").string();
  if (const char* d = env("HOME"); d && *d) return (fs::path(d) / ".cache" / "tessera" / "opencl").string();
  return {};
}

ProgramCacheStats Backend::program_cache_stats() const {
  std::lock_guard<std::mutex> lock(stats_mutex_);
  return cache_stats_;
}

cl_kernel Backend::kernel(DeviceState& dev, const std::string& program_key, const char* kernel_name,
                          const SourceFn& source) {
  std::lock_guard<std::mutex> lock(dev.program_mutex);
  std::string kernel_key = program_key + '/' + kernel_name;
  if (auto it = dev.kernels.find(kernel_key); it != dev.kernels.end()) return it->second;
  cl_program prog = nullptr;
  if (auto it = dev.programs.find(program_key); it != dev.programs.end()) {
    prog = it->second;
    std::lock_guard<std::mutex> s(stats_mutex_);
    ++cache_stats_.memory_hits;
  } else {
    prog = build_program(dev, ProgramSource{program_key, source()});
    dev.programs.emplace(program_key, prog);
  }
  cl_int err = CL_SUCCESS;
  cl_kernel k = cl().clCreateKernel(prog, kernel_name, &err);
  check_cl(err, "clCreateKernel('" + std::string(kernel_name) + "') of program " + program_key);
  dev.kernels.emplace(kernel_key, k);
  return k;
}

cl_program Backend::build_program(DeviceState& dev, const ProgramSource& program) {
  namespace fs = std::filesystem;
  const std::string identity = dev.name + '\n' + dev.driver_version + '\n' + dev.device_version + '\n' +
                               kBuildOptions + '\n' + program.source;
  const uint64_t key_hash = fnv1a64(identity.data(), identity.size());
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(key_hash));
  const std::string dir = cache_dir();
  const std::string path = dir.empty() ? std::string() : (fs::path(dir) / (program.key + "-" + hex + ".clbin")).string();

  if (!path.empty()) {
    std::error_code ec;
    if (fs::exists(path, ec)) {
      if (cl_program p = load_cached_binary(dev, path)) {
        std::lock_guard<std::mutex> s(stats_mutex_);
        ++cache_stats_.disk_hits;
        log_info("program " + program.key + ": loaded from cache " + path);
        return p;
      }
    }
  }

  const char* src = program.source.c_str();
  const size_t len = program.source.size();
  cl_int err = CL_SUCCESS;
  cl_program p = cl().clCreateProgramWithSource(dev.context, 1, &src, &len, &err);
  check_cl(err, "clCreateProgramWithSource(" + program.key + ")");
  err = cl().clBuildProgram(p, 1, &dev.id, kBuildOptions, nullptr, nullptr);
  if (err != CL_SUCCESS) {
    size_t log_size = 0;
    cl().clGetProgramBuildInfo(p, dev.id, CL_PROGRAM_BUILD_LOG, 0, nullptr, &log_size);
    std::string build_log(log_size, '\0');
    if (log_size) cl().clGetProgramBuildInfo(p, dev.id, CL_PROGRAM_BUILD_LOG, log_size, build_log.data(), nullptr);
    cl().clReleaseProgram(p);
    throw sdk::Error(TESSERA_STATUS_INTERNAL, "opencl: building program " + program.key + " for " + dev.name +
                                                  " failed with " + cl_error_name(err) + ":\n" + build_log);
  }
  {
    std::lock_guard<std::mutex> s(stats_mutex_);
    ++cache_stats_.disk_misses;
  }
  log_info("program " + program.key + ": compiled from source" + (path.empty() ? "" : ", caching in " + path));
  if (!path.empty()) store_binary(dev, p, path);
  return p;
}

cl_program Backend::load_cached_binary(DeviceState& dev, const std::string& path) {
  auto reject = [&](const std::string& why) -> cl_program {
    {
      std::lock_guard<std::mutex> s(stats_mutex_);
      ++cache_stats_.corrupt;
    }
    log_warning("program cache file " + path + " rejected (" + why + "); rebuilding from source");
    std::error_code ec;
    std::filesystem::remove(path, ec);
    return nullptr;
  };
  std::ifstream in(path, std::ios::binary);
  if (!in) return reject("cannot open");
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  constexpr size_t kHeader = sizeof(kCacheMagic) + 2 * sizeof(uint64_t);
  if (bytes.size() < kHeader || std::memcmp(bytes.data(), kCacheMagic, sizeof(kCacheMagic)) != 0)
    return reject("bad header");
  uint64_t size = 0, checksum = 0;
  std::memcpy(&size, bytes.data() + sizeof(kCacheMagic), sizeof size);
  std::memcpy(&checksum, bytes.data() + sizeof(kCacheMagic) + sizeof size, sizeof checksum);
  if (size == 0 || size != bytes.size() - kHeader) return reject("truncated");
  const auto* payload = reinterpret_cast<const unsigned char*>(bytes.data() + kHeader);
  if (fnv1a64(payload, size) != checksum) return reject("checksum mismatch");
  cl_int binary_status = CL_SUCCESS, err = CL_SUCCESS;
  const size_t payload_size = size;
  cl_program p = cl().clCreateProgramWithBinary(dev.context, 1, &dev.id, &payload_size, &payload, &binary_status, &err);
  if (err != CL_SUCCESS || binary_status != CL_SUCCESS || !p) {
    if (p) cl().clReleaseProgram(p);
    return reject("driver refused the binary: " + cl_error_name(err != CL_SUCCESS ? err : binary_status));
  }
  err = cl().clBuildProgram(p, 1, &dev.id, kBuildOptions, nullptr, nullptr);
  if (err != CL_SUCCESS) {
    cl().clReleaseProgram(p);
    return reject("build from binary: " + cl_error_name(err));
  }
  return p;
}

void Backend::store_binary(DeviceState& dev, cl_program program, const std::string& path) {
  namespace fs = std::filesystem;
  auto fail = [&](const std::string& why) {
    std::lock_guard<std::mutex> s(stats_mutex_);
    ++cache_stats_.store_failures;
    log_warning("cannot store program cache file " + path + ": " + why);
  };
  size_t size = 0;
  if (cl().clGetProgramInfo(program, CL_PROGRAM_BINARY_SIZES, sizeof size, &size, nullptr) != CL_SUCCESS || size == 0)
    return fail("the driver gives no program binary");
  std::vector<unsigned char> binary(size);
  unsigned char* ptr = binary.data();
  if (cl().clGetProgramInfo(program, CL_PROGRAM_BINARIES, sizeof ptr, &ptr, nullptr) != CL_SUCCESS)
    return fail("clGetProgramInfo(CL_PROGRAM_BINARIES) failed");
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  if (ec) return fail(ec.message());
  std::random_device rd;
  const std::string tmp = path + ".tmp." + std::to_string(getpid()) + "." + std::to_string(rd());
  {
    std::ofstream out(tmp, std::ios::binary);
    const uint64_t size64 = size, checksum = fnv1a64(binary.data(), binary.size());
    out.write(kCacheMagic, sizeof kCacheMagic);
    out.write(reinterpret_cast<const char*>(&size64), sizeof size64);
    out.write(reinterpret_cast<const char*>(&checksum), sizeof checksum);
    out.write(reinterpret_cast<const char*>(binary.data()), std::streamsize(binary.size()));
    if (!out) {
      fs::remove(tmp, ec);
      return fail("write failed");
    }
  }
  fs::rename(tmp, path, ec);  // atomic: a concurrent reader sees the old file or the whole new one
  if (ec) {
    fs::remove(tmp, ec);
    fail("rename failed");
  }
}

std::string Backend::properties_json(int32_t index) {
  DeviceState& d = device(index);
  const auto a = d.allocator.stats();
  const auto p = program_cache_stats();
  std::ostringstream os;
  os << "{\"name\": \"" << json_escape(d.name) << "\", \"vendor\": \"" << json_escape(d.vendor)
     << "\", \"platform\": \"" << json_escape(d.platform_name) << "\", \"driver_version\": \""
     << json_escape(d.driver_version) << "\", \"opencl_version\": \"" << json_escape(d.device_version)
     << "\", \"capability\": \"" << json_escape(d.device_version)
     << "\", \"memory\": " << d.global_memory << ", \"global_memory\": " << d.global_memory
     << ", \"max_allocation\": " << d.max_alloc << ", \"compute_units\": " << d.compute_units
     << ", \"max_work_group_size\": " << d.max_work_group_size << ", \"fp64\": " << (d.fp64 ? "true" : "false")
     << ", \"fp16\": " << (d.fp16 ? "true" : "false")
     << ", \"allocator\": {\"allocated\": " << a.allocated << ", \"cached\": " << a.cached
     << ", \"hits\": " << a.hits << ", \"misses\": " << a.misses << "}"
     << ", \"program_cache\": {\"dir\": \"" << json_escape(cache_dir()) << "\", \"memory_hits\": " << p.memory_hits
     << ", \"disk_hits\": " << p.disk_hits << ", \"disk_misses\": " << p.disk_misses
     << ", \"corrupt\": " << p.corrupt << ", \"store_failures\": " << p.store_failures << "}}";
  return os.str();
}

void Backend::shutdown() {
  for (auto& d : devices_) {
    if (d->default_stream.queue) cl().clFinish(d->default_stream.queue);
    for (auto& [k, kernel] : d->kernels) cl().clReleaseKernel(kernel);
    for (auto& [k, prog] : d->programs) cl().clReleaseProgram(prog);
    d->kernels.clear();
    d->programs.clear();
    d->allocator.release_all();
    if (d->default_stream.queue) cl().clReleaseCommandQueue(d->default_stream.queue);
    if (d->context) cl().clReleaseContext(d->context);
  }
  devices_.clear();
  // The ICD loader stays loaded: PoCL's worker threads and atexit handlers live in it.
}

// ---------------------------------------------------------------- device interface

namespace {

Backend& be() { return Backend::instance(); }

int32_t di_device_count(void*, char* reason, size_t capacity) {
  const int32_t n = be().count();
  if (n == 0 && reason && capacity > 0) {
    std::snprintf(reason, capacity, "%s", be().reason().c_str());
  }
  return n;
}

tessera_status_t di_get_current(void*, int32_t* out_index) {
  return guarded("device_get_current", [&] { *out_index = be().current_device(); });
}
tessera_status_t di_set_current(void*, int32_t index) {
  return guarded("device_set_current", [&] { be().set_current_device(index); });
}

tessera_status_t di_allocate(void*, int32_t device, uint64_t nbytes, void** out_handle) {
  return guarded("memory_allocate", [&] { *out_handle = be().device(device).allocator.allocate(nbytes); });
}
void di_free(void*, int32_t device, void* handle) {
  if (device < 0 || device >= be().count()) return;
  be().device(device).allocator.free(static_cast<cl_mem>(handle));
}

tessera_status_t di_copy_from_host(void*, int32_t device, void* dst, uint64_t dst_offset, const void* src,
                                   uint64_t nbytes, void* stream) {
  return guarded("memory_copy_from_host", [&] {
    if (nbytes == 0) return;
    DeviceState& d = be().device(device);
    check_cl(cl().clEnqueueWriteBuffer(d.queue(stream), static_cast<cl_mem>(dst), CL_TRUE, dst_offset, nbytes, src,
                                       0, nullptr, nullptr),
             "clEnqueueWriteBuffer of " + std::to_string(nbytes) + " bytes to opencl:" + std::to_string(device));
  });
}

tessera_status_t di_copy_to_host(void*, int32_t device, void* dst, const void* src, uint64_t src_offset,
                                 uint64_t nbytes, void* stream) {
  return guarded("memory_copy_to_host", [&] {
    if (nbytes == 0) return;
    DeviceState& d = be().device(device);
    check_cl(cl().clEnqueueReadBuffer(d.queue(stream), static_cast<cl_mem>(const_cast<void*>(src)), CL_TRUE,
                                      src_offset, nbytes, dst, 0, nullptr, nullptr),
             "clEnqueueReadBuffer of " + std::to_string(nbytes) + " bytes from opencl:" + std::to_string(device));
  });
}

tessera_status_t di_copy_device(void*, int32_t dst_device, void* dst, uint64_t dst_offset, int32_t src_device,
                                const void* src, uint64_t src_offset, uint64_t nbytes, void* stream) {
  return guarded("memory_copy_device", [&] {
    if (nbytes == 0) return;
    DeviceState& dd = be().device(dst_device);
    DeviceState& sd = be().device(src_device);
    cl_mem src_mem = static_cast<cl_mem>(const_cast<void*>(src));
    cl_mem dst_mem = static_cast<cl_mem>(dst);
    const Stream* s = static_cast<const Stream*>(stream);
    if (dd.context == sd.context) {
      cl_command_queue q = (s && (s->device == dst_device || s->device == src_device)) ? s->queue
                                                                                         : sd.default_stream.queue;
      check_cl(cl().clEnqueueCopyBuffer(q, src_mem, dst_mem, src_offset, dst_offset, nbytes, 0, nullptr, nullptr),
               "clEnqueueCopyBuffer of " + std::to_string(nbytes) + " bytes");
      return;
    }
    // Different contexts: stage through host memory (both transfers blocking).
    std::vector<unsigned char> staging(nbytes);
    cl_command_queue sq = (s && s->device == src_device) ? s->queue : sd.default_stream.queue;
    cl_command_queue dq = (s && s->device == dst_device) ? s->queue : dd.default_stream.queue;
    check_cl(cl().clEnqueueReadBuffer(sq, src_mem, CL_TRUE, src_offset, nbytes, staging.data(), 0, nullptr, nullptr),
             "clEnqueueReadBuffer (device to device staging)");
    check_cl(cl().clEnqueueWriteBuffer(dq, dst_mem, CL_TRUE, dst_offset, nbytes, staging.data(), 0, nullptr, nullptr),
             "clEnqueueWriteBuffer (device to device staging)");
  });
}

tessera_status_t di_stream_create(void*, int32_t device, void** out_stream) {
  return guarded("stream_create", [&] {
    DeviceState& d = be().device(device);
    cl_int err = CL_SUCCESS;
    cl_command_queue q = cl().clCreateCommandQueue(d.context, d.id, 0, &err);
    check_cl(err, "clCreateCommandQueue for opencl:" + std::to_string(device));
    auto* s = new Stream{q, device};
    *out_stream = s;
  });
}
void di_stream_destroy(void*, int32_t, void* stream) {
  auto* s = static_cast<Stream*>(stream);
  if (!s) return;
  cl().clFinish(s->queue);
  cl().clReleaseCommandQueue(s->queue);
  delete s;
}
tessera_status_t di_stream_synchronize(void*, int32_t device, void* stream) {
  return guarded("stream_synchronize", [&] {
    DeviceState& d = be().device(device);
    check_cl(cl().clFinish(d.queue(stream)), "clFinish on a stream of opencl:" + std::to_string(device));
  });
}

tessera_status_t di_event_create(void*, int32_t device, void** out_event) {
  return guarded("event_create", [&] {
    (void)be().device(device);
    *out_event = new Event{nullptr, device};
  });
}
void di_event_destroy(void*, int32_t, void* event) {
  auto* e = static_cast<Event*>(event);
  if (!e) return;
  if (e->event) cl().clReleaseEvent(e->event);
  delete e;
}
tessera_status_t di_event_record(void*, int32_t device, void* event, void* stream) {
  return guarded("event_record", [&] {
    auto* e = static_cast<Event*>(event);
    TESSERA_SDK_CHECK(e != nullptr, "opencl: event_record got a NULL event; create one with event_create");
    DeviceState& d = be().device(device);
    cl_event marker = nullptr;
    check_cl(cl().clEnqueueMarkerWithWaitList(d.queue(stream), 0, nullptr, &marker), "clEnqueueMarkerWithWaitList");
    cl().clFlush(d.queue(stream));
    if (e->event) cl().clReleaseEvent(e->event);
    e->event = marker;
    e->device = device;
  });
}
tessera_status_t di_event_wait(void*, int32_t device, void* event, void* stream) {
  return guarded("event_wait", [&] {
    auto* e = static_cast<Event*>(event);
    if (!e || !e->event) return;  // never recorded: nothing to wait for
    DeviceState& d = be().device(device);
    if (be().device(e->device).context != d.context) {
      // An event of another context cannot enter this queue's wait list: wait on the host.
      check_cl(cl().clWaitForEvents(1, &e->event), "clWaitForEvents (cross-context event_wait)");
      return;
    }
    check_cl(cl().clEnqueueBarrierWithWaitList(d.queue(stream), 1, &e->event, nullptr), "clEnqueueBarrierWithWaitList");
  });
}
tessera_status_t di_event_synchronize(void*, int32_t, void* event) {
  return guarded("event_synchronize", [&] {
    auto* e = static_cast<Event*>(event);
    if (!e || !e->event) return;
    check_cl(cl().clWaitForEvents(1, &e->event), "clWaitForEvents");
  });
}
tessera_status_t di_device_synchronize(void*, int32_t device) {
  return guarded("device_synchronize", [&] {
    DeviceState& d = be().device(device);
    check_cl(cl().clFinish(d.default_stream.queue), "clFinish on opencl:" + std::to_string(device));
  });
}

tessera_status_t di_memory_record_stream(void*, int32_t device, void* handle, void* stream) {
  return guarded("memory_record_stream", [&] {
    TESSERA_SDK_CHECK(be().device(device).allocator.record_stream(static_cast<cl_mem>(handle), stream),
                      "opencl:" + std::to_string(device) + ": record_stream: the buffer was not allocated on this device");
  });
}

size_t di_properties(void*, int32_t device, char* buffer, size_t capacity) {
  std::string json;
  try {
    json = be().properties_json(device);
  } catch (const std::exception& e) {
    json = std::string("{\"error\": \"") + json_escape(e.what()) + "\"}";
  }
  if (buffer && capacity > 0) {
    const size_t n = std::min(capacity - 1, json.size());
    std::memcpy(buffer, json.data(), n);
    buffer[n] = '\0';
  }
  return json.size();  // like snprintf: without the NUL
}

tessera_status_t di_memory_stats(void*, int32_t device, tessera_memory_stats_t* out) {
  return guarded("memory_stats", [&] {
    const CachingAllocator::Stats a = be().device(device).allocator.stats();
    if (TESSERA_ABI_HAS_FIELD(out, tessera_memory_stats_t, allocated_bytes)) out->allocated_bytes = a.allocated;
    if (TESSERA_ABI_HAS_FIELD(out, tessera_memory_stats_t, reserved_bytes)) out->reserved_bytes = a.allocated + a.cached;
    if (TESSERA_ABI_HAS_FIELD(out, tessera_memory_stats_t, peak_allocated_bytes)) out->peak_allocated_bytes = a.peak;
    if (TESSERA_ABI_HAS_FIELD(out, tessera_memory_stats_t, num_allocations)) out->num_allocations = a.live;
  });
}

const tessera_device_interface_t kDeviceInterface = {
    .struct_size = sizeof(tessera_device_interface_t),
    .reserved_ = 0,
    .device_count = di_device_count,
    .device_get_current = di_get_current,
    .device_set_current = di_set_current,
    .memory_allocate = di_allocate,
    .memory_free = di_free,
    .memory_copy_from_host = di_copy_from_host,
    .memory_copy_to_host = di_copy_to_host,
    .memory_copy_device = di_copy_device,
    .stream_create = di_stream_create,
    .stream_destroy = di_stream_destroy,
    .stream_synchronize = di_stream_synchronize,
    .event_create = di_event_create,
    .event_destroy = di_event_destroy,
    .event_record = di_event_record,
    .event_wait = di_event_wait,
    .event_synchronize = di_event_synchronize,
    .device_synchronize = di_device_synchronize,
    .device_properties = di_properties,
    .memory_stats = di_memory_stats,
    // No event times: the queues are made without CL_QUEUE_PROFILING_ENABLE.
    .event_elapsed_time = nullptr,
    .memory_record_stream = di_memory_record_stream,
    // ABI 1.3 (memory info, pinned host memory): not provided (host defaults).
    .memory_info = nullptr,
    .pinned_allocate = nullptr,
    .pinned_free = nullptr,
    .memory_copy_from_pinned = nullptr,
};

}  // namespace

const tessera_device_interface_t* device_interface() { return &kDeviceInterface; }

}  // namespace tessera::opencl
