/* The C host loader against the compatibility matrix of mock plugins and the real plugin:
 * each case asserts the decision and the words of its message. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>
#include <elf.h>

#include "file_digest.h"
#include "nvfp4_mla_loader.h"

static char mock_dir[2048], real_plugin[2048];

static const char *mock_path(const char *name) {
    static char path[4096];
    snprintf(path, sizeof path, "%s/libmock_%s.so", mock_dir, name);
    return path;
}

static int setup(void **state) {
    (void)state;
    const char *m = getenv("NVFP4_MLA_MOCK_DIR"), *p = getenv("NVFP4_MLA_PLUGIN_PATH");
    if (!m || !p) return -1;
    snprintf(mock_dir, sizeof mock_dir, "%s", m);
    snprintf(real_plugin, sizeof real_plugin, "%s", p);
    return 0;
}

static void assert_contains(const char *text, const char *needle) {
    if (!strstr(text, needle)) fail_msg("\"%s\" lacks \"%s\"", text, needle);
}

/* Opens the build's plugin (NVFP4_MLA_PLUGIN_PATH); fails the test with the loader's message. */
static void open_real_plugin(nvfp4_mla_loader_t *l) {
    char msg[2048];
    if (nvfp4_mla_loader_open(l, real_plugin, msg, sizeof msg) != NVFP4_MLA_LOAD_OK) fail_msg("%s", msg);
}

static const nvfp4_mla_requirement_t per_token = {NVFP4_MLA_LAYOUT_FP8_ROPE_368, NVFP4_MLA_SCALE_PER_TOKEN, 0, 1};
static const nvfp4_mla_requirement_t static368 = {NVFP4_MLA_LAYOUT_FP8_ROPE_368, NVFP4_MLA_SCALE_STATIC, 0, 0};

static void loader_should_accept_a_current_plugin(void **state) {
    (void)state;
    nvfp4_mla_loader_t l;
    char msg[2048];
    assert_int_equal(nvfp4_mla_loader_open(&l, mock_path("current"), msg, sizeof msg), NVFP4_MLA_LOAD_OK);
    assert_int_equal(nvfp4_mla_loader_require(&l, &per_token, nvfp4_mla_loader_table_caps(&l), msg, sizeof msg), 0);
    assert_contains(msg, "serves per-token scales on fp8_rope_368");
    nvfp4_mla_loader_close(&l);
}

static void loader_should_mask_members_an_older_minor_lacks(void **state) {
    (void)state;
    nvfp4_mla_loader_t l;
    char msg[2048];
    assert_int_equal(nvfp4_mla_loader_open(&l, mock_path("old_minor"), msg, sizeof msg), NVFP4_MLA_LOAD_OK);
    uint64_t caps = nvfp4_mla_loader_table_caps(&l);
    assert_true(caps & NVFP4_MLA_CAP_OP_GATHER);
    assert_false(caps & NVFP4_MLA_CAP_OP_ATTEND); /* the bit is set, the member is not in the table */
    nvfp4_mla_requirement_t attend = static368;
    attend.extra_caps = NVFP4_MLA_CAP_OP_ATTEND;
    assert_int_equal(nvfp4_mla_loader_require(&l, &static368, caps, msg, sizeof msg), 0);
    assert_int_equal(nvfp4_mla_loader_require(&l, &attend, caps, msg, sizeof msg), -1);
    assert_contains(msg, "missing op.attend");
    nvfp4_mla_loader_close(&l);
}

static void loader_should_accept_a_future_minor_and_ignore_unknown_capabilities(void **state) {
    (void)state;
    nvfp4_mla_loader_t l;
    char msg[2048];
    assert_int_equal(nvfp4_mla_loader_open(&l, mock_path("future_minor"), msg, sizeof msg), NVFP4_MLA_LOAD_OK);
    assert_contains(msg, "(ABI 1.7, host ABI 1.1) loaded");
    assert_int_equal(nvfp4_mla_loader_require(&l, &per_token, nvfp4_mla_loader_table_caps(&l), msg, sizeof msg), 0);
    assert_string_equal(l.table->capabilities[1].name, "future.capability");
    assert_string_equal(nvfp4_mla_loader_cap_name(UINT64_C(1) << 40), "unknown");
    nvfp4_mla_loader_close(&l);
}

