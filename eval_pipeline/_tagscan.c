/* One-pass scans of a batch's UTF-8 string buffers (#12.1, target 1).
 *
 * The Arrow stages (formats/xml_arrow.py, preprocess_arrow.py, clips_arrow.py) find tags,
 * trim step texts and map byte offsets to character offsets with numpy: a few dozen whole-
 * array passes per batch, each paying numpy's call overhead and a fresh temporary. The
 * functions here compute the same arrays in one pass each, on the Arrow buffers handed in
 * as-is (any contiguous buffer: numpy arrays, pyarrow Buffers; no copy), and return their
 * results as bytearrays the Python side wraps with np.frombuffer. Every function has a
 * numpy twin (the fallback when this module is not built), and the tests hold both to the
 * same output (eval_pipeline_tests/test_tagscan.py, and the stage tests run both ways).
 *
 * CPython C API and the buffer protocol only: no numpy headers, no third-party library.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>  /* a compiler intrinsic header, no library */
#endif

/* ---- growable output arrays ---------------------------------------------------------- */

typedef struct {
    char *data;
    Py_ssize_t len;  /* bytes used */
    Py_ssize_t cap;
} vec;

static int vec_reserve(vec *v, Py_ssize_t extra) {
    if (v->len + extra <= v->cap) return 0;
    Py_ssize_t cap = v->cap ? v->cap : 256;
    while (cap < v->len + extra) cap *= 2;
    char *p = PyMem_Realloc(v->data, (size_t)cap);
    if (!p) { PyErr_NoMemory(); return -1; }
    v->data = p;
    v->cap = cap;
    return 0;
}

static int vec_push(vec *v, const void *item, Py_ssize_t size) {
    if (vec_reserve(v, size) < 0) return -1;
    memcpy(v->data + v->len, item, (size_t)size);
    v->len += size;
    return 0;
}

#define PUSH(v, type, value) do { type _x = (value); \
    if (vec_push(&(v), &_x, sizeof(type)) < 0) goto fail; } while (0)

/* The vector as a bytearray (the caller's np.frombuffer view), freeing the vector. */
static PyObject *vec_take(vec *v) {
    PyObject *out = PyByteArray_FromStringAndSize(v->data ? v->data : "", v->len);
    PyMem_Free(v->data);
    v->data = NULL;
    v->len = v->cap = 0;
    return out;
}

static void vec_free(vec *v) {
    PyMem_Free(v->data);
    v->data = NULL;
}

/* A tuple of bytearrays from vectors (all freed, also on failure). */
static PyObject *vecs_tuple(vec *vs, int count) {
    PyObject *tuple = PyTuple_New(count);
    int failed = tuple == NULL;
    for (int i = 0; i < count; i++) {
        if (failed) { vec_free(&vs[i]); continue; }
        PyObject *item = vec_take(&vs[i]);
        if (!item) { failed = 1; continue; }
        PyTuple_SET_ITEM(tuple, i, item);
    }
    if (failed) { Py_XDECREF(tuple); return NULL; }
    return tuple;
}

/* int64 offsets from a buffer: ``count`` of them at least. */
static int check_i64(Py_buffer *b, Py_ssize_t count, const char *what) {
    if (b->len % 8 || b->len / 8 < count) {
        PyErr_Format(PyExc_ValueError, "%s: expected %zd int64 values", what, count);
        return -1;
    }
    return 0;
}

/* ---- byte classes -------------------------------------------------------------------- */

static unsigned char XML_NAME[256], XML_FIRST[256], TAGLIKE_NEXT[256], PY_SPACE[256],
    PREP_NAME[256], PREP_START[256], MAYBE_SPACE_LEAD[256];

static void init_tables(void) {
    for (int c = 0; c < 256; c++) {
        int alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
        int digit = c >= '0' && c <= '9';
        XML_NAME[c] = alpha || digit || c == '_' || c == '.' || c == '-';
        XML_FIRST[c] = alpha || c == '_';
        TAGLIKE_NEXT[c] = XML_FIRST[c] || c == '/';
        PY_SPACE[c] = (c >= 9 && c <= 13) || (c >= 28 && c <= 32);
        PREP_NAME[c] = alpha || digit || c == '_' || c == '-';
        PREP_START[c] = alpha || c == '_';
        MAYBE_SPACE_LEAD[c] = c == 0xC2 || c == 0xE1 || c == 0xE2 || c == 0xE3;
    }
}

static inline unsigned char lower(unsigned char c) {
    return (c >= 'A' && c <= 'Z') ? (unsigned char)(c + 32) : c;
}

#define FNV_OFFSET 0xcbf29ce484222325ULL
#define FNV_PRIME 0x100000001b3ULL

/* ---- xml_scan: formats/xml_arrow.py's candidate tags ----------------------------------- */

#define XML_WINDOW 32
#define MAX_NAMES 256

static const char SELF_CLOSING_A[] = "execute_tools />";
static const char SELF_CLOSING_B[] = "execute_tools/>";

static PyObject *xml_scan(PyObject *self, PyObject *args) {
    Py_buffer data_b, off_b;
    Py_ssize_t total;
    PyObject *names;
    if (!PyArg_ParseTuple(args, "y*ny*O!", &data_b, &total, &off_b, &PyTuple_Type, &names))
        return NULL;
    vec out[10] = {{0}};
    PyObject *result = NULL;
    const unsigned char *names_at[MAX_NAMES];
    Py_ssize_t names_len[MAX_NAMES];
    Py_ssize_t n_names = PyTuple_GET_SIZE(names);
    Py_ssize_t n_off = off_b.len / 8;
    if (n_names > MAX_NAMES || total < 0 || total > data_b.len || n_off < 1 || off_b.len % 8) {
        PyErr_SetString(PyExc_ValueError, "xml_scan: bad arguments");
        goto done;
    }
    for (Py_ssize_t i = 0; i < n_names; i++) {
        PyObject *item = PyTuple_GET_ITEM(names, i);
        if (!PyBytes_Check(item)) {
            PyErr_SetString(PyExc_TypeError, "xml_scan: names must be bytes");
            goto done;
        }
        names_at[i] = (const unsigned char *)PyBytes_AS_STRING(item);
        names_len[i] = PyBytes_GET_SIZE(item);
    }
    const unsigned char *d = data_b.buf;
    const int64_t *offsets = off_b.buf;
    Py_ssize_t n_rec = n_off - 1;
    Py_ssize_t rec = 0;
    const unsigned char *hit = total ? memchr(d, '<', (size_t)total) : NULL;
    while (hit) {
        Py_ssize_t p = hit - d;
        hit = p + 1 < total ? memchr(d + p + 1, '<', (size_t)(total - p - 1)) : NULL;
        unsigned char after = p + 1 < total ? d[p + 1] : 0;
        if (!(TAGLIKE_NEXT[after] || after >= 0x80)) continue;
        int closing = after == '/';
        Py_ssize_t name_at = p + 1 + closing;
        unsigned char first = name_at < total ? d[name_at] : 0;
        unsigned char low[XML_WINDOW];
        Py_ssize_t run = 0;
        int upper = 0;
        uint64_t hash = FNV_OFFSET;
        while (run < XML_WINDOW && name_at + run < total && XML_NAME[d[name_at + run]]) {
            unsigned char c = d[name_at + run];
            upper |= c >= 'A' && c <= 'Z';
            low[run] = lower(c);
            hash = (hash ^ low[run]) * FNV_PRIME;
            run++;
        }
        hash = (hash ^ (uint64_t)run) * FNV_PRIME;
        unsigned char term = name_at + run < total ? d[name_at + run] : 0;
        int64_t lower_id = -1;
        for (Py_ssize_t i = 0; i < n_names; i++) {
            if (names_len[i] == run && memcmp(names_at[i], low, (size_t)run) == 0) {
                lower_id = i;
                break;
            }
        }
        int64_t exact = (lower_id >= 0 && !upper && term == '>' && run < XML_WINDOW)
                        ? lower_id : -1;
        int loose = (lower_id >= 0 && XML_FIRST[first]) || first >= 0x80
                    || (term >= 0x80 && XML_FIRST[first]);
        int self_closing =
            (name_at + 16 <= total && memcmp(d + name_at, SELF_CLOSING_A, 16) == 0)
            || (name_at + 15 <= total && memcmp(d + name_at, SELF_CLOSING_B, 15) == 0);
        while (rec + 1 < n_rec && offsets[rec + 1] <= p) rec++;
        PUSH(out[0], int64_t, p);
        PUSH(out[1], int64_t, rec);
        PUSH(out[2], uint8_t, closing);
        PUSH(out[3], uint8_t, TAGLIKE_NEXT[after]);
        PUSH(out[4], int64_t, run);
        PUSH(out[5], uint8_t, term);
        PUSH(out[6], int64_t, exact);
        PUSH(out[7], uint8_t, loose);
        PUSH(out[8], uint64_t, hash);
        PUSH(out[9], uint8_t, self_closing);
    }
    result = vecs_tuple(out, 10);
    goto done;
fail:
    for (int i = 0; i < 10; i++) vec_free(&out[i]);
done:
    PyBuffer_Release(&data_b);
    PyBuffer_Release(&off_b);
    return result;
}

/* ---- xml_pair: formats/xml_arrow.py's nesting checks and elements ----------------------- */

/* A set of uint64 keys (open addressing), cleared per record. */
typedef struct {
    uint64_t *keys;
    unsigned char *used;
    Py_ssize_t cap;
} keyset;

static int keyset_reset(keyset *set, Py_ssize_t items) {
    Py_ssize_t cap = 16;
    while (cap < 2 * items + 1) cap *= 2;
    if (cap > set->cap) {
        PyMem_Free(set->keys);
        PyMem_Free(set->used);
        set->keys = PyMem_Malloc((size_t)cap * sizeof(uint64_t));
        set->used = PyMem_Malloc((size_t)cap);
        if (!set->keys || !set->used) { PyErr_NoMemory(); set->cap = 0; return -1; }
        set->cap = cap;
    }
    memset(set->used, 0, (size_t)set->cap);
    return 0;
}

static inline Py_ssize_t keyset_slot(const keyset *set, uint64_t key) {
    Py_ssize_t mask = set->cap - 1;
    Py_ssize_t at = (Py_ssize_t)((key ^ (key >> 29)) * 0x9E3779B97F4A7C15ULL >> 7) & mask;
    while (set->used[at] && set->keys[at] != key) at = (at + 1) & mask;
    return at;
}

enum { T_NONE = 0, T_TOKEN, T_LIMITED, T_ORPHAN, T_STRAY, T_TOP, T_INNER };

/* xml_pair(lt, rec, closing, taglike, run, term, exact_id, loose, name_hash, self_closing,
 *          n, answer, tool_call)
 * -> (bad, top_pos, top_name, top_close, top_rec, top_end, lim_pos, lim_rec, lim_end,
 *     lim_limit, orphan_pos, orphan_rec, orphan_name)
 *
 * The candidates (xml_scan's arrays) record by record, as _chunk_steps' numpy code reads
 * them: the known tags (exact_id >= 0) must nest, each closer closing the latest open tag
 * of its name; an <answer> opener followed right away by a known opener is "limited" (an
 * element of its own, to that tag); an opener with no later tag of its name is an orphan
 * (text; noted when between elements); a closer with nothing open is stray (text); tags
 * inside an element may not have its name nor be inside an <answer>; other tag-like text
 * outside the elements must be what the Python scan reads as text. A record that breaks
 * a rule is bad (read in Python). Returned: bad per record, the level-1 tags (elements'
 * openers and closers), the limited answers between elements and the orphans between
 * elements, of every record (the caller keeps those of good records). */
