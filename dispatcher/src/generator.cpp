// Generators (Note [Generators] in tessera/generator.h).
#include "tessera/generator.h"

#include <array>
#include <cstring>
#include <mutex>
#include <random>

#include "tessera/error.h"
#include "tessera/ops.h"
#include "tessera/random.h"

namespace tessera {

// Throws naming the device when no plugin provides its type or its index is out of range (ops.cpp).
void check_device_index(const char* what, Device device);

namespace detail {
struct GeneratorImpl {
  explicit GeneratorImpl(Device d, uint64_t s) : device(d), seed(s) {}
  const Device device;
  mutable std::mutex mutex;
  uint64_t seed;
  uint64_t offset = 0;
};
}  // namespace detail

namespace {

constexpr int kMaxGeneratorDevices = 64;
constexpr unsigned char kStateMagic[4] = {'T', 'S', 'G', 'N'};
constexpr uint32_t kStateVersion = 1;

// The default generators, made on first use, and the seed new ones start from. Guarded by `mutex`
// (taken before any generator's own mutex).
struct DefaultGenerators {
  std::mutex mutex;
  uint64_t seed = kDefaultGeneratorSeed;
  std::array<std::array<std::shared_ptr<detail::GeneratorImpl>, kMaxGeneratorDevices>, kNumDeviceTypes> table;
};
DefaultGenerators& defaults() {
  static DefaultGenerators d;
  return d;
}

void put_le(unsigned char* p, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}
uint64_t get_le(const unsigned char* p, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= uint64_t(p[i]) << (8 * i);
  return v;
}

}  // namespace

Generator::Generator(Device device, uint64_t seed)
    : impl_(std::make_shared<detail::GeneratorImpl>(
          Device(device.type(), device.index() < 0 ? 0 : device.index()), seed)) {}

Generator detail::default_generator_unchecked(DeviceType type, int index) {
  if (index < 0) index = 0;
  TESSERA_CHECK(index < kMaxGeneratorDevices, "default generator: device index ", index, " of '",
                device_type_name(type), "' is out of range (0..", kMaxGeneratorDevices - 1, ")");
  DefaultGenerators& d = defaults();
  std::lock_guard lock(d.mutex);
  auto& slot = d.table[size_t(type)][size_t(index)];
  if (!slot) slot = std::make_shared<GeneratorImpl>(Device(type, index), d.seed);
  return Generator(slot);
}

GeneratorState detail::reserve_for(const Tensor& t, const Generator* generator) {
  // The storage knows the device index a plugin allocated on (index -1 resolves to its current one).
  const Device d = t.storage() ? t.storage()->device() : t.device();
  Generator g = generator ? *generator : default_generator_unchecked(d.type(), d.index());
  return g.reserve(uint64_t(t.numel()));
}

Generator Generator::default_generator(Device device) {
  if (device.type() != DeviceType::Meta) check_device_index("default_generator", device);
  return detail::default_generator_unchecked(device.type(), device.index());
}

Device Generator::device() const { return impl_->device; }

void Generator::manual_seed(uint64_t seed) {
  std::lock_guard lock(impl_->mutex);
  impl_->seed = seed;
  impl_->offset = 0;
}

uint64_t Generator::seed() {
  std::random_device rd;
  const uint64_t s = (uint64_t(rd()) << 32) ^ uint64_t(rd());
  manual_seed(s);
  return s;
}

uint64_t Generator::initial_seed() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->seed;
}

uint64_t Generator::offset() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->offset;
}

void Generator::set_offset(uint64_t offset) {
  std::lock_guard lock(impl_->mutex);
  impl_->offset = offset;
}

GeneratorState Generator::state() const {
  std::lock_guard lock(impl_->mutex);
  return GeneratorState{impl_->seed, impl_->offset};
}

void Generator::set_state(const GeneratorState& state) {
  std::lock_guard lock(impl_->mutex);
  impl_->seed = state.seed;
  impl_->offset = state.offset;
}

Tensor Generator::get_state() const {
  const GeneratorState s = state();
  Tensor t = empty({kGeneratorStateBytes}, TensorOptions(kUInt8));
  auto* p = t.data_ptr<uint8_t>();
  std::memcpy(p, kStateMagic, 4);
  put_le(p + 4, kStateVersion, 4);
  put_le(p + 8, s.seed, 8);
  put_le(p + 16, s.offset, 8);
  return t;
}

void Generator::set_state(const Tensor& state) {
  TESSERA_CHECK(state.defined(),
                "Generator::set_state: the state tensor is undefined; pass what get_state() returned");
  TESSERA_CHECK(state.dtype() == kUInt8,
                "Generator::set_state: the state must be a uint8 tensor (from get_state()), got ",
                dtype_name(state.dtype()));
  TESSERA_CHECK(state.device().is_cpu(), "Generator::set_state: the state must be on the CPU, got ",
                state.device().str(), "; move it with .cpu() first");
  TESSERA_CHECK(state.numel() == kGeneratorStateBytes, "Generator::set_state: the state must hold ",
                kGeneratorStateBytes, " bytes (magic, version, seed, offset), got ", state.numel(),
                "; pass a tensor that Generator::get_state() returned");
  const Tensor c = state.contiguous();
  const auto* p = c.const_data_ptr<uint8_t>();
  TESSERA_CHECK(
      std::memcmp(p, kStateMagic, 4) == 0,
      "Generator::set_state: the state does not start with the magic \"TSGN\": it is not a generator state "
      "(or it was corrupted)");
  const uint64_t version = get_le(p + 4, 4);
  TESSERA_CHECK(version == kStateVersion, "Generator::set_state: unknown state format version ", version,
                " (expected ", kStateVersion, "); the state comes from a newer Tessera or was corrupted");
  set_state(GeneratorState{get_le(p + 8, 8), get_le(p + 16, 8)});
}

GeneratorState Generator::reserve(uint64_t count) {
  std::lock_guard lock(impl_->mutex);
  TESSERA_CHECK(impl_->offset <= UINT64_MAX - count, "Generator: reserving ", count,
                " random numbers at offset ", impl_->offset,
                " would wrap the Philox counter around 2^64; reseed with manual_seed");
  GeneratorState s{impl_->seed, impl_->offset};
  impl_->offset += count;
  return s;
}

Generator Generator::fork() {
  const GeneratorState s = reserve(1);
  // A fresh key from the parent's stream: the Philox block of counter value `offset` (two 32-bit
  // words), so every fork of every parent gets another seed.
  const philox::Block b = philox::philox4x32_10(s.offset, s.seed);
  return Generator(device(), (uint64_t(b.v[2]) << 32) | b.v[3]);
}

Generator Generator::clone() const {
  Generator g(device());
  g.set_state(state());
  return g;
}

// Every default generator, existing and future, starts over from `seed`.
void manual_seed(uint64_t seed) {
  DefaultGenerators& d = defaults();
  std::lock_guard lock(d.mutex);
  d.seed = seed;
  for (auto& per_type : d.table)
    for (auto& g : per_type)
      if (g) {
        std::lock_guard glock(g->mutex);
        g->seed = seed;
        g->offset = 0;
      }
}

}  // namespace tessera