static void loader_should_refuse_with_the_reason(void **state) {
    (void)state;
    struct {
        const char *selection, *needle, *reason;
    } cases[] = {
        {"future_major", "does not export nvfp4_mla_plugin_v1 (host ABI 1.1); it implements ABI major 2 only",
         "abi_mismatch"},
        {"wrong_major", "refused: ABI major mismatch (plugin ABI 2.0, host ABI 1.1)", "abi_mismatch"},
        {"bad_magic", "refused: wrong magic (0x12345678, expected 0x4d34464e)", "not_a_plugin"},
        {"null_entry", "refused: its entry returned no table", "not_a_plugin"},
        {"tiny_table", "refused: table too small (struct_size 16 <", "abi_mismatch"},
        {"not_a_plugin", "it is not an nvfp4-mla plugin", "not_a_plugin"},
        {"null_init", "refused: table member \"init\" is NULL (plugin ABI 1.1, host ABI 1.1; every member its "
                      "struct_size", "incomplete_table"},
        {"null_attend", "refused: table member \"attend\" is NULL", "incomplete_table"},
        {"null_merge", "refused: table member \"merge\" is NULL (plugin ABI 1.1", "incomplete_table"},
        {"null_version", "refused: table member \"version\" is NULL", "incomplete_table"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        nvfp4_mla_loader_t l;
        char msg[2048];
        assert_int_equal(nvfp4_mla_loader_open(&l, mock_path(cases[c].selection), msg, sizeof msg),
                         NVFP4_MLA_LOAD_FAILED);
        assert_contains(msg, cases[c].needle);
        assert_contains(msg, mock_path(cases[c].selection));
        assert_string_equal(l.reason, cases[c].reason);
        assert_null(l.table);
        assert_null(l.handle);
    }
}

/* A NULL member past an older table's struct_size is not covered: the table loads, the operation is
 * an absent capability. */
static void loader_should_accept_a_null_member_its_table_does_not_cover(void **state) {
    (void)state;
    nvfp4_mla_loader_t l;
    char msg[2048];
    assert_int_equal(nvfp4_mla_loader_open(&l, mock_path("old_minor_null_attend"), msg, sizeof msg), NVFP4_MLA_LOAD_OK);
    assert_string_equal(l.reason, "");
    assert_false(nvfp4_mla_loader_table_caps(&l) & NVFP4_MLA_CAP_OP_ATTEND);
    nvfp4_mla_loader_close(&l);
}

/* A 1.0 table ends at attend: op.merge_partials is masked even where its bit is set, and a host
 * that will merge (decode context parallelism) is refused by name. */
static void loader_should_mask_merge_a_1_0_table_lacks(void **state) {
    (void)state;
    nvfp4_mla_loader_t l;
    char msg[2048];
    assert_int_equal(nvfp4_mla_loader_open(&l, mock_path("v1_0_merge_bit"), msg, sizeof msg), NVFP4_MLA_LOAD_OK);
    assert_true(l.table->capability_bits & NVFP4_MLA_CAP_OP_MERGE_PARTIALS);
    assert_false(NVFP4_MLA_TABLE_HAS(l.table, merge));
    uint64_t caps = nvfp4_mla_loader_table_caps(&l);
    assert_false(caps & NVFP4_MLA_CAP_OP_MERGE_PARTIALS);
    assert_true(caps & NVFP4_MLA_CAP_OP_ATTEND);
    nvfp4_mla_requirement_t dcp = static368;
    dcp.extra_caps = NVFP4_MLA_CAP_OP_ATTEND | NVFP4_MLA_CAP_OP_MERGE_PARTIALS;
    assert_int_equal(nvfp4_mla_loader_require(&l, &dcp, caps, msg, sizeof msg), -1);
    assert_contains(msg,
                    "(ABI 1.0, host ABI 1.1) cannot serve static scales on fp8_rope_368: missing op.merge_partials");
    nvfp4_mla_loader_close(&l);
    assert_int_equal(nvfp4_mla_loader_open(&l, mock_path("current"), msg, sizeof msg), NVFP4_MLA_LOAD_OK);
    assert_true(NVFP4_MLA_TABLE_HAS(l.table, merge));
    nvfp4_mla_loader_close(&l);
}

/* NVFP4_MLA_PLUGIN by the settings rule: whitespace and keyword-like values are refused by name. */
static void loader_should_refuse_a_malformed_selection(void **state) {
    (void)state;
    struct {
        const char *value, *needle;
    } cases[] = {
        {" none", "NVFP4_MLA_PLUGIN=\" none\" has leading or trailing whitespace: give the path without it"},
        {"/tmp/libnvfp4_mla.so\n", "NVFP4_MLA_PLUGIN=\"/tmp/libnvfp4_mla.so\\n\" has leading or trailing whitespace"},
        {"   ", "NVFP4_MLA_PLUGIN=\"   \" has leading or trailing whitespace"},
        {"None", "NVFP4_MLA_PLUGIN=\"None\" names no file and is not the keyword \"none\" (exactly, lower case)"},
        {"0", "NVFP4_MLA_PLUGIN=\"0\" names no file and is not the keyword \"none\""},
        {"off", "NVFP4_MLA_PLUGIN=\"off\" names no file"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        nvfp4_mla_loader_t l;
        char msg[2048];
        setenv("NVFP4_MLA_PLUGIN", cases[c].value, 1);
        assert_int_equal(nvfp4_mla_loader_open(&l, NULL, msg, sizeof msg), NVFP4_MLA_LOAD_FAILED);
        assert_contains(msg, cases[c].needle);
        assert_string_equal(l.reason, "invalid_selection");
        assert_null(l.handle);
    }
    char long_path[5000];
    memset(long_path, 'a', sizeof long_path - 1);
    long_path[sizeof long_path - 1] = '\0';
    nvfp4_mla_loader_t l;
    char msg[2048];
    assert_int_equal(nvfp4_mla_loader_open(&l, long_path, msg, sizeof msg), NVFP4_MLA_LOAD_FAILED);
    assert_contains(msg, "plugin selection is 4999 bytes long, longer than the");
    unsetenv("NVFP4_MLA_PLUGIN");
}

/* Issue 37: a name without a slash is the file of that name in the working folder, never one the
 * dynamic loader's search path finds ("libc.so.6" used to load the system libc and be refused only
 * as "not a plugin"). */
static char test_cwd[4096]; /* the folder to return to, whatever the test's outcome (back_home) */

static int back_home(void **state) {
    (void)state;
    return chdir(test_cwd);
}

static void loader_should_take_a_bare_name_as_a_file_in_the_working_folder(void **state) {
    (void)state;
    char dir[] = "/tmp/nvfp4_loader_XXXXXX", link_path[4200];
    assert_non_null(getcwd(test_cwd, sizeof test_cwd));
    assert_non_null(mkdtemp(dir));
    assert_int_equal(chdir(dir), 0);
    nvfp4_mla_loader_t l;
    char msg[2048];
    assert_int_equal(nvfp4_mla_loader_open(&l, "libc.so.6", msg, sizeof msg), NVFP4_MLA_LOAD_FAILED);
    assert_string_equal(l.reason, "not_found");
    assert_string_equal(l.path, "./libc.so.6");
    assert_contains(msg, "cannot load nvfp4-mla plugin ./libc.so.6: ");
    snprintf(link_path, sizeof link_path, "%s/libnvfp4_mla.so", dir);
    assert_int_equal(symlink(real_plugin, link_path), 0);
    assert_int_equal(nvfp4_mla_loader_open(&l, "libnvfp4_mla.so", msg, sizeof msg), NVFP4_MLA_LOAD_OK);
    assert_string_equal(l.path, "./libnvfp4_mla.so");
    nvfp4_mla_loader_close(&l);
    unlink(link_path);
    rmdir(dir);
}

static void loader_should_name_every_missing_capability(void **state) {
    (void)state;
    nvfp4_mla_loader_t l;
    char msg[2048];
    assert_int_equal(nvfp4_mla_loader_open(&l, mock_path("no_per_token"), msg, sizeof msg), NVFP4_MLA_LOAD_OK);
    assert_int_equal(nvfp4_mla_loader_require(&l, &per_token, nvfp4_mla_loader_table_caps(&l), msg, sizeof msg), -1);
    assert_contains(msg, mock_path("no_per_token"));
    assert_contains(msg, "(ABI 1.1, host ABI 1.1) cannot serve per-token scales on fp8_rope_368 (requested by the "
                         "configuration): missing write.per_token_scale, read.latent_scale_per_token");
    assert_int_equal(nvfp4_mla_loader_require(&l, &static368, nvfp4_mla_loader_table_caps(&l), msg, sizeof msg), 0);
    nvfp4_mla_loader_close(&l);
}

static void loader_should_handle_selection_by_environment(void **state) {
    (void)state;
    nvfp4_mla_loader_t l;
    char msg[2048];
    setenv("NVFP4_MLA_PLUGIN", "none", 1);
    assert_int_equal(nvfp4_mla_loader_open(&l, NULL, msg, sizeof msg), NVFP4_MLA_LOAD_DISABLED);
    assert_contains(msg, "disabled (NVFP4_MLA_PLUGIN=none)");
    assert_string_equal(l.reason, "disabled");
    unsetenv("NVFP4_MLA_PLUGIN");
    assert_int_equal(nvfp4_mla_loader_open(&l, NULL, msg, sizeof msg), NVFP4_MLA_LOAD_NOT_SELECTED);
    assert_contains(msg, "set NVFP4_MLA_PLUGIN");
    assert_string_equal(l.reason, "not_selected");
    setenv("NVFP4_MLA_PLUGIN", "/nonexistent/libnvfp4_mla.so", 1);
    assert_int_equal(nvfp4_mla_loader_open(&l, NULL, msg, sizeof msg), NVFP4_MLA_LOAD_FAILED);
    assert_contains(msg, "cannot load nvfp4-mla plugin /nonexistent/libnvfp4_mla.so:");
    assert_string_equal(l.reason, "not_found");
    setenv("NVFP4_MLA_PLUGIN", getenv("NVFP4_MLA_TEST_DATA"), 1); /* a folder without the plugin file */
    assert_int_equal(nvfp4_mla_loader_open(&l, NULL, msg, sizeof msg), NVFP4_MLA_LOAD_FAILED);
    assert_string_equal(l.reason, "not_found");
    char not_elf[4096];
    snprintf(not_elf, sizeof not_elf, "%s/model_plain/config.json", getenv("NVFP4_MLA_TEST_DATA"));
    setenv("NVFP4_MLA_PLUGIN", not_elf, 1); /* a file that is not a shared object */
    assert_int_equal(nvfp4_mla_loader_open(&l, NULL, msg, sizeof msg), NVFP4_MLA_LOAD_FAILED);
    assert_string_equal(l.reason, "load_error");
    char folder[2048];
    snprintf(folder, sizeof folder, "%s", real_plugin);
    *strrchr(folder, '/') = '\0';
    setenv("NVFP4_MLA_PLUGIN", folder, 1); /* a folder holding libnvfp4_mla.so */
    assert_int_equal(nvfp4_mla_loader_open(&l, NULL, msg, sizeof msg), NVFP4_MLA_LOAD_OK);
    assert_contains(l.path, "/libnvfp4_mla.so");
    nvfp4_mla_loader_close(&l);
    unsetenv("NVFP4_MLA_PLUGIN");
}

static void loader_should_give_the_plugins_cache_identity(void **state) {
    (void)state;
    nvfp4_mla_loader_t l;
    char id[512];
    open_real_plugin(&l);
    setenv("VLLM_NVFP4_MLA_DYNAMIC_SCALE", "1", 1);
    setenv("KV_FP8_ROPE", "1", 1);
    assert_int_equal(nvfp4_mla_loader_cache_identity(&l, "torch.nvfp4_ds_mla", NULL, id, sizeof id), 0);
    assert_string_equal(id, "nvfp4_ds_mla:fp8-rope-368:dynamic-token-v1");
    assert_int_equal(nvfp4_mla_loader_cache_identity(&l, "fp8", NULL, id, sizeof id), 0);
    assert_string_equal(id, "vllm-default-v1");
    unsetenv("KV_FP8_ROPE");
    assert_int_equal(nvfp4_mla_loader_cache_identity(&l, "nvfp4_ds_mla", NULL, id, sizeof id), -1);
    assert_contains(id, "VLLM_NVFP4_MLA_DYNAMIC_SCALE=1 requires KV_FP8_ROPE=1");
    unsetenv("VLLM_NVFP4_MLA_DYNAMIC_SCALE");
    nvfp4_mla_loader_close(&l);
}

static void real_plugin_should_init_and_shutdown_repeatedly_with_two_contexts(void **state) {
    (void)state;
    nvfp4_mla_loader_t l;
    open_real_plugin(&l);
    char msg[2048];
    const nvfp4_mla_plugin_t *t = l.table;
    assert_string_equal(t->status_string(NVFP4_MLA_ERR_UNSUPPORTED), "NVFP4_MLA_ERR_UNSUPPORTED");
    assert_string_equal(t->record_format, "nvfp4_ds_mla");
    for (int round = 0; round < 50; round++) {
        nvfp4_mla_init_args_t init = {sizeof init, NVFP4_MLA_DEVICE_CPU, 0, 0, NULL, {0}, NULL};
        nvfp4_mla_context_t *a = NULL, *b = NULL;
        assert_int_equal(t->init(&init, &a), NVFP4_MLA_OK);
        assert_int_equal(t->init(&init, &b), NVFP4_MLA_OK);
        assert_ptr_not_equal(a, b);
        nvfp4_mla_context_info_t info = {.struct_size = sizeof info};
        assert_int_equal(t->context_info(b, &info), NVFP4_MLA_OK);
        assert_true(info.capability_bits & NVFP4_MLA_CAP_BACKEND_CPU);
        assert_string_equal(info.device_name, "cpu");
        assert_int_equal(t->shutdown(a), NVFP4_MLA_OK);
        assert_int_equal(t->shutdown(b), NVFP4_MLA_OK);
    }
    /* attend exists on the CPU backend: a zeroed argument struct is refused by name, not run. */
    nvfp4_mla_init_args_t init = {sizeof init, NVFP4_MLA_DEVICE_CPU, 0, 0, NULL, {0}, NULL};
    nvfp4_mla_context_t *c;
    assert_int_equal(t->init(&init, &c), NVFP4_MLA_OK);
    nvfp4_mla_attend_args_t attend = {.struct_size = sizeof attend};
    assert_true(NVFP4_MLA_TABLE_HAS(t, attend));
    assert_int_equal(t->attend(c, &attend), NVFP4_MLA_ERR_INVALID_ARGUMENT);
    assert_contains(t->last_error(), "attend: layout is 0");
    assert_true(t->capability_bits & NVFP4_MLA_CAP_OP_ATTEND);
    t->shutdown(c);
    /* Per-token mode: the writer's and the readers' capabilities are both compiled in. */
    assert_int_equal(nvfp4_mla_loader_require(&l, &per_token, nvfp4_mla_loader_table_caps(&l), msg, sizeof msg), 0);
    assert_contains(msg, "serves per-token scales on fp8_rope_368");
    nvfp4_mla_loader_close(&l);
}

/* With CUDA compiled in, init on a machine without a driver or device turns backend.cuda off with a
 * reason; on a machine with a device it turns it on. Without CUDA compiled in, init says so. */
static void real_plugin_should_report_cuda_by_what_the_machine_can_run(void **state) {
    (void)state;
    nvfp4_mla_loader_t l;
    open_real_plugin(&l);
    nvfp4_mla_init_args_t init = {sizeof init, NVFP4_MLA_DEVICE_CUDA, 0, 0, NULL, {0}, NULL};
    nvfp4_mla_context_t *c = (nvfp4_mla_context_t *)1;
    nvfp4_mla_status_t st = l.table->init(&init, &c);
    if (!(l.table->capability_bits & NVFP4_MLA_CAP_BACKEND_CUDA)) {
        assert_int_equal(st, NVFP4_MLA_ERR_UNSUPPORTED);
        assert_contains(l.table->last_error(), "this build has no CUDA backend");
    } else if (st == NVFP4_MLA_OK) {
        nvfp4_mla_context_info_t info = {.struct_size = sizeof info};
        assert_int_equal(l.table->context_info(c, &info), NVFP4_MLA_OK);
        assert_true(info.capability_bits & NVFP4_MLA_CAP_BACKEND_CUDA);
        assert_false(info.capability_bits & NVFP4_MLA_CAP_BACKEND_CPU);
        assert_contains(info.device_name, "(sm_");
        l.table->shutdown(c);
        c = NULL;
    } else {
        assert_int_equal(st, NVFP4_MLA_ERR_UNSUPPORTED);
        assert_contains(l.table->last_error(), "init: CUDA device 0 is unusable:");
        assert_contains(l.table->last_error(), "(backend.cuda absent)");
    }
    assert_null(c);
    nvfp4_mla_loader_close(&l);
}

/* The real plugin's 1.1 table carries merge and its capability; a zeroed struct is refused by name. */
static void real_plugin_should_serve_merge(void **state) {
    (void)state;
    nvfp4_mla_loader_t l;
    open_real_plugin(&l);
    char msg[2048];
    const nvfp4_mla_plugin_t *t = l.table;
    assert_true(NVFP4_MLA_TABLE_HAS(t, merge));
    nvfp4_mla_requirement_t dcp = per_token;
    dcp.extra_caps = NVFP4_MLA_CAP_OP_ATTEND | NVFP4_MLA_CAP_OP_MERGE_PARTIALS;
    assert_int_equal(nvfp4_mla_loader_require(&l, &dcp, nvfp4_mla_loader_table_caps(&l), msg, sizeof msg), 0);
    nvfp4_mla_init_args_t init = {sizeof init, NVFP4_MLA_DEVICE_CPU, 0, 0, NULL, {0}, NULL};
    nvfp4_mla_context_t *c;
    assert_int_equal(t->init(&init, &c), NVFP4_MLA_OK);
    nvfp4_mla_merge_args_t merge = {.struct_size = sizeof merge};
    assert_int_equal(t->merge(c, &merge), NVFP4_MLA_ERR_INVALID_ARGUMENT);
    assert_contains(t->last_error(), "merge: partial_out: dtype is unknown (0), must be bf16 or f32");
    merge.struct_size = 8; /* smaller than the only size merge ever had */
    assert_int_equal(t->merge(c, &merge), NVFP4_MLA_ERR_VERSION);
    assert_contains(t->last_error(), "merge: nvfp4_mla_merge_args_t: struct_size 8");
    t->shutdown(c);
    nvfp4_mla_loader_close(&l);
}

/* The compiled table is generated from the header's X-macro: each entry's name is the header's
 * name of its bit, and the entries are exactly the table's capability_bits. */
static void real_plugin_should_name_its_capabilities_as_the_header_does(void **state) {
    (void)state;
    nvfp4_mla_loader_t l;
    open_real_plugin(&l);
    uint64_t listed = 0;
    for (uint32_t i = 0; i < l.table->capability_count; i++) {
        const nvfp4_mla_capability_t *c = &l.table->capabilities[i];
        assert_string_equal(c->name, nvfp4_mla_capability_name(c->bit));
        assert_int_equal(c->revision, 1);
        assert_false(listed & c->bit); /* each once */
        listed |= c->bit;
    }
    assert_true(listed == l.table->capability_bits);
    nvfp4_mla_loader_close(&l);
}

/* The writer policy a host asks for, read by the plugin's own rule (for plugins too old to say). */
static void loader_should_read_the_writer_policy_by_the_plugins_rule(void **state) {
    (void)state;
    char message[1024];
    uint32_t policy = 99;
    const char *unset[] = {NULL};
    assert_int_equal(nvfp4_mla_loader_writer_policy(unset, &policy, message, sizeof message), 0);
    assert_int_equal(policy, NVFP4_MLA_WRITER_POLICY_RTN);
    const char *mse[] = {"NVFP4_MLA_WRITER_POLICY_OTHER=rtn", "NVFP4_MLA_WRITER_POLICY=Mse", NULL};
    assert_int_equal(nvfp4_mla_loader_writer_policy(mse, &policy, message, sizeof message), 0);
    assert_int_equal(policy, NVFP4_MLA_WRITER_POLICY_MSE);
    const char *bad[] = {"NVFP4_MLA_WRITER_POLICY=mse ", NULL};
    assert_int_equal(nvfp4_mla_loader_writer_policy(bad, &policy, message, sizeof message), -1);
    assert_int_equal(policy, NVFP4_MLA_WRITER_POLICY_RTN);
    assert_string_equal(message, "NVFP4_MLA_WRITER_POLICY=\"mse \" is not one of: rtn, mse (any case); unset or empty "
                                 "is rtn");
    setenv("NVFP4_MLA_WRITER_POLICY", "mse", 1); /* NULL: the process environment */
    assert_int_equal(nvfp4_mla_loader_writer_policy(NULL, &policy, message, sizeof message), 0);
    unsetenv("NVFP4_MLA_WRITER_POLICY");
    assert_int_equal(policy, NVFP4_MLA_WRITER_POLICY_MSE);
}

/* The host-side rule of nvfp4_mla_record.h the loader decides with: the writer's and the readers'
 * per-token capabilities, and attend's only when the host calls attend. */
static void requirement_should_follow_the_records_rule(void **state) {
    (void)state;
    nvfp4_mla_requirement_t want = per_token;
    uint64_t need = nvfp4_mla_requirement_caps(&want);
    assert_true(need & NVFP4_MLA_CAP_WRITE_PER_TOKEN_SCALE);
    assert_true(need & NVFP4_MLA_CAP_READ_LATENT_SCALE_PER_TOKEN);
    assert_false(need & (NVFP4_MLA_CAP_SCALE_STATIC_OUTER | NVFP4_MLA_CAP_OP_ATTEND));
    want = static368;
    want.extra_caps = NVFP4_MLA_CAP_OP_ATTEND;
    assert_true(nvfp4_mla_requirement_caps(&want) ==
                (NVFP4_MLA_CAP_OP_WRITE | NVFP4_MLA_CAP_OP_GATHER | NVFP4_MLA_CAP_OP_ATTEND |
                 NVFP4_MLA_CAP_LAYOUT_FP8_ROPE_368 | NVFP4_MLA_CAP_SCALE_STATIC_OUTER));
}

/* The real plugin's bytes (read whole), and copies of it written to a private folder. */
static unsigned char *plugin_bytes(size_t *len) {
    FILE *f = fopen(real_plugin, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *bytes = malloc(*len);
    assert_non_null(bytes);
    assert_int_equal(fread(bytes, 1, *len, f), *len);
    fclose(f);
    return bytes;
}

static void write_copy(const char *path, const unsigned char *bytes, size_t len) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(bytes, 1, len, f), len);
    fclose(f);
}

/* The real plugin's bytes, and `path` = a fresh private folder (from `dir`, a mkdtemp template) / the
 * plugin's file name, where the cases write their copies. */
static unsigned char *copy_setup(char *dir, char *path, size_t path_size, size_t *len) {
    unsigned char *bytes = plugin_bytes(len);
    assert_non_null(mkdtemp(dir));
    snprintf(path, path_size, "%s/libnvfp4_mla.so", dir);
    return bytes;
}

static void copy_teardown(const char *dir, const char *path, unsigned char *bytes) {
    unlink(path);
    rmdir(dir);
    free(bytes);
}

/* Opens `path`, which must be refused as load_error with the path and `needle` in the message. */
static void assert_refused_file(const char *path, const char *needle) {
    nvfp4_mla_loader_t l;
    char msg[2048];
    assert_int_equal(nvfp4_mla_loader_open(&l, path, msg, sizeof msg), NVFP4_MLA_LOAD_FAILED);
    assert_contains(msg, path);
    assert_contains(msg, needle);
    assert_string_equal(l.reason, NVFP4_MLA_REASON_LOAD_ERROR);
    assert_null(l.handle);
}

/* Issue 48, case 1: dlopen maps a cut-short file as if whole and raised SIGBUS inside the host (every
 * cut from 1 KB to 1 MB crashed). Each cut of the real plugin is refused before dlopen, naming the
 * file, its size and the part past its end; the whole file still loads. */
static void loader_should_refuse_a_plugin_file_cut_short(void **state) {
    (void)state;
    size_t len;
    char dir[] = "/tmp/nvfp4_cut_XXXXXX", path[4096];
    unsigned char *bytes = copy_setup(dir, path, sizeof path, &len);
    const size_t cuts[] = {0, 10, 63, 64, 1024, 4096, 20000, 65536, 262144, 1 << 20, len / 2, len - 4096, len - 1};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        char size_words[64];
        write_copy(path, bytes, cuts[i]);
        snprintf(size_words, sizeof size_words, cuts[i] < 64 ? "the file is %zu bytes" : "the %zu-byte file", cuts[i]);
        assert_refused_file(path, size_words);
        assert_refused_file(path, "cut short: an interrupted copy or a full disk?");
    }
    write_copy(path, bytes, 20000);
    assert_refused_file(path, "its loadable segment (program header 0) ends at byte");
    write_copy(path, bytes, len - 1);
    assert_refused_file(path, "its section headers end at byte");
    write_copy(path, bytes, len);
    nvfp4_mla_loader_t l;
    char msg[2048];
    assert_int_equal(nvfp4_mla_loader_open(&l, path, msg, sizeof msg), NVFP4_MLA_LOAD_OK);
    nvfp4_mla_loader_close(&l);
    copy_teardown(dir, path, bytes);
}

