/* k-way Karmarkar-Karp largest differencing with compact states. See
 * compat_kk.h for the method and the tie rules.
 *
 * verl's version keeps k set objects per state (O(n * k) objects for
 * equal_size=False) and re-sorts all k sets at every merge. Here a state
 * stores only its non-empty sets, values are linked lists (a set merge is
 * O(1)), and a merge sorts only the sets that received values from both
 * states; the rest are already sorted runs that are merged in linear time. */
#include "compat_kk.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "pk_error.h"

#define KK_NIL UINT32_MAX
#define PK_KK_MIN(a, b) ((a) < (b) ? (a) : (b))

/* One non-empty set: its sum, value count, smallest value number (unique
 * among disjoint sets, so it breaks every tie) and its linked value list. */
typedef struct kk_set {
  double sum;
  uint32_t count;
  uint32_t id;
  uint32_t head, tail;
} kk_set_t;

/* A state: m non-empty sets in descending order (the k - m empty sets are
 * implicit and come last). `sets` points into the pool (owned == false) or
 * to its own allocation. */
typedef struct kk_state {
  kk_set_t *sets;
  uint32_t m, cap;
  bool owned;
  double spread;
} kk_state_t;

/* A heap entry: the state's key, cached so that sifting never touches the
 * states themselves. */
typedef struct kk_entry {
  double spread;
  double top;        /* Sum of the largest set. */
  uint32_t topcount; /* Its value count. */
  uint32_t topid;    /* Its smallest value number. */
  uint32_t s;        /* The state. */
} kk_entry_t;

typedef struct kk {
  uint32_t k;
  kk_state_t *st;
  kk_entry_t *heap;
  uint32_t nheap;
  uint32_t *next; /* Linked value lists. */
  kk_set_t *mid;  /* Scratch: sets that merge two sets (k entries). */
  kk_set_t *tmp;  /* Scratch: the merged state (k entries). */
} kk_t;

/* Whether set a orders before set b in descending order. */
static inline bool set_before(const kk_set_t *a, const kk_set_t *b) {
  if (a->sum != b->sum)
    return a->sum > b->sum;
  if (a->count != b->count)
    return a->count > b->count;
  return a->id < b->id;
}

static int set_cmp(const void *pa, const void *pb) {
  const kk_set_t *a = pa, *b = pb;
  if (set_before(a, b))
    return -1;
  if (set_before(b, a))
    return 1;
  return 0;
}

static void state_spread(const kk_t *kk, kk_state_t *s) {
  double lo = s->m == kk->k ? s->sets[s->m - 1].sum : 0.0;
  s->spread = s->sets[0].sum - lo;
}

/* Whether entry x pops before entry y: larger spread, then larger largest
 * set (sum, count, smaller smallest value number), then the older state. */
static inline bool entry_before(const kk_entry_t *x, const kk_entry_t *y) {
  if (x->spread != y->spread)
    return x->spread > y->spread;
  if (x->top != y->top)
    return x->top > y->top;
  if (x->topcount != y->topcount)
    return x->topcount > y->topcount;
  if (x->topid != y->topid)
    return x->topid < y->topid;
  return x->s < y->s;
}

static kk_entry_t entry_of(const kk_t *kk, uint32_t s) {
  const kk_state_t *st = &kk->st[s];
  return (kk_entry_t){.spread = st->spread,
                      .top = st->sets[0].sum,
                      .topcount = st->sets[0].count,
                      .topid = st->sets[0].id,
                      .s = s};
}

static void heap_down(kk_t *kk, uint32_t i) {
  uint32_t n = kk->nheap;
  kk_entry_t *h = kk->heap;
  kk_entry_t x = h[i];
  for (;;) {
    uint32_t l = 2 * i + 1;
    if (l >= n)
      break;
    uint32_t c = l + 1 < n && entry_before(&h[l + 1], &h[l]) ? l + 1 : l;
    if (!entry_before(&h[c], &x))
      break;
    h[i] = h[c];
    i = c;
  }
  h[i] = x;
}

