#!/usr/bin/env bash
# check_gpu_bundle.sh BUILD SRC [PROGRAM...]: builds the GPU bundle of the release tree BUILD with
# SRC/benchmarks/cuda/gpu_bundle.sh into a temporary folder and checks that it is complete for a
# bare GPU machine:
#   - it holds the CLI, test_cuda, bench_cuda and every PROGRAM named, ORIGIN = BUILD, and every
#     plugin library of BUILD with a manifest whose "library" names it (and no manifest without one);
#   - every program and shared library in it resolves all its libraries (ldd) with the bundle's
#     lib folders on LD_LIBRARY_PATH, to files inside the bundle, except the C/C++ runtime and the
#     NVIDIA libraries the GPU machine has: nothing may come from BUILD or from a Debian package;
#   - the .tar.xz that travels is under 60 MiB;
#   - run from the bundle, the CLI loads every plugin from the bundle's own plugin folder, and
#     test_cuda's host tests of the kernels' NaN rule pass;
#   - where there is no CUDA device, `run_gpu_checks.sh run` on the bundle goes through every step
#     within a short budget, fails (TESSERA_REQUIRE_CUDA=1 must not pass without a GPU) and still
#     writes summary.txt and a table with a line for every benchmark row.
set -uo pipefail
BUILD=$(cd "$1" && pwd)
SRC=$(cd "$2" && pwd)
shift 2
work=$(mktemp -d /tmp/tessera-bundle-check.XXXXXX)
trap 'rm -rf "$work"' EXIT
D=$work/gpu-bundle
fail=0
bad() {
  echo "FAIL: $*"
  fail=1
}

bash "$SRC/benchmarks/cuda/gpu_bundle.sh" "$BUILD" "$D" || { echo "FAIL: gpu_bundle.sh failed"; exit 1; }

# ---- contents
for p in tessera test_cuda bench_cuda "$@"; do
  [ -x "$D/tree/bin/$p" ] || bad "program $p is not in the bundle"
done
[ "$(cat "$D/ORIGIN" 2>/dev/null)" = "$BUILD" ] || bad "ORIGIN is '$(cat "$D/ORIGIN" 2>/dev/null)', expected $BUILD"
for lib in "$BUILD"/lib/tessera/plugins/*.so; do
  [ -f "$D/tree/lib/tessera/plugins/$(basename "$lib")" ] || bad "plugin $(basename "$lib") is not in the bundle"
done
python3 - "$D/tree/lib/tessera/plugins" <<'EOF' || fail=1
import glob, json, os, sys
folder = sys.argv[1]
named = set()
ok = True
for m in sorted(glob.glob(os.path.join(folder, "*.json"))):
    lib = json.load(open(m)).get("library", "")
    named.add(lib)
    if not os.path.isfile(os.path.join(folder, lib)):
        print(f"FAIL: manifest {os.path.basename(m)} names {lib!r}, which is not in the bundle"); ok = False
for so in sorted(glob.glob(os.path.join(folder, "*.so"))):
    if os.path.basename(so) not in named:
        print(f"FAIL: plugin library {os.path.basename(so)} has no manifest in the bundle"); ok = False
print(f"manifests: {len(named)} plugin manifests, each naming its library")
sys.exit(0 if ok else 1)
EOF

# ---- every library resolves inside the bundle
system_base='/(libc|libm|libgcc_s|libstdc\+\+|libpthread|libdl|librt|libutil|ld-linux[^/]*)\.so'
nvidia='lib(cuda|cudart|cublas|cublasLt|cudnn[a-z_]*|cusparse|cusparseLt|cufft|curand|cusolver|nvrtc|nvrtc-builtins|nccl|nvJitLink|nvToolsExt)\.so'
checked=0
while IFS= read -r f; do
  checked=$((checked + 1))
  out=$(LD_LIBRARY_PATH="$D/tree/lib:$D/syslibs" ldd "$f" 2>&1) || { bad "ldd $f: $out"; continue; }
  while read -r name arrow path _; do
    [ "$arrow" = "=>" ] || continue
    if [ "$path" = "not" ]; then
      grep -qE "^$nvidia" <<<"$name" || bad "${f#"$D"/} needs $name: not found"
      continue
    fi
    case $path in "$D"/*) continue ;; esac
    if grep -qE "$system_base|/$nvidia" <<<"$path"; then continue; fi
    bad "${f#"$D"/} resolves $name to $path, outside the bundle (a bare GPU machine lacks it)"
  done <<<"$out"
done < <(find "$D/tree" "$D/syslibs" -type f \( -path '*/bin/*' -o -name '*.so*' \))
echo "ldd: $checked programs and libraries checked"
((checked >= 10)) || bad "only $checked files were checked"

# ---- size of what travels
size=$(stat -c %s "$D.tar.xz" 2>/dev/null || echo 0)
echo "bundle: $(du -sm "$D" | cut -f1) MiB, compressed $((size / 1048576)) MiB"
((size > 0 && size < 60 * 1048576)) || bad "the compressed bundle is $size bytes; it must be under 60 MiB"

# ---- run from the bundle
export LD_LIBRARY_PATH=$D/tree/lib:$D/syslibs
listing=$("$D/tree/bin/tessera" plugins --load 2>&1) || bad "tessera plugins --load failed: $listing"
grep -q "manifest $D/tree/lib/tessera/plugins/tessera_cuda.json" <<<"$listing" || bad "the CLI did not find the bundle's CUDA plugin: $listing"
if grep -E '^\S' <<<"$listing" | grep -qw failed; then bad "a plugin failed to load from the bundle: $listing"; fi
if grep -q "manifest $BUILD/" <<<"$listing"; then bad "the CLI read manifests from the build tree: $listing"; fi
"$D/tree/bin/test_cuda" --gtest_filter='NanMath.*:SoftmaxStat.*' >"$work/test_cuda.log" 2>&1 || {
  bad "test_cuda's host tests failed when run from the bundle"
  tail -20 "$work/test_cuda.log"
}
# ---- the GPU command end to end, where it cannot pass
if "$D/tree/bin/tessera" devices 2>&1 | grep -q '^cuda .*no devices'; then
  rm -rf "$work/out"
  OUT=$work/out GPU_CHECKS_BUDGET_S=180 LD_LIBRARY_PATH='' bash "$SRC/benchmarks/cuda/run_gpu_checks.sh" run "$D.tar.xz" \
    >"$work/run.log" 2>&1
  rc=$?
  ((rc != 0)) || bad "run_gpu_checks.sh run passed without a CUDA device"
  for s in libraries "tessera devices" test_cuda "tessera check" bench_cuda "pytorch rows" table memcheck; do
    grep -q "^$s " "$work/out/summary.txt" 2>/dev/null || bad "summary.txt has no line for step '$s'"
  done
  grep -q '^test_cuda .*FAILED' "$work/out/summary.txt" || bad "test_cuda did not fail without a device"
  grep -q '^libraries .*ok' "$work/out/summary.txt" || bad "the bundle's libraries did not resolve on the run"
  rows=$(grep -c '^| BM_' "$work/out/table.md" 2>/dev/null || echo 0)
  listed=$("$D/tree/bin/bench_cuda" --benchmark_list_tests=true | grep -c '^BM_')
  ((rows >= listed && listed > 0)) || bad "table.md has $rows benchmark rows, bench_cuda lists $listed"
  echo "run_gpu_checks.sh run without a device: exit $rc, $rows table rows; summary:"
  sed 's/^/  /' "$work/out/summary.txt"
fi
[ $fail -eq 0 ] && echo "the GPU bundle is complete"
exit $fail