/* Files that are not this host's ELF shared objects: refused by name before dlopen, a FIFO without
 * blocking. */
static void loader_should_refuse_files_that_are_not_this_hosts_shared_objects(void **state) {
    (void)state;
    size_t len;
    char dir[] = "/tmp/nvfp4_elf_XXXXXX", path[4096];
    unsigned char *bytes = copy_setup(dir, path, sizeof path, &len);
    struct {
        size_t offset;
        unsigned char value;
        const char *needle;
    } patches[] = {
        {0, 'X', "not an ELF file (it does not start with \\x7fELF)"},
        {4, 1, "a 32-bit ELF file; this host is 64-bit"},
        {5, 2, "an ELF file of the other byte order (EI_DATA 2; this host's is 1)"},
        {16, 2, "an ELF file of type 2, not a shared object (ET_DYN, 3)"},
        {18, 40, "an ELF file for machine 40; this host is machine"},
        {54, 32, "an ELF file whose program headers are 32 bytes each, not 56"},
    };
    for (size_t i = 0; i < sizeof patches / sizeof patches[0]; i++) {
        const unsigned char kept = bytes[patches[i].offset];
        bytes[patches[i].offset] = patches[i].value;
        write_copy(path, bytes, len);
        assert_refused_file(path, patches[i].needle);
        bytes[patches[i].offset] = kept;
    }
    unlink(path);
    assert_int_equal(mkfifo(path, 0600), 0);
    assert_refused_file(path, "it is not a regular file");
    copy_teardown(dir, path, bytes);
}

