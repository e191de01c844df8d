/* One-pass reader of a plain XML-tag JSONL batch into Arrow buffers (#12.1, target 1).
 *
 * formats/xml_arrow.py json_table decoded a batch of plain records with pyarrow's JSON
 * reader, then validated the table's UTF-8 (the reader does not) and found the lines and
 * their stripped bounds in Python: three passes, a sixth of parsing a batch. read_batch() here
 * does it in one pass over the file's bytes: it finds the lines, checks that each is one
 * JSON object of the schema's fields only (each key at most once, each value of its one
 * JSON type or null), unescapes and validates the strings' UTF-8 as it copies them, and
 * builds the Arrow buffers (offsets, data, validity) the Python side wraps with
 * pa.Array.from_buffers, no copy.
 *
 * It is strict: anything it does not fully understand (an unknown or duplicate key, a
 * value of another type, a lone surrogate, invalid UTF-8, a control character in a string,
 * a number json.loads and Arrow may read differently -- NaN, Infinity, one that overflows,
 * a negative zero --, a byte outside the JSON grammar, two objects on a line, an object
 * across lines, no raw_response) makes it return None for the whole batch; the caller then
 * reads it as before (pyarrow's reader, or json.loads per line). Its twin is the pyarrow
 * path in json_table; eval_pipeline_tests/test_jsonlines.py holds the two to the same
 * JsonBatch (corpora, the generated drop, edge cases, random mutations of real lines).
 *
 * CPython C API and the buffer protocol only.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/* ---- a read-only buffer owning malloc'd memory (zero-copy into pyarrow) ---------------- */

typedef struct {
    PyObject_HEAD
    char *data;
    Py_ssize_t len;
} OwnedBuffer;

static void owned_dealloc(PyObject *self) {
    PyMem_RawFree(((OwnedBuffer *)self)->data);
    Py_TYPE(self)->tp_free(self);
}

static int owned_getbuffer(PyObject *self, Py_buffer *view, int flags) {
    OwnedBuffer *b = (OwnedBuffer *)self;
    return PyBuffer_FillInfo(view, self, b->data, b->len, 1, flags);
}

static PyBufferProcs owned_as_buffer = {owned_getbuffer, NULL};

static PyTypeObject OwnedBufferType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "eval_pipeline._jsonlines.OwnedBuffer",
    .tp_basicsize = sizeof(OwnedBuffer),
    .tp_dealloc = owned_dealloc,
    .tp_as_buffer = &owned_as_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Bytes read_batch() wrote, handed to pyarrow without a copy.",
};

/* ---- growable byte buffers ------------------------------------------------------------- */

typedef struct {
    char *data;
    Py_ssize_t len;
    Py_ssize_t cap;
    int borrowed;  /* memory the caller handed in: never reallocated nor freed here */
} buf;

static int grow(buf *b, Py_ssize_t extra) {
    if (b->borrowed) {
        PyErr_SetString(PyExc_ValueError, "read_batch: the raw_response buffer is too small");
        return -1;
    }
    Py_ssize_t cap = b->cap ? b->cap : 64;
    while (cap < b->len + extra) cap *= 2;
    char *p = PyMem_RawRealloc(b->data, (size_t)cap);
    if (!p) { PyErr_NoMemory(); return -1; }
    b->data = p;
    b->cap = cap;
    return 0;
}

#define RESERVE(b, n) ((b)->len + (n) <= (b)->cap ? 0 : grow((b), (n)))

/* The buffer as an OwnedBuffer (shrunk to its length; 8 bytes at least, so it is never
 * NULL and stays aligned), the buffer emptied. */
static PyObject *take(buf *b) {
    Py_ssize_t size = b->len < 8 ? 8 : b->len;
    char *p = PyMem_RawRealloc(b->data, (size_t)size);
    if (!p) { PyErr_NoMemory(); return NULL; }
    if (b->len < 8) memset(p + b->len, 0, (size_t)(8 - b->len));
    OwnedBuffer *out = PyObject_New(OwnedBuffer, &OwnedBufferType);
    if (!out) { b->data = p; return NULL; }
    out->data = p;
    out->len = b->len;
    b->data = NULL;
    b->len = b->cap = 0;
    return (PyObject *)out;
}