static void heap_up(kk_t *kk, uint32_t i) {
  kk_entry_t *h = kk->heap;
  kk_entry_t x = h[i];
  while (i > 0) {
    uint32_t p = (i - 1) / 2;
    if (!entry_before(&x, &h[p]))
      break;
    h[i] = h[p];
    i = p;
  }
  h[i] = x;
}

static uint32_t heap_pop(kk_t *kk) {
  uint32_t top = kk->heap[0].s;
  kk->heap[0] = kk->heap[--kk->nheap];
  if (kk->nheap > 0)
    heap_down(kk, 0);
  return top;
}

static void heap_push(kk_t *kk, uint32_t s) {
  kk->heap[kk->nheap] = entry_of(kk, s);
  heap_up(kk, kk->nheap++);
}

static kk_set_t set_join(kk_t *kk, const kk_set_t *a, const kk_set_t *b) {
  kk_set_t r;
  r.sum = a->sum + b->sum;
  r.count = a->count + b->count;
  r.id = a->id < b->id ? a->id : b->id;
  r.head = a->head;
  kk->next[a->tail] = b->head;
  r.tail = b->tail;
  return r;
}

/* Gives state s room for `need` sets, keeping its first `keep` sets. */
static int state_reserve(const kk_t *kk, kk_state_t *s, uint32_t need, uint32_t keep) {
  if (need <= s->cap)
    return 0;
  uint32_t cap = s->cap * 2 > need ? s->cap * 2 : need;
  if (cap > kk->k)
    cap = kk->k;
  kk_set_t *sets = malloc((size_t)cap * sizeof(kk_set_t));
  if (sets == NULL)
    return PK_ENOMEM;
  memcpy(sets, s->sets, (size_t)keep * sizeof(kk_set_t));
  if (s->owned)
    free(s->sets);
  s->sets = sets;
  s->cap = cap;
  s->owned = true;
  return 0;
}

static void state_release(kk_state_t *s) {
  if (s->owned)
    free(s->sets);
  s->sets = NULL;
  s->m = s->cap = 0;
  s->owned = false;
}

/* The fast path of a merge where one state has at most KK_SMALL sets (a
 * singleton joining a large state is the common case). The sets of the large
 * state L that get a partner are always its smallest ones (a suffix), so the
 * result is L's untouched prefix plus at most KK_SMALL new sets, which are
 * merged into the prefix from the back, in place. The result ends in a's
 * slot (buffers are swapped when L is b). */
#define KK_SMALL 8
static int merge_small(kk_t *kk, uint32_t ia, uint32_t ib) {
  kk_state_t *a = &kk->st[ia], *b = &kk->st[ib];
  uint32_t k = kk->k, ma = a->m, mb = b->m;
  bool a_large = ma >= mb;
  kk_state_t *L = a_large ? a : b, *S = a_large ? b : a;
  kk_set_t extra[KK_SMALL];
  uint32_t e = 0, p = L->m;
  for (uint32_t x = 0; x < S->m; x++) {
    /* S's set x pairs with L's set k - 1 - x whether S is a or b. */
    uint32_t y = k - 1 - x;
    if (y < L->m) {
      const kk_set_t *sa = a_large ? &L->sets[y] : &S->sets[x];
      const kk_set_t *sb = a_large ? &S->sets[x] : &L->sets[y];
      extra[e++] = set_join(kk, sa, sb);
      p = y < p ? y : p;
    } else {
      extra[e++] = S->sets[x];
    }
  }
  /* Insertion sort of the extras, descending. */
  for (uint32_t i = 1; i < e; i++) {
    kk_set_t t = extra[i];
    uint32_t j = i;
    while (j > 0 && set_before(&t, &extra[j - 1])) {
      extra[j] = extra[j - 1];
      j--;
    }
    extra[j] = t;
  }
  uint32_t nm = p + e;
  if (state_reserve(kk, L, nm, p) != 0)
    return PK_ENOMEM;
  /* From the smallest extra up: find its place in the prefix by binary
   * search and shift the part of the prefix after it in one memmove. */
  kk_set_t *d = L->sets;
  uint32_t hi = p; /* d[0..hi) is the part of the prefix not moved yet. */
  for (uint32_t j = e; j-- > 0;) {
    uint32_t lo = 0, up = hi;
    while (lo < up) {
      uint32_t mid = lo + (up - lo) / 2;
      if (set_before(&extra[j], &d[mid]))
        up = mid;
      else
        lo = mid + 1;
    }
    memmove(&d[lo + j + 1], &d[lo], (size_t)(hi - lo) * sizeof(kk_set_t));
    d[lo + j] = extra[j];
    hi = lo;
  }
  L->m = nm;
  if (!a_large) {
    kk_state_t t = *a;
    *a = *b;
    *b = t;
  }
  state_spread(kk, a);
  state_release(b);
  return 0;
}

