/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * libFuzzer target: smcctl's command line (smcctl/smcctl.c: parse_argv() with
 * getopt_long, the object and command lookup by unique prefix, then the command's
 * own argument parsing: "set KEY=VALUE...", "connections --mode/--port",
 * "policy add RULE...", "pnet add NETDEV IBDEV [PORT] [pnetid ID]", ...).
 *
 * The input is split on NUL bytes into argv[1..] (at most 64 words; argv[0] is
 * "smcctl"). smcctl.c is compiled into this target as it is (#include below), with
 * its main() renamed smcctl_main() and sd_bus_open_system() replaced by one that
 * gives a NULL bus: every command then parses its arguments exactly as in smcctl and
 * its first D-Bus call fails at once (sd-bus refuses a NULL bus with an error, no
 * I/O), which smcctl reports as a bus error. So nothing but smcctl's own code runs,
 * and no bus is ever contacted. Run it with -close_fd_mask=3 (run-fuzz.sh does):
 * smcctl prints its usage errors.
 */

#include <errno.h>
#include <getopt.h>
#include <string.h>
#include <systemd/sd-bus.h>

#include "fuzz.h"

int smcctl_main(int argc, char *argv[]);
static int fuzz_bus_open_system(sd_bus **ret);

#define main smcctl_main
#define sd_bus_open_system fuzz_bus_open_system
#include "smcctl.c"
#undef main
#undef sd_bus_open_system

static int fuzz_bus_open_system(sd_bus **ret) {
        *ret = NULL;
        return 0;
}

#define MAX_WORDS 64

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        char *argv[MAX_WORDS + 2], *copy;
        int argc = 1, r;
        size_t start = 0;

        if (size > 4096)
                return 0;
        copy = fuzz_cstring(data, size);
        argv[0] = (char *) "smcctl";
        for (size_t i = 0; i <= size && argc <= MAX_WORDS; i++)
                if (i == size || data[i] == 0) {
                        if (i > start || i < size) /* a trailing NUL adds no empty word */
                                argv[argc++] = copy + start;
                        start = i + 1;
                }
        if (size == 0)
                argc = 1;
        argv[argc] = NULL;

        optind = 0; /* a full re-initialization of getopt (glibc) */
        opterr = 1;
        r = smcctl_main(argc, argv);
        FUZZ_CHECK(r == EXIT_SUCCESS || r == EXIT_FAILURE || r == EXIT_USAGE);
        fflush(stdout);
        free(copy);
        return 0;
}
