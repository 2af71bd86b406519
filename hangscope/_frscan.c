/* hangscope._frscan: a flight-recorder pickle read into columns, its records made objects only
 * when asked for.
 *
 * Why: at 4096 ranks x 2000 records, unpickling every record into dicts and then reading each
 * dict's fields (sources/fr_columns.py) is most of what an analysis costs, and most records are
 * only ever three numbers and a body id. This reads the pickle's opcodes into a compact value
 * table (no Python objects but the strings), computes the columns fr_columns.scan computes
 * (record ids, seqs, creation times, and per record the first record with an equal key), and
 * returns the records as a sequence that builds record i, with the unpickler's sharing, when it
 * is indexed.
 *
 * It reads the opcodes c10's Pickler and Python's protocols 2-5 write for plain data (dicts,
 * lists, tuples, str, int, float, bool, None, memo). Anything else (an import, bytes, a huge
 * int, a cycle, nesting deeper than MAX_DEPTH, a string that is not UTF-8, a field of a type
 * the columns do not take as it is) and it declines: read() returns None and the caller
 * unpickles as before, so the answers never depend on this module. Every read is bounds-checked:
 * dumps come from hosts we do not trust.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

enum { K_NONE, K_BOOL, K_INT, K_FLOAT, K_STR, K_LIST, K_TUPLE, K_DICT };
#define MAX_DEPTH 100

typedef struct {
    uint8_t kind;
    int8_t field; /* K_STR: the record field its text names: -2 not looked up, -1 none */
    int32_t sid;  /* K_STR: its interned id, -1 until needed */
    union {
        int64_t i;
        double f;
        struct { Py_ssize_t off, len; } s;
        Py_ssize_t c; /* containers: index into conts */
    } u;
} Val;

typedef struct {
    int32_t *items; /* dicts: key, value, key, value, ... */
    Py_ssize_t n, cap;
} Cont;

typedef struct {
    Val *vals;
    Py_ssize_t nvals, capvals;
    Cont *conts;
    Py_ssize_t nconts, capconts;
    PyObject **objs; /* per value, the object made of it (strings: all, at the end of parsing) */
    PyObject *sids;  /* str -> int: equal strings written twice get one id */
} State;

static const char *FIELDS[] = {
    "profiling_name", "process_group", "state", "is_p2p", "timeout_ms", "retired",
    "thread_name", "input_sizes", "output_sizes", "input_dtypes", "output_dtypes",
    "record_id", "collective_seq_id", "p2p_seq_id", "duration_ms", "time_created_ns"};
enum {
    F_NAME, F_GROUP, F_STATE, F_P2P, F_TIMEOUT, F_RETIRED, F_THREAD, F_IN_SIZES, F_OUT_SIZES,
    F_IN_TYPES, F_OUT_TYPES, F_RID, F_SEQ, F_P2P_SEQ, F_DURATION, F_CREATED, N_FIELDS};

static void state_free(State *s)
{
    if (s == NULL)
        return;
    if (s->objs != NULL) {
        for (Py_ssize_t i = 0; i < s->nvals; i++)
            Py_XDECREF(s->objs[i]);
        PyMem_Free(s->objs);
    }
    for (Py_ssize_t i = 0; i < s->nconts; i++)
        PyMem_Free(s->conts[i].items);
    PyMem_Free(s->conts);
    PyMem_Free(s->vals);
    Py_XDECREF(s->sids);
    PyMem_Free(s);
}

/* Grows *buf (of *cap elements of size elem) to hold need elements; 0 on failure. */
static int grow(void **buf, Py_ssize_t *cap, Py_ssize_t need, size_t elem)
{
    if (need <= *cap)
        return 1;
    Py_ssize_t cap2 = *cap ? *cap : 16;
    while (cap2 < need) {
        if (cap2 > PY_SSIZE_T_MAX / 2 / (Py_ssize_t)elem)
            return 0;
        cap2 *= 2;
    }
    void *b = PyMem_Realloc(*buf, (size_t)cap2 * elem);
    if (b == NULL)
        return 0;
    *buf = b;
    *cap = cap2;
    return 1;
}