/* Merges state b into state a (a popped first): set i of the result is the
 * i-th largest set of a joined with the i-th smallest set of b. The sets that
 * come from a alone and from b alone are sorted runs already; only the joined
 * ones are sorted, then the three runs are merged. */
static int merge_states(kk_t *kk, uint32_t ia, uint32_t ib) {
  kk_state_t *a = &kk->st[ia], *b = &kk->st[ib];
  uint32_t k = kk->k, ma = a->m, mb = b->m;
  if (ma <= KK_SMALL || mb <= KK_SMALL)
    return merge_small(kk, ia, ib);
  uint32_t np = PK_KK_MIN(ma, k - mb); /* a[0..np): no partner in b. */
  uint32_t nq = PK_KK_MIN(mb, k - ma); /* b[0..nq): no partner in a. */
  uint32_t nr = 0;
  for (uint32_t i = k - mb; i < ma; i++)
    kk->mid[nr++] = set_join(kk, &a->sets[i], &b->sets[k - 1 - i]);
  if (nr > 1)
    qsort(kk->mid, nr, sizeof(kk_set_t), set_cmp);

  uint32_t p = 0, q = 0, r = 0, o = 0;
  while (p < np || q < nq || r < nr) {
    const kk_set_t *best = NULL;
    int which = 0;
    if (p < np) {
      best = &a->sets[p];
      which = 0;
    }
    if (q < nq && (best == NULL || set_before(&b->sets[q], best))) {
      best = &b->sets[q];
      which = 1;
    }
    if (r < nr && (best == NULL || set_before(&kk->mid[r], best))) {
      best = &kk->mid[r];
      which = 2;
    }
    kk->tmp[o++] = *best;
    if (which == 0)
      p++;
    else if (which == 1)
      q++;
    else
      r++;
  }

  /* Store the result in a's slot, growing its storage when needed. */
  if (state_reserve(kk, a, o, 0) != 0)
    return PK_ENOMEM;
  memcpy(a->sets, kk->tmp, (size_t)o * sizeof(kk_set_t));
  a->m = o;
  state_spread(kk, a);
  state_release(b);
  return 0;
}

typedef struct kk_key {
  double v;
  uint32_t j;
} kk_key_t;

static int key_cmp(const void *pa, const void *pb) {
  const kk_key_t *a = pa, *b = pb;
  if (a->v != b->v)
    return a->v < b->v ? -1 : 1;
  return a->j < b->j ? -1 : (a->j > b->j ? 1 : 0);
}