/* A copy of the real plugin's digest file beside `path` (its own name: the loader compares the digits). */
static void copy_digest(const char *path) {
    char from[4200], to[4200], line[256] = "";
    snprintf(from, sizeof from, "%s.sha256", real_plugin);
    snprintf(to, sizeof to, "%s.sha256", path);
    FILE *f = fopen(from, "r");
    assert_non_null(f);
    assert_non_null(fgets(line, sizeof line, f));
    fclose(f);
    f = fopen(to, "w");
    assert_non_null(f);
    fputs(line, f);
    fclose(f);
}

/* The plugin's dynamic section: its file offset and entry count (from the PT_DYNAMIC program header). */
static Elf64_Dyn *dynamic_section(unsigned char *bytes, size_t *count) {
    Elf64_Ehdr eh;
    memcpy(&eh, bytes, sizeof eh);
    for (unsigned i = 0; i < eh.e_phnum; i++) {
        Elf64_Phdr ph;
        memcpy(&ph, bytes + eh.e_phoff + i * sizeof ph, sizeof ph);
        if (ph.p_type == PT_DYNAMIC) {
            *count = ph.p_filesz / sizeof(Elf64_Dyn);
            return (Elf64_Dyn *)(void *)(bytes + ph.p_offset);
        }
    }
    fail_msg("the plugin has no PT_DYNAMIC segment");
    return NULL;
}

