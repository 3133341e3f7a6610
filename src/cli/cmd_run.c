/* lazyattn run (placeholder until implemented). */
#include <stdio.h>
#include "cli/commands.h"
int la_cli_run(int argc, char **argv) { (void)argc; (void)argv; fprintf(stderr, "lazyattn run: not implemented yet\n"); return LA_EXIT_ERROR; }