int pk_kk_partition(const double *val, uint32_t m, uint32_t k, bool equal, uint32_t *part) {
  if (k == 0)
    return PK_EINVAL;
  for (uint32_t j = 0; j < m; j++)
    if (!isfinite(val[j]) || val[j] < 0.0)
      return PK_EINVAL;
  if (m == 0)
    return 0;

  int rc = PK_ENOMEM;
  /* Total values including the virtual zero values of the equal mode. */
  uint64_t mt64 = equal ? ((uint64_t)m + k - 1) / k * k : m;
  if (mt64 > UINT32_MAX)
    return PK_ENOMEM;
  uint32_t mt = (uint32_t)mt64;
  uint32_t nstates = equal ? mt / k : mt;
  kk_t kk = {.k = k};
  kk_set_t *pool = NULL;
  kk_key_t *keys = NULL;
  kk.st = calloc(nstates, sizeof(kk_state_t));
  kk.heap = malloc((size_t)nstates * sizeof(kk_entry_t));
  kk.next = malloc((size_t)mt * sizeof(uint32_t));
  kk.mid = malloc((size_t)k * sizeof(kk_set_t));
  kk.tmp = malloc((size_t)k * sizeof(kk_set_t));
  pool = malloc((size_t)mt * sizeof(kk_set_t));
  if (!kk.st || !kk.heap || !kk.next || !kk.mid || !kk.tmp || !pool)
    goto done;

  for (uint32_t j = 0; j < mt; j++) {
    kk.next[j] = KK_NIL;
    pool[j] = (kk_set_t){.sum = j < m ? val[j] : 0.0, .count = 1, .id = j, .head = j, .tail = j};
  }
  if (!equal) {
    for (uint32_t j = 0; j < m; j++) {
      kk.st[j] = (kk_state_t){.sets = &pool[j], .m = 1, .cap = 1};
      state_spread(&kk, &kk.st[j]);
    }
  } else {
    /* Ascending order of (value, number); the virtual values (numbers >= m,
     * value 0) go first, before real values of 0. */
    keys = malloc((size_t)mt * sizeof(kk_key_t));
    if (keys == NULL)
      goto done;
    uint32_t nv = mt - m;
    for (uint32_t j = 0; j < nv; j++)
      keys[j] = (kk_key_t){.v = -1.0, .j = m + j};
    for (uint32_t j = 0; j < m; j++)
      keys[nv + j] = (kk_key_t){.v = val[j], .j = j};
    qsort(keys + nv, m, sizeof(kk_key_t), key_cmp);
    for (uint32_t s = 0; s < nstates; s++) {
      kk_set_t *sets = &pool[(size_t)s * k];
      /* Fill the run into its slice of the pool (the pool is indexed by
       * value number for singletons; here it is reused as run storage). */
      for (uint32_t i = 0; i < k; i++) {
        uint32_t j = keys[(size_t)s * k + i].j;
        sets[i] =
            (kk_set_t){.sum = j < m ? val[j] : 0.0, .count = 1, .id = j, .head = j, .tail = j};
      }
      qsort(sets, k, sizeof(kk_set_t), set_cmp);
      kk.st[s] = (kk_state_t){.sets = sets, .m = k, .cap = k};
      state_spread(&kk, &kk.st[s]);
    }
  }

  for (uint32_t s = 0; s < nstates; s++)
    kk.heap[s] = entry_of(&kk, s);
  kk.nheap = nstates;
  for (uint32_t i = nstates / 2; i-- > 0;)
    heap_down(&kk, i);

  /* The last state standing; with one state from the start it is state 0. */
  uint32_t final = 0;
  while (kk.nheap > 1) {
    uint32_t a = heap_pop(&kk);
    uint32_t b = heap_pop(&kk);
    rc = merge_states(&kk, a, b);
    if (rc != 0)
      goto done;
    heap_push(&kk, a);
    final = a;
  }

  const kk_state_t *last = &kk.st[final];
  for (uint32_t s = 0; s < last->m; s++)
    for (uint32_t j = last->sets[s].head; j != KK_NIL; j = kk.next[j])
      if (j < m)
        part[j] = s;
  rc = 0;

done:
  if (kk.st != NULL)
    for (uint32_t s = 0; s < nstates; s++)
      if (kk.st[s].owned)
        free(kk.st[s].sets);
  free(kk.st);
  free(kk.heap);
  free(kk.next);
  free(kk.mid);
  free(kk.tmp);
  free(pool);
  free(keys);
  return rc;
}