static Elf64_Dyn *dynamic_entry(unsigned char *bytes, Elf64_Sxword tag) {
    size_t n = 0; /* set by dynamic_section, which fails the test when there is none */
    Elf64_Dyn *d = dynamic_section(bytes, &n);
    for (size_t i = 0; i < n; i++) {
        if (d[i].d_tag == tag) return &d[i];
    }
    fail_msg("the plugin's dynamic section has no tag 0x%llx", (unsigned long long)tag);
    return NULL;
}

/* The corruptions of issue 58 (N2): bytes changed in place, the size kept, so the ELF check passes. */
enum { CORRUPTIONS = 18 };
static void corrupt(unsigned char *bytes, size_t len, int which) {
    size_t n = 0;
    unsigned char *dyn = (unsigned char *)dynamic_section(bytes, &n);
    static const Elf64_Sxword pointers[] = {DT_STRTAB, DT_SYMTAB, DT_GNU_HASH, DT_RELA};
    unsigned long long x = 0x9E3779B97F4A7C15ull * (unsigned)(which + 1); /* a fixed pseudo-random stream */
    if (which == 0 || which == 1) {
        memset(dyn, which ? 0xFF : 0, n * sizeof(Elf64_Dyn)); /* the DYNAMIC segment zeroed, or all ones */
    } else if (which < 6) {
        dynamic_entry(bytes, pointers[which - 2])->d_un.d_ptr = 0x7ffffff00000ull; /* a bogus pointer */
    } else if (which == 6) {
        dynamic_entry(bytes, DT_RELASZ)->d_un.d_val = 1ull << 40;
    } else if (which == 7) { /* RELACOUNT promises relative relocations: the first one is not (ld.so asserts) */
        Elf64_Rela *r = (Elf64_Rela *)(void *)(bytes + dynamic_entry(bytes, DT_RELA)->d_un.d_ptr);
        r->r_info = ELF64_R_INFO(0, R_X86_64_64);
    } else {
        const size_t span = which < 14 ? 8 : 2000; /* 8 bytes in .dynamic, or 2000 anywhere past the headers */
        const size_t at = which < 14 ? (size_t)(dyn - bytes) + (size_t)(which - 8) * 80
                                     : 4096 + (len - 8192) / 5 * (size_t)(which - 13);
        for (size_t i = 0; i < span; i++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            bytes[at + i] = (unsigned char)(x >> 56);
        }
    }
}

