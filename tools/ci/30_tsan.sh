#!/usr/bin/env bash
# ThreadSanitizer over the core, dispatcher, loader and stress suites. Kernel suites that run on
# OpenMP (the CPU backend, oneDNN) are excluded: libgomp is not built with TSan instrumentation, so
# its barriers are invisible to TSan and every parallel region would be reported as a race.
set -euo pipefail
cd "$(dirname "$0")/../.."
cmake --preset tsan >/dev/null
known=$(cmake --build --preset tsan --target help)
targets=()
# my_hardware_device: the loader suite's shutdown-while-running and stale-tensor tests run on the
# reference accelerator (its queue thread, not OpenMP), so it is built here too.
for t in test_core test_dispatcher test_loader test_loader_abi_c test_streams test_stress my_hardware_device; do
  if grep -q "^$t:" <<<"$known"; then targets+=("$t"); fi
done
cmake --build --preset tsan -j "${JOBS:-2}" --target "${targets[@]}"
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1"
# gtest_discover_tests (CMake 3.25) keeps only the first of several labels, so the suites are named
# by their layer label; the stress suite carries 'tsan'.
# CheckCommand/DevicesCommand run the tessera CLI against the CPU plugin, which this stage does not
# build (OpenMP, above); loader.install_leaves_slots_free installs the whole build, of which this
# stage builds only the targets above. The release and ASan stages run all three. test_profiler
# (ProfilerTest.*, MemoryStats.*) runs ops on the CPU plugin too: not built here, so its placeholder
# test is left out; the profiler's own thread-safety tests are in test_dispatcher. test_streams runs
# the reference accelerator's per-stream queue threads; three of its tests make tensors on the CPU
# (ones/zeros need the CPU plugin) and check no threading, so they run in the other stages only.
(cd build/tsan && ctest --output-on-failure -j "${JOBS:-2}" -L '^(core|dispatcher|loader|tsan)$' \
  -E '^((CheckCommand|DevicesCommand)\.|loader\.install_leaves_slots_free$|test_profiler_NOT_BUILT$|Streams\.(DeviceWithoutStreamsGetsItsDefaultStreamAndHostEvents|MisuseIsAClearError|AStreamOutlivingItsPluginIsAClearError)$)')
