/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Unit: smcd/eptable.c. A table is created, committed, filled beyond its first size
 * (it grows), records are removed and re-owned, and eptable_load() reads back exactly
 * the live, valid records; records a loader must skip are skipped; files not to be
 * trusted or read are refused with the documented errors and nothing else. */

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "eptable.h"

static struct smcd_ept_record rec(uint32_t i) {
        struct smcd_ept_record r = { 0 };

        r.role = i % 2 ? SMC_CTL_ROLE_SERVER : SMC_CTL_ROLE_CLIENT;
        r.id = 0x1000 + i;
        r.rx_token = 0xA000000000000000ull + 2 * i + 1;
        r.tx_token = 0xA000000000000000ull + 2 * i + 2;
        r.rx_size = 65536;
        r.tx_size = 16384u << (i % 7);
        r.uid = i;
        r.pid = (int32_t) (100 + i);
        r.pid_start = 5000 + i;
        r.local.family = 2;
        r.local.port = (uint16_t) (1000 + i);
        r.peer.family = 2;
        r.peer.port = 80;
        return r;
}

static char path[4096];

static void write_file(const char *dir, const void *data, size_t len, mode_t mode) {
        int fd;

        snprintf(path, sizeof(path), "%s/%s", dir, SMCD_EPT_NAME);
        unlink(path);
        fd = open(path, O_WRONLY | O_CREAT | O_EXCL, mode);
        if (fd < 0 || write(fd, data, len) != (ssize_t) len)
                abort();
        fchmod(fd, mode);
        close(fd);
}

