// Random number generators, one per device and any number made by the user (torch.Generator).
//
// Note [Generators]
// A Generator is a Philox stream (tessera/random.h): a 64-bit seed and a 64-bit offset, the next
// unused counter value. A random op on n elements reserves n counter values under the generator's
// mutex and element i (row-major) gets philox(seed, offset + i), on every device: the values depend
// only on (seed, offset), so the CPU, the reference accelerator, OpenCL and any plugin draw the same
// numbers for the same seed. A plugin needs nothing but the seed and the offset: its random kernels
// receive them as the `seed` and `offset` attributes of uniform_ / normal_, and a random op of its
// own reserves them through host->generator_reserve (plugin_abi.h, ABI 1.3).
// - Every device (type and index) has a default generator, made on first use with the seed of the
//   last tessera::manual_seed (67280421310721 before any); rand, randn, uniform_ and normal_ draw
//   from the default generator of the output's device unless given one. manual_seed(s) reseeds every
//   default generator (offset 0).
// - A Generator is a handle: copies share one state, as torch.Generator objects do; clone() makes an
//   independent copy. A generator drives random ops on any device (its device only names whose
//   default it is), since the numbers do not depend on the device.
// - Threads: every member function is thread-safe (one mutex per generator). Threads drawing from
//   one generator get disjoint numbers, but which thread gets which depends on scheduling. For
//   reproducible multi-threaded code give each thread its own generator: fork() returns a new
//   generator seeded from this one's (seed, offset) and advances this one by one counter value, so
//   forking in a fixed order (before starting the threads) gives the same streams on every run.
#pragma once
#include <cstdint>
#include <memory>

#include "tessera/device.h"
#include "tessera/export.h"
#include "tessera/tensor.h"

namespace tessera {

// The whole state of a generator. As a tensor (Generator::get_state) it is kGeneratorStateBytes
// bytes of uint8 on the CPU: the magic "TSGN", the format version 1 as a little-endian uint32, then
// the seed and the offset as little-endian uint64.
struct GeneratorState {
  uint64_t seed = 0;
  uint64_t offset = 0;
  friend bool operator==(const GeneratorState& a, const GeneratorState& b) {
    return a.seed == b.seed && a.offset == b.offset;
  }
};
inline constexpr int64_t kGeneratorStateBytes = 24;
inline constexpr uint64_t kDefaultGeneratorSeed = 67280421310721ull;

class Generator;
namespace detail {
struct GeneratorImpl;
// The default generator of (type, index) without the device-count check (for plugins calling
// host->generator_reserve while they load). Throws for an index outside 0..63.
TESSERA_API Generator default_generator_unchecked(DeviceType type, int index);
// The counters a random op on `t` (numel of them) reserves: from `generator`, else from the default
// generator of the device t's storage lives on (its index as the plugin allocated it). Eager random
// fills and a program's random nodes (Note [Random ops in a program]) both draw this way.
TESSERA_API GeneratorState reserve_for(const Tensor& t, const Generator* generator = nullptr);
}  // namespace detail

class TESSERA_API Generator {
 public:
  // A new generator for `device` (default: the CPU) with `seed`, offset 0. Not any device's default.
  explicit Generator(Device device = Device(DeviceType::CPU), uint64_t seed = kDefaultGeneratorSeed);

  // The default generator of `device` (index -1 means 0). Throws naming the device when no plugin
  // provides its type or the index is out of range (loads the device's plugin to count devices).
  static Generator default_generator(Device device);

  Device device() const;
  // Sets the seed and restarts the stream (offset 0).
  void manual_seed(uint64_t seed);
  // Seeds from a non-deterministic source (std::random_device), like torch.Generator.seed(), and
  // returns the new seed.
  uint64_t seed();
  uint64_t initial_seed() const;
  // The next unused Philox counter value.
  uint64_t offset() const;
  void set_offset(uint64_t offset);

  GeneratorState state() const;
  void set_state(const GeneratorState& state);
  // The state as a byte tensor (see GeneratorState); set_state takes only such a tensor and throws
  // naming what is wrong (not uint8, not kGeneratorStateBytes bytes, not on the CPU, bad magic or
  // version) without changing the generator.
  Tensor get_state() const;
  void set_state(const Tensor& state);

  // Reserves `count` consecutive counter values: returns the seed and the first offset, and moves
  // the offset past them. Throws when the offset would wrap around 2^64.
  GeneratorState reserve(uint64_t count);
  // A new, independent generator on the same device, seeded from this one's (seed, offset); this
  // one advances by one counter value (Note [Generators]).
  Generator fork();
  // A new generator with a copy of this one's state.
  Generator clone() const;

  // Copies share the state: equal when they are the same generator.
  friend bool operator==(const Generator& a, const Generator& b) { return a.impl_ == b.impl_; }
  friend bool operator!=(const Generator& a, const Generator& b) { return !(a == b); }

 private:
  friend Generator detail::default_generator_unchecked(DeviceType type, int index);
  explicit Generator(std::shared_ptr<detail::GeneratorImpl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<detail::GeneratorImpl> impl_;
};

}  // namespace tessera
