/* SPDX-License-Identifier: LGPL-2.1-or-later */
#pragma once

/*
 * A small open-addressing hash map from uint64_t keys to non-NULL pointers (linear
 * probing, backward-shift deletion, load factor <= 1/2). O(1) average for get, put
 * and remove. Not thread-safe.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct U64Map U64Map;

/* Returns NULL on ENOMEM. */
U64Map *u64map_new(void);
/* Frees the map, not the values. NULL is ok. Returns NULL. */
U64Map *u64map_free(U64Map *m);
size_t u64map_size(const U64Map *m);
/* Value for @key, or NULL. */
void *u64map_get(const U64Map *m, uint64_t key);
/* Insert @key -> @value (@value != NULL). Returns 0, -EEXIST or -ENOMEM. */
int u64map_put(U64Map *m, uint64_t key, void *value);
/* Remove @key; returns its value or NULL. */
void *u64map_remove(U64Map *m, uint64_t key);
/* Iterate: start with *state = 0; returns false at the end. The map must not be
 * changed during an iteration. */
bool u64map_iterate(const U64Map *m, size_t *state, uint64_t *ret_key, void **ret_value);