int main(void) {
        char dir[] = "/tmp/test-eptable-XXXXXX";
        struct smcd_ept_record *out = NULL;
        const uint32_t n = 3 * SMCD_EPT_MIN_SLOTS + 5; /* grows twice */
        int *slots = calloc(n, sizeof(int));
        EpTable *t = NULL;
        uint64_t start = 0;
        int r, got;

        if (!mkdtemp(dir) || !slots)
                return 1;
        CHECK(eptable_load(dir, &out) == -ENOENT && !out, "no table: -ENOENT");
        r = eptable_create(dir, 0x1234, 0, &t);
        CHECK(r == 0 && t, "create: %d", r);
        if (!t)
                return 1;
        CHECK(eptable_load(dir, &out) == -ENOENT, "not committed: not under its name yet");
        CHECK(eptable_commit(t) == 0, "commit");
        CHECK(eptable_load(dir, &out) == 0 && !out, "an empty table: 0 records");

        for (uint32_t i = 0; i < n; i++) {
                struct smcd_ept_record r1 = rec(i);

                slots[i] = eptable_add(t, &r1);
                if (slots[i] <= 0)
                        break;
        }
        CHECK(slots[n - 1] > 0, "%u records added (the table grew): last slot %d", n, slots[n - 1]);
        /* remove every third, re-own every fifth */
        for (uint32_t i = 0; i < n; i += 3)
                eptable_remove(t, (uint32_t) slots[i]);
        for (uint32_t i = 1; i < n; i += 5)
                eptable_set_owner(t, (uint32_t) slots[i], 7, 77);
        got = eptable_load(dir, &out);
        {
                uint32_t want = n - (n + 2) / 3, match = 0;

                CHECK(got == (int) want, "load: %d records, want %u", got, want);
                for (int k = 0; out && k < got; k++) {
                        uint32_t i = (uint32_t) (out[k].id - 0x1000);
                        struct smcd_ept_record e = rec(i);

                        if (i % 5 == 1) {
                                e.pid = 7;
                                e.pid_start = 77;
                        }
                        e.state = SMCD_EPT_LIVE;
                        if (i < n && i % 3 != 0 && memcmp(&e, &out[k], sizeof(e)) == 0)
                                match++;
                }
                CHECK(match == want, "every loaded record is one added and not removed, as it was (%u of %u)", match,
                      want);
        }
        free(out);
        out = NULL;
        /* freed slots are used again */
        {
                struct smcd_ept_record r1 = rec(n);
                int s1 = eptable_add(t, &r1);

                CHECK(s1 > 0 && s1 <= (int) n, "a freed slot is reused (%d)", s1);
        }
        t = eptable_free(t);

        /* records a loader skips: bad role, token 0, equal tokens, bad size, pid 0 */
        {
                size_t len = SMCD_EPT_HDR_LEN + (size_t) SMCD_EPT_MIN_SLOTS * SMCD_EPT_RECORD_LEN;
                char *buf = calloc(1, len);
                struct smcd_ept_header *h = (void *) buf;
                struct smcd_ept_record *rs = (void *) (buf + SMCD_EPT_HDR_LEN);

                h->magic = SMCD_EPT_MAGIC;
                h->version = SMCD_EPT_VERSION;
                h->record_len = SMCD_EPT_RECORD_LEN;
                h->nslots = SMCD_EPT_MIN_SLOTS;
                for (uint32_t i = 0; i < 8; i++) {
                        rs[i] = rec(i);
                        rs[i].state = SMCD_EPT_LIVE;
                }
                rs[1].role = 2;
                rs[2].rx_token = 0;
                rs[3].tx_token = rs[3].rx_token;
                rs[4].rx_size = 65537;
                rs[5].tx_size = 2u << 20;
                rs[6].pid = 0;
                rs[7].state = 0x4556494d; /* not LIVE */
                write_file(dir, buf, len, 0600);
                got = eptable_load(dir, &out);
                CHECK(got == 1 && out && out[0].id == 0x1000, "only the valid live record is read (%d)", got);
                free(out);
                out = NULL;
                write_file(dir, buf, len, 0640);
                CHECK(eptable_load(dir, &out) == -EPERM, "mode 0640: -EPERM");
                write_file(dir, buf, len - 1, 0600);
                CHECK(eptable_load(dir, &out) == -EBADMSG, "a size that is no whole number of records: -EBADMSG");
                write_file(dir, buf, len - SMCD_EPT_RECORD_LEN, 0600);
                CHECK(eptable_load(dir, &out) == -EBADMSG, "smaller than the header's nslots: -EBADMSG");
                {
                        /* killed while growing: the file doubled, the header not yet */
                        char *big = calloc(1, 2 * len);

                        memcpy(big, buf, len);
                        ((struct smcd_ept_record *) (big + len))[0] = rs[0];
                        ((struct smcd_ept_record *) (big + len))[0].id = 0x2000;
                        write_file(dir, big, SMCD_EPT_HDR_LEN + 2 * (len - SMCD_EPT_HDR_LEN), 0600);
                        got = eptable_load(dir, &out);
                        CHECK(got == 2 && out && out[0].id == 0x1000 && out[1].id == 0x2000,
                              "a file larger than its header's nslots (killed while growing): all records read (%d)",
                              got);
                        free(out);
                        out = NULL;
                        free(big);
                }
                h->version = 2;
                write_file(dir, buf, len, 0600);
                CHECK(eptable_load(dir, &out) == -EBADMSG, "another version: -EBADMSG");
                h->version = SMCD_EPT_VERSION;
                h->nslots = SMCD_EPT_MAX_SLOTS + 1;
                write_file(dir, buf, len, 0600);
                CHECK(eptable_load(dir, &out) == -EBADMSG, "nslots beyond the maximum: -EBADMSG");
                write_file(dir, buf, 10, 0600);
                CHECK(eptable_load(dir, &out) == -EBADMSG, "shorter than a header: -EBADMSG");
                unlink(path);
                CHECK(symlink("/etc/passwd", path) == 0 && eptable_load(dir, &out) == -ELOOP, "a symlink: -ELOOP");
                CHECK(!out, "no records on errors");
                unlink(path);
                free(buf);
        }

        CHECK(proc_pid_start(getpid(), &start) == 0 && start > 0, "our start time %llu",
              (unsigned long long) start);
        CHECK(proc_pid_start(0x3fffffff, &start) == -ESRCH, "no such process: -ESRCH");
        {
                char cmd[4200];

                snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
                if (system(cmd) != 0)
                        return 1;
        }
        free(slots);
        printf("%d passed, %d failed\n", checks - failures, failures);
        return failures != 0;
}