static PyObject *xml_pair(PyObject *self, PyObject *args) {
    Py_buffer b[10];
    Py_ssize_t n, answer, tool_call;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*y*y*y*y*y*nnn", &b[0], &b[1], &b[2], &b[3], &b[4],
                          &b[5], &b[6], &b[7], &b[8], &b[9], &n, &answer, &tool_call))
        return NULL;
    PyObject *result = NULL, *bad_obj = NULL;
    vec out[14] = {{0}};
    keyset closers = {0};
    unsigned char *status = NULL, *later = NULL;
    Py_ssize_t *stack = NULL;
    Py_ssize_t k = b[0].len / 8, scratch = 0;
    static const int sizes[10] = {8, 8, 1, 1, 8, 1, 8, 1, 8, 1};
    for (int i = 0; i < 10; i++) {
        if (b[i].len != k * sizes[i]) {
            PyErr_SetString(PyExc_ValueError, "xml_pair: arrays of different lengths");
            goto done;
        }
    }
    if (n < 0) { PyErr_SetString(PyExc_ValueError, "xml_pair: bad n"); goto done; }
    const int64_t *lt = b[0].buf, *rec = b[1].buf, *run = b[4].buf, *exact = b[6].buf;
    const unsigned char *closing = b[2].buf, *taglike = b[3].buf, *term = b[5].buf,
                        *loose = b[7].buf, *self_closing = b[9].buf;
    const uint64_t *hash = b[8].buf;
    bad_obj = PyByteArray_FromStringAndSize(NULL, n);
    if (!bad_obj) goto done;
    unsigned char *bad = (unsigned char *)PyByteArray_AS_STRING(bad_obj);
    memset(bad, 0, (size_t)n);
    for (Py_ssize_t c0 = 0, c1; c0 < k; c0 = c1) {
        int64_t r = rec[c0];
        if (r < 0 || r >= n || (c0 && r < rec[c0 - 1])) {
            PyErr_SetString(PyExc_ValueError, "xml_pair: records out of range or order");
            goto fail;
        }
        for (c1 = c0 + 1; c1 < k && rec[c1] == r; c1++) {}
        Py_ssize_t count = c1 - c0;
        if (count > scratch) {
            PyMem_Free(status); PyMem_Free(later); PyMem_Free(stack);
            scratch = count * 2;
            status = PyMem_Malloc((size_t)scratch);
            later = PyMem_Malloc((size_t)scratch);
            stack = PyMem_Malloc((size_t)scratch * sizeof(Py_ssize_t));
            if (!status || !later || !stack) { PyErr_NoMemory(); goto fail; }
        }
        unsigned char *st = status - c0, *lat = later - c0;  /* indexed by candidate */
        Py_ssize_t *stk = stack;
        /* Tokens, loose spellings, <tool_call>, limited answers. */
        for (Py_ssize_t c = c0; c < c1; c++) {
            st[c] = T_NONE;
            if (loose[c] && exact[c] < 0) bad[r] = 1;
            if (exact[c] < 0) continue;
            if (exact[c] >= MAX_NAMES) {
                PyErr_SetString(PyExc_ValueError, "xml_pair: name id too large");
                goto fail;
            }
            st[c] = T_TOKEN;
            if (exact[c] == tool_call) bad[r] = 1;
            if (!closing[c] && exact[c] == answer && c + 1 < c1 && exact[c + 1] >= 0
                && !closing[c + 1])
                st[c] = T_LIMITED;
        }
        /* Orphans: openers (not <answer>) with no later token of their name; and, for
         * tag-like text, whether a closer of its name (any case) follows in the record. */
        if (keyset_reset(&closers, count) < 0) goto fail;
        unsigned char later_name[MAX_NAMES];
        memset(later_name, 0, sizeof(later_name));
        for (Py_ssize_t c = c1 - 1; c >= c0; c--) {
            lat[c] = closers.used[keyset_slot(&closers, hash[c])];
            if (closing[c]) {
                Py_ssize_t at = keyset_slot(&closers, hash[c]);
                closers.used[at] = 1;
                closers.keys[at] = hash[c];
            }
            if (st[c] != T_TOKEN) continue;
            if (!closing[c] && exact[c] != answer && !later_name[exact[c]]) st[c] = T_ORPHAN;
            later_name[exact[c]] = 1;
        }
        /* Nesting: strays dropped, each closer must close the latest opener, of its name;
         * nothing inside an element of its own name or inside an <answer>. */
        Py_ssize_t depth = 0, last_token = -1;
        for (Py_ssize_t c = c0; c < c1; c++) {
            if (st[c] != T_TOKEN) continue;
            if (closing[c]) {
                if (depth == 0) { st[c] = T_STRAY; continue; }
                if (depth > 1 && (exact[stk[0]] == exact[c] || exact[stk[0]] == answer))
                    bad[r] = 1;
                if (exact[stk[depth - 1]] != exact[c]) bad[r] = 1;
                st[c] = depth == 1 ? T_TOP : T_INNER;
                depth--;
            } else {
                if (depth > 0 && (exact[stk[0]] == exact[c] || exact[stk[0]] == answer))
                    bad[r] = 1;
                st[c] = depth == 0 ? T_TOP : T_INNER;
                stk[depth++] = c;
            }
            last_token = c;
        }
        /* Left open: only an <answer> at the top, as the record's last tag. */
        if (depth > 1 || (depth == 1 && (exact[stk[0]] != answer || stk[0] != last_token)))
            bad[r] = 1;
        /* Between and inside the elements, in order. */
        int64_t open_top = -1;
        for (Py_ssize_t c = c0; c < c1; c++) {
            switch (st[c]) {
            case T_TOP:
                open_top = closing[c] ? -1 : exact[c];
                PUSH(out[0], int64_t, lt[c]);
                PUSH(out[1], int64_t, exact[c]);
                PUSH(out[2], uint8_t, closing[c]);
                PUSH(out[3], int64_t, r);
                PUSH(out[4], int64_t, lt[c] + 1 + closing[c] + run[c] + 1);
                continue;
            case T_LIMITED:
                if (open_top >= 0) {  /* text of the element it is in */
                    if (open_top == answer) bad[r] = 1;
                    continue;
                }
                PUSH(out[5], int64_t, lt[c]);
                PUSH(out[6], int64_t, r);
                PUSH(out[7], int64_t, lt[c] + 1 + closing[c] + run[c] + 1);
                PUSH(out[8], int64_t, lt[c + 1]);
                continue;
            case T_ORPHAN:
                if (open_top >= 0) {
                    if (open_top == answer) bad[r] = 1;
                    continue;
                }
                PUSH(out[9], int64_t, lt[c]);
                PUSH(out[10], int64_t, r);
                PUSH(out[11], int64_t, exact[c]);
                continue;
            case T_NONE:
                if (!taglike[c]) continue;
                if (open_top == answer) { bad[r] = 1; continue; }
                if (open_top >= 0) continue;  /* text of a body */
                {
                    int known_run = run[c] > 0 && run[c] < XML_WINDOW && term[c] < 0x80;
                    if (known_run && lat[c] && !self_closing[c] && !closing[c]) {
                        /* An opener of another name with a closer of it further on: a
                         * tool call only if the closer it pairs with is followed by a
                         * trigger, which the caller checks (verify). */
                        PUSH(out[12], int64_t, lt[c]);
                        PUSH(out[13], int64_t, r);
                    } else if (!(self_closing[c] || closing[c] || (known_run && !lat[c]))) {
                        bad[r] = 1;
                    }
                }
                continue;
            default:
                continue;
            }
        }
    }
    {
        PyObject *arrays = vecs_tuple(out, 14);
        if (arrays) result = Py_BuildValue("(ON)", bad_obj, arrays);
    }
    goto done;
fail:
    for (int i = 0; i < 14; i++) vec_free(&out[i]);
done:
    Py_XDECREF(bad_obj);
    PyMem_Free(closers.keys);
    PyMem_Free(closers.used);
    PyMem_Free(status);
    PyMem_Free(later);
    PyMem_Free(stack);
    for (int i = 0; i < 10; i++) PyBuffer_Release(&b[i]);
    return result;
}

/* ---- split_actions: xml_tags.split_action on ASCII edges -------------------------------- */

/* [s, e) with ASCII whitespace stripped; 1 if an edge left may be non-ASCII whitespace
 * (its lead byte is one such characters have: str.strip would decide). */
static int strip_range(const unsigned char *d, int64_t *s, int64_t *e) {
    while (*s < *e && PY_SPACE[d[*s]]) (*s)++;
    while (*e > *s && PY_SPACE[d[*e - 1]]) (*e)--;
    if (*s >= *e) return 0;
    int64_t lead = *e - 1;
    for (int k = 0; k < 3 && lead > *s && (d[lead] & 0xC0) == 0x80; k++) lead--;
    return MAYBE_SPACE_LEAD[d[*s]] || MAYBE_SPACE_LEAD[d[lead]];
}

/* split_actions(data, starts, ends) -> (how, name_start, name_end, value_start, value_end)
 *
 * Per body data[starts[i]:ends[i]], xml_tags.split_action's reading of it: the regex
 * ^\s*<([A-Za-z_][\w.-]*)(?:\s[^>]*)?>(.*?)</\1>\s*$ (DOTALL) then strip(). how: 1 the
 * regex matches (the action name and the stripped body), 0 it does not (the value is the
 * whole body stripped), 2 a non-ASCII byte where Python's Unicode \s, \w or strip() could
 * read it otherwise: call split_action itself. */
static PyObject *split_actions(PyObject *self, PyObject *args) {
    Py_buffer data_b, start_b, end_b;
    if (!PyArg_ParseTuple(args, "y*y*y*", &data_b, &start_b, &end_b)) return NULL;
    PyObject *result = NULL;
    vec out[5] = {{0}};
    Py_ssize_t m = start_b.len / 8;
    if (check_i64(&start_b, m, "split_actions") < 0 || end_b.len != start_b.len) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "split_actions: bad arguments");
        goto done;
    }
    const unsigned char *d = data_b.buf;
    const int64_t *starts = start_b.buf, *ends = end_b.buf;
    for (Py_ssize_t i = 0; i < m; i++) {
        int64_t s = starts[i], e = ends[i];
        if (s < 0 || e < s || e > data_b.len) {
            PyErr_SetString(PyExc_IndexError, "split_actions: range outside the data");
            goto fail;
        }
        int how = 0;
        int64_t name_s = 0, name_e = 0, vs = s, ve = e;
        int64_t p = s;
        while (p < e && PY_SPACE[d[p]]) p++;
        if (p < e && d[p] >= 0x80) {
            how = 2;  /* Unicode whitespace before the '<'? */
        } else if (p + 1 < e && d[p] == '<' && XML_FIRST[d[p + 1]]) {
            name_s = p + 1;
            int64_t q = name_s + 1;
            while (q < e && (XML_NAME[d[q]])) q++;  /* [A-Za-z0-9_.-] */
            name_e = q;
            int64_t open_end = -1;
            if (q < e && d[q] >= 0x80) {
                how = 2;  /* a Unicode \w or \s after the name */
            } else if (q < e && d[q] == '>') {
                open_end = q + 1;
            } else if (q < e && PY_SPACE[d[q]]) {
                const unsigned char *gt = memchr(d + q, '>', (size_t)(e - q));
                if (gt) open_end = gt - d + 1;
            }
            if (how != 2 && open_end >= 0) {
                /* The closer: the string's end less trailing whitespace must be
                 * "</name>", at or after the opening tag's end. */
                int64_t t = e;
                while (t > open_end && PY_SPACE[d[t - 1]]) t--;
                int64_t len = name_e - name_s;
                int64_t close_at = t - (len + 3);
                if (t > open_end && d[t - 1] >= 0x80) {
                    how = 2;  /* Unicode whitespace at the end? */
                } else if (close_at >= open_end && d[close_at] == '<' && d[close_at + 1] == '/'
                           && memcmp(d + close_at + 2, d + name_s, (size_t)len) == 0
                           && d[t - 1] == '>') {
                    how = 1;
                    vs = open_end;
                    ve = close_at;
                }
            }
        } else if (p + 1 < e && d[p] == '<' && d[p + 1] >= 0x80) {
            how = 0;  /* [A-Za-z_] is ASCII: no match */
        }
        if (how != 2 && strip_range(d, &vs, &ve)) how = 2;
        PUSH(out[0], uint8_t, (uint8_t)how);
        PUSH(out[1], int64_t, name_s);
        PUSH(out[2], int64_t, name_e);
        PUSH(out[3], int64_t, vs);
        PUSH(out[4], int64_t, ve);
    }
    result = vecs_tuple(out, 5);
    goto done;