static int32_t new_val(State *s, uint8_t kind)
{
    if (s->nvals >= INT32_MAX || !grow((void **)&s->vals, &s->capvals, s->nvals + 1, sizeof(Val)))
        return -1;
    Val *v = &s->vals[s->nvals];
    memset(v, 0, sizeof(Val));
    v->kind = kind;
    v->field = -2;
    v->sid = -1;
    return (int32_t)s->nvals++;
}

static int32_t new_cont(State *s, uint8_t kind, Py_ssize_t n)
{
    if (!grow((void **)&s->conts, &s->capconts, s->nconts + 1, sizeof(Cont)))
        return -1;
    int32_t v = new_val(s, kind);
    if (v < 0)
        return -1;
    Cont *c = &s->conts[s->nconts];
    c->items = NULL;
    c->n = c->cap = 0;
    if (n && !grow((void **)&c->items, &c->cap, n, sizeof(int32_t)))
        return -1;
    s->vals[v].u.c = s->nconts++;
    return v;
}

static int cont_add(State *s, int32_t v, const int32_t *items, Py_ssize_t n)
{
    Cont *c = &s->conts[s->vals[v].u.c];
    if (!grow((void **)&c->items, &c->cap, c->n + n, sizeof(int32_t)))
        return 0;
    memcpy(c->items + c->n, items, (size_t)n * sizeof(int32_t));
    c->n += n;
    return 1;
}

#define CONT(s, v) (&(s)->conts[(s)->vals[v].u.c])

static uint64_t le(const unsigned char *p, int n)
{
    uint64_t x = 0;
    for (int i = n - 1; i >= 0; i--)
        x = (x << 8) | p[i];
    return x;
}

/* Parses the pickle into s; returns the root value, -1 to decline, -2 on MemoryError. */
static int32_t parse(State *s, const unsigned char *p, Py_ssize_t size)
{
    const unsigned char *end = p + size;
    int32_t *stack = NULL, *memo = NULL;
    Py_ssize_t *marks = NULL;
    Py_ssize_t nstack = 0, capstack = 0, nmarks = 0, capmarks = 0, capmemo = 0, memo_len = 0;
    Py_ssize_t fence = 0; /* the stack below the newest mark, which only a mark's op may pop */
    int32_t root = -1, v = -1;
    int oom = 0;

#define NEED(k) do { if ((Py_ssize_t)(k) > end - p) goto decline; } while (0)
#define PUSH(x) do { \
        if (!grow((void **)&stack, &capstack, nstack + 1, sizeof(int32_t))) \
            goto nomem; \
        stack[nstack++] = (x); \
    } while (0)
