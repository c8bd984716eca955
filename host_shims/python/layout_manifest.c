/* Prints, as JSON, the size of every ABI struct and the offset of every member the Python shim
 * mirrors, and the constants it copies (layout ids, record sizes, capability bits and names); the
 * build runs it and tests/test_layout.py compares the Python package against it. */
#include <stddef.h>
#include <stdio.h>

#include "nvfp4_mla.h"

#define STRUCT(name) printf("%s\"%s\": {\"size\": %zu, \"fields\": {", first_struct++ ? "}},\n " : "", #name, sizeof(name)), first_field = 0
#define FIELD(type, member) printf("%s\"%s\": %zu", first_field++ ? ", " : "", #member, offsetof(type, member))

int main(void) {
    int first_struct = 0, first_field = 0;
    printf("{");
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
    FIELD(nvfp4_mla_write_args_t, layout); FIELD(nvfp4_mla_write_args_t, outer_scale); FIELD(nvfp4_mla_write_args_t, kv_c);
    FIELD(nvfp4_mla_write_args_t, k_pe); FIELD(nvfp4_mla_write_args_t, slot_mapping); FIELD(nvfp4_mla_write_args_t, cache);
    FIELD(nvfp4_mla_write_args_t, capture_max_abs); FIELD(nvfp4_mla_write_args_t, nonfinite_count);
    FIELD(nvfp4_mla_write_args_t, stream); FIELD(nvfp4_mla_write_args_t, reserved);
    STRUCT(nvfp4_mla_gather_args_t);
    FIELD(nvfp4_mla_gather_args_t, outer_scale); FIELD(nvfp4_mla_gather_args_t, cache); FIELD(nvfp4_mla_gather_args_t, slots);
    FIELD(nvfp4_mla_gather_args_t, out); FIELD(nvfp4_mla_gather_args_t, stream); FIELD(nvfp4_mla_gather_args_t, reserved);
    STRUCT(nvfp4_mla_attend_args_t);
    FIELD(nvfp4_mla_attend_args_t, sm_scale); FIELD(nvfp4_mla_attend_args_t, q); FIELD(nvfp4_mla_attend_args_t, slots);
    FIELD(nvfp4_mla_attend_args_t, valid_len); FIELD(nvfp4_mla_attend_args_t, cache); FIELD(nvfp4_mla_attend_args_t, out);
    FIELD(nvfp4_mla_attend_args_t, lse); FIELD(nvfp4_mla_attend_args_t, workspace); FIELD(nvfp4_mla_attend_args_t, stream);
    FIELD(nvfp4_mla_attend_args_t, reserved);
    STRUCT(nvfp4_mla_host_desc_t);
    FIELD(nvfp4_mla_host_desc_t, host_name); FIELD(nvfp4_mla_host_desc_t, log); FIELD(nvfp4_mla_host_desc_t, log_user_data);
    STRUCT(nvfp4_mla_init_args_t);
    FIELD(nvfp4_mla_init_args_t, device_type); FIELD(nvfp4_mla_init_args_t, host); FIELD(nvfp4_mla_init_args_t, reserved);
    STRUCT(nvfp4_mla_context_info_t);
    FIELD(nvfp4_mla_context_info_t, capability_bits); FIELD(nvfp4_mla_context_info_t, device_name);
    FIELD(nvfp4_mla_context_info_t, backend_note);
    STRUCT(nvfp4_mla_config_request_t);
    FIELD(nvfp4_mla_config_request_t, cache_dtype); FIELD(nvfp4_mla_config_request_t, model_dir);
    FIELD(nvfp4_mla_config_request_t, environ); FIELD(nvfp4_mla_config_request_t, host); FIELD(nvfp4_mla_config_request_t, reserved);
    STRUCT(nvfp4_mla_config_info_t);
    FIELD(nvfp4_mla_config_info_t, is_nvfp4); FIELD(nvfp4_mla_config_info_t, scale_source); FIELD(nvfp4_mla_config_info_t, num_layers);
    FIELD(nvfp4_mla_config_info_t, identity); FIELD(nvfp4_mla_config_info_t, scale_source_path);
    STRUCT(nvfp4_mla_plugin_t);
    FIELD(nvfp4_mla_plugin_t, header); FIELD(nvfp4_mla_plugin_t, plugin_name); FIELD(nvfp4_mla_plugin_t, capability_bits);
    FIELD(nvfp4_mla_plugin_t, capabilities); FIELD(nvfp4_mla_plugin_t, status_string); FIELD(nvfp4_mla_plugin_t, init);
    FIELD(nvfp4_mla_plugin_t, config_create); FIELD(nvfp4_mla_plugin_t, config_destroy); FIELD(nvfp4_mla_plugin_t, write);
    FIELD(nvfp4_mla_plugin_t, gather); FIELD(nvfp4_mla_plugin_t, attend_workspace_bytes); FIELD(nvfp4_mla_plugin_t, attend);
    printf("}},\n \"constants\": {");
#define CONST(name) printf("\"%s\": %llu, ", #name, (unsigned long long)(name))
    CONST(NVFP4_MLA_LAYOUT_FP8_ROPE_368); CONST(NVFP4_MLA_LAYOUT_BF16_ROPE_432); CONST(NVFP4_MLA_LAYOUT_FP8_DS_MLA_656);
    CONST(NVFP4_MLA_RECORD_BYTES_368); CONST(NVFP4_MLA_RECORD_BYTES_432); CONST(NVFP4_MLA_RECORD_BYTES_656);
    CONST(NVFP4_MLA_SCALE_STATIC); CONST(NVFP4_MLA_SCALE_PER_TOKEN);
    printf("\"capabilities\": {");
    int first_cap = 0;
#define CAP_ENTRY(bit, name) printf("%s\"%s\": %llu", first_cap++ ? ", " : "", name, (unsigned long long)(bit));
    NVFP4_MLA_FOR_EACH_CAPABILITY(CAP_ENTRY)
    printf("}}}\n");
    return 0;
}
