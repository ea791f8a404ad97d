/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * smcctl: inspect and control smcd over D-Bus (org.smcd.smcd1 on the system bus, or
 * $DBUS_SYSTEM_BUS_ADDRESS). ip(8)-style: smcctl [OPTIONS] OBJECT [COMMAND]; objects
 * and commands abbreviate to a unique prefix, "show" is the default command. A verb
 * table (networkctl), one smcctl-<object>.c per object; each field is printed once
 * through one helper that renders text or JSON (rdma -j, smcctl.h). smcctl speaks only
 * D-Bus, never smcd's control socket.
 *
 * Exit: 0 ok, 1 failure (bus, smcd, unknown object or command), 2 usage.
 */

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "smcctl.h"

typedef struct Object {
        const char *name;
        const Verb *verbs; /* the first is the default */
        bool direct;       /* no COMMAND word: verbs[0] gets every argument ("smcctl set") */
} Object;

static const Object objects[] = {
        { "stats", stats_verbs, false },
        { "connections", connections_verbs, false },
        { "devices", devices_verbs, false },
        { "linkgroups", linkgroups_verbs, false },
        { "tunables", tunables_verbs, false },
        { "policy", policy_verbs, false },
        { "pnet", pnet_verbs, false },
        /* "smcctl set inline=on", "smcctl get inline": short for tunables set / get */
        { "set", tunables_set_verbs, true },
        { "get", tunables_get_verbs, true },
        {}
};

static void help(void) {
        printf("Usage: smcctl [OPTIONS] OBJECT [COMMAND]\n\n"
               "Inspect and control smcd over D-Bus (" BUS_NAME ").\n\n"
               "Objects and commands (unique prefixes are enough; show is the default):\n"
               "  stats [show]     Show smcd's counters\n"
               "  stats reset      Zero smcd's counters (root)\n"
               "  connections [show] [--mode smcd|tcp] [--port N]\n"
               "                   List the SMC-D connection endpoints smcd set up\n"
               "  devices [show]   Show the ISM and RoCE devices and the netdevs with their\n"
               "                   addresses (-d: GIDs, MACs, link details)\n"
               "  linkgroups [show]\n"
               "                   Show the SMC-R link groups and their links\n"
               "  tunables [show]  Show smcd's tunables\n"
               "  tunables get KEY Show one tunable\n"
               "  tunables set KEY=VALUE...\n"
               "                   Change and persist tunables (root)\n"
               "  policy [show]    Show the SMC/TCP policy rules in evaluation order\n"
               "  policy add RULE...\n"
               "                   Add a rule (root): [connect|listen|both] [local-port P[-Q]]\n"
               "                   [peer-port P[-Q]] [prefix CIDR] [position N] action smc|tcp\n"
               "  policy del ID    Delete a rule (root)\n"
               "  pnet [show]      Show the netdev <-> RoCE device table (for SMC-R)\n"
               "  pnet add NETDEV IBDEV [PORT] [pnetid ID]\n"
               "                   Add an entry (root); PORT defaults to 1\n"
               "  pnet del NETDEV  Delete an entry (root)\n"
               "  set KEY=VALUE... Short for tunables set\n"
               "  get KEY          Short for tunables get\n\n"
               "Options:\n"
               "  -j --json        JSON output\n"
               "  -p --pretty      Indent the JSON output\n"
               "  -d --details     More columns and fields\n"
               "  -h --help        Show this help\n"
               "     --version     Show the version\n");
}

static int parse_argv(int argc, char *argv[], Args *a) {
        enum { ARG_VERSION = 0x100 };
        static const struct option options[] = {
                { "help", no_argument, NULL, 'h' },
                { "version", no_argument, NULL, ARG_VERSION },
                { "json", no_argument, NULL, 'j' },
                { "pretty", no_argument, NULL, 'p' },
                { "details", no_argument, NULL, 'd' },
                {}
        };
        int c;

        /* "+": options only before OBJECT, as ip(8) */
        while ((c = getopt_long(argc, argv, "+hjpd", options, NULL)) >= 0)
                switch (c) {
                case 'h':
                        help();
                        return 0;
                case ARG_VERSION:
                        printf("smcctl " SMCD_VERSION "\n");
                        return 0;
                case 'j':
                        a->json = true;
                        break;
                case 'p':
                        a->pretty = true;
                        break;
                case 'd':
                        a->details = true;
                        break;
                default:
                        return -EINVAL; /* getopt printed the reason */
                }
        return 1;
}

static int run(int argc, char *argv[]);

/* The output went where it was sent, all of it, or the run failed: a full disk, a
 * closed standard output (">&-") or /dev/full make smcctl exit 1 with a message, as
 * coreutils' close_stdout(). */
int main(int argc, char *argv[]) {
        int r = run(argc, argv);

        errno = 0;
        if (fflush(stdout) != 0 || ferror(stdout)) {
                if (errno)
                        fprintf(stderr, "smcctl: cannot write the output: %s\n", strerror(errno));
                else
                        fprintf(stderr, "smcctl: cannot write the output\n");
                return r == EXIT_SUCCESS ? EXIT_FAILURE : r;
        }
        return r;
}

static int run(int argc, char *argv[]) {
        const Object *obj;
        const Verb *verb;
        sd_bus *bus = NULL;
        Args a = {};
        bool ambiguous;
        int r;

        /* getopt's messages say "smcctl: ...", not the path it was started by */
        if (argc > 0)
                argv[0] = (char *) "smcctl";
        r = parse_argv(argc, argv, &a);
        if (r <= 0)
                return r < 0 ? EXIT_USAGE : EXIT_SUCCESS;
        if (optind >= argc) {
                fprintf(stderr, "smcctl: missing OBJECT (try: smcctl stats); see smcctl --help\n");
                return EXIT_USAGE;
        }
        obj = lookup_prefix(objects, sizeof(*objects), argv[optind], &ambiguous);
        if (!obj) {
                fprintf(stderr, "smcctl: %s object \"%s\"; objects:", ambiguous ? "ambiguous" : "unknown",
                        argv[optind]);
                for (const Object *o = objects; o->name; o++)
                        fprintf(stderr, " %s", o->name);
                fputc('\n', stderr);
                return EXIT_FAILURE;
        }
        optind++;
        verb = obj->verbs;
        /* "smcctl connections --port 80": a filter option after OBJECT means the default command */
        if (!obj->direct && optind < argc && argv[optind][0] != '-') {
                verb = lookup_prefix(obj->verbs, sizeof(*obj->verbs), argv[optind], &ambiguous);
                if (!verb) {
                        fprintf(stderr, "smcctl: %s command \"%s\" for %s; commands:",
                                ambiguous ? "ambiguous" : "unknown", argv[optind], obj->name);
                        for (const Verb *v = obj->verbs; v->name; v++)
                                fprintf(stderr, " %s", v->name);
                        fputc('\n', stderr);
                        return EXIT_FAILURE;
                }
                optind++;
        }

        /* a failure is reported by the verb at its first call (bus_check()), after it
         * checked its arguments: a usage error is one with or without a bus */
        r = sd_bus_open_system(&bus);
        if (r < 0) {
                bus_open_error = r;
                bus = NULL;
        }
        r = verb->run(bus, &a, argc - optind, argv + optind);
        sd_bus_flush_close_unref(bus);
        return r;
}