#define NEWV(kind) do { v = new_val(s, (kind)); if (v < 0) goto nomem; } while (0)
#define POPMARK(x) do { \
        if (nmarks == 0) \
            goto decline; \
        (x) = marks[--nmarks]; \
        fence = nmarks ? marks[nmarks - 1] : 0; \
    } while (0)

    for (;;) {
        NEED(1);
        unsigned char op = *p++;
        switch (op) {
        case 0x80: /* PROTO */
            NEED(1);
            if (*p++ > 5)
                goto decline;
            break;
        case 0x95: { /* FRAME */
            NEED(8);
            uint64_t n = le(p, 8);
            p += 8;
            if (n > (uint64_t)(end - p))
                goto decline;
            break;
        }
        case '.': /* STOP */
            if (nstack <= fence)
                goto decline;
            root = stack[nstack - 1];
            goto done;
        case 'N':
            NEWV(K_NONE);
            PUSH(v);
            break;
        case 0x88: case 0x89: /* NEWTRUE, NEWFALSE */
            NEWV(K_BOOL);
            s->vals[v].u.i = op == 0x88;
            PUSH(v);
            break;
        case 'K': case 'M': case 'J': { /* BININT1, BININT2, BININT */
            int n = op == 'K' ? 1 : op == 'M' ? 2 : 4;
            NEED(n);
            int64_t x = (int64_t)le(p, n);
            if (op == 'J')
                x = (int32_t)(uint32_t)x;
            p += n;
            NEWV(K_INT);
            s->vals[v].u.i = x;
            PUSH(v);
            break;
        }
        case 0x8a: { /* LONG1 */
            NEED(1);
            int n = *p++;
            if (n > 8)
                goto decline;
            NEED(n);
            uint64_t x = le(p, n);
            if (n > 0 && n < 8 && (p[n - 1] & 0x80))
                x |= ~(uint64_t)0 << (8 * n);
            p += n;
            NEWV(K_INT);
            s->vals[v].u.i = (int64_t)x;
            PUSH(v);
            break;
        }
        case 'G': { /* BINFLOAT, big-endian */
            NEED(8);
            uint64_t x = 0;
            for (int i = 0; i < 8; i++)
                x = (x << 8) | p[i];
            p += 8;
            NEWV(K_FLOAT);
            memcpy(&s->vals[v].u.f, &x, 8);
            PUSH(v);
            break;
        }
        case 'X': case 0x8c: case 0x8d: { /* BINUNICODE, SHORT_BINUNICODE, BINUNICODE8 */
            int n = op == 'X' ? 4 : op == 0x8c ? 1 : 8;
            NEED(n);
            uint64_t len = le(p, n);
            p += n;
            if (len > (uint64_t)(end - p))
                goto decline;
            NEWV(K_STR);
            s->vals[v].u.s.off = (Py_ssize_t)(p - (end - size));
            s->vals[v].u.s.len = (Py_ssize_t)len;
            p += len;
            PUSH(v);
            break;
        }
        case ']': case '}': case ')': /* EMPTY_LIST, EMPTY_DICT, EMPTY_TUPLE */
            v = new_cont(s, op == ']' ? K_LIST : op == '}' ? K_DICT : K_TUPLE, 0);
            if (v < 0)
                goto nomem;
            PUSH(v);
            break;
        case '(': /* MARK */
            if (!grow((void **)&marks, &capmarks, nmarks + 1, sizeof(Py_ssize_t)))
                goto nomem;
            marks[nmarks++] = fence = nstack;
            break;
        case 'a': case 's': { /* APPEND (one item to a list), SETITEM (a key and value) */
            Py_ssize_t n = op == 'a' ? 1 : 2;
            if (nstack - fence < n + 1
                    || s->vals[stack[nstack - n - 1]].kind != (op == 'a' ? K_LIST : K_DICT))
                goto decline;
            if (!cont_add(s, stack[nstack - n - 1], &stack[nstack - n], n))
                goto nomem;
            nstack -= n;
            break;
        }
        case 'e': case 'u': { /* APPENDS, SETITEMS */
            Py_ssize_t x;
            POPMARK(x);
            if (x <= fence || x > nstack
                    || s->vals[stack[x - 1]].kind != (op == 'e' ? K_LIST : K_DICT)
                    || (op == 'u' && (nstack - x) % 2))
                goto decline;
            if (!cont_add(s, stack[x - 1], &stack[x], nstack - x))
                goto nomem;
            nstack = x;
            break;
        }
        case 't': case 'l': case 'd': { /* TUPLE, LIST, DICT: from the items above the mark */
            Py_ssize_t x;
            POPMARK(x);
            if (x > nstack || (op == 'd' && (nstack - x) % 2))
                goto decline;
            v = new_cont(s, op == 't' ? K_TUPLE : op == 'l' ? K_LIST : K_DICT, nstack - x);
            if (v < 0 || !cont_add(s, v, &stack[x], nstack - x))
                goto nomem;
            nstack = x;
            PUSH(v);
            break;
        }
        case 0x85: case 0x86: case 0x87: { /* TUPLE1, TUPLE2, TUPLE3 */
            Py_ssize_t n = op - 0x84;
            if (nstack - fence < n)
                goto decline;
            v = new_cont(s, K_TUPLE, n);
            if (v < 0 || !cont_add(s, v, &stack[nstack - n], n))
                goto nomem;
            nstack -= n;
            PUSH(v);
            break;
        }
        case 'q': case 'r': case 0x94: { /* BINPUT, LONG_BINPUT, MEMOIZE */
            uint64_t idx;
            if (op == 0x94) {
                idx = (uint64_t)memo_len;
            } else {
                int n = op == 'q' ? 1 : 4;
                NEED(n);
                idx = le(p, n);
                p += n;
            }
            if (nstack <= fence || idx > (uint64_t)size)
                goto decline;
            Py_ssize_t old = capmemo;
            if (!grow((void **)&memo, &capmemo, (Py_ssize_t)idx + 1, sizeof(int32_t)))
                goto nomem;
            for (Py_ssize_t i = old; i < capmemo; i++)
                memo[i] = -1;
            if (memo[idx] < 0)
                memo_len++;
            memo[idx] = stack[nstack - 1];
            break;
        }
        case 'h': case 'j': { /* BINGET, LONG_BINGET */
            int n = op == 'h' ? 1 : 4;
            NEED(n);
            uint64_t idx = le(p, n);
            p += n;
            if (idx >= (uint64_t)capmemo || memo[idx] < 0)
                goto decline;
            PUSH(memo[idx]);
            break;
        }
        default: /* imports, bytes, text opcodes, sets, ...: left to the unpickler */
            goto decline;
        }
    }