/* Issue 58, N2: a corrupted (not cut short) plugin killed the host inside dlopen (9 of 32 corruptions:
 * SIGSEGV; one ld.so assertion, exit 127). With the digest file the build records beside it, every
 * corruption is refused before dlopen, naming both digests; without one, the plugin is loaded in a
 * child process first, and whatever kills that child is refused, naming the signal or exit status;
 * in every case the host (this test) lives on. */
static void loader_should_keep_the_host_alive_on_a_damaged_plugin(void **state) {
    (void)state;
    size_t len;
    char dir[] = "/tmp/nvfp4_dmg_XXXXXX", path[4096], sidecar[4200];
    unsigned char *bytes = copy_setup(dir, path, sizeof path, &len);
    unsigned char *damaged = malloc(len);
    int killed = 0, loaded = 0;
    assert_non_null(damaged);
    snprintf(sidecar, sizeof sidecar, "%s.sha256", path);
    for (int which = 0; which < CORRUPTIONS; which++) {
        memcpy(damaged, bytes, len);
        corrupt(damaged, len, which);
        write_copy(path, damaged, len);
        copy_digest(path);
        assert_refused_file(path, ".sha256 when it was built or installed: the file changed since");
        unlink(sidecar);
        nvfp4_mla_loader_t l;
        char msg[8192];
        const int rc = nvfp4_mla_loader_open(&l, path, msg, sizeof msg);
        if (rc == NVFP4_MLA_LOAD_OK) {
            loaded++;
            nvfp4_mla_loader_close(&l);
            continue;
        }
        assert_string_equal(l.reason, which == 0 || which == 1 ? NVFP4_MLA_REASON_LOAD_ERROR : l.reason);
        killed += strstr(msg, "in a child process first") != NULL;
        if (which == 0) assert_contains(msg, "killed that process with signal 11 (Segmentation fault)");
        if (which == 7) assert_contains(msg, "with exit status 127 (127: the dynamic loader stopped");
    }
    print_message("damaged plugins: %d of %d refused after killing the child that loaded them first, %d loaded\n",
                  killed, CORRUPTIONS, loaded);
    assert_true(killed >= 2);
    /* A digest file that is not a digest is refused by name; the whole file with its digest loads. */
    write_copy(path, bytes, len);
    FILE *f = fopen(sidecar, "w");
    assert_non_null(f);
    fputs("not a digest\n", f);
    fclose(f);
    assert_refused_file(path, "does not start with the file's SHA-256 (64 hex digits");
    copy_digest(path);
    nvfp4_mla_loader_t l;
    char msg[2048];
    assert_int_equal(nvfp4_mla_loader_open(&l, path, msg, sizeof msg), NVFP4_MLA_LOAD_OK);
    nvfp4_mla_loader_close(&l);
    unlink(sidecar);
    free(damaged);
    copy_teardown(dir, path, bytes);
}