fail:
    for (int i = 0; i < 5; i++) vec_free(&out[i]);
done:
    PyBuffer_Release(&data_b);
    PyBuffer_Release(&start_b);
    PyBuffer_Release(&end_b);
    return result;
}

/* ---- prep_scan: preprocess_arrow._scan's tag tokens ------------------------------------ */

#define PREP_WINDOW 32
#define PREP_READ (PREP_WINDOW + 2)

static PyObject *prep_scan(PyObject *self, PyObject *args) {
    Py_buffer data_b, off_b;
    if (!PyArg_ParseTuple(args, "y*y*", &data_b, &off_b)) return NULL;
    vec out[7] = {{0}};
    PyObject *result = NULL, *unsure_obj = NULL;
    Py_ssize_t n_off = off_b.len / 8;
    if (n_off < 1 || off_b.len % 8) {
        PyErr_SetString(PyExc_ValueError, "prep_scan: bad offsets");
        goto done;
    }
    Py_ssize_t n = n_off - 1;
    unsure_obj = PyByteArray_FromStringAndSize(NULL, n);
    if (!unsure_obj) goto done;
    unsigned char *unsure = (unsigned char *)PyByteArray_AS_STRING(unsure_obj);
    memset(unsure, 0, (size_t)n);
    const unsigned char *d = data_b.buf;
    const int64_t *offsets = off_b.buf;
    Py_ssize_t size = data_b.len;
    Py_ssize_t last = size - 1;
    Py_ssize_t row = 0;
    Py_ssize_t gt_from = -1, gt_at = -1;  /* the first '>' at or after gt_from */
    const unsigned char *hit = size ? memchr(d, '<', (size_t)size) : NULL;
    while (hit) {
        Py_ssize_t c = hit - d;
        hit = c + 1 < size ? memchr(d + c + 1, '<', (size_t)(size - c - 1)) : NULL;
        Py_ssize_t next_lt = hit ? hit - d : size;
        if (c + 1 >= size) continue;
        unsigned char following = d[c + 1];
        unsigned char second = d[c + 2 < size ? c + 2 : last];
        if (!(PREP_START[following] || following >= 128
              || (following == '/' && (PREP_START[second] || second >= 128))))
            continue;
        while (row + 1 < n && offsets[row + 1] <= c) row++;
        Py_ssize_t row_end = offsets[row + 1];
        int closing = following == '/';
        Py_ssize_t name_start = c + 1 + closing;
        unsigned char window[PREP_READ];
        for (int k = 0; k < PREP_READ; k++) {
            Py_ssize_t at = name_start + k;
            window[k] = d[at < size ? at : last];
        }
        int run = 0;
        while (run < PREP_READ && PREP_NAME[window[run]]) run++;
        int full = run == PREP_READ;
        if (full) run = 0;  /* numpy's argmin of an all-true row */
        Py_ssize_t term_at = name_start + run;
        unsigned char term = full ? 0 : window[run];
        int inside = term_at < row_end;
        int odd = inside && (term >= 128 || full);
        if (odd) unsure[row] = 1;
        int first_ok = PREP_START[window[0]] && run > 0;
        unsigned char after = d[term_at + 1 < size ? term_at + 1 : last];
        int spaced = PY_SPACE[term];
        int direct = term == '>';
        int self_closing = term == '/' && after == '>' && term_at + 1 < size;
        Py_ssize_t g = size;
        if (spaced) {
            if (!(gt_from >= 0 && term_at >= gt_from && term_at <= gt_at)) {
                const unsigned char *gt =
                    term_at < size ? memchr(d + term_at, '>', (size_t)(size - term_at)) : NULL;
                gt_from = term_at;
                gt_at = gt ? gt - d : size;
            }
            g = gt_at;
        }
        Py_ssize_t end = direct ? term_at + 1 : self_closing ? term_at + 2 : g + 1;
        int ok = first_ok && inside && !odd
                 && (direct || self_closing || (spaced && g < next_lt)) && end <= row_end;
        if (!ok) continue;
        unsigned char name[PREP_WINDOW];
        for (int k = 0; k < PREP_WINDOW; k++) name[k] = k < run ? lower(window[k]) : 0;
        PUSH(out[0], int64_t, row);
        PUSH(out[1], uint8_t, closing);
        if (vec_push(&out[2], name, PREP_WINDOW) < 0) goto fail;
        PUSH(out[3], int64_t, spaced ? g - term_at : 0);
        PUSH(out[4], int64_t, term_at);
        PUSH(out[5], int64_t, end);
        PUSH(out[6], uint8_t, self_closing);
    }
    {
        PyObject *tokens = vecs_tuple(out, 7);
        if (tokens) {
            result = Py_BuildValue("(NO)", tokens, unsure_obj);
        }
    }
    goto done;
fail:
    for (int i = 0; i < 7; i++) vec_free(&out[i]);
done:
    Py_XDECREF(unsure_obj);
    PyBuffer_Release(&data_b);
    PyBuffer_Release(&off_b);
    return result;
}

/* ---- repair_status: preprocess_arrow._repair_status's walk ------------------------------ */

/* repair_status(data, row, closing, name, attrs, attr_start, self_closing, n, known, flat,
 *               opaque, answer) -> (python, answer_closed)
 *
 * prep_scan's tokens row by row, as repair_tags walks the known tags (known: the names,
 * sorted, as PREP_WINDOW-padded bytes each; flat, opaque: a byte per name; answer: its
 * index): an opaque opening ends at the next tag of its name that is its closer (only
 * whitespace attributes) or another opening of it; a flat opening at the next tag that is
 * not self-closing, if that closes it. Tags inside an element's span are skipped; the rest
 * must pair, opening then its end, from the row's first. The one repair decided here: the
 * last opening an <answer> nothing follows (closed at the end). python: the row needs
 * repair_tags itself (or has a closer with non-ASCII attributes). */
static PyObject *repair_status(PyObject *self, PyObject *args) {
    Py_buffer data_b, row_b, closing_b, name_b, attrs_b, astart_b, sc_b, flat_b, opaque_b;
    Py_ssize_t n, answer;
    PyObject *known;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*y*y*nO!y*y*n", &data_b, &row_b, &closing_b,
                          &name_b, &attrs_b, &astart_b, &sc_b, &n, &PyTuple_Type, &known,
                          &flat_b, &opaque_b, &answer))
        return NULL;
    PyObject *python_obj = NULL, *closed_obj = NULL, *result = NULL;
    int64_t *tok = NULL, *name_of = NULL, *following = NULL, *own_next = NULL, *end = NULL,
            *cover = NULL, *top = NULL;
    unsigned char *blank = NULL;
    Py_ssize_t k = row_b.len / 8, scratch = 0;
    Py_ssize_t n_known = PyTuple_GET_SIZE(known);
    if (check_i64(&row_b, k, "repair_status") < 0 || closing_b.len != k || sc_b.len != k
        || name_b.len != k * PREP_WINDOW || attrs_b.len != k * 8 || astart_b.len != k * 8
        || flat_b.len != n_known || opaque_b.len != n_known || n_known > MAX_NAMES || n < 0) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "repair_status: bad arguments");
        goto done;
    }
    unsigned char known_names[MAX_NAMES][PREP_WINDOW];
    for (Py_ssize_t i = 0; i < n_known; i++) {
        PyObject *item = PyTuple_GET_ITEM(known, i);
        if (!PyBytes_Check(item) || PyBytes_GET_SIZE(item) > PREP_WINDOW) {
            PyErr_SetString(PyExc_ValueError, "repair_status: known names must be short bytes");
            goto done;
        }
        memset(known_names[i], 0, PREP_WINDOW);
        memcpy(known_names[i], PyBytes_AS_STRING(item), (size_t)PyBytes_GET_SIZE(item));
    }
    const unsigned char *d = data_b.buf, *closing = closing_b.buf, *names = name_b.buf,
                        *sc = sc_b.buf, *flat = flat_b.buf, *opaque = opaque_b.buf;
    const int64_t *rows = row_b.buf, *attrs = attrs_b.buf, *astart = astart_b.buf;
    python_obj = PyByteArray_FromStringAndSize(NULL, n);
    closed_obj = PyByteArray_FromStringAndSize(NULL, n);
    if (!python_obj || !closed_obj) goto done;
    unsigned char *python = (unsigned char *)PyByteArray_AS_STRING(python_obj);
    unsigned char *answer_closed = (unsigned char *)PyByteArray_AS_STRING(closed_obj);
    memset(python, 0, (size_t)n);
    memset(answer_closed, 0, (size_t)n);
    int64_t next_event[MAX_NAMES];
    for (Py_ssize_t a = 0, z; a < k; a = z) {
        int64_t r = rows[a];
        if (r < 0 || r >= n || (a && r < rows[a - 1])) {
            PyErr_SetString(PyExc_ValueError, "repair_status: rows out of range or order");
            goto done;
        }
        for (z = a + 1; z < k && rows[z] == r; z++) {}
        if (z - a + 1 > scratch) {
            PyMem_Free(tok); PyMem_Free(name_of); PyMem_Free(following); PyMem_Free(own_next);
            PyMem_Free(end); PyMem_Free(cover); PyMem_Free(top); PyMem_Free(blank);
            scratch = 2 * (z - a + 1);
            size_t bytes = (size_t)scratch * sizeof(int64_t);
            tok = PyMem_Malloc(bytes); name_of = PyMem_Malloc(bytes);
            following = PyMem_Malloc(bytes); own_next = PyMem_Malloc(bytes);
            end = PyMem_Malloc(bytes); cover = PyMem_Malloc(bytes); top = PyMem_Malloc(bytes);
            blank = PyMem_Malloc((size_t)scratch);
            if (!tok || !name_of || !following || !own_next || !end || !cover || !top
                || !blank) {
                PyErr_NoMemory();
                goto done;
            }
        }
        /* The row's known tags (m of them), their names and closers' blank attributes. */
        Py_ssize_t m = 0;
        for (Py_ssize_t t = a; t < z; t++) {
            const unsigned char *nm = names + t * PREP_WINDOW;
            Py_ssize_t lo = 0, hi = n_known;  /* binary search of the sorted names */
            while (lo < hi) {
                Py_ssize_t mid = (lo + hi) / 2;
                if (memcmp(known_names[mid], nm, PREP_WINDOW) < 0) lo = mid + 1; else hi = mid;
            }
            if (lo >= n_known || memcmp(known_names[lo], nm, PREP_WINDOW) != 0) continue;
            tok[m] = t;
            name_of[m] = lo;
            blank[m] = attrs[t] == 0;
            if (closing[t] && attrs[t] > 0) {
                int all_space = 1;
                for (int64_t j = astart[t]; j < astart[t] + attrs[t]; j++) {
                    if (j < 0 || j >= data_b.len) {
                        PyErr_SetString(PyExc_IndexError, "repair_status: attributes outside");
                        goto done;
                    }
                    if (d[j] >= 128) python[r] = 1;
                    if (!PY_SPACE[d[j]]) all_space = 0;
                }
                blank[m] = (unsigned char)all_space;
            }
            m++;
        }
        /* Backwards: the next tag that is not self-closing; the next event of each name. */
        for (Py_ssize_t i = 0; i < n_known; i++) next_event[i] = -1;
        int64_t next_real = -1;
        for (Py_ssize_t i = m - 1; i >= 0; i--) {
            int64_t t = tok[i];
            following[i] = next_real;
            own_next[i] = next_event[name_of[i]];
            int event = closing[t] ? (!sc[t] && blank[i]) : (attrs[t] > 0 || !sc[t]);
            if (event) next_event[name_of[i]] = i;
            if (!sc[t]) next_real = i;
        }
        /* Each opening's end; tags inside the spans skipped. */
        for (Py_ssize_t i = 0; i <= m; i++) cover[i] = 0;
        for (Py_ssize_t i = 0; i < m; i++) {
            int64_t t = tok[i];
            end[i] = -1;
            if (closing[t] || sc[t]) continue;
            if (opaque[name_of[i]]) {
                int64_t e = own_next[i];
                if (e >= 0 && closing[tok[e]]) end[i] = e;
            } else if (flat[name_of[i]]) {
                int64_t f = following[i];
                if (f >= 0 && closing[tok[f]] && name_of[f] == name_of[i]) end[i] = f;
            }
            if (end[i] >= 0) {
                cover[i + 1]++;
                cover[end[i]]--;
            }
        }
        Py_ssize_t tops = 0;
        int64_t covered = 0;
        for (Py_ssize_t i = 0; i < m; i++) {
            covered += cover[i];
            if (covered == 0 && !sc[tok[i]]) top[tops++] = i;
        }
        /* The chain: opening, its end, the next opening, ... */
        for (Py_ssize_t j = 0; j < tops; j += 2) {
            int64_t i = top[j], t = tok[i];
            int opening = !closing[t] && !sc[t];
            int64_t e = end[i];
            int64_t want_after = j + 2 < tops ? top[j + 2] : -1;
            int pair_ok = opening && e >= 0 && j + 1 < tops && top[j + 1] == e
                          && following[e] == want_after;
            int answer_end = opening && name_of[i] == answer && j + 1 == tops
                             && following[i] == -1 && e < 0;
            if (!pair_ok && !answer_end) python[r] = 1;
            if (answer_end) answer_closed[r] = 1;
        }
    }
    result = Py_BuildValue("(OO)", python_obj, closed_obj);