nomem:
    oom = 1;
decline:
    root = -1;
done:
    PyMem_Free(stack);
    PyMem_Free(marks);
    PyMem_Free(memo);
    if (oom) {
        PyErr_NoMemory();
        return -2;
    }
    return root;
#undef NEED
#undef PUSH
#undef NEWV
#undef POPMARK
}

/* Every value the root reaches: no cycle, no nesting deeper than MAX_DEPTH, dict keys of
 * hashable kinds. Then no object made of them can fail but for lack of memory. */
static int check_graph(State *s, int32_t root)
{
    uint8_t *color = PyMem_Calloc((size_t)s->nvals, 1);
    int32_t path_v[MAX_DEPTH + 1];
    Py_ssize_t path_i[MAX_DEPTH + 1];
    int depth = 0, ok = 1;
    if (color == NULL)
        return -1;
    path_v[0] = root;
    path_i[0] = 0;
    color[root] = 1;
    while (depth >= 0) {
        int32_t v = path_v[depth];
        uint8_t kind = s->vals[v].kind;
        Cont *c = (kind >= K_LIST) ? CONT(s, v) : NULL;
        if (c == NULL || path_i[depth] >= c->n) {
            color[v] = 2;
            depth--;
            continue;
        }
        Py_ssize_t i = path_i[depth]++;
        int32_t w = c->items[i];
        if (kind == K_DICT && i % 2 == 0 && s->vals[w].kind > K_STR) {
            ok = 0;
            break;
        }
        if (color[w] == 1 || (color[w] == 0 && depth == MAX_DEPTH)) {
            ok = 0;
            break;
        }
        if (color[w] == 0) {
            color[w] = 1;
            path_v[++depth] = w;
            path_i[depth] = 0;
        }
    }
    PyMem_Free(color);
    return ok;
}

static PyObject *make(State *s, int32_t v);

/* A new dict of dict value v's items, leaving out those whose value is `skip`. */
static PyObject *make_dict(State *s, int32_t v, int32_t skip)
{
    Cont *c = CONT(s, v);
    PyObject *o = PyDict_New();
    if (o == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i + 1 < c->n; i += 2) {
        if (c->items[i + 1] == skip)
            continue;
        PyObject *key = make(s, c->items[i]), *value = NULL;
        if (key != NULL)
            value = make(s, c->items[i + 1]);
        if (value == NULL || PyDict_SetItem(o, key, value) < 0) {
            Py_XDECREF(key);
            Py_XDECREF(value);
            Py_DECREF(o);
            return NULL;
        }
        Py_DECREF(key);
        Py_DECREF(value);
    }
    return o;
}

/* The object made of value v (a new reference), made once and shared, as the unpickler does. */
static PyObject *make(State *s, int32_t v)
{
    PyObject *o = s->objs[v];
    if (o != NULL) {
        Py_INCREF(o);
        return o;
    }
    Val *x = &s->vals[v];
    switch (x->kind) {
    case K_NONE:
        Py_RETURN_NONE;
    case K_BOOL:
        return PyBool_FromLong((long)x->u.i);
    case K_INT:
        o = PyLong_FromLongLong(x->u.i);
        break;
    case K_FLOAT:
        o = PyFloat_FromDouble(x->u.f);
        break;
    case K_LIST:
    case K_TUPLE: {
        Cont *c = CONT(s, v);
        int list = x->kind == K_LIST;
        o = list ? PyList_New(c->n) : PyTuple_New(c->n);
        if (o == NULL)
            return NULL;
        for (Py_ssize_t i = 0; i < c->n; i++) {
            PyObject *item = make(s, c->items[i]);
            if (item == NULL) {
                Py_DECREF(o);
                return NULL;
            }
            if (list)
                PyList_SET_ITEM(o, i, item);
            else
                PyTuple_SET_ITEM(o, i, item);
        }
        break;
    }
    case K_DICT:
        o = make_dict(s, v, -1);
        break;
    default:
        PyErr_SetString(PyExc_SystemError, "_frscan: a string was not decoded");
        return NULL;
    }
    if (o == NULL)
        return NULL;
    Py_INCREF(o);
    s->objs[v] = o;
    return o;
}