/* Issue 58, N8: require accepted what no plugin serves (per-token on 432 or 656, layout 0 or 9, scale
 * mode 7: "serves static scales on unknown"); the first write then refused. Refused by name. */
static void loader_should_refuse_what_no_record_serves(void **state) {
    (void)state;
    nvfp4_mla_loader_t l;
    char msg[2048];
    const struct {
        nvfp4_mla_requirement_t want;
        const char *words;
    } cases[] = {
        {{NVFP4_MLA_LAYOUT_BF16_ROPE_432, NVFP4_MLA_SCALE_PER_TOKEN, 0, 1},
         "cannot serve per-token scales on bf16_rope_432: only fp8_rope_368 records carry the per-token scale s_t"},
        {{NVFP4_MLA_LAYOUT_FP8_DS_MLA_656, NVFP4_MLA_SCALE_PER_TOKEN, 0, 1},
         "cannot serve per-token scales on fp8_ds_mla_656: only fp8_rope_368 records"},
        {{9, NVFP4_MLA_SCALE_STATIC, 0, 1}, "cannot serve layout 9: no such layout (NVFP4_MLA_LAYOUT_*: 1 fp8_rope_368"},
        {{0, NVFP4_MLA_SCALE_STATIC, 0, 1}, "cannot serve layout 0: no such layout"},
        {{NVFP4_MLA_LAYOUT_FP8_ROPE_368, 7, 0, 1},
         "cannot serve scale mode 7 on fp8_rope_368: no such mode (NVFP4_MLA_SCALE_*: 1 static, 2 per-token)"},
        {{NVFP4_MLA_LAYOUT_FP8_ROPE_368, 0, 0, 1}, "cannot serve scale mode 0 on fp8_rope_368"},
    };
    open_real_plugin(&l);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        assert_int_equal(nvfp4_mla_loader_require(&l, &cases[i].want, ~UINT64_C(0), msg, sizeof msg), -1);
        assert_contains(msg, cases[i].words);
        assert_contains(msg, real_plugin);
    }
    const nvfp4_mla_requirement_t ok656 = {NVFP4_MLA_LAYOUT_FP8_DS_MLA_656, NVFP4_MLA_SCALE_STATIC, 0, 1};
    assert_int_equal(nvfp4_mla_loader_require(&l, &ok656, ~UINT64_C(0), msg, sizeof msg), 0);
    assert_int_equal(nvfp4_mla_loader_require(&l, &per_token, ~UINT64_C(0), msg, sizeof msg), 0);
    nvfp4_mla_loader_close(&l);
}