done:
    Py_XDECREF(python_obj);
    Py_XDECREF(closed_obj);
    PyMem_Free(tok); PyMem_Free(name_of); PyMem_Free(following); PyMem_Free(own_next);
    PyMem_Free(end); PyMem_Free(cover); PyMem_Free(top); PyMem_Free(blank);
    PyBuffer_Release(&data_b); PyBuffer_Release(&row_b); PyBuffer_Release(&closing_b);
    PyBuffer_Release(&name_b); PyBuffer_Release(&attrs_b); PyBuffer_Release(&astart_b);
    PyBuffer_Release(&sc_b); PyBuffer_Release(&flat_b); PyBuffer_Release(&opaque_b);
    return result;
}

/* ---- tag_counts: preprocess_arrow._tag_counts's dicts ---------------------------------- */

static int compare_names(const void *a, const void *b) {
    return memcmp(*(const unsigned char *const *)a, *(const unsigned char *const *)b,
                  PREP_WINDOW);
}

/* tag_counts(rows, closing, names, n): per row, {name: count} of its tokens that are not
 * closers, by name in byte order (names: PREP_WINDOW zero-padded ASCII bytes each; rows
 * ascending, as prep_scan returns them). */
static PyObject *tag_counts(PyObject *self, PyObject *args) {
    Py_buffer rows_b, closing_b, names_b;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "y*y*y*n", &rows_b, &closing_b, &names_b, &n)) return NULL;
    PyObject *result = NULL;
    const unsigned char **sorted = NULL;
    Py_ssize_t k = rows_b.len / 8;
    if (check_i64(&rows_b, k, "tag_counts") < 0 || closing_b.len != k
        || names_b.len != k * PREP_WINDOW || n < 0) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "tag_counts: bad arguments");
        goto done;
    }
    const int64_t *rows = rows_b.buf;
    const unsigned char *closing = closing_b.buf, *names = names_b.buf;
    sorted = PyMem_Malloc((size_t)(k ? k : 1) * sizeof(*sorted));
    if (!sorted) { PyErr_NoMemory(); goto done; }
    result = PyList_New(n);
    if (!result) goto done;
    for (Py_ssize_t r = 0; r < n; r++) {
        PyObject *d = PyDict_New();
        if (!d) { Py_CLEAR(result); goto done; }
        PyList_SET_ITEM(result, r, d);
    }
    Py_ssize_t i = 0;
    while (i < k) {
        int64_t row = rows[i];
        if (row < 0 || row >= n || (i && row < rows[i - 1])) {
            Py_CLEAR(result);
            PyErr_SetString(PyExc_ValueError, "tag_counts: rows out of range or order");
            goto done;
        }
        Py_ssize_t m = 0;
        for (; i < k && rows[i] == row; i++)
            if (!closing[i]) sorted[m++] = names + i * PREP_WINDOW;
        qsort(sorted, (size_t)m, sizeof(*sorted), compare_names);
        PyObject *d = PyList_GET_ITEM(result, row);
        for (Py_ssize_t a = 0; a < m;) {
            Py_ssize_t b = a + 1;
            while (b < m && memcmp(sorted[a], sorted[b], PREP_WINDOW) == 0) b++;
            PyObject *key = PyUnicode_DecodeASCII(
                (const char *)sorted[a], (Py_ssize_t)strnlen((const char *)sorted[a],
                                                             PREP_WINDOW), NULL);
            PyObject *value = key ? PyLong_FromSsize_t(b - a) : NULL;
            int failed = !value || PyDict_SetItem(d, key, value) < 0;
            Py_XDECREF(key);
            Py_XDECREF(value);
            if (failed) { Py_CLEAR(result); goto done; }
            a = b;
        }
    }
done:
    PyMem_Free(sorted);
    PyBuffer_Release(&rows_b);
    PyBuffer_Release(&closing_b);
    PyBuffer_Release(&names_b);
    return result;
}

/* ---- trim: xml_arrow._trim's byte loops ------------------------------------------------ */

static PyObject *trim(PyObject *self, PyObject *args) {
    Py_buffer buf_b, start_b, end_b;
    if (!PyArg_ParseTuple(args, "y*y*y*", &buf_b, &start_b, &end_b)) return NULL;
    PyObject *result = NULL;
    Py_ssize_t m = start_b.len / 8;
    if (buf_b.len < 1 || check_i64(&start_b, m, "trim") < 0
        || check_i64(&end_b, m, "trim") < 0 || end_b.len != start_b.len) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "trim: bad arguments");
        goto done;
    }
    PyObject *s_o = PyByteArray_FromStringAndSize(NULL, m * 8);
    PyObject *e_o = PyByteArray_FromStringAndSize(NULL, m * 8);
    PyObject *l_o = PyByteArray_FromStringAndSize(NULL, m * 8);
    PyObject *u_o = PyByteArray_FromStringAndSize(NULL, m);
    if (!s_o || !e_o || !l_o || !u_o) {
        Py_XDECREF(s_o); Py_XDECREF(e_o); Py_XDECREF(l_o); Py_XDECREF(u_o);
        goto done;
    }
    const unsigned char *b = buf_b.buf;
    Py_ssize_t last = buf_b.len - 1;
    const int64_t *starts = start_b.buf, *ends = end_b.buf;
    int64_t *so = (int64_t *)PyByteArray_AS_STRING(s_o);
    int64_t *eo = (int64_t *)PyByteArray_AS_STRING(e_o);
    int64_t *lo = (int64_t *)PyByteArray_AS_STRING(l_o);
    unsigned char *uo = (unsigned char *)PyByteArray_AS_STRING(u_o);
    for (Py_ssize_t i = 0; i < m; i++) {
        int64_t s = starts[i], e = ends[i];
        if (s < 0 || e > buf_b.len || (s < e && e - 1 > last)) {
            Py_DECREF(s_o); Py_DECREF(e_o); Py_DECREF(l_o); Py_DECREF(u_o);
            PyErr_SetString(PyExc_IndexError, "trim: range outside the buffer");
            goto done;
        }
        while (s < e && PY_SPACE[b[s]]) s++;
        while (e > s && PY_SPACE[b[e - 1]]) e--;
        int64_t lead = e - 1 > 0 ? e - 1 : 0;
        for (int k = 0; k < 3; k++)
            if (lead > s && (b[lead] & 0xC0) == 0x80) lead--;
        so[i] = s;
        eo[i] = e;
        lo[i] = lead;
        uo[i] = s < e && (MAYBE_SPACE_LEAD[b[s < last ? s : last]] || MAYBE_SPACE_LEAD[b[lead]]);
    }
    result = Py_BuildValue("(NNNN)", s_o, e_o, l_o, u_o);
done:
    PyBuffer_Release(&buf_b);
    PyBuffer_Release(&start_b);
    PyBuffer_Release(&end_b);
    return result;
}

/* ---- UTF-8 offsets -------------------------------------------------------------------- */

#define BLOCK 64

/* The continuation bits (10xxxxxx) of eight bytes, one per byte lane (0 or 1). */
static inline uint64_t continuation_lanes(const unsigned char *d) {
    uint64_t w;
    memcpy(&w, d, 8);
    return (w & ~(w << 1) & 0x8080808080808080ULL) >> 7;
}

/* The sum of the byte lanes (each lane at most 255 in total). */
static inline int64_t lane_sum(uint64_t lanes) {
    return (int64_t)((lanes * 0x0101010101010101ULL) >> 56);
}

/* Continuation bytes before each BLOCK-byte block: one pass, eight bytes at a time, the
 * lanes summed once per block. */
static int64_t *block_continuations(const unsigned char *d, Py_ssize_t size) {
    Py_ssize_t blocks = size / BLOCK + 1;
    int64_t *before = PyMem_Malloc((size_t)(blocks + 1) * sizeof(int64_t));
    if (!before) { PyErr_NoMemory(); return NULL; }
    int64_t count = 0;
    Py_ssize_t full = size / BLOCK;
    for (Py_ssize_t blk = 0; blk < full; blk++) {
        before[blk] = count;
        const unsigned char *at = d + blk * BLOCK;
        uint64_t lanes = 0;
        for (int i = 0; i < BLOCK; i += 8) lanes += continuation_lanes(at + i);
        count += lane_sum(lanes);
    }
    before[full] = count;
    for (Py_ssize_t i = full * BLOCK; i < size; i++) count += (d[i] & 0xC0) == 0x80;
    before[blocks] = count;
    return before;
}

static inline int64_t continuations_before(const unsigned char *d, const int64_t *before,
                                           Py_ssize_t p) {
    Py_ssize_t i = p / BLOCK * BLOCK;
    int64_t count = before[p / BLOCK];
    uint64_t lanes = 0;
    for (; i + 8 <= p; i += 8) lanes += continuation_lanes(d + i);
    count += lane_sum(lanes);
    for (; i < p; i++) count += (d[i] & 0xC0) == 0x80;
    return count;
}

