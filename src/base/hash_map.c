#include "base/hash_map.h"

#include <stdlib.h>

void la_hmap_fini(la_hmap *m) {
    free(m->slots);
    *m = (la_hmap){0};
}

static int64_t find(const la_hmap *m, la_hash128 key) {
    if (m->cap == 0) return -1;
    for (int64_t i = (int64_t)(key.lo & (uint64_t)(m->cap - 1)), n = 0; n < m->cap;
         n++, i = (i + 1) & (m->cap - 1)) {
        const la_hmap_slot *s = &m->slots[i];
        if (s->state == 0) return -1;
        if (s->state == 1 && la_hash128_eq(s->key, key)) return i;
    }
    return -1;
}

bool la_hmap_get(const la_hmap *m, la_hash128 key, int64_t *value) {
    int64_t i = find(m, key);
    if (i < 0) return false;
    if (value) *value = m->slots[i].value;
    return true;
}

static void insert_new(la_hmap *m, la_hash128 key, int64_t value) {
    for (int64_t i = (int64_t)(key.lo & (uint64_t)(m->cap - 1));; i = (i + 1) & (m->cap - 1))
        if (m->slots[i].state != 1) {
            if (m->slots[i].state == 2) m->n_dead--;
            m->slots[i] = (la_hmap_slot){key, value, 1};
            m->n_used++;
            return;
        }
}

static bool rehash(la_hmap *m, int64_t cap) {
    la_hmap_slot *slots = calloc((size_t)cap, sizeof *slots);
    if (!slots) return false;
    la_hmap old = *m;
    *m = (la_hmap){.slots = slots, .cap = cap};
    for (int64_t i = 0; i < old.cap; i++)
        if (old.slots[i].state == 1) insert_new(m, old.slots[i].key, old.slots[i].value);
    free(old.slots);
    return true;
}

bool la_hmap_put(la_hmap *m, la_hash128 key, int64_t value) {
    int64_t i = find(m, key);
    if (i >= 0) {
        m->slots[i].value = value;
        return true;
    }
    if ((m->n_used + m->n_dead + 1) * 2 > m->cap) {
        int64_t cap = m->cap ? m->cap : 16;
        while ((m->n_used + 1) * 2 > cap) cap *= 2;
        if ((m->n_used + 1) * 4 > cap) cap *= 2; /* leave room after a rehash of tombstones */
        if (!rehash(m, cap)) return false;
    }
    insert_new(m, key, value);
    return true;
}

bool la_hmap_remove(la_hmap *m, la_hash128 key) {
    int64_t i = find(m, key);
    if (i < 0) return false;
    m->slots[i].state = 2;
    m->n_used--;
    m->n_dead++;
    return true;
}