/* ---- the records, made one by one when indexed ---- */

typedef struct {
    PyObject_HEAD
    State *state;
    int32_t list; /* the entries list's value */
} Entries;

static void entries_dealloc(Entries *self)
{
    state_free(self->state);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static Py_ssize_t entries_len(Entries *self)
{
    return CONT(self->state, self->list)->n;
}

static PyObject *entries_item(Entries *self, Py_ssize_t i)
{
    Cont *c = CONT(self->state, self->list);
    if (i < 0 || i >= c->n) {
        PyErr_SetString(PyExc_IndexError, "record index out of range");
        return NULL;
    }
    return make(self->state, c->items[i]);
}

static PySequenceMethods entries_as_sequence = {
    .sq_length = (lenfunc)entries_len,
    .sq_item = (ssizeargfunc)entries_item,
};

static PyTypeObject EntriesType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "hangscope._frscan.Entries",
    .tp_doc = "A dump's records, each made (once) when it is indexed.",
    .tp_basicsize = sizeof(Entries),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_dealloc = (destructor)entries_dealloc,
    .tp_as_sequence = &entries_as_sequence,
};

/* ---- the columns ---- */

static int field_of(State *s, int32_t v, const char *base)
{
    Val *x = &s->vals[v];
    if (x->field == -2) {
        x->field = -1;
        for (int f = 0; f < N_FIELDS; f++) {
            if ((Py_ssize_t)strlen(FIELDS[f]) == x->u.s.len
                    && memcmp(base + x->u.s.off, FIELDS[f], (size_t)x->u.s.len) == 0) {
                x->field = (int8_t)f;
                break;
            }
        }
    }
    return x->field;
}

static int64_t sid_of(State *s, int32_t v)
{
    Val *x = &s->vals[v];
    if (x->sid < 0) {
        PyObject *known = PyDict_GetItemWithError(s->sids, s->objs[v]);
        if (known != NULL) {
            x->sid = (int32_t)PyLong_AsLong(known);
        } else {
            if (PyErr_Occurred())
                return -1;
            PyObject *id = PyLong_FromSsize_t(PyDict_GET_SIZE(s->sids));
            if (id == NULL || PyDict_SetItem(s->sids, s->objs[v], id) < 0) {
                Py_XDECREF(id);
                return -1;
            }
            x->sid = (int32_t)PyDict_GET_SIZE(s->sids) - 1;
            Py_DECREF(id);
        }
    }
    return x->sid;
}

typedef struct {
    int64_t *t;
    Py_ssize_t n, cap;
} Tokens;

static int tok(Tokens *k, int64_t x)
{
    if (!grow((void **)&k->t, &k->cap, k->n + 1, sizeof(int64_t)))
        return 0;
    k->t[k->n++] = x;
    return 1;
}

#define DECLINE 0
#define FAILED -1
#define TOK(x) do { if (!tok(k, (x))) { PyErr_NoMemory(); return FAILED; } } while (0)

static int tok_str(State *s, Tokens *k, int32_t v)
{
    int64_t id = sid_of(s, v);
    if (id < 0)
        return FAILED;
    TOK(id);
    return 1;
}

