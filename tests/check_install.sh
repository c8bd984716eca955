#!/bin/sh
# What a C host gets from `meson install`: stages the build's install into a temporary folder,
# checks that it holds nvfp4-mla.pc, the loader library and the plugin under lib.../nvfp4-mla/,
# then builds a small C host with `pkg-config --cflags --libs nvfp4-mla` alone and runs it: it finds
# the plugin through the .pc file's plugindir (NVFP4_MLA_PLUGIN names the folder), loads, checks
# and requires it through the loader, and opens a CPU context; the installed nvfp4-mla tool finds the
# installed plugin by itself. Skips (77) without pkg-config.
#   usage: check_install.sh BUILD_ROOT CC
set -eu
build=$1
cc=$2
command -v pkg-config >/dev/null 2>&1 || { echo "pkg-config not installed: skipped"; exit 77; }
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
meson install -C "$build" --destdir "$stage" --no-rebuild >"$stage/install.log" 2>&1 || {
    cat "$stage/install.log"; echo "FAIL: meson install"; exit 1; }
pc=$(find "$stage" -name nvfp4-mla.pc | head -1)
[ -n "$pc" ] || { echo "FAIL: no nvfp4-mla.pc in the staged install"; exit 1; }
export PKG_CONFIG_PATH="$(dirname "$pc")"
prefix=$(pkg-config --variable=prefix nvfp4-mla)
pc() { pkg-config --define-variable=prefix="$stage$prefix" "$@" nvfp4-mla; }
plugindir=$(pc --variable=plugindir)
libdir=$(pc --variable=libdir)
[ -f "$plugindir/libnvfp4_mla.so" ] || { echo "FAIL: no $plugindir/libnvfp4_mla.so"; exit 1; }
[ -f "$libdir/libnvfp4_mla_loader.a" ] || { echo "FAIL: no loader library in $libdir"; exit 1; }
# The plugin's digest, recorded for the installed file (the loaders check it before dlopen: issue 58).
(cd "$plugindir" && sha256sum -c --quiet libnvfp4_mla.so.sha256) || {
    echo "FAIL: $plugindir/libnvfp4_mla.so.sha256 is missing or does not match the installed plugin"; exit 1; }
case "$plugindir" in */nvfp4-mla) ;; *) echo "FAIL: plugindir $plugindir is not .../nvfp4-mla"; exit 1 ;; esac
cat >"$stage/host.c" <<'C'
#include <stdio.h>
#include "nvfp4_mla_loader.h"

int main(void) {
    nvfp4_mla_loader_t loader;
    char message[1024];
    if (nvfp4_mla_loader_open(&loader, NULL, message, sizeof message) != NVFP4_MLA_LOAD_OK) {
        fprintf(stderr, "%s\n", message);
        return 1;
    }
    nvfp4_mla_requirement_t want = {NVFP4_MLA_LAYOUT_FP8_ROPE_368, NVFP4_MLA_SCALE_PER_TOKEN, NVFP4_MLA_CAP_OP_ATTEND, 1};
    int rc = nvfp4_mla_loader_require(&loader, &want, nvfp4_mla_loader_table_caps(&loader), message, sizeof message);
    printf("%s\n", message);
    nvfp4_mla_init_args_t init = {sizeof init, NVFP4_MLA_DEVICE_CPU, 0, 0, NULL, {0}, NULL};
    nvfp4_mla_context_t *ctx = NULL;
    rc = rc || loader.table->init(&init, &ctx) != NVFP4_MLA_OK;
    if (ctx) {
        printf("record of layout %s: %u bytes; context on cpu\n", nvfp4_mla_layout_name(want.layout),
               nvfp4_mla_record_bytes(want.layout));
        loader.table->shutdown(ctx);
    }
    nvfp4_mla_loader_close(&loader);
    return rc;
}
C
# shellcheck disable=SC2046 # pkg-config's words are flags
"$cc" -std=c11 -o "$stage/host" "$stage/host.c" $(pc --cflags --libs) || { echo "FAIL: the host does not build"; exit 1; }
NVFP4_MLA_PLUGIN="$plugindir" "$stage/host" || { echo "FAIL: the host cannot load the installed plugin"; exit 1; }
# The loader's digest is libcrypto's, linked statically: the host gains no libcrypto.so (readelf: binutils).
if command -v readelf >/dev/null 2>&1 && readelf -d "$stage/host" | grep -q 'NEEDED.*libcrypto'; then
    readelf -d "$stage/host" | grep NEEDED; echo "FAIL: the pkg-config-built host needs a shared libcrypto"; exit 1
fi
# What a packager expects under share/ (issue 58): the documentation, and the calibration format's
# schema with the real calibration file, which the installed tool's plugin accepts.
share="$stage$prefix/share"
for f in doc/nvfp4-mla/README.md doc/nvfp4-mla/RELIABILITY.md doc/nvfp4-mla/docs/record-format.md \
         doc/nvfp4-mla/docs/integration.md doc/nvfp4-mla/abi/CHANGELOG.md nvfp4-mla/nvfp4_ds_mla_outer_scale_v1.schema.json \
         nvfp4-mla/glm52-nvfp4-nf3-hybrid_mla_outer_scales_v1.json; do
    [ -s "$share/$f" ] || { echo "FAIL: no $share/$f in the staged install"; exit 1; }
done
# The installed tool finds the plugin installed with it, with neither --plugin nor NVFP4_MLA_PLUGIN (issue 48).
tool=$(find "$stage" -name nvfp4-mla -type f | head -1)
[ -n "$tool" ] || { echo "FAIL: no nvfp4-mla tool in the staged install"; exit 1; }
(cd / && env -u NVFP4_MLA_PLUGIN "$tool" probe >"$stage/probe.txt" 2>&1) || {
    cat "$stage/probe.txt"; echo "FAIL: the installed tool does not find its installed plugin"; exit 1; }
(cd / && env -u NVFP4_MLA_PLUGIN KV_FP8_ROPE=1 VLLM_NVFP4_MLA_SCALES_FILE="$share/nvfp4-mla/glm52-nvfp4-nf3-hybrid_mla_outer_scales_v1.json" \
    "$tool" probe >"$stage/probe-share.txt" 2>&1) || {
    cat "$stage/probe-share.txt"; echo "FAIL: the installed plugin refuses the installed calibration file"; exit 1; }
grep -q "^plugin  *$(realpath "$plugindir")/libnvfp4_mla.so" "$stage/probe.txt" || {
    cat "$stage/probe.txt"; echo "FAIL: the installed tool loaded another plugin than $plugindir"; exit 1; }
echo "ok: staged install has $(basename "$pc"), $(basename "$libdir")/libnvfp4_mla_loader.a and" \
     "$(echo "$plugindir" | sed "s|^$stage||")/libnvfp4_mla.so; a pkg-config-built host loads it"
