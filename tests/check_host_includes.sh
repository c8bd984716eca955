#!/bin/sh
# The hosts of this repository reach the plugin only through the ABI: nothing under host_shims/ or
# bench/ (the tool's benchmark), and not the CLI's tests (tests/test_cli*.c, tests/cli_harness.h),
# includes a header of kernels/, and no build file gives them that folder.
# (The loader library shares one file with the plugin on purpose, plugin/settings.c: the settings
# table and rule, so that the plugin and its loader parse NVFP4_MLA_PLUGIN-style values alike; the
# Python shim's layout manifest prints that table for the mirror's test.)
#   usage: check_host_includes.sh SOURCE_ROOT
set -u
cd "$1" || exit 1
kernel_headers=$(cd kernels && find . -name '*.h' -o -name '*.cuh' | sed 's|^.*/||')
status=0
for header in $kernel_headers; do
    if grep -rn --include='*.c' --include='*.h' --include='*.cu' --include='*.cuh' --include='*.cpp' \
            "#include *[\"<]\(.*/\)\?$header[\">]" host_shims bench tests/test_cli*.c tests/cli_harness.h; then
        status=1
    fi
done
if grep -rn "kernels_inc" host_shims bench --include=meson.build; then
    status=1
fi
if grep -n "'test_cli[a-z_]*'.*kernels_inc" tests/meson.build; then
    status=1
fi
[ $status -eq 0 ] && echo "ok: host_shims/, bench/ and the CLI's tests include nothing of kernels/"
[ $status -eq 0 ] || echo "FAIL: the lines above reach into kernels/"
exit $status
