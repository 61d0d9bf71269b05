#!/usr/bin/env bash
# The whole suite under AddressSanitizer + UndefinedBehaviorSanitizer (no CUDA), leaks detected.
set -euo pipefail
cd "$(dirname "$0")/../.."
cmake --preset asan >/dev/null
cmake --build --preset asan -j "${JOBS:-2}"
export ASAN_OPTIONS="detect_leaks=1:allocator_may_return_null=1:abort_on_error=0:strict_string_checks=1:detect_stack_use_after_return=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
# use_tls=0: LSan's tracer faults while reading the dynamic TLS of libgomp's worker threads (libgomp
# arrives with the dlopen'ed CPU plugin and oneDNN) and aborts the run after every test has passed.
# Not scanning TLS keeps the multi-threaded kernels under ASan; the price is that a block referenced
# only from TLS is reported, which the suppressions file covers for glibc's dlerror buffer.
export LSAN_OPTIONS="use_tls=0:suppressions=$(pwd)/tools/ci/lsan.supp:print_suppressions=0"
(cd build/asan && ctest --output-on-failure -j "${JOBS:-2}" -LE no_asan)