/* The loader's file digest (file_digest.c, OpenSSL's SHA-256) on FIPS 180-4's examples written to a file:
 * a million a's spans many of its 16 KiB reads. The digest leaves the file offset alone (pread), and a
 * read that fails is -1 with the read's errno. The real plugin's load above checks it against the digest
 * the build wrote with Python's hashlib. */
static void digest_should_match_the_standards_examples(void **state) {
    (void)state;
    static const struct {
        const char *text;
        size_t repeat;
        const char *hex;
    } cases[] = {
        {"", 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
        {"abc", 1, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
        {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", 1,
         "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
        {"a", 1000000, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char hex[NVFP4_SHA256_HEX + 1];
        FILE *f = tmpfile();
        assert_non_null(f);
        for (size_t r = 0; r < cases[c].repeat; r++) fputs(cases[c].text, f);
        assert_int_equal(fflush(f), 0);
        const int fd = fileno(f);
        const off_t end = lseek(fd, 0, SEEK_CUR);
        assert_int_equal(nvfp4_sha256_file(fd, hex), 0);
        assert_string_equal(hex, cases[c].hex);
        assert_int_equal(lseek(fd, 0, SEEK_CUR), end);
        fclose(f);
    }
    char hex[NVFP4_SHA256_HEX + 1];
    const int dir = open(mock_dir, O_RDONLY | O_DIRECTORY);
    assert_true(dir >= 0);
    errno = 0;
    assert_int_equal(nvfp4_sha256_file(dir, hex), -1);
    assert_int_equal(errno, EISDIR);
    close(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(loader_should_accept_a_current_plugin),
        cmocka_unit_test(loader_should_mask_members_an_older_minor_lacks),
        cmocka_unit_test(loader_should_accept_a_future_minor_and_ignore_unknown_capabilities),
        cmocka_unit_test(loader_should_refuse_with_the_reason),
        cmocka_unit_test(loader_should_accept_a_null_member_its_table_does_not_cover),
        cmocka_unit_test(loader_should_mask_merge_a_1_0_table_lacks),
        cmocka_unit_test(loader_should_refuse_a_malformed_selection),
        cmocka_unit_test_teardown(loader_should_take_a_bare_name_as_a_file_in_the_working_folder, back_home),
        cmocka_unit_test(loader_should_name_every_missing_capability),
        cmocka_unit_test(loader_should_handle_selection_by_environment),
        cmocka_unit_test(loader_should_give_the_plugins_cache_identity),
        cmocka_unit_test(real_plugin_should_init_and_shutdown_repeatedly_with_two_contexts),
        cmocka_unit_test(real_plugin_should_report_cuda_by_what_the_machine_can_run),
        cmocka_unit_test(real_plugin_should_serve_merge),
        cmocka_unit_test(real_plugin_should_name_its_capabilities_as_the_header_does),
        cmocka_unit_test(loader_should_read_the_writer_policy_by_the_plugins_rule),
        cmocka_unit_test(requirement_should_follow_the_records_rule),
        cmocka_unit_test(loader_should_refuse_a_plugin_file_cut_short),
        cmocka_unit_test(loader_should_refuse_files_that_are_not_this_hosts_shared_objects),
        cmocka_unit_test(loader_should_keep_the_host_alive_on_a_damaged_plugin),
        cmocka_unit_test(loader_should_refuse_what_no_record_serves),
        cmocka_unit_test(digest_should_match_the_standards_examples),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
