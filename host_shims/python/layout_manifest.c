/* Prints, as JSON, what the Python shim mirrors of the C headers: the size of every ABI struct and
 * the offset of every member it reads; every constant (status codes, dtypes, devices, layouts,
 * record sizes and field offsets, scale modes, mode-check results, capability bits and names, the
 * entry's strings); and the results of the record rules of nvfp4_mla_record.h over every layout,
 * scale mode, operation and outer scale of interest, so that the Python copies of those functions
 * are compared result for result; and the settings table (plugin/settings.h) with its parse of
 * sample values, which the Python mirror (settings.py) must match row for row and message for
 * message. The build runs it; tests/test_layout.py compares the package. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>

#include "nvfp4_mla.h"
#include "nvfp4_mla_loader.h"
#include "settings.h" /* the settings table, which the loader library carries */

static int first_struct, first_field;
#define STRUCT(name)                                                                                    \
    printf("%s\"%s\": {\"size\": %zu, \"fields\": {", first_struct++ ? "}},\n " : "", #name, sizeof(name)), \
        first_field = 0
#define FIELD(type, member) printf("%s\"%s\": %zu", first_field++ ? ", " : "", #member, offsetof(type, member))

static void print_argument_structs(void) {
    STRUCT(nvfp4_mla_header_t);
    FIELD(nvfp4_mla_header_t, magic); FIELD(nvfp4_mla_header_t, struct_size); FIELD(nvfp4_mla_header_t, abi_major);
    FIELD(nvfp4_mla_header_t, abi_minor);
    STRUCT(nvfp4_mla_capability_t);
    FIELD(nvfp4_mla_capability_t, name); FIELD(nvfp4_mla_capability_t, revision); FIELD(nvfp4_mla_capability_t, bit);
    STRUCT(nvfp4_mla_tensor_t);
    FIELD(nvfp4_mla_tensor_t, data); FIELD(nvfp4_mla_tensor_t, dtype); FIELD(nvfp4_mla_tensor_t, ndim);
    FIELD(nvfp4_mla_tensor_t, shape); FIELD(nvfp4_mla_tensor_t, strides); FIELD(nvfp4_mla_tensor_t, device_type);
    FIELD(nvfp4_mla_tensor_t, device_index);
    STRUCT(nvfp4_mla_write_args_t);
    FIELD(nvfp4_mla_write_args_t, layout); FIELD(nvfp4_mla_write_args_t, outer_scale);
    FIELD(nvfp4_mla_write_args_t, writer_policy); FIELD(nvfp4_mla_write_args_t, kv_c);
    FIELD(nvfp4_mla_write_args_t, k_pe);
    FIELD(nvfp4_mla_write_args_t, slot_mapping);
    FIELD(nvfp4_mla_write_args_t, cache);
    FIELD(nvfp4_mla_write_args_t, capture_max_abs); FIELD(nvfp4_mla_write_args_t, nonfinite_count);
    FIELD(nvfp4_mla_write_args_t, stream); FIELD(nvfp4_mla_write_args_t, reserved);
    FIELD(nvfp4_mla_write_args_t, out_of_range_count);
    STRUCT(nvfp4_mla_gather_args_t);
    FIELD(nvfp4_mla_gather_args_t, outer_scale);
    FIELD(nvfp4_mla_gather_args_t, cache);
    FIELD(nvfp4_mla_gather_args_t, slots);
    FIELD(nvfp4_mla_gather_args_t, out);
    FIELD(nvfp4_mla_gather_args_t, stream);
    FIELD(nvfp4_mla_gather_args_t, reserved);
    STRUCT(nvfp4_mla_attend_args_t);
    FIELD(nvfp4_mla_attend_args_t, sm_scale); FIELD(nvfp4_mla_attend_args_t, q); FIELD(nvfp4_mla_attend_args_t, slots);
    FIELD(nvfp4_mla_attend_args_t, valid_len);
    FIELD(nvfp4_mla_attend_args_t, cache);
    FIELD(nvfp4_mla_attend_args_t, out);
    FIELD(nvfp4_mla_attend_args_t, lse);
    FIELD(nvfp4_mla_attend_args_t, workspace);
    FIELD(nvfp4_mla_attend_args_t, stream);
    FIELD(nvfp4_mla_attend_args_t, reserved);
    STRUCT(nvfp4_mla_merge_args_t);
    FIELD(nvfp4_mla_merge_args_t, flags); FIELD(nvfp4_mla_merge_args_t, partial_out);
    FIELD(nvfp4_mla_merge_args_t, partial_lse); FIELD(nvfp4_mla_merge_args_t, out); FIELD(nvfp4_mla_merge_args_t, lse);
    FIELD(nvfp4_mla_merge_args_t, stream); FIELD(nvfp4_mla_merge_args_t, reserved);
}

static void print_table_structs(void) {
    STRUCT(nvfp4_mla_host_desc_t);
    FIELD(nvfp4_mla_host_desc_t, host_name);
    FIELD(nvfp4_mla_host_desc_t, log);
    FIELD(nvfp4_mla_host_desc_t, log_user_data);
    STRUCT(nvfp4_mla_init_args_t);
    FIELD(nvfp4_mla_init_args_t, device_type);
    FIELD(nvfp4_mla_init_args_t, host);
    FIELD(nvfp4_mla_init_args_t, reserved);
    FIELD(nvfp4_mla_init_args_t, environ);
    STRUCT(nvfp4_mla_context_info_t);
    FIELD(nvfp4_mla_context_info_t, capability_bits); FIELD(nvfp4_mla_context_info_t, device_name);
    FIELD(nvfp4_mla_context_info_t, backend_note);
    STRUCT(nvfp4_mla_config_request_t);
    FIELD(nvfp4_mla_config_request_t, cache_dtype); FIELD(nvfp4_mla_config_request_t, model_dir);
    FIELD(nvfp4_mla_config_request_t, environ);
    FIELD(nvfp4_mla_config_request_t, host);
    FIELD(nvfp4_mla_config_request_t, reserved);
    STRUCT(nvfp4_mla_config_info_t);
    FIELD(nvfp4_mla_config_info_t, is_nvfp4);
    FIELD(nvfp4_mla_config_info_t, scale_source);
    FIELD(nvfp4_mla_config_info_t, num_layers);
    FIELD(nvfp4_mla_config_info_t, identity); FIELD(nvfp4_mla_config_info_t, scale_source_path);
    FIELD(nvfp4_mla_config_info_t, writer_policy);
    STRUCT(nvfp4_mla_plugin_t);
    FIELD(nvfp4_mla_plugin_t, header);
    FIELD(nvfp4_mla_plugin_t, plugin_name);
    FIELD(nvfp4_mla_plugin_t, capability_bits);
    FIELD(nvfp4_mla_plugin_t, capabilities); FIELD(nvfp4_mla_plugin_t, status_string); FIELD(nvfp4_mla_plugin_t, init);
    FIELD(nvfp4_mla_plugin_t, config_create);
    FIELD(nvfp4_mla_plugin_t, config_destroy);
    FIELD(nvfp4_mla_plugin_t, write);
    FIELD(nvfp4_mla_plugin_t, gather);
    FIELD(nvfp4_mla_plugin_t, attend_workspace_bytes);
    FIELD(nvfp4_mla_plugin_t, attend);
    FIELD(nvfp4_mla_plugin_t, merge);
    printf("}}");
}

/* "NAME": value for every constant; the Python name is NAME without NVFP4_MLA_. */
#define CONST(name) printf("\"%s\": %llu, ", #name, (unsigned long long)(name))

static void print_constants(void) {
    CONST(NVFP4_MLA_ABI_MAGIC); CONST(NVFP4_MLA_ABI_MAJOR); CONST(NVFP4_MLA_ABI_MINOR); CONST(NVFP4_MLA_MAX_DIMS);
    CONST(NVFP4_MLA_OK); CONST(NVFP4_MLA_ERR_INVALID_ARGUMENT); CONST(NVFP4_MLA_ERR_UNSUPPORTED);
    CONST(NVFP4_MLA_ERR_OUT_OF_MEMORY);
    CONST(NVFP4_MLA_ERR_DEVICE);
    CONST(NVFP4_MLA_ERR_IO);
    CONST(NVFP4_MLA_ERR_CONFIG);
    CONST(NVFP4_MLA_ERR_VERSION); CONST(NVFP4_MLA_ERR_INTERNAL);
    CONST(NVFP4_MLA_DTYPE_U8); CONST(NVFP4_MLA_DTYPE_I32); CONST(NVFP4_MLA_DTYPE_I64); CONST(NVFP4_MLA_DTYPE_F32);
    CONST(NVFP4_MLA_DTYPE_BF16); CONST(NVFP4_MLA_DTYPE_F16);
    CONST(NVFP4_MLA_DEVICE_CPU); CONST(NVFP4_MLA_DEVICE_CUDA);
    CONST(NVFP4_MLA_LOG_ERROR); CONST(NVFP4_MLA_LOG_WARN); CONST(NVFP4_MLA_LOG_INFO); CONST(NVFP4_MLA_LOG_DEBUG);
    CONST(NVFP4_MLA_SCALE_SOURCE_NONE); CONST(NVFP4_MLA_SCALE_SOURCE_ENV_FILE);
    CONST(NVFP4_MLA_SCALE_SOURCE_CHECKPOINT_INLINE); CONST(NVFP4_MLA_SCALE_SOURCE_CHECKPOINT_FILE);
    CONST(NVFP4_MLA_SCALE_SOURCE_PER_TOKEN);
    CONST(NVFP4_MLA_LAYOUT_FP8_ROPE_368); CONST(NVFP4_MLA_LAYOUT_BF16_ROPE_432); CONST(NVFP4_MLA_LAYOUT_FP8_DS_MLA_656);
    CONST(NVFP4_MLA_RECORD_BYTES_368); CONST(NVFP4_MLA_RECORD_BYTES_432); CONST(NVFP4_MLA_RECORD_BYTES_656);
    CONST(NVFP4_MLA_LATENT_DIM); CONST(NVFP4_MLA_ROPE_DIM); CONST(NVFP4_MLA_ROW_DIM);
    CONST(NVFP4_MLA_SCALE_STATIC); CONST(NVFP4_MLA_SCALE_PER_TOKEN);
    CONST(NVFP4_MLA_GROUP_SIZE); CONST(NVFP4_MLA_GROUPS); CONST(NVFP4_MLA_RECORD_PAYLOAD_OFFSET);
    CONST(NVFP4_MLA_RECORD_GROUP_SCALE_OFFSET); CONST(NVFP4_MLA_RECORD_ROPE_SCALE_OFFSET);
    CONST(NVFP4_MLA_RECORD_TOKEN_SCALE_OFFSET); CONST(NVFP4_MLA_RECORD_PAD_OFFSET); CONST(NVFP4_MLA_RECORD_ROPE_OFFSET);
    CONST(NVFP4_MLA_FP8_656_TILE_SIZE); CONST(NVFP4_MLA_FP8_656_TILES); CONST(NVFP4_MLA_FP8_656_TILE_SCALE_OFFSET);
    CONST(NVFP4_MLA_FP8_656_ROPE_OFFSET);
    CONST(NVFP4_MLA_MODE_OK); CONST(NVFP4_MLA_MODE_UNKNOWN_LAYOUT); CONST(NVFP4_MLA_MODE_LAYOUT_NOT_FOR_OP);
    CONST(NVFP4_MLA_MODE_UNKNOWN_SCALE_MODE); CONST(NVFP4_MLA_MODE_PER_TOKEN_NEEDS_368);
    CONST(NVFP4_MLA_MODE_PER_TOKEN_SCALE); CONST(NVFP4_MLA_MODE_STATIC_SCALE); CONST(NVFP4_MLA_MODE_FP8_656_SCALE);
    CONST(NVFP4_MLA_WRITER_POLICY_RTN); CONST(NVFP4_MLA_WRITER_POLICY_MSE); CONST(NVFP4_MLA_WRITER_POLICY_COUNT);
    printf("\"strings\": {\"NVFP4_MLA_ENTRY_SYMBOL\": \"%s\", \"NVFP4_MLA_PLUGIN_ENV\": \"%s\", "
           "\"NVFP4_MLA_RECORD_FORMAT\": \"%s\", \"NVFP4_MLA_PLUGIN_FILE\": \"%s\"}, ",
           NVFP4_MLA_ENTRY_SYMBOL, NVFP4_MLA_PLUGIN_ENV, NVFP4_MLA_RECORD_FORMAT, NVFP4_MLA_PLUGIN_FILE);
    printf("\"capabilities\": {");
    int first_cap = 0;
#define CAP_ENTRY(bit, name) printf("%s\"%s\": %llu", first_cap++ ? ", " : "", name, (unsigned long long)(bit));
    NVFP4_MLA_FOR_EACH_CAPABILITY(CAP_ENTRY)
#undef CAP_ENTRY
    printf("}, \"writer_policies\": {");
    int first_policy = 0;
#define POLICY_ENTRY(id, name)                                                                                     \
    printf("%s\"%s\": [%u, \"%s\", %llu]", first_policy++ ? ", " : "", name, (unsigned)(id),                         \
           nvfp4_mla_writer_policy_name(id), (unsigned long long)nvfp4_mla_writer_policy_cap(id));
    NVFP4_MLA_FOR_EACH_WRITER_POLICY(POLICY_ENTRY)
#undef POLICY_ENTRY
    printf("}}");
}

/* The inputs the rules are evaluated on: known and unknown ids, valid and invalid scales. */
static const uint32_t layouts[] = {0, NVFP4_MLA_LAYOUT_FP8_ROPE_368, NVFP4_MLA_LAYOUT_BF16_ROPE_432,
                                   NVFP4_MLA_LAYOUT_FP8_DS_MLA_656, 7};
static const uint32_t modes[] = {0, NVFP4_MLA_SCALE_STATIC, NVFP4_MLA_SCALE_PER_TOKEN, 3};
static const uint64_t ops[] = {NVFP4_MLA_CAP_OP_WRITE, NVFP4_MLA_CAP_OP_GATHER, NVFP4_MLA_CAP_OP_ATTEND,
                               NVFP4_MLA_CAP_OP_WRITE | NVFP4_MLA_CAP_OP_GATHER,
                               NVFP4_MLA_CAP_OP_WRITE | NVFP4_MLA_CAP_OP_GATHER | NVFP4_MLA_CAP_OP_ATTEND,
                               /* a DCP host: attend and merge (merge reads no record: no layout bit) */
                               NVFP4_MLA_CAP_OP_WRITE | NVFP4_MLA_CAP_OP_ATTEND | NVFP4_MLA_CAP_OP_MERGE_PARTIALS};
static const float scales[] = {0.0f, 1.0f, 0.5f, 0.003f, -2.0f, 1e-40f, 3.0e38f, INFINITY, NAN};
#define COUNT(a) (sizeof a / sizeof a[0])

/* A float as JSON: the value, or the strings "inf", "-inf", "nan". */
static void print_float(float v) {
    if (isnan(v)) printf("\"nan\"");
    else if (isinf(v)) printf(v > 0 ? "\"inf\"" : "\"-inf\"");
    else printf("%.9g", (double)v);
}

static void print_layout_rules(void) {
    printf("\"record_bytes\": [");
    for (size_t l = 0; l < COUNT(layouts); l++)
        printf("%s[%u, %u, \"%s\", %llu]", l ? ", " : "", layouts[l], nvfp4_mla_record_bytes(layouts[l]),
               nvfp4_mla_layout_name(layouts[l]), (unsigned long long)nvfp4_mla_layout_ops(layouts[l]));
    printf("],\n  \"layout_has_mode\": [");
    for (size_t l = 0, n = 0; l < COUNT(layouts); l++)
        for (size_t m = 0; m < COUNT(modes); m++)
            printf("%s[%u, %u, %d]", n++ ? ", " : "", layouts[l], modes[m],
                   nvfp4_mla_layout_has_mode(layouts[l], modes[m]));
    printf("],\n  \"default_outer_scale\": [");
    for (size_t m = 0; m < COUNT(modes); m++) {
        printf("%s[%u, ", m ? ", " : "", modes[m]);
        print_float(nvfp4_mla_default_outer_scale(modes[m]));
        printf("]");
    }
    printf("]");
}

static void print_call_rules(void) {
    printf(",\n  \"caps_needed\": [");
    size_t n = 0;
    for (size_t o = 0; o < COUNT(ops); o++)
        for (size_t l = 0; l < COUNT(layouts); l++)
            for (size_t m = 0; m < COUNT(modes); m++)
                printf("%s[%llu, %u, %u, %llu]", n++ ? ", " : "", (unsigned long long)ops[o], layouts[l], modes[m],
                       (unsigned long long)nvfp4_mla_caps_needed(ops[o], layouts[l], modes[m]));
    printf("],\n  \"mode_check\": [");
    n = 0;
    for (size_t o = 0; o < 3; o++) /* one operation each */
        for (size_t l = 0; l < COUNT(layouts); l++)
            for (size_t m = 0; m < COUNT(modes); m++)
                for (size_t s = 0; s < COUNT(scales); s++) {
                    printf("%s[%llu, %u, %u, ", n++ ? ", " : "", (unsigned long long)ops[o], layouts[l], modes[m]);
                    print_float(scales[s]);
                    printf(", %d]", nvfp4_mla_mode_check(ops[o], layouts[l], modes[m], scales[s]));
                }
    printf("]");
}

/* A C string as a JSON string (the samples and messages below are ASCII: quotes, backslashes and
 * control bytes are escaped). */
static void print_json_string(const char *v) {
    putchar('"');
    for (; *v; v++) {
        const unsigned char c = (unsigned char)*v;
        if (c == '"' || c == '\\') printf("\\%c", c);
        else if (c < 0x20 || c >= 0x7F) printf("\\u%04x", c);
        else putchar(c);
    }
    putchar('"');
}

/* The settings table (plugin/settings.h) row by row, then every row's parse of each sample value:
 * [row, value or null (unset), 0 and the result, or -1 and the message]. The result: on (bool), the
 * path, the choice's index, or the count (null when unset left it as primed). */
static void print_settings(void) {
    static const char *const kinds[] = {"bool", "path", "path_stripped", "choice", "count"};
    static const char *const samples[] = {NULL, "", "0", "1", "true", "FALSE", "yes", " 1", "1 ", "rtn", "MSE",
                                          "4over6", "auto", "Sync", "separate", "IN-LAUNCH", "16383", "16384", "101376",
                                          "2147483647", "2147483648", "99999999999999999999999", "-1", "1e5", "99KB",
                                          "/x/s.json", " /x/s.json\n", "\t", "a\"b\\c\x01\x7f", "none"};
    printf("\"rows\": [");
    for (int id = 0; id < NVFP4_SETTINGS; id++) {
        const nvfp4_setting_t *r = &nvfp4_settings[id];
        printf("%s{\"name\": ", id ? ", " : "");
        print_json_string(r->name);
        printf(", \"kind\": \"%s\", \"reader\": \"%s\", \"unset\": ", kinds[r->kind], r->reader);
        print_json_string(r->unset);
        printf(", \"choices\": [");
        for (int c = 0; c < r->choice_count; c++) printf("%s\"%s\"", c ? ", " : "", r->choices[c]);
        printf("], \"what\": ");
        print_json_string(r->what ? r->what : "");
        printf(", \"lo\": %llu, \"hi\": %llu}", r->lo, r->hi);
    }
    printf("],\n  \"parses\": [");
    for (int id = 0, n = 0; id < NVFP4_SETTINGS; id++)
        for (size_t v = 0; v < COUNT(samples); v++) {
            char path[64], message[NVFP4_SETTING_MESSAGE_MAX];
            nvfp4_setting_value_t out = {.on = -1, .index = -1, .count = ~0ull, .path = path, .path_size = sizeof path};
            const int rc = nvfp4_setting_parse(&nvfp4_settings[id], samples[v], &out, message, sizeof message);
            printf("%s[%d, ", n++ ? ", " : "", id);
            if (samples[v]) print_json_string(samples[v]);
            else printf("null");
            printf(", %d, ", rc);
            if (rc) print_json_string(message);
            else if (nvfp4_settings[id].kind == NVFP4_SETTING_KIND_BOOL) printf("%s", out.on ? "true" : "false");
            else if (nvfp4_settings[id].kind == NVFP4_SETTING_KIND_CHOICE) printf("%d", out.index);
            else if (nvfp4_settings[id].kind == NVFP4_SETTING_KIND_COUNT && out.count == ~0ull) printf("null");
            else if (nvfp4_settings[id].kind == NVFP4_SETTING_KIND_COUNT) printf("%llu", out.count);
            else print_json_string(path);
            printf("]");
        }
    printf("]");
}

int main(void) {
    printf("{");
    print_argument_structs();
    print_table_structs();
    printf(",\n \"constants\": {");
    print_constants();
    printf(",\n \"rules\": {");
    print_layout_rules();
    print_call_rules();
    printf("},\n \"settings\": {");
    print_settings();
    printf("}}\n");
    return 0;
}
