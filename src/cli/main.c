#include <stdio.h>
int main(int argc, char **argv) { (void)argc; (void)argv; fprintf(stderr, "lazyattn: not built yet\n"); return 1; }