/* continuation_before(data, points): the continuation bytes in data[:p] for each p. */
static PyObject *continuation_before(PyObject *self, PyObject *args) {
    Py_buffer data_b, pts_b;
    if (!PyArg_ParseTuple(args, "y*y*", &data_b, &pts_b)) return NULL;
    PyObject *out = NULL;
    Py_ssize_t m = pts_b.len / 8;
    int64_t *before = NULL;
    if (check_i64(&pts_b, m, "continuation_before") < 0) goto done;
    const unsigned char *d = data_b.buf;
    const int64_t *pts = pts_b.buf;
    for (Py_ssize_t i = 0; i < m; i++) {
        if (pts[i] < 0 || pts[i] > data_b.len) {
            PyErr_SetString(PyExc_IndexError, "continuation_before: point outside the data");
            goto done;
        }
    }
    before = block_continuations(d, data_b.len);
    if (!before) goto done;
    out = PyByteArray_FromStringAndSize(NULL, m * 8);
    if (!out) goto done;
    int64_t *o = (int64_t *)PyByteArray_AS_STRING(out);
    for (Py_ssize_t i = 0; i < m; i++) o[i] = continuations_before(d, before, pts[i]);
done:
    PyMem_Free(before);
    PyBuffer_Release(&data_b);
    PyBuffer_Release(&pts_b);
    return out;
}

/* char_lengths(data, offsets): each string's length in characters (its bytes less its
 * continuation bytes), as Arrow's utf8_length. */
static PyObject *char_lengths(PyObject *self, PyObject *args) {
    Py_buffer data_b, off_b;
    if (!PyArg_ParseTuple(args, "y*y*", &data_b, &off_b)) return NULL;
    PyObject *out = NULL;
    int64_t *before = NULL;
    Py_ssize_t n_off = off_b.len / 8;
    if (n_off < 1 || off_b.len % 8) {
        PyErr_SetString(PyExc_ValueError, "char_lengths: bad offsets");
        goto done;
    }
    const unsigned char *d = data_b.buf;
    const int64_t *offsets = off_b.buf;
    for (Py_ssize_t i = 0; i < n_off; i++) {
        if (offsets[i] < 0 || offsets[i] > data_b.len || (i && offsets[i] < offsets[i - 1])) {
            PyErr_SetString(PyExc_IndexError, "char_lengths: offsets outside the data");
            goto done;
        }
    }
    before = block_continuations(d, data_b.len);
    if (!before) goto done;
    out = PyByteArray_FromStringAndSize(NULL, (n_off - 1) * 8);
    if (!out) goto done;
    int64_t *o = (int64_t *)PyByteArray_AS_STRING(out);
    int64_t previous = continuations_before(d, before, offsets[0]);
    for (Py_ssize_t r = 0; r + 1 < n_off; r++) {
        int64_t next = continuations_before(d, before, offsets[r + 1]);
        o[r] = offsets[r + 1] - offsets[r] - (next - previous);
        previous = next;
    }
done:
    PyMem_Free(before);
    PyBuffer_Release(&data_b);
    PyBuffer_Release(&off_b);
    return out;
}

/* char_to_byte(data, offsets, rows, chars): the byte offset (into data) of character
 * chars[i] of string rows[i] (offsets: the strings' int64 offsets into data). A character
 * count at or past the data's end maps as if the rest were ASCII. */
static PyObject *char_to_byte(PyObject *self, PyObject *args) {
    Py_buffer data_b, off_b, rows_b, chars_b;
    if (!PyArg_ParseTuple(args, "y*y*y*y*", &data_b, &off_b, &rows_b, &chars_b)) return NULL;
    PyObject *out = NULL;
    int64_t *before = NULL;
    Py_ssize_t m = rows_b.len / 8, n_off = off_b.len / 8;
    if (check_i64(&rows_b, m, "char_to_byte") < 0 || check_i64(&chars_b, m, "char_to_byte") < 0
        || off_b.len % 8) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "char_to_byte: bad offsets");
        goto done;
    }
    const unsigned char *d = data_b.buf;
    Py_ssize_t size = data_b.len;
    const int64_t *offsets = off_b.buf, *rows = rows_b.buf, *chars = chars_b.buf;
    before = block_continuations(d, size);
    if (!before) goto done;
    Py_ssize_t blocks = size / BLOCK + 1;
    int64_t total_chars = size - before[blocks];
    out = PyByteArray_FromStringAndSize(NULL, m * 8);
    if (!out) goto done;
    int64_t *o = (int64_t *)PyByteArray_AS_STRING(out);
    for (Py_ssize_t i = 0; i < m; i++) {
        if (rows[i] < 0 || rows[i] >= n_off || offsets[rows[i]] < 0 || offsets[rows[i]] > size) {
            Py_CLEAR(out);
            PyErr_SetString(PyExc_IndexError, "char_to_byte: row outside the offsets");
            goto done;
        }
        int64_t base = offsets[rows[i]];
        int64_t target = base - continuations_before(d, before, base) + chars[i];
        if (target < 0) {
            Py_CLEAR(out);
            PyErr_SetString(PyExc_IndexError, "char_to_byte: character before the data");
            goto done;
        }
        if (target >= total_chars) {
            o[i] = size + (target - total_chars);
            continue;
        }
        /* The last block whose characters before it are <= target, then the target-th
         * character start inside it. */
        Py_ssize_t lo = 0, hi = blocks - 1;
        while (lo < hi) {
            Py_ssize_t mid = (lo + hi + 1) / 2;
            if ((int64_t)mid * BLOCK - before[mid] <= target) lo = mid; else hi = mid - 1;
        }
        int64_t seen = (int64_t)lo * BLOCK - before[lo];
        Py_ssize_t p = lo * BLOCK;
        for (;; p++) {
            if ((d[p] & 0xC0) != 0x80) {
                if (seen == target) break;
                seen++;
            }
        }
        o[i] = p;
    }
done:
    PyMem_Free(before);
    PyBuffer_Release(&data_b);
    PyBuffer_Release(&off_b);
    PyBuffer_Release(&rows_b);
    PyBuffer_Release(&chars_b);
    return out;
}

/* ---- strip_hash: preprocess_arrow._stripped's equality, hashed -------------------------- */

/* Bytes of a whitespace character str.split() splits on (the _STRIP class), else 0. */
static inline int space_at(const unsigned char *s, Py_ssize_t left) {
    unsigned char c = s[0];
    if (PY_SPACE[c]) return 1;
    if (c == 0xC2 && left >= 2 && (s[1] == 0x85 || s[1] == 0xA0)) return 2;
    if (left >= 3) {
        if (c == 0xE1 && s[1] == 0x9A && s[2] == 0x80) return 3;  /* U+1680 */
        if (c == 0xE2 && s[1] == 0x80
            && ((s[2] >= 0x80 && s[2] <= 0x8A) || s[2] == 0xA8 || s[2] == 0xA9 || s[2] == 0xAF))
            return 3;  /* U+2000-200A, U+2028, U+2029, U+202F */
        if (c == 0xE2 && s[1] == 0x81 && s[2] == 0x9F) return 3;  /* U+205F */
        if (c == 0xE3 && s[1] == 0x80 && s[2] == 0x80) return 3;  /* U+3000 */
    }
    return 0;
}

/* strip_hash(data, offsets): per string, the FNV-1a hash of its text without tags
 * (``<`` ... ``>`` with neither inside) and without the characters str.split() splits on:
 * what ``replace_substring_regex(_STRIP, "")`` leaves, hashed as it is produced. */
static PyObject *strip_hash(PyObject *self, PyObject *args) {
    Py_buffer data_b, off_b;
    if (!PyArg_ParseTuple(args, "y*y*", &data_b, &off_b)) return NULL;
    PyObject *out = NULL;
    Py_ssize_t n_off = off_b.len / 8;
    if (n_off < 1 || off_b.len % 8) {
        PyErr_SetString(PyExc_ValueError, "strip_hash: bad offsets");
        goto done;
    }
    const unsigned char *d = data_b.buf;
    const int64_t *offsets = off_b.buf;
    Py_ssize_t n = n_off - 1;
    for (Py_ssize_t i = 0; i <= n; i++) {
        if (offsets[i] < 0 || offsets[i] > data_b.len || (i && offsets[i] < offsets[i - 1])) {
            PyErr_SetString(PyExc_IndexError, "strip_hash: offsets outside the data");
            goto done;
        }
    }
    out = PyByteArray_FromStringAndSize(NULL, n * 8);
    if (!out) goto done;
    uint64_t *o = (uint64_t *)PyByteArray_AS_STRING(out);
    for (Py_ssize_t r = 0; r < n; r++) {
        const unsigned char *s = d + offsets[r];
        Py_ssize_t len = offsets[r + 1] - offsets[r];
        uint64_t h = FNV_OFFSET;
        Py_ssize_t i = 0;
        while (i < len) {
            int sp = space_at(s + i, len - i);
            if (sp) { i += sp; continue; }
            if (s[i] == '<') {
                /* A tag: to the first '>', with no '<' before it (each '<' scans only
                 * to the next '<' or '>': linear). */
                Py_ssize_t j = i + 1;
                while (j < len && s[j] != '<' && s[j] != '>') j++;
                if (j < len && s[j] == '>') { i = j + 1; continue; }
            }
            h = (h ^ s[i]) * FNV_PRIME;
            i++;
        }
        o[r] = h;
    }
done:
    PyBuffer_Release(&data_b);
    PyBuffer_Release(&off_b);
    return out;
}

/* gather(data, starts, ends) -> (offsets, data): the strings data[starts[i]:ends[i]] as a
 * large_string array's buffers (one copy of the bytes, no index array). */
static PyObject *gather(PyObject *self, PyObject *args) {
    Py_buffer data_b, start_b, end_b;
    if (!PyArg_ParseTuple(args, "y*y*y*", &data_b, &start_b, &end_b)) return NULL;
    PyObject *result = NULL, *off_obj = NULL, *out_obj = NULL;
    Py_ssize_t m = start_b.len / 8;
    if (check_i64(&start_b, m, "gather") < 0 || end_b.len != start_b.len) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "gather: bad arguments");
        goto done;
    }
    const int64_t *starts = start_b.buf, *ends = end_b.buf;
    int64_t size = 0;
    for (Py_ssize_t i = 0; i < m; i++) {
        if (starts[i] < 0 || ends[i] < starts[i] || ends[i] > data_b.len) {
            PyErr_SetString(PyExc_IndexError, "gather: range outside the data");
            goto done;
        }
        size += ends[i] - starts[i];
    }
    off_obj = PyByteArray_FromStringAndSize(NULL, (m + 1) * 8);
    out_obj = PyByteArray_FromStringAndSize(NULL, size);
    if (!off_obj || !out_obj) goto done;
    int64_t *o = (int64_t *)PyByteArray_AS_STRING(off_obj);
    char *out = PyByteArray_AS_STRING(out_obj);
    const char *d = data_b.buf;
    o[0] = 0;
    for (Py_ssize_t i = 0; i < m; i++) {
        int64_t len = ends[i] - starts[i];
        memcpy(out + o[i], d + starts[i], (size_t)len);
        o[i + 1] = o[i] + len;
    }
    result = Py_BuildValue("(OO)", off_obj, out_obj);
done:
    Py_XDECREF(off_obj);
    Py_XDECREF(out_obj);
    PyBuffer_Release(&data_b);
    PyBuffer_Release(&start_b);
    PyBuffer_Release(&end_b);
    return result;
}

/* ---- join_groups: clips_arrow's texts joined per clip ----------------------------------- */

/* join_groups(data, offsets, items, groups, n_groups, sep) -> (offsets, data): per group,
 * its items' strings (items: string indexes; groups: each item's group, ascending) joined
 * by sep, as Arrow's binary_join of the lists (an empty group: ""). */
