#!/bin/sh
# The built plugin's ABI surface (every type reachable from nvfp4_mla_plugin_v1, as declared in
# abi/*.h) against the two baselines kept in abi/baseline/:
#   libnvfp4_mla-1.0.abi  the ABI 1.0 surface, frozen (taken from git history, the last revision
#                         with NVFP4_MLA_ABI_MINOR 0): the build must still hold it, laid out the
#                         same, every symbol and member at its offset with its type (appended
#                         members and reserved words given a use are what a minor may add);
#   libnvfp4_mla-1.1.abi  the current surface: any change fails.
# Both through check_abi_surface.py on abidw's dump of the build; the current surface also through
# abidiff. A deliberate change to the 1.1 surface refreshes its baseline (command below) and gets
# an entry in abi/CHANGELOG.md; the 1.0 baseline never changes. Skips (77) where abigail-tools is
# not installed, and where the .so carries no DWARF (a release build: abidw reads the types from the
# debug information, and without it every struct reads as gone).
#   usage: check_abi_baseline.sh SOURCE_ROOT PLUGIN.so
set -u
src=$1
so=$2
base=$src/abi/baseline
command -v abidw >/dev/null 2>&1 || { echo "abidw not installed (apt-get install abigail-tools): skipped"; exit 77; }
python=$(command -v python3) || { echo "python3 not found: skipped"; exit 77; }
command -v readelf >/dev/null 2>&1 || { echo "readelf not installed (apt-get install binutils): skipped"; exit 77; }
if ! readelf -S --wide "$so" | grep -q '\.debug_info'; then
    echo "$so has no debug information (a release build without -g): abidw cannot see its types: skipped"
    exit 77
fi
dump=$(mktemp) || exit 1
trap 'rm -f "$dump"' EXIT
refresh="abidw --headers-dir abi/ --drop-undefined-syms --suppressions abi/baseline/internal.suppr $so > abi/baseline/libnvfp4_mla-1.1.abi"
if ! abidw --headers-dir "$src/abi" --drop-undefined-syms --suppressions "$base/internal.suppr" "$so" >"$dump"; then
    echo "FAIL: abidw could not read $so"
    exit 1
fi
status=0
"$python" "$src/tests/check_abi_surface.py" extends "$base/libnvfp4_mla-1.0.abi" "$dump" || {
    echo "FAIL: the build no longer holds the ABI 1.0 surface: a 1.0 host would break (a new major is needed)"
    status=1
}
"$python" "$src/tests/check_abi_surface.py" exact "$base/libnvfp4_mla-1.1.abi" "$dump" || {
    echo "FAIL: the ABI surface differs from abi/baseline/libnvfp4_mla-1.1.abi. If the change is deliberate (ABI 1.1"
    echo "is unreleased: appended members only), note it in abi/CHANGELOG.md and run"
    echo "  $refresh"
    status=1
}
abidiff --headers-dir2 "$src/abi" --suppressions "$base/internal.suppr" "$base/libnvfp4_mla-1.1.abi" "$so"
rc=$?
if [ $rc -ne 0 ]; then
    echo "FAIL: abidiff exit $rc (4 = ABI change, 8 = incompatible change) against abi/baseline/libnvfp4_mla-1.1.abi"
    status=1
fi
# The comparison can fail: the two baselines differ (1.1 appended members), so neither is the other.
if "$python" "$src/tests/check_abi_surface.py" exact "$base/libnvfp4_mla-1.0.abi" "$base/libnvfp4_mla-1.1.abi" \
        >/dev/null || "$python" "$src/tests/check_abi_surface.py" extends "$base/libnvfp4_mla-1.1.abi" \
        "$base/libnvfp4_mla-1.0.abi" >/dev/null; then
    echo "FAIL: check_abi_surface.py takes the 1.0 and 1.1 baselines for each other: it cannot see a change"
    status=1
fi
[ $status -eq 0 ] && echo "ok: the build holds the ABI 1.0 surface and is the 1.1 surface of abi/baseline/"
exit $status
