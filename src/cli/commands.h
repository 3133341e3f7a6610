/* Subcommands of the lazyattn CLI (DESIGN.md §7b). Each returns the process exit status:
 * 0 success, 2 usage error, 1 any other error (one clear message on stderr). */
#ifndef LA_CLI_COMMANDS_H
#define LA_CLI_COMMANDS_H

#include "lazyattn/status.h"

/* argv[0] is the subcommand name. */
int la_cli_run(int argc, char **argv);
int la_cli_tokenize(int argc, char **argv);
int la_cli_info(int argc, char **argv);
int la_cli_serve(int argc, char **argv);
int la_cli_eval(int argc, char **argv);
int la_cli_race(int argc, char **argv);
int la_cli_bench(int argc, char **argv);
int la_cli_ingest(int argc, char **argv);

/* The bundled demo model directory (models/<name> in the source tree, or beside the
 * installed binary). */
const char *la_cli_default_model_dir(void);

#define LA_EXIT_OK 0
#define LA_EXIT_ERROR 1
#define LA_EXIT_USAGE 2

/* Exit status for an error the engine returned: a value the user passed that the engine
 * refused (LA_ERR_INVALID_ARG) is a usage error (2), anything else 1. */
#define LA_EXIT_FOR(status) ((status) == LA_ERR_INVALID_ARG ? LA_EXIT_USAGE : LA_EXIT_ERROR)

#endif
