/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * libFuzzer target: smcd's tunables (smcd/tunables.c): the state file loader
 * tunables_load() and the value parser tunable_parse() behind SetTunable(s) and the
 * options.
 *
 * Input: byte 0 selects
 *   even: the rest is the state file: written to a file in a private temporary
 *         directory and loaded onto the defaults (read_json_file, parse, move aside).
 *         Accepted: the file stays, and saving the result and loading that onto the
 *         defaults gives the same tunables. Refused: the tunables are unchanged and
 *         the file was moved aside.
 *   odd:  byte 1 picks a key (one of the known keys, or past them: the key is the rest
 *         up to its first NUL) and the rest is the value for tunable_parse(). Refused:
 *         nothing changed and a reason was written. Accepted: the normalized value
 *         (tunable_format) parses to the same tunables and formats the same again.
 * LeakSanitizer (on in libFuzzer) reports any leak of json-c objects or strings.
 */

#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "fuzz.h"
#include "tunables.h"

static void defaults(ManagerConfig *cfg) {
        memset(cfg, 0, sizeof(*cfg));
        tunables_set_defaults(cfg);
}

static void fuzz_state_file(const uint8_t *data, size_t size) {
        ManagerConfig cfg, before, again;
        const char *path = fuzz_write_file("tunables.json", data, size);
        char p[4096];
        int r;

        snprintf(p, sizeof(p), "%s", path);
        defaults(&cfg);
        before = cfg;
        r = tunables_load(&cfg, p);
        FUZZ_CHECK(r == 0);
        if (access(p, F_OK) < 0) {
                /* corrupt: moved aside, nothing changed */
                FUZZ_CHECK(errno == ENOENT);
                FUZZ_CHECK(memcmp(&cfg, &before, sizeof(cfg)) == 0);
        } else {
                FUZZ_CHECK(tunables_save(&cfg, p) == 0);
                defaults(&again);
                FUZZ_CHECK(tunables_load(&again, p) == 0);
                FUZZ_CHECK(access(p, F_OK) == 0);
                FUZZ_CHECK(memcmp(&cfg, &again, sizeof(cfg)) == 0);
        }
        fuzz_clean_tmpdir();
}

static void fuzz_value(const char *key, const char *value) {
        ManagerConfig cfg, before, again;
        char err[512] = "", err2[512];
        char *shown = NULL, *shown2 = NULL;
        int r;

        defaults(&cfg);
        before = cfg;
        r = tunable_parse(&cfg, key, value, err, sizeof(err));
        FUZZ_CHECK(r == 0 || r == -EINVAL);
        if (r < 0) {
                FUZZ_CHECK(err[0] != 0);
                FUZZ_CHECK(memcmp(&cfg, &before, sizeof(cfg)) == 0);
                FUZZ_CHECK(tunable_known(key) || tunable_format(&cfg, key, &shown) == -EINVAL);
                return;
        }
        FUZZ_CHECK(tunable_known(key));
        FUZZ_CHECK(tunable_format(&cfg, key, &shown) == 0);
        defaults(&again);
        r = tunable_parse(&again, key, shown, err2, sizeof(err2));
        if (r != 0)
                fprintf(stderr, "%s=%s normalized to \"%s\", which is refused: %s\n", key, value, shown, err2);
        FUZZ_CHECK(r == 0);
        FUZZ_CHECK(memcmp(&cfg, &again, sizeof(cfg)) == 0);
        FUZZ_CHECK(tunable_format(&again, key, &shown2) == 0);
        FUZZ_CHECK(strcmp(shown, shown2) == 0);
        free(shown);
        free(shown2);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        char *s;

        if (size < 1)
                return 0;
        if (data[0] % 2 == 0) {
                fuzz_state_file(data + 1, size - 1);
                return 0;
        }
        if (size < 2)
                return 0;
        /* a C string of the rest (an embedded NUL ends the value, as over D-Bus) */
        s = fuzz_cstring(data + 2, size - 2);
        if (data[1] < tunables_count())
                fuzz_value(tunable_key(data[1]), s);
        else
                fuzz_value(s, s + strlen(s) + (strlen(s) < size - 2 ? 1 : 0));
        free(s);
        return 0;
}
