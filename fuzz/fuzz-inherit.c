/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * libFuzzer target: smc_inherit_parse_entry() and smc_inherit_parse_listener()
 * (libsmcproto/socket.c), one entry of the
 * SMCRUN_INHERIT environment variable that a new process image under smcrun reads
 * (any program may set it). The input is the entry (no separator, not NUL-terminated,
 * in an exact-size heap block: the parser must respect the length). Accepted entries
 * must be within the documented ranges and survive smc_inherit_format_entry() ->
 * smc_inherit_parse_entry() unchanged (listener entries likewise).
 */

#include <errno.h>
#include <string.h>

#include "dmb.h"
#include "fuzz.h"
#include "socket-internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        struct smc_inherit_entry e, f;
        struct smc_inherit_listener l, m;
        uint8_t *buf;
        char text[256];
        int r, n;

        if (size > 1024)
                return 0;
        buf = fuzz_exact_copy(data, size);
        r = smc_inherit_parse_entry((const char *) buf, size, &e);
        FUZZ_CHECK(r == 0 || r == -EINVAL);
        if (r == 0) {
                FUZZ_CHECK(e.x >= 0 && e.t >= -1 && e.t != e.x);
                FUZZ_CHECK(e.conn_id && e.rx_id && e.tx_id && e.rx_id != e.tx_id);
                FUZZ_CHECK(e.rx_size >= SMC_DMB_MIN_SIZE && e.rx_size <= SMC_DMB_MAX_SIZE &&
                           (e.rx_size & (e.rx_size - 1)) == 0);
                FUZZ_CHECK(e.tx_size >= SMC_DMB_MIN_SIZE && e.tx_size <= SMC_DMB_MAX_SIZE &&
                           (e.tx_size & (e.tx_size - 1)) == 0);
                FUZZ_CHECK((e.flags & ~SMC_INHERIT_F_MASK) == 0 && e.owed <= SMC_INHERIT_OWED_MAX &&
                           e.unpub <= e.tx_size);
                n = smc_inherit_format_entry(&e, text, sizeof(text));
                FUZZ_CHECK(n > 0 && (size_t) n == strlen(text));
                FUZZ_CHECK(smc_inherit_parse_entry(text, (size_t) n, &f) == 0);
                FUZZ_CHECK(f.x == e.x && f.t == e.t && f.conn_id == e.conn_id && f.rx_id == e.rx_id &&
                           f.rx_size == e.rx_size && f.tx_id == e.tx_id && f.tx_size == e.tx_size &&
                           f.flags == e.flags && f.owed == e.owed && f.unpub == e.unpub);
        }
        r = smc_inherit_parse_listener((const char *) buf, size, &l);
        FUZZ_CHECK(r == 0 || r == -EINVAL);
        if (r == 0) {
                FUZZ_CHECK(l.fd >= 0 && l.chan >= -1 && l.chan != l.fd && (l.flags & ~SMC_INHERIT_LF_MASK) == 0);
                FUZZ_CHECK(l.chan < 0 ? l.listener_id == 0 : l.listener_id != 0);
                FUZZ_CHECK(l.dchan < 0 ? l.dchan == -1 : (l.chan >= 0 && l.dchan != l.chan && l.dchan != l.fd));
                n = smc_inherit_format_listener(&l, text, sizeof(text));
                FUZZ_CHECK(n > 0 && (size_t) n == strlen(text));
                FUZZ_CHECK(smc_inherit_parse_listener(text, (size_t) n, &m) == 0);
                FUZZ_CHECK(m.fd == l.fd && m.chan == l.chan && m.dchan == l.dchan && m.listener_id == l.listener_id &&
                           m.flags == l.flags);
        }
        free(buf);
        return 0;
}