static PyObject *join_groups(PyObject *self, PyObject *args) {
    Py_buffer data_b, off_b, items_b, groups_b, sep_b;
    Py_ssize_t n_groups;
    if (!PyArg_ParseTuple(args, "y*y*y*y*ny*", &data_b, &off_b, &items_b, &groups_b,
                          &n_groups, &sep_b))
        return NULL;
    PyObject *result = NULL;
    vec out_data = {0};
    PyObject *out_off = NULL;
    Py_ssize_t m = items_b.len / 8, n_off = off_b.len / 8;
    if (check_i64(&items_b, m, "join_groups") < 0 || groups_b.len != items_b.len
        || off_b.len % 8 || n_groups < 0) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "join_groups: bad arguments");
        goto done;
    }
    const unsigned char *d = data_b.buf;
    const int64_t *offsets = off_b.buf, *items = items_b.buf, *groups = groups_b.buf;
    out_off = PyByteArray_FromStringAndSize(NULL, (n_groups + 1) * 8);
    if (!out_off) goto done;
    int64_t *o = (int64_t *)PyByteArray_AS_STRING(out_off);
    Py_ssize_t j = 0;
    o[0] = 0;
    for (Py_ssize_t g = 0; g < n_groups; g++) {
        int first = 1;
        for (; j < m && groups[j] == g; j++) {
            int64_t it = items[j];
            if (it < 0 || it + 1 >= n_off || offsets[it] < 0 || offsets[it + 1] > data_b.len
                || offsets[it] > offsets[it + 1]) {
                PyErr_SetString(PyExc_IndexError, "join_groups: item outside the offsets");
                goto fail;
            }
            if (!first && vec_push(&out_data, sep_b.buf, sep_b.len) < 0) goto fail;
            if (vec_push(&out_data, d + offsets[it], offsets[it + 1] - offsets[it]) < 0)
                goto fail;
            first = 0;
        }
        o[g + 1] = out_data.len;
    }
    if (j != m) {
        PyErr_SetString(PyExc_ValueError, "join_groups: groups out of range or order");
        goto fail;
    }
    {
        PyObject *joined = vec_take(&out_data);
        if (joined) result = Py_BuildValue("(ON)", out_off, joined);
    }
    goto done;
fail:
    vec_free(&out_data);
done:
    Py_XDECREF(out_off);
    PyBuffer_Release(&data_b);
    PyBuffer_Release(&off_b);
    PyBuffer_Release(&items_b);
    PyBuffer_Release(&groups_b);
    PyBuffer_Release(&sep_b);
    return result;
}

/* ---- xml_tags._scan of one str ---------------------------------------------------------
 * The tag tokens of ``_TAG`` = <(?:/([A-Za-z_][\w.-]*)\s*|([A-Za-z_][\w.-]*)(?:\s[^<>]*)?)>
 * found left to right as re.finditer finds them, paired per name as _scan pairs them, over
 * the str's own code points (so offsets are character offsets). Neither alternative can
 * backtrack into a different match (a name is followed by whitespace or '>', and the
 * attributes run to the first '<' or '>'), so one forward pass decides each '<'. \w and \s
 * are the regex module's Unicode classes: Py_UNICODE_ISALNUM or '_', Py_UNICODE_ISSPACE.
 */
static inline int scan_first(Py_UCS4 c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_';
}

static inline int scan_namechar(Py_UCS4 c) {
    if (c < 128)
        return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')
            || c == '_' || c == '.' || c == '-';
    return Py_UNICODE_ISALNUM(c);
}

/* The lower-cased name text[start:end], one object per distinct name of the call. */
static PyObject *scan_name(PyObject *text, int kind, const void *data, Py_ssize_t start,
                           Py_ssize_t end, PyObject *names) {
    PyObject *lowered;
    int ascii = 1;
    char small[64];
    Py_ssize_t len = end - start;
    for (Py_ssize_t k = start; k < end; k++)
        if (PyUnicode_READ(kind, data, k) >= 128) { ascii = 0; break; }
    if (ascii && len <= (Py_ssize_t)sizeof(small)) {
        for (Py_ssize_t k = 0; k < len; k++) {
            Py_UCS4 c = PyUnicode_READ(kind, data, start + k);
            small[k] = (char)((c >= 'A' && c <= 'Z') ? c + 32 : c);
        }
        lowered = PyUnicode_FromStringAndSize(small, len);
    } else {
        PyObject *raw = PyUnicode_Substring(text, start, end);
        if (!raw) return NULL;
        lowered = PyObject_CallMethod(raw, "lower", NULL);
        Py_DECREF(raw);
    }
    if (!lowered) return NULL;
    PyObject *known = PyDict_GetItemWithError(names, lowered);
    if (known) { Py_INCREF(known); Py_DECREF(lowered); return known; }
    if (PyErr_Occurred() || PyDict_SetItem(names, lowered, lowered) < 0) {
        Py_DECREF(lowered);
        return NULL;
    }
    return lowered;
}

static int list_set_int(PyObject *list, Py_ssize_t i, Py_ssize_t value) {
    PyObject *v = PyLong_FromSsize_t(value);
    if (!v) return -1;
    return PyList_SetItem(list, i, v);  /* steals v */
}

static int list_push_int(PyObject *list, Py_ssize_t value) {
    PyObject *v = PyLong_FromSsize_t(value);
    if (!v) return -1;
    int r = PyList_Append(list, v);
    Py_DECREF(v);
    return r;
}

static PyObject *tag_scan(PyObject *self, PyObject *args) {
    PyObject *text;
    if (!PyArg_ParseTuple(args, "U", &text)) return NULL;
    int kind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    Py_ssize_t n = PyUnicode_GET_LENGTH(text);
    PyObject *starts = PyList_New(0), *ends = PyList_New(0), *tags = PyList_New(0);
    PyObject *close_starts = PyList_New(0), *close_ends = PyList_New(0);
    PyObject *next_same = PyList_New(0);
    PyObject *names = PyDict_New();   /* lowered name -> itself */
    PyObject *stacks = PyDict_New();  /* name -> list of open indices */
    PyObject *last = PyDict_New();    /* name -> index of its latest opening */
    if (!starts || !ends || !tags || !close_starts || !close_ends || !next_same || !names
        || !stacks || !last) goto fail;
    Py_ssize_t i = 0;
    while (i < n) {
        if (PyUnicode_READ(kind, data, i) != '<') { i++; continue; }
        Py_ssize_t p = i;
        i = p + 1;
        if (p + 1 >= n) break;
        Py_UCS4 c = PyUnicode_READ(kind, data, p + 1);
        if (c == '/') {
            Py_ssize_t q = p + 2;
            if (q >= n || !scan_first(PyUnicode_READ(kind, data, q))) continue;
            Py_ssize_t r = q + 1;
            while (r < n && scan_namechar(PyUnicode_READ(kind, data, r))) r++;
            Py_ssize_t name_end = r;
            while (r < n && Py_UNICODE_ISSPACE(PyUnicode_READ(kind, data, r))) r++;
            if (r >= n || PyUnicode_READ(kind, data, r) != '>') continue;
            i = r + 1;
            PyObject *name = scan_name(text, kind, data, q, name_end, names);
            if (!name) goto fail;
            PyObject *stack = PyDict_GetItemWithError(stacks, name);
            Py_DECREF(name);
            if (!stack) { if (PyErr_Occurred()) goto fail; continue; }
            Py_ssize_t size = PyList_GET_SIZE(stack);
            if (!size) continue;
            Py_ssize_t at = PyLong_AsSsize_t(PyList_GET_ITEM(stack, size - 1));
            if (PyList_SetSlice(stack, size - 1, size, NULL) < 0) goto fail;
            if (list_set_int(close_starts, at, p) < 0 || list_set_int(close_ends, at, i) < 0)
                goto fail;
            continue;
        }
        if (!scan_first(c)) continue;
        Py_ssize_t r = p + 2;
        while (r < n && scan_namechar(PyUnicode_READ(kind, data, r))) r++;
        Py_ssize_t name_end = r;
        if (r >= n) continue;
        Py_UCS4 d = PyUnicode_READ(kind, data, r);
        if (d != '>') {
            if (!Py_UNICODE_ISSPACE(d)) continue;
            r++;
            while (r < n) {
                Py_UCS4 e = PyUnicode_READ(kind, data, r);
                if (e == '<' || e == '>') break;
                r++;
            }
            if (r >= n || PyUnicode_READ(kind, data, r) != '>') continue;
        }
        Py_ssize_t end = r + 1;
        i = end;
        if (PyUnicode_READ(kind, data, end - 2) == '/') continue;  /* <execute_tools /> */
        PyObject *name = scan_name(text, kind, data, p + 1, name_end, names);
        if (!name) goto fail;
        Py_ssize_t index = PyList_GET_SIZE(starts);
        if (list_push_int(starts, p) < 0 || list_push_int(ends, end) < 0
            || PyList_Append(tags, name) < 0 || list_push_int(close_starts, -1) < 0
            || list_push_int(close_ends, -1) < 0 || list_push_int(next_same, -1) < 0) {
            Py_DECREF(name);
            goto fail;
        }
        PyObject *previous = PyDict_GetItemWithError(last, name);
        if (previous) {
            if (list_set_int(next_same, PyLong_AsSsize_t(previous), p) < 0) {
                Py_DECREF(name);
                goto fail;
            }
        } else if (PyErr_Occurred()) { Py_DECREF(name); goto fail; }
        PyObject *at = PyLong_FromSsize_t(index);
        if (!at || PyDict_SetItem(last, name, at) < 0) {
            Py_XDECREF(at); Py_DECREF(name); goto fail;
        }
        PyObject *stack = PyDict_GetItemWithError(stacks, name);
        if (!stack) {
            if (PyErr_Occurred()) { Py_DECREF(at); Py_DECREF(name); goto fail; }
            stack = PyList_New(0);
            if (!stack || PyDict_SetItem(stacks, name, stack) < 0) {
                Py_XDECREF(stack); Py_DECREF(at); Py_DECREF(name); goto fail;
            }
            Py_DECREF(stack);  /* the dict holds it */
        }
        int failed = PyList_Append(stack, at);
        Py_DECREF(at);
        Py_DECREF(name);
        if (failed < 0) goto fail;
    }
    Py_DECREF(names); Py_DECREF(stacks); Py_DECREF(last);
    return Py_BuildValue("(NNNNNN)", starts, ends, tags, close_starts, close_ends, next_same);
fail:
    Py_XDECREF(starts); Py_XDECREF(ends); Py_XDECREF(tags); Py_XDECREF(close_starts);
    Py_XDECREF(close_ends); Py_XDECREF(next_same); Py_XDECREF(names); Py_XDECREF(stacks);
    Py_XDECREF(last);
    return NULL;
}

/* ---- repair_tags: preprocess.repair_tags on a str ------------------------------------- */

/* repair_tags(text, names, flat, opaque) -> (text, fixes) | None
 *
 * preprocess._repair_tags_python's walk, on the str's own code points (so a fix's "at char
 * N" is a character offset without any UTF-8 mapping): the token pattern
 * ``<(/?)(names)(\s[^<>]*)?(/?)>`` and the line-start pattern ``\n[ \t]*<(names)\b`` with
 * re.IGNORECASE matched by hand. names: the known tags lowercased, deduplicated, ASCII
 * letters, digits, '_', '-', '.' and ':' only (the caller checks); flat, opaque: a byte per
 * name. ``\s`` and ``\w`` are sre's own classes (Py_UNICODE_ISSPACE, Py_UNICODE_ISALNUM
 * or '_'), so non-ASCII spaces and letters count as Python counts them. The one place the
 * hand matcher is not sure: a non-ASCII character that re.IGNORECASE folds onto an ASCII
 * letter of a name (U+0130, U+0131 with 'i', U+017F with 's', U+212A with 'k'; the tests
 * check there are no others). There Python's name.lower() of the matched text is not the
 * name, so the function returns None and the Python walk repairs the response. */