static void release(buf *b) {
    if (!b->borrowed) PyMem_RawFree(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

/* ---- the schema ------------------------------------------------------------------------ */

enum { STRING32, STRING64, DOUBLE, BOOL };
#define N_FIELDS 7
#define RAW_RESPONSE 6
#define SUCCESS 4
static const char *const FIELD_NAMES[N_FIELDS] = {
    "timestamp", "task_id", "task_description", "duration", "success", "final_result",
    "raw_response"};
static const int FIELD_KINDS[N_FIELDS] = {
    STRING32, STRING32, STRING32, DOUBLE, BOOL, STRING32, STRING64};

static int field_of(const char *key, Py_ssize_t len) {
    for (int f = 0; f < N_FIELDS; f++)
        if ((size_t)len == strlen(FIELD_NAMES[f]) && memcmp(key, FIELD_NAMES[f], (size_t)len) == 0)
            return f;
    return -1;
}

typedef struct {
    buf values;   /* string bytes, doubles, or the bool bits */
    buf offsets;  /* int32 or int64 per record, and one more */
    buf valid;    /* validity bits */
    Py_ssize_t nulls;
} column;

/* ---- strings ---------------------------------------------------------------------------- */

#define ONES 0x0101010101010101ULL
#define HIGHS 0x8080808080808080ULL

/* A nonzero mask whose lowest set bit is in the first byte of the eight that is '"', '\\',
 * a control character or non-ASCII (bytes above that one may be flagged falsely). */
static inline uint64_t special8(uint64_t x) {
    uint64_t q = x ^ (ONES * '"');
    uint64_t b = x ^ (ONES * '\\');
    uint64_t t = ((q - ONES) & ~q) | ((b - ONES) & ~b) | ((x - ONES * 0x20) & ~x);
    return (t | x) & HIGHS;
}

static int hex4(const unsigned char *p, const unsigned char *end, unsigned *out) {
    if (end - p < 4) return -1;
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        unsigned c = p[i], d;
        if (c >= '0' && c <= '9') d = c - '0';
        else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
        else return -1;
        v = v * 16 + d;
    }
    *out = v;
    return 0;
}

/* The length of the valid UTF-8 sequence at p (lead byte >= 0x80), or 0: the strict
 * reading Python's decoder and Arrow's validation share (no overlong forms, no encoded
 * surrogates, nothing above U+10FFFF). */
static inline int utf8_len(const unsigned char *p, const unsigned char *end) {
    unsigned c = p[0];
    Py_ssize_t left = end - p;
    if (c >= 0xC2 && c <= 0xDF) {
        return left >= 2 && (p[1] & 0xC0) == 0x80 ? 2 : 0;
    }
    if (c >= 0xE0 && c <= 0xEF) {
        if (left < 3 || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80) return 0;
        if (c == 0xE0 && p[1] < 0xA0) return 0;
        if (c == 0xED && p[1] > 0x9F) return 0;
        return 3;
    }
    if (c >= 0xF0 && c <= 0xF4) {
        if (left < 4 || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80
            || (p[3] & 0xC0) != 0x80) return 0;
        if (c == 0xF0 && p[1] < 0x90) return 0;
        if (c == 0xF4 && p[1] > 0x8F) return 0;
        return 4;
    }
    return 0;
}

#define BAD ((const unsigned char *)1)  /* not a string read_batch() accepts */

/* The string starting after its opening quote at p, unescaped and appended to out: the
 * position after its closing quote, BAD, or NULL (memory error, raised). */
static const unsigned char *read_string(const unsigned char *p, const unsigned char *end,
                                        buf *out) {
    for (;;) {
        if (RESERVE(out, 16) < 0) return NULL;
        int scanned = 0;  /* a wide test found the first special byte */
#if defined(__SSE2__)
        /* Sixteen bytes at a time where SSE2 is (every x86-64): the same test as
         * special8's, on twice the bytes. */
        if (end - p >= 16) {
            __m128i x = _mm_loadu_si128((const __m128i *)p);
            __m128i hit = _mm_or_si128(
                _mm_or_si128(_mm_cmpeq_epi8(x, _mm_set1_epi8('"')),
                             _mm_cmpeq_epi8(x, _mm_set1_epi8('\\'))),
                _mm_cmpeq_epi8(_mm_min_epu8(x, _mm_set1_epi8(0x1F)), x));
            unsigned m = (unsigned)(_mm_movemask_epi8(hit) | _mm_movemask_epi8(x));
            _mm_storeu_si128((__m128i *)(out->data + out->len), x);
            if (!m) {
                out->len += 16;
                p += 16;
                continue;
            }
            int k = __builtin_ctz(m);
            out->len += k;
            p += k;
            scanned = 1;
        }
#endif
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
        if (!scanned && end - p >= 8) {  /* special8's lowest flag is the first byte's */
            uint64_t x;
            memcpy(&x, p, 8);
            uint64_t m = special8(x);
            memcpy(out->data + out->len, p, 8);
            if (!m) {
                out->len += 8;
                p += 8;
                continue;
            }
            int k = __builtin_ctzll(m) >> 3;
            out->len += k;
            p += k;
        }
#endif
        if (p >= end) return BAD;
        unsigned c = *p;
        if (c == '"') return p + 1;
        if (c == '\\') {
            if (end - p < 2) return BAD;
            unsigned e = p[1];
            char *o = out->data + out->len;
            p += 2;
            switch (e) {
            case '"': *o = '"'; break;
            case '\\': *o = '\\'; break;
            case '/': *o = '/'; break;
            case 'b': *o = '\b'; break;
            case 'f': *o = '\f'; break;
            case 'n': *o = '\n'; break;
            case 'r': *o = '\r'; break;
            case 't': *o = '\t'; break;
            case 'u': {
                unsigned cp, lo;
                if (hex4(p, end, &cp) < 0) return BAD;
                p += 4;
                if (cp >= 0xD800 && cp <= 0xDBFF) {
                    if (end - p < 6 || p[0] != '\\' || p[1] != 'u' || hex4(p + 2, end, &lo) < 0
                        || lo < 0xDC00 || lo > 0xDFFF) return BAD;  /* a lone surrogate */
                    p += 6;
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
                    return BAD;
                }
                unsigned char *u = (unsigned char *)o;
                if (cp < 0x80) {
                    u[0] = (unsigned char)cp;
                    out->len += 1;
                } else if (cp < 0x800) {
                    u[0] = (unsigned char)(0xC0 | (cp >> 6));
                    u[1] = (unsigned char)(0x80 | (cp & 0x3F));
                    out->len += 2;
                } else if (cp < 0x10000) {
                    u[0] = (unsigned char)(0xE0 | (cp >> 12));
                    u[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
                    u[2] = (unsigned char)(0x80 | (cp & 0x3F));
                    out->len += 3;
                } else {
                    u[0] = (unsigned char)(0xF0 | (cp >> 18));
                    u[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
                    u[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
                    u[3] = (unsigned char)(0x80 | (cp & 0x3F));
                    out->len += 4;
                }
                continue;
            }
            default:
                return BAD;
            }
            out->len += 1;
            continue;
        }
        if (c < 0x20) return BAD;
        if (c < 0x80) {  /* the tail of a string shorter than eight bytes */
            out->data[out->len++] = (char)c;
            p++;
            continue;
        }
        /* Non-ASCII: the valid sequences that follow (most often three-byte ones: CJK
         * text), checked, then copied as they are in one go. */
        const unsigned char *q = p;
        do {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
            /* Two three-byte characters at a time (leads E1..EF but ED, each with its
             * two continuation bytes); anything else goes to the one-character step. */
            while (end - q >= 8) {
                uint64_t x;
                memcpy(&x, q, 8);
                if ((x & 0x0000C0C0F0C0C0F0ULL) != 0x00008080E08080E0ULL) break;
                unsigned l0 = (unsigned)(x & 0xFF), l1 = (unsigned)((x >> 24) & 0xFF);
                if (l0 == 0xE0 || l0 == 0xED || l1 == 0xE0 || l1 == 0xED) break;
                q += 6;
            }
            if (q >= end || *q < 0x80) break;
#endif
            unsigned lead = *q;
            if (lead >= 0xE1 && lead <= 0xEF && lead != 0xED && end - q >= 3) {
                if (((q[1] & 0xC0) != 0x80) | ((q[2] & 0xC0) != 0x80)) return BAD;
                q += 3;
                continue;
            }
            int n = utf8_len(q, end);
            if (!n) return BAD;
            q += n;
        } while (q < end && *q >= 0x80);
        if (RESERVE(out, q - p) < 0) return NULL;
        memcpy(out->data + out->len, p, (size_t)(q - p));
        out->len += q - p;
        p = q;
    }
}

/* ---- numbers ---------------------------------------------------------------------------- */

static inline int is_digit(unsigned c) { return c >= '0' && c <= '9'; }

/* A JSON number at p as a double, read by Python's own float() (correctly rounded, as
 * Arrow's reader and float(json.loads(...)) read it): the position after it, or BAD for a
 * malformed token and for a value json_table refuses or Arrow may read otherwise (an
 * overflow to infinity, a negative zero). NULL: memory error. */
static const unsigned char *read_number(const unsigned char *p, const unsigned char *end,
                                        double *out) {
    const unsigned char *s = p;
    if (p < end && *p == '-') p++;
    if (p >= end) return BAD;
    if (*p == '0') p++;
    else if (*p >= '1' && *p <= '9') while (p < end && is_digit(*p)) p++;
    else return BAD;
    if (p < end && *p == '.') {
        p++;
        if (p >= end || !is_digit(*p)) return BAD;
        while (p < end && is_digit(*p)) p++;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < end && (*p == '+' || *p == '-')) p++;
        if (p >= end || !is_digit(*p)) return BAD;
        while (p < end && is_digit(*p)) p++;
    }
    Py_ssize_t len = p - s;
    char small[64];
    char *token = len < (Py_ssize_t)sizeof small ? small : PyMem_Malloc((size_t)len + 1);
    if (!token) { PyErr_NoMemory(); return NULL; }
    memcpy(token, s, (size_t)len);
    token[len] = 0;
    char *stop = NULL;
    double v = PyOS_string_to_double(token, &stop, NULL);
    int whole = stop == token + len;
    if (token != small) PyMem_Free(token);
    if (v == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        return BAD;
    }
    if (!whole || !isfinite(v) || (v == 0.0 && signbit(v))) return BAD;
    *out = v;
    return p;
}

/* ---- read_batch() ----------------------------------------------------------------------------- */

static inline int set_bit(buf *b, Py_ssize_t i, int on) {
    if (i % 8 == 0) {
        if (RESERVE(b, 1) < 0) return -1;
        b->data[b->len++] = 0;
    }
    if (on) b->data[i / 8] |= (char)(1 << (i % 8));
    return 0;
}

static int append_list(PyObject *list, Py_ssize_t value) {
    PyObject *v = PyLong_FromSsize_t(value);
    if (!v) return -1;
    int r = PyList_Append(list, v);
    Py_DECREF(v);
    return r;
}

#define SKIP_INNER_WS(p) while ((p) < end && (*(p) == ' ' || *(p) == '\t' || *(p) == '\r')) (p)++
#define REJECT do { rejected = 1; goto done; } while (0)
#define CHECK(q) do { if ((q) == NULL) goto done; if ((q) == BAD) REJECT; } while (0)

static PyObject *read_batch(PyObject *self, PyObject *args) {
    Py_buffer in, raw;
    if (!PyArg_ParseTuple(args, "y*w*", &in, &raw)) return NULL;
    const unsigned char *base = in.buf, *end = base + in.len, *p = base;
    column cols[N_FIELDS];
    memset(cols, 0, sizeof cols);
    buf key = {0};
    PyObject *lines = PyList_New(0), *starts = PyList_New(0), *ends = PyList_New(0);
    PyObject *absent = PyList_New(0), *result = NULL;
    int rejected = 0;
    Py_ssize_t n = 0, line = 1;
    if (!lines || !starts || !ends || !absent) goto done;
    for (int f = 0; f < N_FIELDS; f++) {
        column *c = &cols[f];
        if (FIELD_KINDS[f] == STRING64) {
            /* Most of the batch, written into the caller's buffer (pyarrow's memory pool:
             * its pages stay warm from batch to batch, and the process's malloc heap is
             * left to numpy); a string's bytes are at most its JSON's, so the batch's
             * size and the 16 bytes a scan writes ahead are room enough. */
            if (raw.len < in.len + 16) {
                PyErr_SetString(PyExc_ValueError, "read_batch: raw needs len(data) + 16 bytes");
                goto done;
            }
            c->values.data = raw.buf;
            c->values.cap = raw.len;
            c->values.borrowed = 1;
            if (RESERVE(&c->offsets, 8) < 0) goto done;
            int64_t zero = 0;
            memcpy(c->offsets.data, &zero, 8);
            c->offsets.len = 8;
        } else if (FIELD_KINDS[f] == STRING32) {
            if (RESERVE(&c->offsets, 4) < 0) goto done;
            int32_t zero = 0;
            memcpy(c->offsets.data, &zero, 4);
            c->offsets.len = 4;
        }
    }
    for (;;) {
        while (p < end && (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n')) {
            if (*p == '\n') line++;
            p++;
        }
        if (p == end) break;
        if (*p != '{') REJECT;
        const unsigned char *record = p;
        int seen[N_FIELDS] = {0}, null[N_FIELDS] = {0}, truth = 0;
        double number = 0.0;
        p++;
        SKIP_INNER_WS(p);
        if (p < end && *p == '}') REJECT;  /* {}: no raw_response */
        for (;;) {
            if (p >= end || *p != '"') REJECT;
            key.len = 0;
            const unsigned char *q = read_string(p + 1, end, &key);
            CHECK(q);
            p = q;
            int f = field_of(key.data, key.len);
            if (f < 0 || seen[f]) REJECT;
            seen[f] = 1;
            SKIP_INNER_WS(p);
            if (p >= end || *p != ':') REJECT;
            p++;
            SKIP_INNER_WS(p);
            if (p >= end) REJECT;
            int kind = FIELD_KINDS[f];
            if (*p == 'n') {
                if (end - p < 4 || memcmp(p, "null", 4) != 0) REJECT;
                p += 4;
                null[f] = 1;
            } else if (*p == '"') {
                if (kind != STRING32 && kind != STRING64) REJECT;
                q = read_string(p + 1, end, &cols[f].values);
                CHECK(q);
                p = q;
            } else if (*p == 't' || *p == 'f') {
                if (kind != BOOL) REJECT;
                if (end - p >= 4 && memcmp(p, "true", 4) == 0) { truth = 1; p += 4; }
                else if (end - p >= 5 && memcmp(p, "false", 5) == 0) { truth = 0; p += 5; }
                else REJECT;
            } else if (*p == '-' || is_digit(*p)) {
                if (kind != DOUBLE) REJECT;
                q = read_number(p, end, &number);
                CHECK(q);
                p = q;
            } else {
                REJECT;
            }
            SKIP_INNER_WS(p);
            if (p < end && *p == ',') {
                p++;
                SKIP_INNER_WS(p);
                continue;
            }
            if (p < end && *p == '}') break;
            REJECT;
        }
        p++;
        const unsigned char *record_end = p;
        SKIP_INNER_WS(p);
        if (p < end && *p != '\n') REJECT;  /* two objects on a line, or other bytes */
        if (!seen[RAW_RESPONSE] || null[RAW_RESPONSE]) REJECT;
        for (int f = 0; f < N_FIELDS; f++) {
            column *c = &cols[f];
            int valid = seen[f] && !null[f];
            if (!valid) c->nulls++;
            if (set_bit(&c->valid, n, valid) < 0) goto done;
            switch (FIELD_KINDS[f]) {
            case STRING32: {
                if (c->values.len > INT32_MAX) REJECT;  /* Arrow would need a second chunk */
                int32_t at = (int32_t)c->values.len;
                if (RESERVE(&c->offsets, 4) < 0) goto done;
                memcpy(c->offsets.data + c->offsets.len, &at, 4);
                c->offsets.len += 4;
                break;
            }
            case STRING64: {
                int64_t at = (int64_t)c->values.len;
                if (RESERVE(&c->offsets, 8) < 0) goto done;
                memcpy(c->offsets.data + c->offsets.len, &at, 8);
                c->offsets.len += 8;
                break;
            }
            case DOUBLE: {
                double v = valid ? number : 0.0;
                if (RESERVE(&c->values, 8) < 0) goto done;
                memcpy(c->values.data + c->values.len, &v, 8);
                c->values.len += 8;
                break;
            }
            case BOOL:
                if (set_bit(&c->values, n, valid && truth) < 0) goto done;
                break;
            }
        }
        if (!seen[SUCCESS] && append_list(absent, n) < 0) goto done;
        if (append_list(lines, line) < 0 || append_list(starts, record - base) < 0
            || append_list(ends, record_end - base) < 0) goto done;
        n++;
    }
    if (!n) REJECT;
    PyObject *columns = PyTuple_New(N_FIELDS);
    if (!columns) goto done;
    for (int f = 0; f < N_FIELDS; f++) {
        column *c = &cols[f];
        PyObject *valid = NULL, *offsets = NULL, *values = NULL;
        if (c->nulls) {
            valid = take(&c->valid);
        } else {
            valid = Py_None;
            Py_INCREF(valid);
        }
        if (c->offsets.data) {
            offsets = take(&c->offsets);
        } else {
            offsets = Py_None;
            Py_INCREF(offsets);
        }
        values = c->values.borrowed ? PyLong_FromSsize_t(c->values.len) : take(&c->values);
        PyObject *item = valid && offsets && values
            ? Py_BuildValue("(nNNN)", c->nulls, valid, offsets, values) : NULL;
        if (!item) {  /* Py_BuildValue's N took the three references, also on failure */
            if (!(valid && offsets && values)) {
                Py_XDECREF(valid);
                Py_XDECREF(offsets);
                Py_XDECREF(values);
            }
            Py_DECREF(columns);
            goto done;
        }
        PyTuple_SET_ITEM(columns, f, item);
    }
    result = Py_BuildValue("(nOOOON)", n, lines, starts, ends, absent, columns);
done:
    for (int f = 0; f < N_FIELDS; f++) {
        release(&cols[f].values);
        release(&cols[f].offsets);
        release(&cols[f].valid);
    }
    release(&key);
    Py_XDECREF(lines);
    Py_XDECREF(starts);
    Py_XDECREF(ends);
    Py_XDECREF(absent);
    PyBuffer_Release(&in);
    PyBuffer_Release(&raw);
    if (rejected && !PyErr_Occurred()) {
        Py_XDECREF(result);
        Py_RETURN_NONE;
    }
    return result;
}

static PyMethodDef methods[] = {
    {"read_batch", read_batch, METH_VARARGS,
     "read_batch(data, raw) -> None, or (n, lines, starts, ends, absent, columns): the "
     "batch's records (one JSON object of the plain XML-tag fields per non-blank line), each "
     "record's line number and stripped bounds, the records without a success key, and per "
     "field (timestamp, task_id, task_description, duration, success, final_result, "
     "raw_response) (null_count, validity or None, offsets or None, values) as Arrow "
     "buffers; raw_response's values are written into raw (writable, len(data) + 16 bytes "
     "at least), its values item the bytes used."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_jsonlines",
    "One-pass reader of plain XML-tag JSONL batches into Arrow buffers (see _jsonlines.c).",
    -1, methods,
};

PyMODINIT_FUNC PyInit__jsonlines(void) {
    if (PyType_Ready(&OwnedBufferType) < 0) return NULL;
    return PyModule_Create(&module);
}