/* sizes: a list of lists of ints; dtypes: a list of strs (else DECLINE) */
static int tok_list(State *s, Tokens *k, int32_t v, int sizes)
{
    if (v < 0 || s->vals[v].kind != K_LIST)
        return DECLINE;
    Cont *c = CONT(s, v);
    TOK(c->n);
    for (Py_ssize_t i = 0; i < c->n; i++) {
        int32_t w = c->items[i];
        if (!sizes) {
            if (s->vals[w].kind != K_STR)
                return DECLINE;
            int got = tok_str(s, k, w);
            if (got != 1)
                return got;
            continue;
        }
        if (s->vals[w].kind != K_LIST)
            return DECLINE;
        Cont *dims = CONT(s, w);
        TOK(dims->n);
        for (Py_ssize_t j = 0; j < dims->n; j++) {
            Val *d = &s->vals[dims->items[j]];
            if (d->kind != K_INT)
                return DECLINE;
            TOK(d->u.i);
        }
    }
    return 1;
}

/* A record's key (every field its body is made of, fr_columns._KEYED plus sizes and dtypes) as
 * tokens, length-prefixed and tagged so that equal tokens mean equal fields under ==. */
static int tok_record(State *s, Tokens *k, const int32_t *f)
{
    int got;
    if (f[F_NAME] < 0 || s->vals[f[F_NAME]].kind != K_STR
            || f[F_STATE] < 0 || s->vals[f[F_STATE]].kind != K_STR
            || f[F_GROUP] < 0 || s->vals[f[F_GROUP]].kind != K_TUPLE)
        return DECLINE;
    if ((got = tok_str(s, k, f[F_NAME])) != 1)
        return got;
    Cont *group = CONT(s, f[F_GROUP]);
    TOK(group->n);
    for (Py_ssize_t i = 0; i < group->n; i++) {
        if (s->vals[group->items[i]].kind != K_STR)
            return DECLINE;
        if ((got = tok_str(s, k, group->items[i])) != 1)
            return got;
    }
    if ((got = tok_str(s, k, f[F_STATE])) != 1)
        return got;
    static const int tri[] = {F_P2P, F_RETIRED}; /* bool or None */
    for (int t = 0; t < 2; t++) {
        int32_t w = f[tri[t]];
        uint8_t kind = w < 0 ? K_NONE : s->vals[w].kind;
        if (kind != K_NONE && kind != K_BOOL)
            return DECLINE;
        TOK(kind == K_NONE ? 2 : s->vals[w].u.i);
    }
    int32_t w = f[F_TIMEOUT]; /* int or None */
    uint8_t kind = w < 0 ? K_NONE : s->vals[w].kind;
    if (kind != K_NONE && kind != K_INT)
        return DECLINE;
    TOK(kind == K_INT);
    if (kind == K_INT)
        TOK(s->vals[w].u.i);
    w = f[F_THREAD]; /* str or None */
    kind = w < 0 ? K_NONE : s->vals[w].kind;
    if (kind != K_NONE && kind != K_STR)
        return DECLINE;
    TOK(kind == K_STR);
    if (kind == K_STR && (got = tok_str(s, k, w)) != 1)
        return got;
    if ((got = tok_list(s, k, f[F_IN_SIZES], 1)) != 1
            || (got = tok_list(s, k, f[F_OUT_SIZES], 1)) != 1
            || (got = tok_list(s, k, f[F_IN_TYPES], 0)) != 1
            || (got = tok_list(s, k, f[F_OUT_TYPES], 0)) != 1)
        return got;
    return 1;
}

static uint64_t hash_tokens(const int64_t *t, Py_ssize_t n)
{
    uint64_t h = 1469598103934665603ULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        h ^= (uint64_t)t[i];
        h *= 1099511628211ULL;
        h ^= h >> 29;
    }
    return h;
}

static PyObject *int_list(const int64_t *x, Py_ssize_t n)
{
    PyObject *list = PyList_New(n);
    if (list == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyLong_FromLongLong(x[i]);
        if (item == NULL) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, i, item);
    }
    return list;
}