#define RT_NAMES 64
#define RT_BAIL (-2)

typedef struct {
    int n;
    const char *name[RT_NAMES];
    Py_ssize_t len[RT_NAMES];
    unsigned char flat[RT_NAMES], opaque[RT_NAMES];
    uint64_t first[128];  /* names by their first (lowercase) character */
} rt_names;

typedef struct {
    int kind;
    const void *data;
    Py_ssize_t n;
} rt_text;

typedef struct {
    Py_ssize_t start, end, attr_start, attr_end;  /* attr_start -1: no attributes group */
    int name, closing, self_closing;
} rt_token;

#define RT_READ(t, i) PyUnicode_READ((t)->kind, (t)->data, (i))

/* The lowercase ASCII letter a character matches under re.IGNORECASE: c itself lowered if
 * ASCII; for the four non-ASCII characters folding onto ASCII letters, 0x100 | the letter;
 * else 0 (matches no name character). */
static inline unsigned rt_fold(Py_UCS4 c) {
    if (c < 128) return lower((unsigned char)c);
    switch (c) {
    case 0x130: case 0x131: return 0x100 | 'i';
    case 0x17F: return 0x100 | 's';
    case 0x212A: return 0x100 | 'k';
    default: return 0;
    }
}

static inline int rt_word(Py_UCS4 c) { return c == '_' || Py_UNICODE_ISALNUM(c); }

/* First index >= from of ch (ASCII), or t->n. Most responses are UCS-2 or UCS-4 (a
 * Chinese or emoji character anywhere makes them so): SSE2 compares 8 or 4 characters at
 * a time (a plain loop, a third of the kernel's time, elsewhere). */
static Py_ssize_t rt_find(const rt_text *t, Py_ssize_t from, Py_UCS4 ch) {
    Py_ssize_t n = t->n, i = from;
    if (from >= n) return n;
    if (t->kind == PyUnicode_1BYTE_KIND) {
        const Py_UCS1 *d = t->data;
        const Py_UCS1 *hit = memchr(d + from, (int)ch, (size_t)(n - from));
        return hit ? hit - d : n;
    }
    if (t->kind == PyUnicode_2BYTE_KIND) {
        const Py_UCS2 *d = t->data;
#ifdef __SSE2__
        const __m128i needle = _mm_set1_epi16((short)ch);
        for (; i + 8 <= n; i += 8) {
            __m128i v = _mm_loadu_si128((const __m128i *)(const void *)(d + i));
            int mask = _mm_movemask_epi8(_mm_cmpeq_epi16(v, needle));
            if (mask) return i + (__builtin_ctz((unsigned)mask) >> 1);
        }
#endif
        for (; i < n; i++)
            if (d[i] == ch) return i;
        return n;
    }
    const Py_UCS4 *d = t->data;
#ifdef __SSE2__
    const __m128i needle = _mm_set1_epi32((int)ch);
    for (; i + 4 <= n; i += 4) {
        __m128i v = _mm_loadu_si128((const __m128i *)(const void *)(d + i));
        int mask = _mm_movemask_epi8(_mm_cmpeq_epi32(v, needle));
        if (mask) return i + (__builtin_ctz((unsigned)mask) >> 2);
    }
#endif
    for (; i < n; i++)
        if (d[i] == ch) return i;
    return n;
}

/* Name k at text[i:]: 1 if it matches (ASCII case-insensitively), 0 if not, RT_BAIL if a
 * non-ASCII character folding onto the name's letter is met. */
static int rt_name_at(const rt_text *t, const rt_names *nm, int k, Py_ssize_t i) {
    Py_ssize_t len = nm->len[k];
    if (i + len > t->n) return 0;
    for (Py_ssize_t m = 0; m < len; m++) {
        unsigned f = rt_fold(RT_READ(t, i + m));
        if (f == (unsigned char)nm->name[k][m]) continue;
        if (f == (0x100u | (unsigned char)nm->name[k][m])) return RT_BAIL;
        return 0;
    }
    return 1;
}

/* The names whose first character the character at i may match (empty past the end). */
static inline uint64_t rt_candidates(const rt_text *t, const rt_names *nm, Py_ssize_t i) {
    if (i >= t->n) return 0;
    unsigned f = rt_fold(RT_READ(t, i)) & 0x7F;
    return f ? nm->first[f] : 0;
}

/* The token pattern at the '<' at p: 1 and *tok filled, 0 if it does not match there,
 * RT_BAIL. At most one name can complete a match (names hold no space, '/' or '>'), so
 * the alternation's order does not matter. */
static int rt_token_at(const rt_text *t, const rt_names *nm, Py_ssize_t p, rt_token *tok) {
    Py_ssize_t n = t->n, i = p + 1;
    int closing = 0;
    if (i < n && RT_READ(t, i) == '/') { closing = 1; i++; }
    uint64_t cand = rt_candidates(t, nm, i);
    while (cand) {
        int k = __builtin_ctzll(cand);
        cand &= cand - 1;
        int hit = rt_name_at(t, nm, k, i);
        if (hit == RT_BAIL) return RT_BAIL;
        if (!hit) continue;
        Py_ssize_t e = i + nm->len[k];
        if (e >= n) continue;
        Py_UCS4 c = RT_READ(t, e);
        tok->start = p;
        tok->name = k;
        tok->closing = closing;
        tok->self_closing = 0;
        tok->attr_start = tok->attr_end = -1;
        if (Py_UNICODE_ISSPACE(c)) {
            /* (\s[^<>]*)? greedy: up to the first '<' or '>', which must be '>'; a '/'
             * before it is the attributes' (so "<think />" is not self-closing). */
            Py_ssize_t j = e + 1;
            for (; j < n; j++) {
                Py_UCS4 d = RT_READ(t, j);
                if (d == '<' || d == '>') break;
            }
            if (j >= n || RT_READ(t, j) != '>') continue;
            tok->attr_start = e;
            tok->attr_end = j;
            tok->end = j + 1;
            return 1;
        }
        if (c == '/' && e + 1 < n && RT_READ(t, e + 1) == '>') {
            tok->self_closing = 1;
            tok->end = e + 2;
            return 1;
        }
        if (c == '>') {
            tok->end = e + 1;
            return 1;
        }
    }
    return 0;
}

/* The first token starting at or after pos: 1, 0 (none), RT_BAIL. */
static int rt_next_token(const rt_text *t, const rt_names *nm, Py_ssize_t pos, rt_token *tok) {
    for (Py_ssize_t p = rt_find(t, pos, '<'); p < t->n; p = rt_find(t, p + 1, '<')) {
        int got = rt_token_at(t, nm, p, tok);
        if (got) return got;
    }
    return 0;
}

/* _own_tag: the end of the opaque tag k's closer after pos, -1 if another opening of it
 * or nothing comes first, RT_BAIL. */
static Py_ssize_t rt_own_tag(const rt_text *t, const rt_names *nm, Py_ssize_t pos, int k) {
    rt_token tok;
    for (;;) {
        int got = rt_next_token(t, nm, pos, &tok);
        if (got == RT_BAIL) return RT_BAIL;
        if (!got) return -1;
        pos = tok.end;
        if (tok.name != k) continue;
        int has_attrs = tok.attr_start >= 0;
        if (tok.closing) {
            if (tok.self_closing) continue;
            int blank = 1;
            for (Py_ssize_t j = tok.attr_start; has_attrs && j < tok.attr_end; j++)
                if (!Py_UNICODE_ISSPACE(RT_READ(t, j))) { blank = 0; break; }
            if (blank) return tok.end;
        } else if (has_attrs || !tok.self_closing) {
            return -1;
        }
    }
}

/* The first match of \n[ \t]*<(names)\b at or after pos: its start, -1, RT_BAIL. */
static Py_ssize_t rt_line_start(const rt_text *t, const rt_names *nm, Py_ssize_t pos) {
    Py_ssize_t n = t->n;
    for (Py_ssize_t q = rt_find(t, pos, '\n'); q < n; q = rt_find(t, q + 1, '\n')) {
        Py_ssize_t i = q + 1;
        while (i < n && (RT_READ(t, i) == ' ' || RT_READ(t, i) == '\t')) i++;
        if (i >= n || RT_READ(t, i) != '<') continue;
        i++;
        uint64_t cand = rt_candidates(t, nm, i);
        while (cand) {
            int k = __builtin_ctzll(cand);
            cand &= cand - 1;
            int hit = rt_name_at(t, nm, k, i);
            if (hit == RT_BAIL) return RT_BAIL;
            if (!hit) continue;
            Py_ssize_t e = i + nm->len[k];
            int before = rt_word(RT_READ(t, e - 1));
            int after = e < n && rt_word(RT_READ(t, e));
            if (before != after) return q;
        }
    }
    return -1;
}

enum { RT_CLOSED_BEFORE_OPEN, RT_CLOSED_AT, RT_CLOSED_BEFORE_CLOSE, RT_STRAY, RT_CLOSED_END };

typedef struct {
    Py_ssize_t start, end;  /* the text replaced */
    int insert;             /* the name whose closer goes in, -1: nothing (a removal) */
} rt_edit;

typedef struct {
    int how, a, b;
    Py_ssize_t at;
} rt_fix;

/* The walk; 1 done, RT_BAIL, -1 error (memory). */
static int rt_walk(const rt_text *t, const rt_names *nm, vec *edits, vec *fixes) {
    vec stack_v = {0};
    int status = 1;
    Py_ssize_t n = t->n, pos = 0, boundary = -3;  /* -3: not searched, -1: none */
    rt_token tok;
#define RT_EDIT(s, e, k) do { rt_edit _e = {(s), (e), (k)}; \
        if (vec_push(edits, &_e, sizeof _e) < 0) goto oom; } while (0)
#define RT_FIX(h, x, y, at_) do { rt_fix _f = {(h), (x), (y), (at_)}; \
        if (vec_push(fixes, &_f, sizeof _f) < 0) goto oom; } while (0)
#define STACK ((int *)stack_v.data)
#define DEPTH ((Py_ssize_t)(stack_v.len / (Py_ssize_t)sizeof(int)))
    for (;;) {
        int got = rt_next_token(t, nm, pos, &tok);
        if (got == RT_BAIL) { status = RT_BAIL; goto out; }
        if (!got) break;
        int k = tok.name;
        Py_ssize_t start = tok.start;
        pos = tok.end;
        if (tok.self_closing) continue;
        if (!tok.closing && DEPTH && nm->flat[STACK[DEPTH - 1]]) {
            int top = STACK[DEPTH - 1];
            RT_EDIT(start, start, top);
            RT_FIX(RT_CLOSED_BEFORE_OPEN, top, k, start);
            stack_v.len -= sizeof(int);
        }
        if (!tok.closing && nm->opaque[k]) {
            Py_ssize_t closer = rt_own_tag(t, nm, pos, k);
            if (closer == RT_BAIL) { status = RT_BAIL; goto out; }
            if (closer >= 0) { pos = closer; continue; }
            if (boundary == -3 || (boundary >= 0 && boundary < pos)) {
                boundary = rt_line_start(t, nm, pos);
                if (boundary == RT_BAIL) { status = RT_BAIL; goto out; }
            }
            Py_ssize_t stop = boundary >= 0 ? boundary : n;
            RT_EDIT(stop, stop, k);
            RT_FIX(RT_CLOSED_AT, k, -1, stop);
            pos = stop;
            continue;
        }
        if (!tok.closing) {
            if (vec_push(&stack_v, &k, sizeof k) < 0) goto oom;
            continue;
        }
        Py_ssize_t at = DEPTH - 1;
        while (at >= 0 && STACK[at] != k) at--;
        if (at >= 0) {
            while (STACK[DEPTH - 1] != k) {
                int inner = STACK[DEPTH - 1];
                stack_v.len -= sizeof(int);
                RT_EDIT(start, start, inner);
                RT_FIX(RT_CLOSED_BEFORE_CLOSE, inner, k, start);
            }
            stack_v.len -= sizeof(int);
        } else {
            RT_EDIT(start, pos, -1);
            RT_FIX(RT_STRAY, k, -1, start);
        }
    }
    while (DEPTH) {
        int k = STACK[DEPTH - 1];
        stack_v.len -= sizeof(int);
        RT_EDIT(n, n, k);
        RT_FIX(RT_CLOSED_END, k, -1, n);
    }
    goto out;
