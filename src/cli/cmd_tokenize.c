/* lazyattn tokenize (placeholder until implemented). */
#include <stdio.h>
#include "cli/commands.h"
int la_cli_tokenize(int argc, char **argv) { (void)argc; (void)argv; fprintf(stderr, "lazyattn tokenize: not implemented yet\n"); return LA_EXIT_ERROR; }
