/* SPDX-License-Identifier: LGPL-2.1-or-later */

#include <errno.h>
#include <stdlib.h>

#include "hashmap.h"

struct U64Map {
        uint64_t *keys;
        void **values; /* NULL = empty slot */
        size_t mask;   /* capacity - 1, capacity a power of two */
        size_t n;
};

static inline size_t slot_of(const U64Map *m, uint64_t k) {
        /* murmur3 fmix64: keys may be sequential */
        k ^= k >> 33;
        k *= 0xff51afd7ed558ccdULL;
        k ^= k >> 33;
        k *= 0xc4ceb9fe1a85ec53ULL;
        k ^= k >> 33;
        return (size_t) k & m->mask;
}

U64Map *u64map_new(void) {
        U64Map *m = calloc(1, sizeof(*m));

        if (!m)
                return NULL;
        m->mask = 15;
        m->keys = calloc(m->mask + 1, sizeof(*m->keys));
        m->values = calloc(m->mask + 1, sizeof(*m->values));
        if (!m->keys || !m->values)
                return u64map_free(m);
        return m;
}

U64Map *u64map_free(U64Map *m) {
        if (!m)
                return NULL;
        free(m->keys);
        free(m->values);
        free(m);
        return NULL;
}

size_t u64map_size(const U64Map *m) {
        return m->n;
}

void *u64map_get(const U64Map *m, uint64_t key) {
        for (size_t i = slot_of(m, key);; i = (i + 1) & m->mask) {
                if (!m->values[i])
                        return NULL;
                if (m->keys[i] == key)
                        return m->values[i];
        }
}

static int resize(U64Map *m, size_t cap) {
        uint64_t *ok = m->keys;
        void **ov = m->values;
        size_t ocap = m->mask + 1;

        m->keys = calloc(cap, sizeof(*m->keys));
        m->values = calloc(cap, sizeof(*m->values));
        if (!m->keys || !m->values) {
                free(m->keys);
                free(m->values);
                m->keys = ok;
                m->values = ov;
                return -ENOMEM;
        }
        m->mask = cap - 1;
        for (size_t j = 0; j < ocap; j++) {
                if (!ov[j])
                        continue;
                size_t i = slot_of(m, ok[j]);
                while (m->values[i])
                        i = (i + 1) & m->mask;
                m->keys[i] = ok[j];
                m->values[i] = ov[j];
        }
        free(ok);
        free(ov);
        return 0;
}

int u64map_put(U64Map *m, uint64_t key, void *value) {
        size_t i;

        if (!value)
                return -EINVAL;
        if (u64map_get(m, key))
                return -EEXIST;
        if ((m->n + 1) * 2 > m->mask + 1) {
                int r = resize(m, (m->mask + 1) * 2);
                if (r < 0)
                        return r;
        }
        for (i = slot_of(m, key); m->values[i]; i = (i + 1) & m->mask)
                ;
        m->keys[i] = key;
        m->values[i] = value;
        m->n++;
        return 0;
}

void *u64map_remove(U64Map *m, uint64_t key) {
        size_t i, j;
        void *v;

        for (i = slot_of(m, key);; i = (i + 1) & m->mask) {
                if (!m->values[i])
                        return NULL;
                if (m->keys[i] == key)
                        break;
        }
        v = m->values[i];
        m->values[i] = NULL;
        m->n--;
        /* backward-shift: move later entries of the probe run into the hole */
        for (j = (i + 1) & m->mask; m->values[j]; j = (j + 1) & m->mask) {
                size_t home = slot_of(m, m->keys[j]);
                /* entry j may move to hole i if its home is not in (i, j] cyclically */
                if ((j > i && (home <= i || home > j)) || (j < i && home <= i && home > j)) {
                        m->keys[i] = m->keys[j];
                        m->values[i] = m->values[j];
                        m->values[j] = NULL;
                        i = j;
                }
        }
        return v;
}

bool u64map_iterate(const U64Map *m, size_t *state, uint64_t *ret_key, void **ret_value) {
        for (size_t i = *state; i <= m->mask; i++)
                if (m->values[i]) {
                        if (ret_key)
                                *ret_key = m->keys[i];
                        if (ret_value)
                                *ret_value = m->values[i];
                        *state = i + 1;
                        return true;
                }
        *state = m->mask + 1;
        return false;
}