oom:
    status = -1;
out:
    vec_free(&stack_v);
    return status;
#undef RT_EDIT
#undef RT_FIX
#undef STACK
#undef DEPTH
}

static PyObject *rt_fix_text(const rt_names *nm, const rt_fix *f) {
    switch (f->how) {
    case RT_CLOSED_BEFORE_OPEN:
        return PyUnicode_FromFormat("closed <%s> before <%s> at char %zd", nm->name[f->a],
                                    nm->name[f->b], f->at);
    case RT_CLOSED_AT:
        return PyUnicode_FromFormat("closed <%s> at char %zd", nm->name[f->a], f->at);
    case RT_CLOSED_BEFORE_CLOSE:
        return PyUnicode_FromFormat("closed <%s> before </%s> at char %zd", nm->name[f->a],
                                    nm->name[f->b], f->at);
    case RT_STRAY:
        return PyUnicode_FromFormat("removed stray </%s> at char %zd", nm->name[f->a], f->at);
    default:
        return PyUnicode_FromFormat("closed <%s> at end of response", nm->name[f->a]);
    }
}

/* The text with the edits made (in text order, as _apply makes them). Without a removal
 * every character stays, so the result has the text's kind and is built in place; a
 * removal may take the only wide characters, so those are joined (which finds the
 * narrowest kind, as CPython requires). */
static PyObject *rt_apply(PyObject *text, const rt_names *nm, const rt_edit *edits,
                          Py_ssize_t count) {
    Py_ssize_t n = PyUnicode_GET_LENGTH(text);
    if (!count) return Py_NewRef(text);
    int removal = 0;
    Py_ssize_t size = n;
    for (Py_ssize_t i = 0; i < count; i++) {
        if (edits[i].insert < 0) removal = 1;
        else size += nm->len[edits[i].insert] + 3;
        size -= edits[i].end - edits[i].start;
    }
    if (removal) {
        PyObject *pieces = PyList_New(0), *out = NULL;
        if (!pieces) return NULL;
        Py_ssize_t last = 0;
        for (Py_ssize_t i = 0; i < count; i++) {
            PyObject *piece = PyUnicode_Substring(text, last, edits[i].start);
            if (!piece || PyList_Append(pieces, piece) < 0) { Py_XDECREF(piece); goto fail; }
            Py_DECREF(piece);
            if (edits[i].insert >= 0) {
                piece = PyUnicode_FromFormat("</%s>", nm->name[edits[i].insert]);
                if (!piece || PyList_Append(pieces, piece) < 0) {
                    Py_XDECREF(piece);
                    goto fail;
                }
                Py_DECREF(piece);
            }
            last = edits[i].end;
        }
        PyObject *piece = PyUnicode_Substring(text, last, n);
        if (!piece || PyList_Append(pieces, piece) < 0) { Py_XDECREF(piece); goto fail; }
        Py_DECREF(piece);
        PyObject *empty = PyUnicode_FromStringAndSize("", 0);
        if (empty) out = PyUnicode_Join(empty, pieces);
        Py_XDECREF(empty);
fail:
        Py_DECREF(pieces);
        return out;
    }
    PyObject *out = PyUnicode_New(size, PyUnicode_MAX_CHAR_VALUE(text));
    if (!out) return NULL;
    int kind = PyUnicode_KIND(out);
    void *data = PyUnicode_DATA(out);
    Py_ssize_t at = 0, last = 0;
    for (Py_ssize_t i = 0; i <= count; i++) {
        Py_ssize_t upto = i < count ? edits[i].start : n;
        if (upto > last) {
            if (PyUnicode_CopyCharacters(out, at, text, last, upto - last) < 0) {
                Py_DECREF(out);
                return NULL;
            }
            at += upto - last;
        }
        if (i == count) break;
        const char *name = nm->name[edits[i].insert];
        PyUnicode_WRITE(kind, data, at++, '<');
        PyUnicode_WRITE(kind, data, at++, '/');
        for (Py_ssize_t m = 0; m < nm->len[edits[i].insert]; m++)
            PyUnicode_WRITE(kind, data, at++, (Py_UCS4)(unsigned char)name[m]);
        PyUnicode_WRITE(kind, data, at++, '>');
        last = edits[i].end;
    }
    return out;
}

static PyObject *repair_tags(PyObject *self, PyObject *args) {
    PyObject *text, *names;
    Py_buffer flat_b, opaque_b;
    if (!PyArg_ParseTuple(args, "UO!y*y*", &text, &PyTuple_Type, &names, &flat_b, &opaque_b))
        return NULL;
    PyObject *result = NULL;
    vec edits = {0}, fixes = {0};
    rt_names nm;
    if (PyUnicode_READY(text) < 0) goto done;
    nm.n = (int)PyTuple_GET_SIZE(names);
    if (PyTuple_GET_SIZE(names) > RT_NAMES || flat_b.len != nm.n || opaque_b.len != nm.n) {
        PyErr_SetString(PyExc_ValueError, "repair_tags: at most 64 names, a flag byte each");
        goto done;
    }
    memset(nm.first, 0, sizeof nm.first);
    for (int k = 0; k < nm.n; k++) {
        PyObject *item = PyTuple_GET_ITEM(names, k);
        Py_ssize_t len;
        const char *s = PyUnicode_Check(item) ? PyUnicode_AsUTF8AndSize(item, &len) : NULL;
        int ok = s != NULL && len > 0;
        for (Py_ssize_t m = 0; ok && m < len; m++) {
            unsigned char c = (unsigned char)s[m];
            ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-'
                 || c == '.' || c == ':';
        }
        for (int j = 0; ok && j < k; j++)
            ok = strcmp(s, nm.name[j]) != 0;
        if (!ok) {
            PyErr_Clear();
            PyErr_SetString(PyExc_ValueError,
                            "repair_tags: names must be distinct, lowercase ASCII [a-z0-9_.:-]");
            goto done;
        }
        nm.name[k] = s;
        nm.len[k] = len;
        nm.flat[k] = ((const unsigned char *)flat_b.buf)[k] != 0;
        nm.opaque[k] = ((const unsigned char *)opaque_b.buf)[k] != 0;
        nm.first[(unsigned char)s[0]] |= 1ULL << k;
    }
    rt_text t = {PyUnicode_KIND(text), PyUnicode_DATA(text), PyUnicode_GET_LENGTH(text)};
    int status = rt_walk(&t, &nm, &edits, &fixes);
    if (status < 0 && status != RT_BAIL) { PyErr_NoMemory(); goto done; }
    if (status == RT_BAIL) { result = Py_NewRef(Py_None); goto done; }
    Py_ssize_t n_fixes = fixes.len / (Py_ssize_t)sizeof(rt_fix);
    PyObject *fix_list = PyList_New(n_fixes);
    if (!fix_list) goto done;
    for (Py_ssize_t i = 0; i < n_fixes; i++) {
        PyObject *line = rt_fix_text(&nm, (const rt_fix *)fixes.data + i);
        if (!line) { Py_DECREF(fix_list); goto done; }
        PyList_SET_ITEM(fix_list, i, line);
    }
    PyObject *repaired = rt_apply(text, &nm, (const rt_edit *)edits.data,
                                  edits.len / (Py_ssize_t)sizeof(rt_edit));
    if (!repaired) { Py_DECREF(fix_list); goto done; }
    result = Py_BuildValue("(NN)", repaired, fix_list);
done:
    vec_free(&edits);
    vec_free(&fixes);
    PyBuffer_Release(&flat_b);
    PyBuffer_Release(&opaque_b);
    return result;
}

static PyMethodDef methods[] = {
    {"xml_scan", xml_scan, METH_VARARGS,
     "xml_scan(data, total, offsets, names) -> (lt, rec, closing, taglike, run, term, "
     "exact_id, loose, name_hash, self_closing): every '<' of data[:total] that may open a "
     "tag, as formats/xml_arrow.py reads it."},
    {"xml_pair", xml_pair, METH_VARARGS,
     "xml_pair(lt, rec, closing, taglike, run, term, exact_id, loose, name_hash, "
     "self_closing, n, answer, tool_call) -> (bad, (top_pos, top_name, top_close, top_rec, "
     "top_end, lim_pos, lim_rec, lim_end, lim_limit, orphan_pos, orphan_rec, orphan_name, "
     "verify_pos, verify_rec))"},
    {"split_actions", split_actions, METH_VARARGS,
     "split_actions(data, starts, ends) -> (how, name_start, name_end, value_start, "
     "value_end): xml_tags.split_action of each body, 2 where Python must read it."},
    {"prep_scan", prep_scan, METH_VARARGS,
     "prep_scan(data, offsets) -> ((row, closing, name, attrs, attr_start, end, "
     "self_closing), unsure): preprocess_arrow._scan's tag tokens."},
    {"repair_status", repair_status, METH_VARARGS,
     "repair_status(data, row, closing, name, attrs, attr_start, self_closing, n, known, "
     "flat, opaque, answer) -> (python, answer_closed) per row."},
    {"tag_counts", tag_counts, METH_VARARGS,
     "tag_counts(rows, closing, names, n) -> per row, {name: count} of its openings."},
    {"trim", trim, METH_VARARGS,
     "trim(buf, start, end) -> (start, end, lead_end, suspect): ASCII whitespace trimmed "
     "off byte ranges, and whether an edge may be non-ASCII whitespace."},
    {"continuation_before", continuation_before, METH_VARARGS,
     "continuation_before(data, points) -> UTF-8 continuation bytes in data[:p] per point."},
    {"char_lengths", char_lengths, METH_VARARGS,
     "char_lengths(data, offsets) -> each string's length in characters."},
    {"char_to_byte", char_to_byte, METH_VARARGS,
     "char_to_byte(data, offsets, rows, chars) -> byte offsets of character offsets."},
    {"gather", gather, METH_VARARGS,
     "gather(data, starts, ends) -> (offsets, data): byte ranges as string buffers."},
    {"join_groups", join_groups, METH_VARARGS,
     "join_groups(data, offsets, items, groups, n_groups, sep) -> (offsets, data): each "
     "group's strings joined by sep."},
    {"strip_hash", strip_hash, METH_VARARGS,
     "strip_hash(data, offsets) -> uint64 hash per string of its text without tags and "
     "whitespace."},
    {"tag_scan", tag_scan, METH_VARARGS,
     "tag_scan(text) -> (starts, ends, tags, close_starts, close_ends, next_same): "
     "xml_tags._scan of one str, in character offsets."},
    {"repair_tags", repair_tags, METH_VARARGS,
     "repair_tags(text, names, flat, opaque) -> (text, fixes), or None where the Python "
     "walk must decide: preprocess.repair_tags on a str."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_tagscan",
    "One-pass scans of UTF-8 string buffers for the Arrow stages (see _tagscan.c).", -1,
    methods,
};

PyMODINIT_FUNC PyInit__tagscan(void) {
    init_tables();
    return PyModule_Create(&module);
}
