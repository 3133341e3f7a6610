/* The `lazyattn` entry point (src/cli/main.c): --version, the command list, an unknown
 * command. */
#include <string.h>

#include "common/test_util.h"

Test(main, version_names_the_release_and_the_devices_built_in) {
    la_test_cli_result r = la_test_cli("", "--version", NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert(!strncmp(r.out, "lazyattn 0.", 11), "stdout: %s", r.out);
#ifdef LA_HAVE_CUDA
    cr_assert(strstr(r.out, "(devices: cpu, cuda)\n"), "stdout: %s", r.out);
#else
    cr_assert(strstr(r.out, "(devices: cpu)\n"), "stdout: %s", r.out);
#endif
    la_test_cli_free(&r);
}

Test(main, no_command_and_unknown_commands_exit_2) {
    la_test_cli_result r = la_test_cli("", "", NULL);
    cr_assert_eq(r.status, 2);
    cr_assert(strstr(r.err, "usage: lazyattn <command>"), "stderr: %s", r.err);
    la_test_cli_free(&r);
    r = la_test_cli("", "frobnicate", NULL);
    cr_assert_eq(r.status, 2);
    cr_assert(strstr(r.err, "lazyattn: unknown command 'frobnicate'"), "stderr: %s", r.err);
    la_test_cli_free(&r);
    r = la_test_cli("", "--help", NULL);
    cr_assert_eq(r.status, 0);
    cr_assert(strstr(r.out, "lazyattn --version"), "stdout: %s", r.out);
    la_test_cli_free(&r);
}

Test(main, help_with_a_command_prints_that_commands_help) {
    la_test_cli_result r = la_test_cli("", "help eval", NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert(!strncmp(r.out, "usage: lazyattn eval", 20), "stdout: %s", r.out);
    la_test_cli_free(&r);
    r = la_test_cli("", "-V", NULL);
    cr_assert_eq(r.status, 0, "%s", r.err);
    cr_assert(!strncmp(r.out, "lazyattn 0.", 11), "stdout: %s", r.out);
    la_test_cli_free(&r);
}
