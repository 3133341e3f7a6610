/* lazyattn info (placeholder until implemented). */
#include <stdio.h>
#include "cli/commands.h"
int la_cli_info(int argc, char **argv) { (void)argc; (void)argv; fprintf(stderr, "lazyattn info: not implemented yet\n"); return LA_EXIT_ERROR; }