/* The columns of the records of list value `list`: a tuple, None to decline, NULL on error. */
static PyObject *columns(State *s, int32_t list, const char *base)
{
    Cont *c = CONT(s, list);
    Py_ssize_t n = c->n, size = 1;
    PyObject *result = NULL, *created = NULL;
    int64_t *cols = PyMem_Malloc((size_t)n * 4 * sizeof(int64_t) + 1);
    Py_ssize_t *offs = PyMem_Malloc((size_t)(n + 1) * sizeof(Py_ssize_t));
    while (size < 2 * n)
        size *= 2;
    Py_ssize_t *table = PyMem_Malloc((size_t)size * sizeof(Py_ssize_t));
    Tokens tokens = {NULL, 0, 0}, *k = &tokens;
    int timed = 1, ok = 1;
    if (cols == NULL || offs == NULL || table == NULL) {
        PyErr_NoMemory();
        goto out;
    }
    int64_t *rids = cols, *seqs = cols + n, *p2ps = cols + 2 * n, *firsts = cols + 3 * n;
    for (Py_ssize_t i = 0; i < size; i++)
        table[i] = -1;
    created = PyList_New(n);
    if (created == NULL)
        goto out;
    for (Py_ssize_t r = 0; r < n && ok == 1; r++) {
        int32_t rec = c->items[r], f[N_FIELDS];
        if (s->vals[rec].kind != K_DICT) {
            ok = DECLINE;
            break;
        }
        for (int i = 0; i < N_FIELDS; i++)
            f[i] = -1;
        Cont *pairs = CONT(s, rec);
        for (Py_ssize_t i = 0; i + 1 < pairs->n; i += 2) {
            int32_t key = pairs->items[i];
            if (s->vals[key].kind == K_STR) {
                int which = field_of(s, key, base);
                if (which >= 0)
                    f[which] = pairs->items[i + 1]; /* the last of equal keys wins, as in a dict */
            }
        }
        /* ids and seqs: ints (p2p_seq_id may be None: 0) */
        if (f[F_RID] < 0 || s->vals[f[F_RID]].kind != K_INT
                || f[F_SEQ] < 0 || s->vals[f[F_SEQ]].kind != K_INT) {
            ok = DECLINE;
            break;
        }
        rids[r] = s->vals[f[F_RID]].u.i;
        seqs[r] = s->vals[f[F_SEQ]].u.i;
        uint8_t kind = f[F_P2P_SEQ] < 0 ? K_NONE : s->vals[f[F_P2P_SEQ]].kind;
        if (kind != K_NONE && kind != K_INT) {
            ok = DECLINE;
            break;
        }
        p2ps[r] = kind == K_INT ? s->vals[f[F_P2P_SEQ]].u.i : 0;
        kind = f[F_DURATION] < 0 ? K_NONE : s->vals[f[F_DURATION]].kind;
        if (kind != K_NONE && kind != K_INT && kind != K_FLOAT) {
            ok = DECLINE;
            break;
        }
        kind = f[F_CREATED] < 0 ? K_NONE : s->vals[f[F_CREATED]].kind;
        if (kind != K_NONE && kind != K_INT) {
            ok = DECLINE;
            break;
        }
        PyObject *when;
        if (kind == K_INT) {
            int64_t t = s->vals[f[F_CREATED]].u.i;
            timed = timed && t > 0;
            when = PyLong_FromLongLong(t);
            if (when == NULL)
                goto out;
        } else {
            timed = 0;
            when = Py_NewRef(Py_None);
        }
        PyList_SET_ITEM(created, r, when);
        /* the key, and the first record with an equal one */
        offs[r] = k->n;
        ok = tok_record(s, k, f);
        if (ok != 1)
            break;
        Py_ssize_t len = k->n - offs[r];
        uint64_t h = hash_tokens(k->t + offs[r], len);
        Py_ssize_t slot = (Py_ssize_t)(h & (uint64_t)(size - 1));
        for (;;) {
            Py_ssize_t first = table[slot];
            if (first < 0) {
                table[slot] = r;
                firsts[r] = r;
                break;
            }
            Py_ssize_t flen = offs[first + 1] - offs[first];
            if (flen == len && memcmp(k->t + offs[first], k->t + offs[r],
                                      (size_t)len * sizeof(int64_t)) == 0) {
                firsts[r] = first;
                k->n = offs[r]; /* its tokens are its first's: drop them */
                break;
            }
            slot = (slot + 1) & (size - 1);
        }
        offs[r + 1] = k->n; /* a first's tokens stay; another's were dropped: it ends where it began */
    }
    if (ok == FAILED)
        goto out;
    if (ok == DECLINE) {
        result = Py_NewRef(Py_None);
        goto out;
    }
    result = Py_BuildValue("(NNNNNN)", int_list(rids, n), int_list(seqs, n), int_list(p2ps, n),
                           Py_NewRef(created), PyBool_FromLong(timed), int_list(firsts, n));
out:
    Py_XDECREF(created);
    PyMem_Free(cols);
    PyMem_Free(offs);
    PyMem_Free(table);
    PyMem_Free(tokens.t);
    return result;
}

static PyObject *frscan_read(PyObject *module, PyObject *arg)
{
    Py_buffer view;
    PyObject *result = NULL, *top = NULL;
    Entries *entries = NULL;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const char *base = view.buf;
    State *s = PyMem_Calloc(1, sizeof(State));
    if (s == NULL) {
        PyErr_NoMemory();
        goto out;
    }
    int32_t root = parse(s, view.buf, view.len);
    if (root == -2)
        goto out;
    if (root < 0 || s->vals[root].kind != K_DICT)
        goto decline;
    int checked = check_graph(s, root);
    if (checked < 0) {
        PyErr_NoMemory();
        goto out;
    }
    if (!checked)
        goto decline;
    s->objs = PyMem_Calloc((size_t)s->nvals, sizeof(PyObject *));
    s->sids = PyDict_New();
    if (s->objs == NULL || s->sids == NULL) {
        PyErr_NoMemory();
        goto out;
    }
    for (Py_ssize_t v = 0; v < s->nvals; v++) { /* as the unpickler decodes them, or decline */
        Val *x = &s->vals[v];
        if (x->kind != K_STR)
            continue;
        s->objs[v] = PyUnicode_DecodeUTF8(base + x->u.s.off, x->u.s.len, "surrogatepass");
        if (s->objs[v] == NULL) {
            if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError))
                goto out;
            PyErr_Clear();
            goto decline;
        }
    }
    /* the top level: every field but the records, whose value (the last "entries") is kept */
    Cont *pairs = CONT(s, root);
    int32_t list = -1;
    for (Py_ssize_t i = 0; i + 1 < pairs->n; i += 2) {
        Val *key = &s->vals[pairs->items[i]];
        if (key->kind == K_STR && key->u.s.len == 7 && memcmp(base + key->u.s.off, "entries", 7) == 0)
            list = pairs->items[i + 1];
    }
    if (list < 0 || s->vals[list].kind != K_LIST || CONT(s, list)->n == 0)
        goto decline;
    PyObject *cols = columns(s, list, base);
    if (cols == NULL)
        goto out;
    if (cols == Py_None) {
        Py_DECREF(cols);
        goto decline;
    }
    top = make_dict(s, root, list); /* not kept in objs: the records must not hold it */
    if (top == NULL) {
        Py_DECREF(cols);
        goto out;
    }
    entries = PyObject_New(Entries, &EntriesType);
    if (entries == NULL) {
        Py_DECREF(cols);
        goto out;
    }
    entries->state = s;
    entries->list = list;
    s = NULL; /* the records own it now */
    result = Py_BuildValue("(NNN)", Py_NewRef(top), (PyObject *)entries, cols);
    entries = NULL;
    goto out;
decline:
    result = Py_NewRef(Py_None);
out:
    Py_XDECREF(top);
    Py_XDECREF(entries);
    state_free(s);
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef frscan_methods[] = {
    {"read", frscan_read, METH_O,
     "read(data) -> (top, entries, (record_ids, seqs, p2p_seqs, created, timed, firsts)) or None\n\n"
     "A flight-recorder pickle's top-level fields but 'entries', its records (made when\n"
     "indexed) and their columns as sources.fr_columns.scan computes them; None where the\n"
     "pickle or a record is of a form left to the unpickler."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef frscan_module = {
    PyModuleDef_HEAD_INIT, "_frscan",
    "A flight-recorder pickle read into columns (see hangscope/_frscan.c).", -1, frscan_methods};

PyMODINIT_FUNC PyInit__frscan(void)
{
    if (PyType_Ready(&EntriesType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&frscan_module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&EntriesType);
    if (PyModule_AddObject(m, "Entries", (PyObject *)&EntriesType) < 0) {
        Py_DECREF(&EntriesType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
