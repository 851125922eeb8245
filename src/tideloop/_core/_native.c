/*
 * tideloop._core._native: the native twin of the core's hot paths.
 *
 * Layer: core. Written against the CPython C API only. The pure-Python
 * `Scheduler` (scheduler.py) is the reference: this module defines a type,
 * `Core`, whose methods of the same names take precedence over Scheduler's
 * where the build has it (CoreLoop's bases are then (Core, Scheduler, ...));
 * everything it does not define is Scheduler's. Every behaviour is tested
 * on both builds.
 *
 * What is here, and why (docs/performance.md has the measurements):
 * - `ReadyQueue`: the ready queue, a ring of handles. The fd registry, the
 *   timer queue and tideloop.testing append to it through its Python
 *   methods (the subset of collections.deque they use); the run phase pops
 *   from it without a call.
 * - `Core.call_soon`: builds an asyncio.Handle (tideloop's subclass) with
 *   one allocation, writing its __slots__ at the offsets their member
 *   descriptors give, and no __init__ frame.
 * - `Core._run_once`: one iteration, asyncio's phases in asyncio's order,
 *   exactly as Scheduler._run_once; the run phase calls each callback in
 *   its handle's context (PyContext_Enter/Exit) with no Python frame of
 *   ours and no bound method per call.
 * - `Core.run_forever`: the loop over _run_once, without a frame.
 *
 * Facts / what this means for us:
 * - asyncio.Handle is a Python class with __slots__: its fields live at
 *   fixed offsets in the object, which its member descriptors expose. A
 *   Python subclass with __slots__ = () has the same layout. So a handle
 *   is read and written here through those offsets, after checking once
 *   that an object is an asyncio.Handle (a user's handle of another class
 *   goes through getattr instead).
 * - The Python code that runs around us (tasks, futures, user callbacks)
 *   reads the loop's state as attributes: `_ready`, `_closed`, `_debug`,
 *   `_stopping` and the others the iteration needs are members of Core, so
 *   both sides see one value.
 * - Other threads call `ReadyQueue.append` (call_soon_threadsafe). Under
 *   the GIL an append is atomic: no Python code runs inside it, and a
 *   growing ring is reallocated before anyone else can look. So the run
 *   phase never keeps a pointer into the ring across a callback.
 *   Free-threaded builds are not supported (Py_mod_gil says so).
 *
 * Ownership: every PyObject* field of a struct here is an owned reference
 * (or NULL); every function documents what it returns (new or borrowed)
 * where it is not the usual "new reference, NULL on error".
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include "_native_common.h"
#include <time.h>
#include <math.h>
#include <errno.h>
#include <limits.h>
#ifdef __linux__
#include <sys/epoll.h>
#define TL_EPOLL 1
#endif


/* ------------------------------------------------------------------ */
/* Module-wide state: set once by configure(), read by the hot paths.  */

static PyTypeObject *HandleType = NULL;        /* tideloop._core.handles.Handle */
static PyTypeObject *AsyncioHandleType = NULL; /* asyncio.Handle */
static PyObject *error_context = NULL;         /* errors.callback_error_context */
static PyObject *thread_count = NULL;          /* _thread._count */
/* Threads that need no prompt GIL hand-over (_core/quiet.py): the poll is
 * skipped while _thread._count() is at most this. Written under the GIL. */
static Py_ssize_t quiet_threads = 0;
static PyObject *monotonic = NULL;             /* time.monotonic */
static PyTypeObject *TimerHandleType = NULL;   /* tideloop._core.handles.TimerHandle */
static PyObject *sleep_callback = NULL;        /* asyncio.futures._set_result_unless_cancelled */
static PyObject *far_delay = NULL;             /* timers.FAR_DELAY */
static PyObject *registry_dispatch = NULL;     /* FdRegistry.dispatch (the fd layer's) */
static long reader_bits = 0, writer_bits = 0;  /* pollers.READER_BITS, WRITER_BITS */
static PyTypeObject *EpollType = NULL;         /* select.epoll, where it exists */

/* Offsets of asyncio.Handle's slots. */
static Py_ssize_t off_context, off_loop, off_callback, off_args, off_cancelled, off_repr,
    off_source_traceback;
/* Offsets of asyncio.TimerHandle's own slots. */
static Py_ssize_t off_when;

/* Interned attribute names. */
static PyObject *s_context, *s_call_exception_handler, *s_call_soon_debug, *s_run_ready_timed,
    *s_slow_phase, *s_run_forever_setup, *s_run_forever_cleanup, *s_polled, *s_heap,
    *s_cancelled, *s_next_deadline, *s_buckets, *s_marker, *s_pass_markers, *s_pop_due,
    *s_timed, *s_run, *s_run_once, *s_callback, *s_args, *s_timers_cancelled, *s_callback_kw, *s_delay_kw, *s_when_kw, *s_call_at_py,
    *s_push, *s_push_far, *s_readers, *s_writers, *s_ready_attr, *s_remove_reader,
    *s_remove_writer, *s_fileno, *s_context_attr;


/* ------------------------------------------------------------------ */
/* ReadyQueue                                                           */

typedef struct {
    PyObject_HEAD
    PyObject **items; /* owned references, ring of capacity `cap` */
    Py_ssize_t head;  /* index of the first item */
    Py_ssize_t len;
    Py_ssize_t cap;   /* a power of two, or 0 */
} ReadyQueue;

static PyTypeObject ReadyQueueType;

static int
rq_grow(ReadyQueue *q)
{
    Py_ssize_t cap = q->cap ? q->cap * 2 : 64;
    PyObject **items = PyMem_New(PyObject *, cap);
    if (items == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < q->len; i++) {
        items[i] = q->items[(q->head + i) & (q->cap - 1)];
    }
    PyMem_Free(q->items);
    q->items = items;
    q->head = 0;
    q->cap = cap;
    return 0;
}

/* Append a new reference to *item* (the caller keeps its own). */
static inline int
rq_push(ReadyQueue *q, PyObject *item)
{
    if (q->len == q->cap && rq_grow(q) < 0) {
        return -1;
    }
    q->items[(q->head + q->len) & (q->cap - 1)] = Py_NewRef(item);
    q->len++;
    return 0;
}

/* Pop the first item: a new (transferred) reference; the queue must not be empty. */
static inline PyObject *
rq_pop(ReadyQueue *q)
{
    PyObject *item = q->items[q->head];
    q->head = (q->head + 1) & (q->cap - 1);
    q->len--;
    return item;
}

static PyObject *
rq_append(ReadyQueue *q, PyObject *item)
{
    if (rq_push(q, item) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *
rq_popleft(ReadyQueue *q, PyObject *Py_UNUSED(ignored))
{
    if (q->len == 0) {
        PyErr_SetString(PyExc_IndexError, "pop from an empty deque");
        return NULL;
    }
    return rq_pop(q);
}

static PyObject *
rq_extend(ReadyQueue *q, PyObject *iterable)
{
    /* A snapshot first: extending a queue with itself adds its items once. */
    PyObject *seq = PySequence_List(iterable);
    if (seq == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(seq); i++) {
        if (rq_push(q, PyList_GET_ITEM(seq, i)) < 0) {
            Py_DECREF(seq);
            return NULL;
        }
    }
    Py_DECREF(seq);
    Py_RETURN_NONE;
}

/* Drop every item. The references go after the queue is empty: a handle's
 * finalizer may append to this very queue. */
static void
rq_drop_all(ReadyQueue *q)
{
    PyObject **items = q->items;
    Py_ssize_t head = q->head, len = q->len, cap = q->cap;
    q->items = NULL;
    q->head = q->len = q->cap = 0;
    for (Py_ssize_t i = 0; i < len; i++) {
        Py_DECREF(items[(head + i) & (cap - 1)]);
    }
    PyMem_Free(items);
}

static PyObject *
rq_clear_method(ReadyQueue *q, PyObject *Py_UNUSED(ignored))
{
    rq_drop_all(q);
    Py_RETURN_NONE;
}

static PyObject *
rq_snapshot(ReadyQueue *q)
{
    PyObject *list = PyList_New(q->len);
    if (list == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < q->len; i++) {
        PyList_SET_ITEM(list, i, Py_NewRef(q->items[(q->head + i) & (q->cap - 1)]));
    }
    return list;
}

static PyObject *
rq_iter(ReadyQueue *q)
{
    /* Iterates over a snapshot: the queue may change while the caller loops. */
    PyObject *list = rq_snapshot(q);
    if (list == NULL) {
        return NULL;
    }
    PyObject *it = PyObject_GetIter(list);
    Py_DECREF(list);
    return it;
}

static Py_ssize_t
rq_length(ReadyQueue *q)
{
    return q->len;
}

static PyObject *
rq_repr(ReadyQueue *q)
{
    PyObject *list = rq_snapshot(q);
    if (list == NULL) {
        return NULL;
    }
    PyObject *r = PyUnicode_FromFormat("ReadyQueue(%R)", list);
    Py_DECREF(list);
    return r;
}

static PyObject *
rq_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    PyObject *iterable = NULL;
    if (!PyArg_UnpackTuple(args, "ReadyQueue", 0, 1, &iterable)) {
        return NULL;
    }
    if (kwds != NULL && PyDict_GET_SIZE(kwds)) {
        PyErr_SetString(PyExc_TypeError, "ReadyQueue() takes no keyword arguments");
        return NULL;
    }
    ReadyQueue *q = (ReadyQueue *)type->tp_alloc(type, 0);
    if (q == NULL) {
        return NULL;
    }
    if (iterable != NULL) {
        PyObject *r = rq_extend(q, iterable);
        if (r == NULL) {
            Py_DECREF(q);
            return NULL;
        }
        Py_DECREF(r);
    }
    return (PyObject *)q;
}

static int
rq_traverse(ReadyQueue *q, visitproc visit, void *arg)
{
    for (Py_ssize_t i = 0; i < q->len; i++) {
        Py_VISIT(q->items[(q->head + i) & (q->cap - 1)]);
    }
    return 0;
}

static int
rq_tp_clear(ReadyQueue *q)
{
    rq_drop_all(q);
    return 0;
}

static void
rq_dealloc(ReadyQueue *q)
{
    PyObject_GC_UnTrack(q);
    rq_drop_all(q);
    Py_TYPE(q)->tp_free((PyObject *)q);
}

static PyMethodDef rq_methods[] = {
    {"append", (PyCFunction)rq_append, METH_O, "Append a handle (any thread)."},
    {"popleft", (PyCFunction)rq_popleft, METH_NOARGS, "Remove and return the first handle."},
    {"extend", (PyCFunction)rq_extend, METH_O, "Append every handle of an iterable."},
    {"clear", (PyCFunction)rq_clear_method, METH_NOARGS, "Remove every handle."},
    {NULL, NULL, 0, NULL},
};

static PySequenceMethods rq_as_sequence = {
    .sq_length = (lenfunc)rq_length,
};

static PyTypeObject ReadyQueueType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tideloop._core._native.ReadyQueue",
    .tp_basicsize = sizeof(ReadyQueue),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The ready queue: handles whose callbacks run in the next run phase.",
    .tp_new = rq_new,
    .tp_dealloc = (destructor)rq_dealloc,
    .tp_traverse = (traverseproc)rq_traverse,
    .tp_clear = (inquiry)rq_tp_clear,
    .tp_iter = (getiterfunc)rq_iter,
    .tp_repr = (reprfunc)rq_repr,
    .tp_as_sequence = &rq_as_sequence,
    .tp_methods = rq_methods,
};

/* ------------------------------------------------------------------ */
/* Counters: metrics.Counters with C numbers                            */

/* metrics.Counters' fields, the same names, as C numbers: the iteration
 * writes them without making a float or an int per write. Python code
 * (metrics(), the timer queue's lag accounting, run_forever's setup)
 * reads and writes them as attributes, as it does the pure class's.
 * metrics.py makes these when the native core runs (native.py says so). */
typedef struct {
    PyObject_HEAD
    long long seq, iterations, callbacks, slow_callbacks;
    double run_time, run_start, idle_time, poll_start, mark, max_lag, lag_sum;
    PyObject *lag_counts; /* a list, len(LAG_BOUNDS) + 1 ints */
} Counters;

static PyTypeObject CountersNativeType;
static Py_ssize_t lag_buckets = 0; /* len(LAG_BOUNDS) + 1, set by configure() */

static PyObject *
counters_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    if (PyTuple_GET_SIZE(args) || (kwds != NULL && PyDict_GET_SIZE(kwds))) {
        PyErr_SetString(PyExc_TypeError, "Counters() takes no arguments");
        return NULL;
    }
    Counters *self = (Counters *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    self->lag_counts = PyList_New(lag_buckets);
    if (self->lag_counts == NULL) {
        Py_DECREF(self);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < lag_buckets; i++) {
        PyList_SET_ITEM(self->lag_counts, i, PyLong_FromLong(0)); /* a cached small int */
    }
    return (PyObject *)self;
}

static int
counters_traverse(Counters *self, visitproc visit, void *arg)
{
    Py_VISIT(self->lag_counts);
    return 0;
}

static int
counters_clear(Counters *self)
{
    Py_CLEAR(self->lag_counts);
    return 0;
}

static void
counters_dealloc(Counters *self)
{
    PyObject_GC_UnTrack(self);
    counters_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMemberDef counters_members[] = {
    {"seq", TL_T_LONGLONG, offsetof(Counters, seq), 0, NULL},
    {"iterations", TL_T_LONGLONG, offsetof(Counters, iterations), 0, NULL},
    {"callbacks", TL_T_LONGLONG, offsetof(Counters, callbacks), 0, NULL},
    {"slow_callbacks", TL_T_LONGLONG, offsetof(Counters, slow_callbacks), 0, NULL},
    {"run_time", TL_T_DOUBLE, offsetof(Counters, run_time), 0, NULL},
    {"run_start", TL_T_DOUBLE, offsetof(Counters, run_start), 0, NULL},
    {"idle_time", TL_T_DOUBLE, offsetof(Counters, idle_time), 0, NULL},
    {"poll_start", TL_T_DOUBLE, offsetof(Counters, poll_start), 0, NULL},
    {"mark", TL_T_DOUBLE, offsetof(Counters, mark), 0, NULL},
    {"max_lag", TL_T_DOUBLE, offsetof(Counters, max_lag), 0, NULL},
    {"lag_sum", TL_T_DOUBLE, offsetof(Counters, lag_sum), 0, NULL},
    {"lag_counts", TL_T_OBJECT_EX, offsetof(Counters, lag_counts), 0, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject CountersNativeType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tideloop._core._native.Counters",
    .tp_basicsize = sizeof(Counters),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The loop's running totals (metrics.Counters), as C numbers.",
    .tp_new = counters_new,
    .tp_dealloc = (destructor)counters_dealloc,
    .tp_traverse = (traverseproc)counters_traverse,
    .tp_clear = (inquiry)counters_clear,
    .tp_members = counters_members,
};

/* ------------------------------------------------------------------ */
/* Core                                                                 */

typedef struct {
    PyObject_HEAD
    ReadyQueue *ready;           /* _ready */
    PyObject *debug_obj;         /* _debug, as set */
    int debug;                   /* its truth */
    char closed;                 /* _closed */
    char stopping;               /* _stopping */
    PyObject *timers;            /* _timers: TimerQueue */
    PyObject *counters;          /* _counters: a Counters of this module's */
    PyObject *instruments;       /* _instruments: Instruments */
    PyObject *clock_wait;        /* _clock_wait: None or wait(poll, timeout) */
    PyObject *poll;              /* _poll */
    PyObject *dispatch;          /* _dispatch */
    PyObject *io;                /* _io: the IoSource */
    PyObject *now;               /* _now: the loop's time function */
    PyObject *now_is_real;       /* _now_is_real */
    PyObject *clock_resolution;  /* _clock_resolution */
    PyObject *slow_duration;     /* slow_callback_duration */
    PyObject *bare_context;      /* _bare_context: asyncio.sleep()'s timers' context */
#ifdef TL_EPOLL
    struct epoll_event *events;  /* the raw poll's buffer (PyMem), made on first use */
#endif
} Core;

static PyTypeObject CoreType;

static PyObject *
core_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    Core *self = (Core *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    /* Closed until fully built: a loop whose construction failed must not
     * warn or close anything in __del__. */
    self->closed = 1;
    return (PyObject *)self;
}

static int
core_traverse(Core *self, visitproc visit, void *arg)
{
    Py_VISIT(self->ready);
    Py_VISIT(self->debug_obj);
    Py_VISIT(self->timers);
    Py_VISIT(self->counters);
    Py_VISIT(self->instruments);
    Py_VISIT(self->clock_wait);
    Py_VISIT(self->poll);
    Py_VISIT(self->dispatch);
    Py_VISIT(self->io);
    Py_VISIT(self->now);
    Py_VISIT(self->now_is_real);
    Py_VISIT(self->clock_resolution);
    Py_VISIT(self->slow_duration);
    Py_VISIT(self->bare_context);
    return 0;
}

static int
core_clear(Core *self)
{
    Py_CLEAR(self->ready);
    Py_CLEAR(self->debug_obj);
    Py_CLEAR(self->timers);
    Py_CLEAR(self->counters);
    Py_CLEAR(self->instruments);
    Py_CLEAR(self->clock_wait);
    Py_CLEAR(self->poll);
    Py_CLEAR(self->dispatch);
    Py_CLEAR(self->io);
    Py_CLEAR(self->now);
    Py_CLEAR(self->now_is_real);
    Py_CLEAR(self->clock_resolution);
    Py_CLEAR(self->slow_duration);
    Py_CLEAR(self->bare_context);
    return 0;
}

static void
core_dealloc(Core *self)
{
    PyObject_GC_UnTrack(self);
    core_clear(self);
#ifdef TL_EPOLL
    PyMem_Free(self->events);
    self->events = NULL;
#endif
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* _ready: must be a ReadyQueue (the run phase reads its ring directly). */
static PyObject *
core_get_ready(Core *self, void *Py_UNUSED(closure))
{
    if (self->ready == NULL) {
        PyErr_SetString(PyExc_AttributeError, "_ready");
        return NULL;
    }
    return Py_NewRef(self->ready);
}

static int
core_set_ready(Core *self, PyObject *value, void *Py_UNUSED(closure))
{
    if (value == NULL) {
        PyErr_SetString(PyExc_AttributeError, "cannot delete _ready");
        return -1;
    }
    if (!PyObject_TypeCheck(value, &ReadyQueueType)) {
        PyErr_Format(PyExc_TypeError, "the native core's ready queue must be a ReadyQueue, not %.100s",
                     Py_TYPE(value)->tp_name);
        return -1;
    }
    Py_XSETREF(self->ready, (ReadyQueue *)Py_NewRef(value));
    return 0;
}

/* _debug: kept as given (get_debug() returns it), its truth cached. */
static PyObject *
core_get_debug(Core *self, void *Py_UNUSED(closure))
{
    if (self->debug_obj == NULL) {
        PyErr_SetString(PyExc_AttributeError, "_debug");
        return NULL;
    }
    return Py_NewRef(self->debug_obj);
}

static int
core_set_debug(Core *self, PyObject *value, void *Py_UNUSED(closure))
{
    if (value == NULL) {
        PyErr_SetString(PyExc_AttributeError, "cannot delete _debug");
        return -1;
    }
    int truth = PyObject_IsTrue(value);
    if (truth < 0) {
        return -1;
    }
    Py_XSETREF(self->debug_obj, Py_NewRef(value));
    self->debug = truth;
    return 0;
}

static PyGetSetDef core_getset[] = {
    {"_ready", (getter)core_get_ready, (setter)core_set_ready, "The ready queue.", NULL},
    {"_debug", (getter)core_get_debug, (setter)core_set_debug, "Debug mode, as set.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMemberDef core_members[] = {
    {"_closed", TL_T_BOOL, offsetof(Core, closed), 0, NULL},
    {"_stopping", TL_T_BOOL, offsetof(Core, stopping), 0, NULL},
    {"_timers", TL_T_OBJECT_EX, offsetof(Core, timers), 0, NULL},
    {"_counters", TL_T_OBJECT_EX, offsetof(Core, counters), 0, NULL},
    {"_instruments", TL_T_OBJECT_EX, offsetof(Core, instruments), 0, NULL},
    {"_clock_wait", TL_T_OBJECT_EX, offsetof(Core, clock_wait), 0, NULL},
    {"_poll", TL_T_OBJECT_EX, offsetof(Core, poll), 0, NULL},
    {"_dispatch", TL_T_OBJECT_EX, offsetof(Core, dispatch), 0, NULL},
    {"_io", TL_T_OBJECT_EX, offsetof(Core, io), 0, NULL},
    {"_now", TL_T_OBJECT_EX, offsetof(Core, now), 0, NULL},
    {"_now_is_real", TL_T_OBJECT_EX, offsetof(Core, now_is_real), 0, NULL},
    {"_clock_resolution", TL_T_OBJECT_EX, offsetof(Core, clock_resolution), 0, NULL},
    {"slow_callback_duration", TL_T_OBJECT_EX, offsetof(Core, slow_duration), 0, NULL},
    {"_bare_context", TL_T_OBJECT_EX, offsetof(Core, bare_context), 0, NULL},
    {NULL, 0, 0, 0, NULL},
};

/* Set every field of handles.new_handle_fields on a new (all-NULL) handle:
 * *ctx* and *args* are stolen, *loop* and *callback* borrowed. */
static inline void
fill_handle(PyObject *handle, PyObject *loop, PyObject *ctx, PyObject *callback, PyObject *args)
{
    SLOT(handle, off_context) = ctx;
    SLOT(handle, off_loop) = Py_NewRef(loop);
    SLOT(handle, off_callback) = Py_NewRef(callback);
    SLOT(handle, off_args) = args;
    SLOT(handle, off_cancelled) = Py_NewRef(Py_False);
    SLOT(handle, off_repr) = Py_NewRef(Py_None);
    SLOT(handle, off_source_traceback) = Py_NewRef(Py_None);
}

static int
check_ready(Core *self)
{
    if (self->ready == NULL || HandleType == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "the native core is not set up (no ready queue)");
        return -1;
    }
    return 0;
}

/* Python's own messages for a bad call of a pure method (the pure twin's
 * qualname is Scheduler.<name>): the same TypeError for the same mistake. */
static int
no_arguments(const char *name, Py_ssize_t nargs, PyObject *kwnames)
{
    if (nargs) {
        PyErr_Format(PyExc_TypeError,
                     "Scheduler.%s() takes 1 positional argument but %zd were given", name,
                     nargs + 1);
        return -1;
    }
    if (kwnames != NULL && PyTuple_GET_SIZE(kwnames)) {
        PyErr_Format(PyExc_TypeError, "Scheduler.%s() got an unexpected keyword argument '%S'",
                     name, PyTuple_GET_ITEM(kwnames, 0));
        return -1;
    }
    return 0;
}

/* call_soon(callback, *args, context=None) */
static PyObject *
core_call_soon(Core *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    PyObject *context = Py_None;
    PyObject *callback = nargs ? args[0] : NULL;
    if (kwnames != NULL) {
        Py_ssize_t nkw = PyTuple_GET_SIZE(kwnames);
        for (Py_ssize_t i = 0; i < nkw; i++) {
            PyObject *name = PyTuple_GET_ITEM(kwnames, i);
            if (PyUnicode_Compare(name, s_context) == 0) {
                context = args[nargs + i];
                continue;
            }
            if (PyUnicode_Compare(name, s_callback_kw) == 0) {
                if (callback != NULL) {
                    PyErr_SetString(PyExc_TypeError,
                                    "Scheduler.call_soon() got multiple values for argument "
                                    "'callback'");
                    return NULL;
                }
                callback = args[nargs + i];
                continue;
            }
            if (PyErr_Occurred()) {
                return NULL;
            }
            PyErr_Format(PyExc_TypeError,
                         "Scheduler.call_soon() got an unexpected keyword argument '%S'", name);
            return NULL;
        }
    }
    if (callback == NULL) {
        PyErr_SetString(PyExc_TypeError,
                        "Scheduler.call_soon() missing 1 required positional argument: 'callback'");
        return NULL;
    }
    if (self->closed) {
        PyErr_SetString(PyExc_RuntimeError, "Event loop is closed");
        return NULL;
    }
    if (check_ready(self) < 0) {
        return NULL;
    }
    Py_ssize_t first = nargs ? 1 : 0; /* the callback's arguments follow it */
    PyObject *cbargs = PyTuple_New(nargs - first);
    if (cbargs == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = first; i < nargs; i++) {
        PyTuple_SET_ITEM(cbargs, i - first, Py_NewRef(args[i]));
    }
    if (self->debug) {
        /* Debug mode's checks and traceback: the pure path's code (one frame
         * of ours to trim: the helper's). */
        PyObject *one = PyLong_FromLong(1);
        if (one == NULL) {
            Py_DECREF(cbargs);
            return NULL;
        }
        PyObject *stack[] = {(PyObject *)self, callback, cbargs, context, one};
        PyObject *handle = PyObject_VectorcallMethod(
            s_call_soon_debug, stack, 5 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
        Py_DECREF(one);
        Py_DECREF(cbargs);
        return handle;
    }
    PyObject *ctx;
    if (context == Py_None) {
        ctx = PyContext_CopyCurrent();
        if (ctx == NULL) {
            Py_DECREF(cbargs);
            return NULL;
        }
    }
    else {
        ctx = Py_NewRef(context);
    }
    PyObject *handle = HandleType->tp_alloc(HandleType, 0);
    if (handle == NULL) {
        Py_DECREF(ctx);
        Py_DECREF(cbargs);
        return NULL;
    }
    fill_handle(handle, (PyObject *)self, ctx, callback, cbargs);
    if (rq_push(self->ready, handle) < 0) {
        Py_DECREF(handle);
        return NULL;
    }
    return handle;
}

/* Parse (first, callback, *args, context=None) as Python would for
 * Scheduler.<name>(self, <first>, callback, *args, context=None): *first*,
 * *callback* and *context* are borrowed; *cbargs* is a new tuple. */
static int
parse_timer_call(const char *name, PyObject *first_kw, PyObject *const *args, Py_ssize_t nargs,
                 PyObject *kwnames, PyObject **first, PyObject **callback, PyObject **context,
                 PyObject **cbargs)
{
    *first = nargs > 0 ? args[0] : NULL;
    *callback = nargs > 1 ? args[1] : NULL;
    *context = Py_None;
    if (kwnames != NULL) {
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(kwnames); i++) {
            PyObject *kw = PyTuple_GET_ITEM(kwnames, i);
            PyObject *value = args[nargs + i];
            PyObject **slot = NULL;
            const char *argname = NULL;
            if (PyUnicode_Compare(kw, s_context) == 0) {
                *context = value;
                continue;
            }
            if (PyUnicode_Compare(kw, first_kw) == 0) {
                slot = first;
                argname = PyUnicode_AsUTF8(first_kw);
            }
            else if (PyUnicode_Compare(kw, s_callback_kw) == 0) {
                slot = callback;
                argname = "callback";
            }
            if (PyErr_Occurred()) {
                return -1;
            }
            if (slot == NULL) {
                PyErr_Format(PyExc_TypeError,
                             "Scheduler.%s() got an unexpected keyword argument '%S'", name, kw);
                return -1;
            }
            if (*slot != NULL) {
                PyErr_Format(PyExc_TypeError,
                             "Scheduler.%s() got multiple values for argument '%s'", name, argname);
                return -1;
            }
            *slot = value;
        }
    }
    if (*first == NULL && *callback == NULL) {
        PyErr_Format(PyExc_TypeError,
                     "Scheduler.%s() missing 2 required positional arguments: '%U' and 'callback'",
                     name, first_kw);
        return -1;
    }
    if (*first == NULL || *callback == NULL) {
        PyErr_Format(PyExc_TypeError, "Scheduler.%s() missing 1 required positional argument: '%U'",
                     name, *first == NULL ? first_kw : s_callback_kw);
        return -1;
    }
    Py_ssize_t skip = nargs < 2 ? nargs : 2;
    *cbargs = PyTuple_New(nargs - skip);
    if (*cbargs == NULL) {
        return -1;
    }
    for (Py_ssize_t i = skip; i < nargs; i++) {
        PyTuple_SET_ITEM(*cbargs, i - skip, Py_NewRef(args[i]));
    }
    return 0;
}

/* self._call_at(when, callback, cbargs, context, 1): the pure path, for
 * debug mode, a closed loop and a time that is not a float. */
static PyObject *
call_at_pure(Core *self, PyObject *when, PyObject *callback, PyObject *cbargs, PyObject *context)
{
    PyObject *one = PyLong_FromLong(1);
    if (one == NULL) {
        return NULL;
    }
    PyObject *stack[] = {(PyObject *)self, when, callback, cbargs, context, one};
    PyObject *timer =
        PyObject_VectorcallMethod(s_call_at_py, stack, 6 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
    Py_DECREF(one);
    return timer;
}

/* A TimerHandle for *callback*(*cbargs) at *when* (its key, a float), in
 * *ctx* (stolen), pushed into the timer queue (push_far when *far*). */
static PyObject *
push_timer(Core *self, PyObject *when, PyObject *callback, PyObject *cbargs, PyObject *ctx, int far)
{
    if (self->timers == NULL) {
        Py_DECREF(ctx);
        PyErr_SetString(PyExc_RuntimeError, "the native core is not set up (no timer queue)");
        return NULL;
    }
    PyObject *timer = TimerHandleType->tp_alloc(TimerHandleType, 0);
    if (timer == NULL) {
        Py_DECREF(ctx);
        return NULL;
    }
    /* _when too (push sets _scheduled). */
    fill_handle(timer, (PyObject *)self, ctx, callback, Py_NewRef(cbargs));
    SLOT(timer, off_when) = Py_NewRef(when);
    PyObject *stack[] = {self->timers, timer, when};
    PyObject *r = PyObject_VectorcallMethod(far ? s_push_far : s_push, stack,
                                            3 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
    if (r == NULL) {
        Py_DECREF(timer);
        return NULL;
    }
    Py_DECREF(r);
    return timer;
}

static PyObject *
loop_now(Core *self)
{
    if (self->now == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "the native core is not set up (no clock)");
        return NULL;
    }
    return PyObject_CallNoArgs(self->now);
}

/* call_later(delay, callback, *args, context=None) */
static PyObject *
core_call_later(Core *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    PyObject *delay, *callback, *context, *cbargs;
    if (parse_timer_call("call_later", s_delay_kw, args, nargs, kwnames, &delay, &callback,
                         &context, &cbargs) < 0) {
        return NULL;
    }
    PyObject *result = NULL;
    if (delay == Py_None) {
        PyErr_SetString(PyExc_TypeError, "delay must not be None");
        goto done;
    }
    PyObject *now = loop_now(self);
    if (now == NULL) {
        goto done;
    }
    PyObject *when = PyNumber_Add(now, delay);
    Py_DECREF(now);
    if (when == NULL) {
        goto done;
    }
    if (!PyFloat_CheckExact(when) || self->closed || self->debug) {
        /* asyncio's debug checks name call_at() here too. */
        result = call_at_pure(self, when, callback, cbargs, context);
        Py_DECREF(when);
        goto done;
    }
    PyObject *ctx;
    if (context == Py_None) {
        /* asyncio.sleep()'s timer needs no copy of the current context: its
         * callback reads none, and its handle never reaches user code. */
        if (callback == sleep_callback && self->bare_context != NULL) {
            ctx = Py_NewRef(self->bare_context);
        }
        else {
            ctx = PyContext_CopyCurrent();
        }
    }
    else {
        ctx = Py_NewRef(context);
    }
    int far = ctx == NULL ? -1 : PyObject_RichCompareBool(delay, far_delay, Py_LT);
    if (far < 0) {
        Py_XDECREF(ctx);
        Py_DECREF(when);
        goto done;
    }
    result = push_timer(self, when, callback, cbargs, ctx, !far);
    Py_DECREF(when);
done:
    Py_DECREF(cbargs);
    return result;
}

/* call_at(when, callback, *args, context=None) */
static PyObject *
core_call_at(Core *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    PyObject *when, *callback, *context, *cbargs;
    if (parse_timer_call("call_at", s_when_kw, args, nargs, kwnames, &when, &callback, &context,
                         &cbargs) < 0) {
        return NULL;
    }
    PyObject *result = NULL;
    if (when == Py_None) {
        PyErr_SetString(PyExc_TypeError, "when cannot be None");
        goto done;
    }
    if (!PyFloat_CheckExact(when) || self->closed || self->debug) {
        result = call_at_pure(self, when, callback, cbargs, context);
        goto done;
    }
    PyObject *ctx = context == Py_None ? PyContext_CopyCurrent() : Py_NewRef(context);
    if (ctx == NULL) {
        goto done;
    }
    PyObject *now = loop_now(self);
    if (now == NULL) {
        Py_DECREF(ctx);
        goto done;
    }
    double until = PyFloat_AS_DOUBLE(when) - PyFloat_AsDouble(now);
    Py_DECREF(now);
    if (PyErr_Occurred()) {
        Py_DECREF(ctx);
        goto done;
    }
    double far_after = PyFloat_AsDouble(far_delay);
    result = push_timer(self, when, callback, cbargs, ctx, !(until < far_after));
done:
    Py_DECREF(cbargs);
    return result;
}

/* ------------------------------------------------------------------ */
/* Counters: the metrics' fields, written at their slot offsets.        */

static double
real_time(void)
{
#ifdef __linux__
    /* time.monotonic() on Linux: CLOCK_MONOTONIC, in seconds as Python
     * converts its nanoseconds (ns / 1e9). */
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    long long ns = (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
    return (double)ns / 1e9;
#else
    PyObject *t = PyObject_CallNoArgs(monotonic);
    if (t == NULL) {
        return -1.0;
    }
    double d = PyFloat_AsDouble(t);
    Py_DECREF(t);
    return d;
#endif
}

static int
counters_ok(Core *self)
{
    if (self->counters == NULL || Py_TYPE(self->counters) != &CountersNativeType) {
        PyErr_SetString(PyExc_RuntimeError, "the native core needs its own Counters");
        return -1;
    }
    return 0;
}

/* The loop's counters (counters_ok() checked the type). */
#define CNT(self) ((Counters *)(self)->counters)

/* Is the phase that just ended slow? Calls self._slow_phase() if so. */
static int
check_slow_phase(Core *self, double t, double mark)
{
    double slow = PyFloat_AsDouble(self->slow_duration);
    if (slow == -1.0 && PyErr_Occurred()) {
        return -1;
    }
    if (t - mark >= slow) {
        PyObject *r = PyObject_CallMethodNoArgs((PyObject *)self, s_slow_phase);
        if (r == NULL) {
            return -1;
        }
        Py_DECREF(r);
    }
    return 0;
}

/* ------------------------------------------------------------------ */
/* The run phase                                                        */

/* Report a callback's exception (set as the current error) to the loop's
 * exception handler, as Scheduler's run phase does: SystemExit and
 * KeyboardInterrupt propagate (return -1 with the error set). */
static int
report_callback_error(Core *self, PyObject *handle)
{
    if (PyErr_ExceptionMatches(PyExc_SystemExit) || PyErr_ExceptionMatches(PyExc_KeyboardInterrupt)) {
        return -1;
    }
    PyObject *exc = take_exception();
    if (exc == NULL) {
        return 0;
    }
    /* The handler runs "in the except block": sys.exc_info() is the
     * callback's exception, and one the handler raises chains to it. */
    PyObject *previous = PyErr_GetHandledException();
    PyErr_SetHandledException(exc);
    int rc = -1;
    PyObject *context = PyObject_CallFunctionObjArgs(error_context, handle, exc, Py_False, NULL);
    if (context != NULL) {
        PyObject *r = PyObject_CallMethodOneArg((PyObject *)self, s_call_exception_handler, context);
        Py_DECREF(context);
        if (r != NULL) {
            Py_DECREF(r);
            rc = 0;
        }
    }
    PyErr_SetHandledException(previous);
    Py_XDECREF(previous);
    Py_DECREF(exc);
    return rc;
}

/* Call callable(*argv) in *context*: 0 on success, -1 with the error set. */
static int
run_in_context(PyObject *context, PyObject *callable, PyObject *const *argv, Py_ssize_t n)
{
    PyObject *res;
    if (PyContext_CheckExact(context)) {
        if (PyContext_Enter(context) < 0) {
            return -1;
        }
        res = PyObject_Vectorcall(callable, argv, n, NULL);
        if (PyContext_Exit(context) < 0) {
            Py_XDECREF(res);
            return -1;
        }
    }
    else {
        /* Not a contextvars.Context: its own run(), as asyncio calls it. */
        PyObject *stack[8];
        PyObject **full = stack;
        if (n + 2 > 8) {
            full = PyMem_New(PyObject *, n + 2);
            if (full == NULL) {
                PyErr_NoMemory();
                return -1;
            }
        }
        full[0] = context;
        full[1] = callable;
        for (Py_ssize_t i = 0; i < n; i++) {
            full[i + 2] = argv[i];
        }
        res = PyObject_VectorcallMethod(s_run, full, (size_t)(n + 2), NULL);
        if (full != stack) {
            PyMem_Free(full);
        }
    }
    if (res == NULL) {
        return -1;
    }
    Py_DECREF(res);
    return 0;
}

/* Twins: a Python function whose bound method, as a handle's callback with
 * no arguments, is run as twin(self) instead (set_twin; the transports'
 * read paths). The handle, its callback and its repr stay what they are. */
#define MAX_TWINS 8
static PyObject *twin_funcs[MAX_TWINS]; /* owned */
static PyObject *twin_impls[MAX_TWINS]; /* owned */
static int n_twins = 0;

/* The twin of *callback* (borrowed), or NULL. */
static inline PyObject *
twin_of(PyObject *callback)
{
    if (n_twins && PyMethod_Check(callback)) {
        PyObject *func = PyMethod_GET_FUNCTION(callback);
        for (int i = 0; i < n_twins; i++) {
            if (twin_funcs[i] == func) {
                return twin_impls[i];
            }
        }
    }
    return NULL;
}

/* Call handle's callback in its context: 0 on success, -1 with the error set. */
static int
run_handle(PyObject *handle, PyObject *context, PyObject *callback, PyObject *args)
{
    if (!PyTuple_Check(args)) {
        /* A user's handle with a list of arguments, say: context.run(cb, *args). */
        PyObject *tuple = PySequence_Tuple(args);
        if (tuple == NULL) {
            return -1;
        }
        int rc = run_handle(handle, context, callback, tuple);
        Py_DECREF(tuple);
        return rc;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(args);
    if (n == 0) {
        PyObject *twin = twin_of(callback);
        if (twin != NULL) {
            PyObject *self = PyMethod_GET_SELF(callback);
            return run_in_context(context, twin, &self, 1);
        }
    }
    return run_in_context(context, callback, &PyTuple_GET_ITEM(args, 0), n);
}

/* One handle of the run phase: 1 if it was cancelled (skipped), 0 if it
 * ran (its error reported), -1 to propagate. Steals *handle*. */
/* An asyncio.Handle (ours first: no walk of the bases for them)? */
static inline int
is_asyncio_handle(PyObject *handle)
{
    PyTypeObject *t = Py_TYPE(handle);
    return t == HandleType || t == TimerHandleType ||
           (AsyncioHandleType != NULL && PyType_IsSubtype(t, AsyncioHandleType));
}

static int
run_one(Core *self, PyObject *handle)
{
    int rc;
    if (is_asyncio_handle(handle)) {
        PyObject *cancelled = SLOT(handle, off_cancelled);
        if (cancelled == Py_True) {
            Py_DECREF(handle);
            return 1;
        }
        if (cancelled != Py_False) {
            int truth = cancelled == NULL ? 0 : PyObject_IsTrue(cancelled);
            if (truth < 0) {
                Py_DECREF(handle);
                return -1;
            }
            if (truth) {
                Py_DECREF(handle);
                return 1;
            }
        }
        PyObject *context = SLOT(handle, off_context);
        PyObject *callback = SLOT(handle, off_callback);
        PyObject *args = SLOT(handle, off_args);
        if (context == NULL || callback == NULL || args == NULL) {
            PyErr_SetString(PyExc_AttributeError, "a handle's fields are unset");
            rc = -1;
        }
        else {
            /* The callback may drop the handle's own references (cancel()). */
            Py_INCREF(context);
            Py_INCREF(callback);
            Py_INCREF(args);
            rc = run_handle(handle, context, callback, args);
            Py_DECREF(context);
            Py_DECREF(callback);
            Py_DECREF(args);
        }
    }
    else {
        /* Not an asyncio.Handle: its attributes, by name. */
        PyObject *cancelled = PyObject_GetAttr(handle, s_cancelled);
        int truth = cancelled == NULL ? -1 : PyObject_IsTrue(cancelled);
        Py_XDECREF(cancelled);
        if (truth < 0) {
            Py_DECREF(handle);
            return -1;
        }
        if (truth) {
            Py_DECREF(handle);
            return 1;
        }
        PyObject *context = PyObject_GetAttr(handle, s_context_attr);
        PyObject *callback = context ? PyObject_GetAttr(handle, s_callback) : NULL;
        PyObject *args = callback ? PyObject_GetAttr(handle, s_args) : NULL;
        rc = args ? run_handle(handle, context, callback, args) : -1;
        Py_XDECREF(context);
        Py_XDECREF(callback);
        Py_XDECREF(args);
    }
    if (rc < 0) {
        rc = report_callback_error(self, handle);
    }
    Py_DECREF(handle);
    return rc;
}

/* ------------------------------------------------------------------ */
/* Fd dispatch: FdRegistry.dispatch, for the fd registry the core polls  */

/* Is *handle* cancelled? 1, 0, or -1 on error. */
static int
handle_cancelled(PyObject *handle)
{
    if (is_asyncio_handle(handle)) {
        PyObject *c = SLOT(handle, off_cancelled);
        if (c == Py_False || c == NULL) {
            return 0;
        }
        return c == Py_True ? 1 : PyObject_IsTrue(c);
    }
    PyObject *c = PyObject_GetAttr(handle, s_cancelled);
    if (c == NULL) {
        return -1;
    }
    int t = PyObject_IsTrue(c);
    Py_DECREF(c);
    return t;
}

/* One side of an fd's event: queue its handle, or drop a cancelled one
 * through the registry's remove method. */
static int
dispatch_side(PyObject *registry, PyObject *table, PyObject *fd, ReadyQueue *ready,
              PyObject *remove)
{
    PyObject *handle = PyDict_GetItemWithError(table, fd);
    if (handle == NULL) {
        return PyErr_Occurred() ? -1 : 0;
    }
    Py_INCREF(handle);
    int cancelled = handle_cancelled(handle);
    int rc = 0;
    if (cancelled < 0) {
        rc = -1;
    }
    else if (cancelled) {
        PyObject *r = PyObject_CallMethodOneArg(registry, remove, fd);
        rc = r == NULL ? -1 : 0;
        Py_XDECREF(r);
    }
    else {
        rc = rq_push(ready, handle);
    }
    Py_DECREF(handle);
    return rc;
}

/* What FdRegistry.dispatch works on (owned references): its registry's
 * ready queue and reader and writer tables. */
typedef struct {
    PyObject *registry; /* borrowed */
    PyObject *ready, *readers, *writers;
} DispatchTarget;

/* Fill *t* from *registry*: 1 ready, 0 not the registry we know (call its
 * Python method), -1 error. release_target() in every case. */
static int
open_target(PyObject *registry, DispatchTarget *t)
{
    t->registry = registry;
    t->ready = PyObject_GetAttr(registry, s_ready_attr);
    t->readers = t->ready ? PyObject_GetAttr(registry, s_readers) : NULL;
    t->writers = t->readers ? PyObject_GetAttr(registry, s_writers) : NULL;
    if (t->writers == NULL) {
        return -1;
    }
    return PyObject_TypeCheck(t->ready, &ReadyQueueType) && PyDict_CheckExact(t->readers) &&
           PyDict_CheckExact(t->writers);
}

static void
release_target(DispatchTarget *t)
{
    Py_CLEAR(t->ready);
    Py_CLEAR(t->readers);
    Py_CLEAR(t->writers);
}

/* One ready fd (borrowed) with its event bits: 0, or -1 with an error set. */
static int
dispatch_fd(DispatchTarget *t, PyObject *fd, long bits)
{
    ReadyQueue *ready = (ReadyQueue *)t->ready;
    if ((bits & reader_bits) && dispatch_side(t->registry, t->readers, fd, ready, s_remove_reader) < 0) {
        return -1;
    }
    if ((bits & writer_bits) && dispatch_side(t->registry, t->writers, fd, ready, s_remove_writer) < 0) {
        return -1;
    }
    return 0;
}

/* FdRegistry.dispatch(events) for *registry*: 1 done, 0 not applicable
 * (call the Python method), -1 error. */
static int
native_dispatch(PyObject *registry, PyObject *events)
{
    if (!PyList_CheckExact(events)) {
        return 0;
    }
    DispatchTarget t;
    int rc = open_target(registry, &t);
    if (rc <= 0) {
        release_target(&t);
        return rc;
    }
    /* The events list is the poller's, of this iteration: nothing else
     * holds it, but a callback of dispatch (remove_reader) runs Python
     * code, so it is read by index each time. */
    rc = 1;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(events); i++) {
        PyObject *event = PyList_GET_ITEM(events, i);
        if (!PyTuple_CheckExact(event) || PyTuple_GET_SIZE(event) != 2) {
            PyErr_SetString(PyExc_TypeError, "a poll event must be a (fd, bits) tuple");
            rc = -1;
            break;
        }
        long bits = PyLong_AsLong(PyTuple_GET_ITEM(event, 1));
        if (bits == -1 && PyErr_Occurred()) {
            rc = -1;
            break;
        }
        Py_INCREF(event);
        int failed = dispatch_fd(&t, PyTuple_GET_ITEM(event, 0), bits) < 0;
        Py_DECREF(event);
        if (failed) {
            rc = -1;
            break;
        }
    }
    release_target(&t);
    return rc;
}

static PyObject *
native_configure_dispatch(PyObject *module, PyObject *args)
{
    PyObject *func, *epoll = Py_None;
    long rbits, wbits;
    if (!PyArg_ParseTuple(args, "Oll|O:configure_dispatch", &func, &rbits, &wbits, &epoll)) {
        return NULL;
    }
    if (epoll != Py_None && !PyType_Check(epoll)) {
        PyErr_SetString(PyExc_TypeError, "epoll must be select.epoll or None");
        return NULL;
    }
    Py_XSETREF(EpollType, epoll == Py_None ? NULL : (PyTypeObject *)Py_NewRef(epoll));
    Py_XSETREF(registry_dispatch, Py_NewRef(func));
    reader_bits = rbits;
    writer_bits = wbits;
    Py_RETURN_NONE;
}

/* ------------------------------------------------------------------ */
/* The raw poll: select.epoll's poll, made here                         */

/* Facts / what this means for us:
 * - select.epoll.poll(timeout) is epoll_wait(2) into a buffer it allocates
 *   per call (FD_SETSIZE - 1 events: 12 KiB, a malloc and a free each
 *   time), then a list of (fd, events) tuples built with Py_BuildValue,
 *   which the dispatch then takes apart again: per event, most of what
 *   the loop's own work costs.
 * - So when the loop polls a select.epoll object's own poll method and
 *   dispatches with the fd registry's own dispatch (nothing wraps either:
 *   no virtual clock, no schedule, no fake), the iteration makes that
 *   epoll_wait itself, into a buffer it keeps, and dispatches the events
 *   from it. The call is the one select.epoll makes: the timeout in
 *   milliseconds rounded up (never early), -1 to block, the GIL released
 *   around it, EINTR retried after running signal handlers with the time
 *   left (PEP 475), errors raised as OSError from errno. Events are
 *   registered by select.epoll with data.fd = the fd.
 * - Anything else (a wrapped poll or dispatch) takes the Python path,
 *   unchanged. */

#ifdef TL_EPOLL
#define RAW_EVENTS 1023 /* select.epoll's default maxevents: FD_SETSIZE - 1 */

/* The epoll object whose poll the loop calls, if the raw poll applies
 * (borrowed), else NULL. */
static PyObject *
raw_epoll_object(Core *self)
{
    if (EpollType == NULL || self->clock_wait != Py_None || registry_dispatch == NULL ||
        !PyCFunction_Check(self->poll) || !PyMethod_Check(self->dispatch) ||
        PyMethod_GET_FUNCTION(self->dispatch) != registry_dispatch) {
        return NULL;
    }
    PyObject *ep = PyCFunction_GET_SELF(self->poll);
    if (ep == NULL || Py_TYPE(ep) != EpollType ||
        strcmp(((PyCFunctionObject *)self->poll)->m_ml->ml_name, "poll") != 0) {
        return NULL;
    }
    return ep;
}

static double
monotonic_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Milliseconds for epoll_wait, as select.epoll rounds a timeout in seconds
 * (to nanoseconds, then to milliseconds, each time up). */
static int
timeout_ms(double seconds, int *ms)
{
    double ns = ceil(seconds * 1e9);
    double m = ceil(ns / 1e6);
    if (m > INT_MAX) {
        PyErr_SetString(PyExc_OverflowError, "timeout is too large");
        return -1;
    }
    *ms = m < 0 ? -1 : (int)m;
    return 0;
}

/* epoll_wait on *ep*'s fd into self->events: the number of events, or -1
 * with an error set. */
static int
raw_poll(Core *self, PyObject *ep, int block_forever, double timeout)
{
    if (self->events == NULL) {
        self->events = PyMem_New(struct epoll_event, RAW_EVENTS);
        if (self->events == NULL) {
            PyErr_NoMemory();
            return -1;
        }
    }
    PyObject *fdobj = PyObject_CallMethodNoArgs(ep, s_fileno);
    if (fdobj == NULL) {
        return -1; /* a closed epoll object: its ValueError */
    }
    int epfd = (int)PyLong_AsLong(fdobj);
    Py_DECREF(fdobj);
    if (epfd == -1 && PyErr_Occurred()) {
        return -1;
    }
    int ms = -1;
    double deadline = 0.0;
    if (!block_forever) {
        if (timeout_ms(timeout, &ms) < 0) {
            return -1;
        }
        deadline = monotonic_now() + timeout;
    }
    for (;;) {
        int n;
        int err;
        Py_BEGIN_ALLOW_THREADS
        n = epoll_wait(epfd, self->events, RAW_EVENTS, ms);
        err = errno;
        Py_END_ALLOW_THREADS
        if (n >= 0) {
            return n;
        }
        if (err != EINTR) {
            errno = err;
            PyErr_SetFromErrno(PyExc_OSError);
            return -1;
        }
        if (PyErr_CheckSignals() < 0) {
            return -1;
        }
        if (!block_forever) {
            double left = deadline - monotonic_now();
            if (left < 0) {
                return 0;
            }
            if (timeout_ms(left, &ms) < 0) {
                return -1;
            }
        }
    }
}

/* FdRegistry.dispatch for the raw poll's *n* events (the registry is the
 * dispatch's bound self). 0, or -1 with an error set. */
static int
raw_dispatch(Core *self, int n)
{
    DispatchTarget t;
    int known = open_target(PyMethod_GET_SELF(self->dispatch), &t);
    int rc = -1;
    if (known < 0) {
        goto done;
    }
    if (!known) {
        /* Not the registry we know: its dispatch, with the list it takes. */
        PyObject *events = PyList_New(n);
        if (events == NULL) {
            goto done;
        }
        for (int i = 0; i < n; i++) {
            PyObject *ev = Py_BuildValue("iI", self->events[i].data.fd, self->events[i].events);
            if (ev == NULL) {
                Py_DECREF(events);
                goto done;
            }
            PyList_SET_ITEM(events, i, ev);
        }
        PyObject *r = PyObject_CallOneArg(self->dispatch, events);
        Py_DECREF(events);
        rc = r == NULL ? -1 : 0;
        Py_XDECREF(r);
        goto done;
    }
    for (int i = 0; i < n; i++) {
        /* Read from the buffer each time: a dispatch side runs Python code
         * (remove_reader) but never polls, so the buffer stays as it is. */
        PyObject *fd = PyLong_FromLong(self->events[i].data.fd);
        if (fd == NULL) {
            goto done;
        }
        int failed = dispatch_fd(&t, fd, (long)self->events[i].events) < 0;
        Py_DECREF(fd);
        if (failed) {
            goto done;
        }
    }
    rc = 0;
done:
    release_target(&t);
    return rc;
}
#endif

/* ------------------------------------------------------------------ */
/* _run_once                                                            */

static PyObject *NO_EVENTS = NULL; /* an empty list, never mutated */

static int
truth_attr(PyObject *obj, PyObject *name)
{
    PyObject *v = PyObject_GetAttr(obj, name);
    if (v == NULL) {
        return -1;
    }
    int t = PyObject_IsTrue(v);
    Py_DECREF(v);
    return t;
}

/* The iteration; 0 or -1 with an error set. Mirrors Scheduler._run_once. */
static int
run_once(Core *self)
{
    if (check_ready(self) < 0 || counters_ok(self) < 0) {
        return -1;
    }
    if (self->timers == NULL || self->instruments == NULL || self->poll == NULL ||
        self->dispatch == NULL || self->io == NULL || self->now == NULL ||
        self->now_is_real == NULL || self->clock_resolution == NULL ||
        self->slow_duration == NULL || self->clock_wait == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "the native core is not fully set up");
        return -1;
    }
    PyObject *timers = self->timers;
    PyObject *deadline = NULL; /* owned, or NULL for none */
    PyObject *events = NULL;
    int rc = -1;

    /* 1. the earliest deadline (dropping cancelled timers) */
    PyObject *heap = PyObject_GetAttr(timers, s_heap);
    if (heap == NULL) {
        return -1;
    }
    if (!PyList_Check(heap)) {
        PyErr_SetString(PyExc_TypeError, "the timer queue's heap must be a list");
        Py_DECREF(heap);
        return -1;
    }
    if (PyList_GET_SIZE(heap)) {
        int cancelled = truth_attr(timers, s_timers_cancelled);
        if (cancelled < 0) {
            Py_DECREF(heap);
            return -1;
        }
        if (cancelled) {
            deadline = PyObject_CallMethodNoArgs(timers, s_next_deadline);
            if (deadline == NULL) {
                Py_DECREF(heap);
                return -1;
            }
            if (deadline == Py_None) {
                Py_CLEAR(deadline);
            }
        }
        else {
            deadline = Py_NewRef(PyList_GET_ITEM(heap, 0));
        }
    }
    Py_DECREF(heap);

    /* 2. the poll timeout */
    int block_forever = 0;
    double timeout = 0.0;
    if (self->ready->len || self->stopping) {
        timeout = 0.0;
    }
    else if (deadline == NULL) {
        block_forever = 1;
    }
    else {
        PyObject *buckets = PyObject_GetAttr(timers, s_buckets);
        PyObject *marker = buckets ? PyObject_GetAttr(timers, s_marker) : NULL;
        if (marker == NULL) {
            Py_XDECREF(buckets);
            goto done;
        }
        PyObject *entry = PyDict_Check(buckets) ? PyDict_GetItemWithError(buckets, deadline)
                                                 : PyObject_GetItem(buckets, deadline);
        int is_marker = entry == marker;
        if (!PyDict_Check(buckets)) {
            Py_XDECREF(entry);
        }
        Py_DECREF(buckets);
        Py_DECREF(marker);
        if (entry == NULL) {
            if (!PyErr_Occurred()) {
                PyErr_SetObject(PyExc_KeyError, deadline);
            }
            goto done;
        }
        if (is_marker) {
            /* Far timers wait behind a marker (timers.py): move the first
             * slot into the heap rather than wake for it. */
            Py_SETREF(deadline, PyObject_CallMethodNoArgs(timers, s_pass_markers));
            if (deadline == NULL) {
                goto done;
            }
            if (deadline == Py_None) {
                Py_CLEAR(deadline);
            }
        }
        if (deadline == NULL) {
            block_forever = 1;
        }
        else {
            PyObject *now = PyObject_CallNoArgs(self->now);
            if (now == NULL) {
                goto done;
            }
            double d = PyFloat_AsDouble(deadline);
            double n = PyFloat_AsDouble(now);
            Py_DECREF(now);
            if (PyErr_Occurred()) {
                goto done;
            }
            timeout = d - n;
            if (timeout > 24 * 3600.0) {
                timeout = 24 * 3600.0;
            }
            else if (timeout < 0.0) {
                timeout = 0.0;
            }
        }
    }

    /* 3. poll (with the metrics' clock reads), then dispatch */
    double t, mark;
    PyObject *wait = self->clock_wait;
    /* The raw poll (see raw_poll), when nothing wraps the poll or the
     * dispatch: its events are dispatched from its buffer (nraw of them). */
    PyObject *raw_ep = NULL;
    int nraw = 0;
#ifdef TL_EPOLL
    raw_ep = raw_epoll_object(self);
#endif
    if (!block_forever && timeout == 0.0 && wait == Py_None) {
        /* A poll that cannot block counts as busy time. */
        t = real_time();
        mark = CNT(self)->mark;
        if (check_slow_phase(self, t, mark) < 0) {
            goto done;
        }
        CNT(self)->mark = t;
        /* Facts (Scheduler._run_once): a zero-timeout poll with only the
         * waker registered reports nothing the ready queue does not show;
         * it is skipped while no other thread exists but quiet ones (quiet.py). */
        int polled = truth_attr(self->io, s_polled);
        if (polled < 0) {
            goto done;
        }
        int others = 0;
        if (!polled) {
            PyObject *count = PyObject_CallNoArgs(thread_count);
            if (count == NULL) {
                goto done;
            }
            Py_ssize_t threads = PyLong_AsSsize_t(count);
            Py_DECREF(count);
            if (threads == -1 && PyErr_Occurred()) {
                goto done;
            }
            others = threads > quiet_threads;
        }
        if ((polled || others) && raw_ep != NULL) {
#ifdef TL_EPOLL
            nraw = raw_poll(self, raw_ep, 0, 0.0);
            if (nraw < 0) {
                goto done;
            }
            events = Py_NewRef(NO_EVENTS);
#endif
        }
        else if (polled || others) {
            PyObject *zero = PyFloat_FromDouble(0.0);
            if (zero == NULL) {
                goto done;
            }
            events = PyObject_CallOneArg(self->poll, zero);
            Py_DECREF(zero);
            if (events == NULL) {
                goto done;
            }
        }
        else {
            events = Py_NewRef(NO_EVENTS);
        }
    }
    else {
        /* A poll that may block is idle time, recorded inside seq windows. */
        CNT(self)->seq += 1;
        t = real_time();
        mark = CNT(self)->mark;
        if (check_slow_phase(self, t, mark) < 0) {
            CNT(self)->seq += 1; /* close the window: nothing was recorded in it */
            goto done;
        }
        CNT(self)->poll_start = t;
        CNT(self)->seq += 1;
        if (raw_ep != NULL) {
#ifdef TL_EPOLL
            nraw = raw_poll(self, raw_ep, block_forever, timeout);
            if (nraw < 0) {
                goto done;
            }
            events = Py_NewRef(NO_EVENTS);
#endif
        }
        else {
            PyObject *timeout_obj = block_forever ? Py_NewRef(Py_None) : PyFloat_FromDouble(timeout);
            if (timeout_obj == NULL) {
                goto done;
            }
            if (wait == Py_None) {
                events = PyObject_CallOneArg(self->poll, timeout_obj);
            }
            else {
                events = PyObject_CallFunctionObjArgs(wait, self->poll, timeout_obj, NULL);
            }
            Py_DECREF(timeout_obj);
            if (events == NULL) {
                goto done;
            }
        }
        CNT(self)->seq += 1;
        t = real_time();
        CNT(self)->mark = t;
        CNT(self)->idle_time += t - CNT(self)->poll_start;
        CNT(self)->poll_start = 0.0;
        CNT(self)->seq += 1;
    }
    CNT(self)->iterations += 1;
#ifdef TL_EPOLL
    if (nraw > 0 && raw_dispatch(self, nraw) < 0) {
        goto done;
    }
#endif
    int have_events = PyList_CheckExact(events) ? PyList_GET_SIZE(events) > 0 : PyObject_IsTrue(events);
    if (have_events < 0) {
        goto done;
    }
    if (have_events) {
        /* The fd registry's own dispatch runs here, without its frame; any
         * other IoSource's (a test's fake) is called. */
        int done_natively = 0;
        if (registry_dispatch != NULL && PyMethod_Check(self->dispatch) &&
            PyMethod_GET_FUNCTION(self->dispatch) == registry_dispatch) {
            done_natively = native_dispatch(PyMethod_GET_SELF(self->dispatch), events);
            if (done_natively < 0) {
                goto done;
            }
        }
        if (!done_natively) {
            PyObject *r = PyObject_CallOneArg(self->dispatch, events);
            if (r == NULL) {
                goto done;
            }
            Py_DECREF(r);
        }
    }

    /* 4. queue the timers that are due */
    if (deadline != NULL) {
        int real = PyObject_IsTrue(self->now_is_real);
        if (real < 0) {
            goto done;
        }
        double now;
        if (real) {
            now = t;
        }
        else {
            PyObject *n = PyObject_CallNoArgs(self->now);
            if (n == NULL) {
                goto done;
            }
            now = PyFloat_AsDouble(n);
            Py_DECREF(n);
            if (now == -1.0 && PyErr_Occurred()) {
                goto done;
            }
        }
        double resolution = PyFloat_AsDouble(self->clock_resolution);
        if (resolution == -1.0 && PyErr_Occurred()) {
            goto done;
        }
        double end = now + resolution;
        heap = PyObject_GetAttr(timers, s_heap);
        if (heap == NULL) {
            goto done;
        }
        int due = 0;
        if (PyList_Check(heap) && PyList_GET_SIZE(heap)) {
            double head = PyFloat_AsDouble(PyList_GET_ITEM(heap, 0));
            if (head == -1.0 && PyErr_Occurred()) {
                Py_DECREF(heap);
                goto done;
            }
            due = head < end;
        }
        Py_DECREF(heap);
        if (due) {
            PyObject *now_obj = PyFloat_FromDouble(now);
            PyObject *end_obj = now_obj ? PyFloat_FromDouble(end) : NULL;
            PyObject *r = NULL;
            if (end_obj != NULL) {
                PyObject *stack[] = {timers, now_obj, end_obj, (PyObject *)self->ready};
                r = PyObject_VectorcallMethod(s_pop_due, stack, 4 | PY_VECTORCALL_ARGUMENTS_OFFSET,
                                              NULL);
            }
            Py_XDECREF(now_obj);
            Py_XDECREF(end_obj);
            if (r == NULL) {
                goto done;
            }
            Py_DECREF(r);
        }
    }

    /* 5. run what is ready now */
    int timed = truth_attr(self->instruments, s_timed);
    if (timed < 0) {
        goto done;
    }
    if (timed || self->debug) {
        PyObject *r = PyObject_CallMethodNoArgs((PyObject *)self, s_run_ready_timed);
        if (r == NULL) {
            goto done;
        }
        Py_DECREF(r);
        rc = 0;
        goto done;
    }
    {
        ReadyQueue *ready = self->ready;
        Py_ssize_t ntodo = ready->len;
        Py_ssize_t skipped = 0;
        for (Py_ssize_t i = 0; i < ntodo; i++) {
            if (ready->len == 0) {
                break; /* cleared by a callback (the loop closed under it) */
            }
            int r = run_one(self, rq_pop(ready));
            if (r < 0) {
                goto done;
            }
            skipped += r;
        }
        CNT(self)->callbacks += (long long)(ntodo - skipped);
    }
    rc = 0;
done:
    Py_XDECREF(deadline);
    Py_XDECREF(events);
    return rc;
}

static PyObject *
core_run_once(Core *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    if (no_arguments("_run_once", nargs, kwnames) < 0 || run_once(self) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

/* run_forever(): _run_forever_setup, _run_once until stopped, _run_forever_cleanup. */
static PyObject *
core_run_forever(Core *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    if (no_arguments("run_forever", nargs, kwnames) < 0) {
        return NULL;
    }
    PyObject *r = PyObject_CallMethodNoArgs((PyObject *)self, s_run_forever_setup);
    if (r == NULL) {
        return NULL;
    }
    Py_DECREF(r);
    /* As Scheduler.run_forever, the iteration is looked up once: a program
     * (or a test) may have replaced it on the instance. */
    PyObject *step = PyObject_GetAttr((PyObject *)self, s_run_once);
    int failed = step == NULL;
    int native = !failed && PyCFunction_Check(step) && PyCFunction_GET_SELF(step) == (PyObject *)self &&
                 PyCFunction_GET_FUNCTION(step) == (PyCFunction)(void (*)(void))core_run_once;
    while (!failed) {
        if (native) {
            failed = run_once(self) < 0;
        }
        else {
            PyObject *res = PyObject_CallNoArgs(step);
            failed = res == NULL;
            Py_XDECREF(res);
        }
        /* Callbacks written in C run no bytecode: let signal handlers run
         * (SIGINT's KeyboardInterrupt) once per iteration, as the pure
         * loop's own bytecode lets them. */
        if (!failed && PyErr_CheckSignals() < 0) {
            failed = 1;
        }
        if (!failed && self->stopping) {
            break;
        }
    }
    Py_XDECREF(step);
    /* finally: the cleanup runs; an error it raises replaces the one in
     * flight, chained to it, as a Python finally block does. */
#if PY_VERSION_HEX >= 0x030C0000
    PyObject *pending = failed ? PyErr_GetRaisedException() : NULL;
#else
    PyObject *ptype = NULL, *pvalue = NULL, *ptb = NULL;
    if (failed) {
        PyErr_Fetch(&ptype, &pvalue, &ptb);
        PyErr_NormalizeException(&ptype, &pvalue, &ptb);
        if (ptb != NULL && pvalue != NULL) {
            PyException_SetTraceback(pvalue, ptb);
        }
    }
#endif
    r = PyObject_CallMethodNoArgs((PyObject *)self, s_run_forever_cleanup);
#if PY_VERSION_HEX >= 0x030C0000
    if (r == NULL) {
        if (pending != NULL) {
            PyObject *exc = PyErr_GetRaisedException();
            PyException_SetContext(exc, pending); /* steals pending */
            PyErr_SetRaisedException(exc);
        }
        return NULL;
    }
    Py_DECREF(r);
    if (pending != NULL) {
        PyErr_SetRaisedException(pending);
        return NULL;
    }
#else
    if (r == NULL) {
        if (pvalue != NULL) {
            PyObject *t2, *v2, *tb2;
            PyErr_Fetch(&t2, &v2, &tb2);
            PyErr_NormalizeException(&t2, &v2, &tb2);
            if (v2 != NULL) {
                PyException_SetContext(v2, pvalue); /* steals pvalue */
                pvalue = NULL;
            }
            PyErr_Restore(t2, v2, tb2);
        }
        Py_XDECREF(ptype);
        Py_XDECREF(pvalue);
        Py_XDECREF(ptb);
        return NULL;
    }
    Py_DECREF(r);
    if (failed) {
        PyErr_Restore(ptype, pvalue, ptb);
        return NULL;
    }
#endif
    Py_RETURN_NONE;
}

static PyMethodDef core_methods[] = {
    {"call_soon", (PyCFunction)(void (*)(void))core_call_soon, METH_FASTCALL | METH_KEYWORDS,
     "call_soon(callback, *args, context=None): schedule callback(*args); return its Handle."},
    {"call_later", (PyCFunction)(void (*)(void))core_call_later, METH_FASTCALL | METH_KEYWORDS,
     "call_later(delay, callback, *args, context=None): a TimerHandle, due after *delay* s."},
    {"call_at", (PyCFunction)(void (*)(void))core_call_at, METH_FASTCALL | METH_KEYWORDS,
     "call_at(when, callback, *args, context=None): a TimerHandle, due at loop time *when*."},
    {"_run_once", (PyCFunction)(void (*)(void))core_run_once, METH_FASTCALL | METH_KEYWORDS,
     "One iteration of the loop."},
    {"run_forever", (PyCFunction)(void (*)(void))core_run_forever, METH_FASTCALL | METH_KEYWORDS,
     "Run until stop() is called."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject CoreType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tideloop._core._native.Core",
    .tp_basicsize = sizeof(Core),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The native twin of Scheduler's hot paths (see scheduler.py).",
    .tp_new = core_new,
    .tp_dealloc = (destructor)core_dealloc,
    .tp_traverse = (traverseproc)core_traverse,
    .tp_clear = (inquiry)core_clear,
    .tp_methods = core_methods,
    .tp_members = core_members,
    .tp_getset = core_getset,
};

/* ------------------------------------------------------------------ */
/* configure(): what the hot paths need from the Python side.           */


static PyObject *
native_configure(PyObject *module, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"handle",        "asyncio_handle", "timer_handle",
                             "asyncio_timer", "lag_buckets",    "error_context",
                             "sleep_callback", "far_delay",     NULL};
    PyObject *handle, *asyncio_handle, *timer, *asyncio_timer, *errctx, *sleep_cb,
        *far;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!O!O!O!nOOO!:configure", kwlist, &PyType_Type,
                                     &handle, &PyType_Type, &asyncio_handle, &PyType_Type, &timer,
                                     &PyType_Type, &asyncio_timer, &lag_buckets, &errctx,
                                     &sleep_cb, &PyFloat_Type, &far)) {
        return NULL;
    }
    if (!PyType_IsSubtype((PyTypeObject *)timer, (PyTypeObject *)asyncio_timer) ||
        !PyType_IsSubtype((PyTypeObject *)asyncio_timer, (PyTypeObject *)asyncio_handle)) {
        PyErr_SetString(PyExc_TypeError, "timer_handle must extend asyncio_timer, an asyncio_handle");
        return NULL;
    }
    if (slot_offset((PyTypeObject *)asyncio_timer, "_when", &off_when) < 0) {
        return NULL;
    }
    if (((PyTypeObject *)timer)->tp_basicsize != ((PyTypeObject *)asyncio_timer)->tp_basicsize) {
        PyErr_SetString(PyExc_TypeError, "timer_handle must not add slots to asyncio.TimerHandle");
        return NULL;
    }
    if (!PyType_IsSubtype((PyTypeObject *)handle, (PyTypeObject *)asyncio_handle)) {
        PyErr_SetString(PyExc_TypeError, "handle must be a subclass of asyncio_handle");
        return NULL;
    }
    PyTypeObject *ah = (PyTypeObject *)asyncio_handle;
    if (lag_buckets < 1) {
        PyErr_SetString(PyExc_ValueError, "lag_buckets must be positive");
        return NULL;
    }
    if (slot_offset(ah, "_context", &off_context) < 0 || slot_offset(ah, "_loop", &off_loop) < 0 ||
        slot_offset(ah, "_callback", &off_callback) < 0 || slot_offset(ah, "_args", &off_args) < 0 ||
        slot_offset(ah, "_cancelled", &off_cancelled) < 0 || slot_offset(ah, "_repr", &off_repr) < 0 ||
        slot_offset(ah, "_source_traceback", &off_source_traceback) < 0) {
        return NULL;
    }
    /* The handle class must add no slots of its own that we would leave
     * unset, and must keep asyncio's layout. */
    if (((PyTypeObject *)handle)->tp_basicsize != ah->tp_basicsize) {
        PyErr_SetString(PyExc_TypeError, "handle must not add slots to asyncio.Handle");
        return NULL;
    }
    Py_XSETREF(HandleType, (PyTypeObject *)Py_NewRef(handle));
    Py_XSETREF(AsyncioHandleType, (PyTypeObject *)Py_NewRef(asyncio_handle));
    Py_XSETREF(error_context, Py_NewRef(errctx));
    Py_XSETREF(TimerHandleType, (PyTypeObject *)Py_NewRef(timer));
    Py_XSETREF(sleep_callback, Py_NewRef(sleep_cb));
    Py_XSETREF(far_delay, Py_NewRef(far));
    Py_RETURN_NONE;
}

/* set_twin(function, twin): run twin(self) for a handle whose callback is
 * a bound method of *function* (None: no twin for it any more). */
static PyObject *
native_set_twin(PyObject *module, PyObject *args)
{
    PyObject *func, *twin;
    if (!PyArg_ParseTuple(args, "OO:set_twin", &func, &twin)) {
        return NULL;
    }
    for (int i = 0; i < n_twins; i++) {
        if (twin_funcs[i] == func) {
            if (twin == Py_None) {
                Py_DECREF(twin_funcs[i]);
                Py_DECREF(twin_impls[i]);
                n_twins--;
                twin_funcs[i] = twin_funcs[n_twins];
                twin_impls[i] = twin_impls[n_twins];
            }
            else {
                Py_SETREF(twin_impls[i], Py_NewRef(twin));
            }
            Py_RETURN_NONE;
        }
    }
    if (twin == Py_None) {
        Py_RETURN_NONE;
    }
    if (!PyCallable_Check(twin)) {
        PyErr_SetString(PyExc_TypeError, "a twin must be callable");
        return NULL;
    }
    if (n_twins == MAX_TWINS) {
        PyErr_SetString(PyExc_RuntimeError, "too many twins");
        return NULL;
    }
    twin_funcs[n_twins] = Py_NewRef(func);
    twin_impls[n_twins] = Py_NewRef(twin);
    n_twins++;
    Py_RETURN_NONE;
}

static PyObject *
native_set_quiet_threads(PyObject *module, PyObject *arg)
{
    (void)module;
    Py_ssize_t n = PyLong_AsSsize_t(arg);
    if (n == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (n < 0) {
        PyErr_SetString(PyExc_ValueError, "a count of quiet threads cannot be negative");
        return NULL;
    }
    quiet_threads = n;
    Py_RETURN_NONE;
}

static PyMethodDef native_methods[] = {
    {"set_quiet_threads", (PyCFunction)native_set_quiet_threads, METH_O,
     "set_quiet_threads(n): the zero-timeout poll is skipped while at most n threads "
     "other than the main one run (tideloop._core.quiet)."},
    {"configure", (PyCFunction)(void (*)(void))native_configure, METH_VARARGS | METH_KEYWORDS,
     "configure(handle, asyncio_handle, timer_handle, asyncio_timer, lag_buckets, error_context, "
     "sleep_callback, far_delay): the Python classes the hot paths build and write."},
    {"set_twin", (PyCFunction)native_set_twin, METH_VARARGS,
     "set_twin(function, twin): a handle whose callback is a bound method of function, "
     "with no arguments, runs twin(self) instead (None removes it)."},
    {"configure_dispatch", (PyCFunction)native_configure_dispatch, METH_VARARGS,
     "configure_dispatch(FdRegistry.dispatch, READER_BITS, WRITER_BITS, epoll=None): the fd "
     "layer's dispatch, which the iteration then runs natively (and select.epoll, whose poll "
     "it then makes itself)."},
    {NULL, NULL, 0, NULL},
};

#define INTERN(var, text)                                  \
    do {                                                   \
        var = PyUnicode_InternFromString(text);            \
        if (var == NULL) {                                 \
            return -1;                                     \
        }                                                  \
    } while (0)

static int
native_exec(PyObject *module)
{
    INTERN(s_context, "context");
    INTERN(s_call_exception_handler, "call_exception_handler");
    INTERN(s_call_soon_debug, "_call_soon_debug");
    INTERN(s_run_ready_timed, "_run_ready_timed");
    INTERN(s_slow_phase, "_slow_phase");
    INTERN(s_run_forever_setup, "_run_forever_setup");
    INTERN(s_run_forever_cleanup, "_run_forever_cleanup");
    INTERN(s_polled, "polled");
    INTERN(s_heap, "heap");
    INTERN(s_cancelled, "_cancelled");
    INTERN(s_next_deadline, "next_deadline");
    INTERN(s_buckets, "buckets");
    INTERN(s_marker, "marker");
    INTERN(s_pass_markers, "pass_markers");
    INTERN(s_pop_due, "pop_due");
    INTERN(s_timed, "timed");
    INTERN(s_run, "run");
    INTERN(s_run_once, "_run_once");
    INTERN(s_callback, "_callback");
    INTERN(s_args, "_args");
    INTERN(s_timers_cancelled, "cancelled");
    INTERN(s_callback_kw, "callback");
    INTERN(s_delay_kw, "delay");
    INTERN(s_when_kw, "when");
    INTERN(s_call_at_py, "_call_at");
    INTERN(s_push, "push");
    INTERN(s_push_far, "push_far");
    INTERN(s_readers, "readers");
    INTERN(s_writers, "writers");
    INTERN(s_ready_attr, "_ready");
    INTERN(s_remove_reader, "remove_reader");
    INTERN(s_remove_writer, "remove_writer");
    INTERN(s_fileno, "fileno");
    INTERN(s_context_attr, "_context");
    NO_EVENTS = PyList_New(0);
    if (NO_EVENTS == NULL) {
        return -1;
    }
    PyObject *thread_mod = PyImport_ImportModule("_thread");
    if (thread_mod == NULL) {
        return -1;
    }
    thread_count = PyObject_GetAttrString(thread_mod, "_count");
    Py_DECREF(thread_mod);
    if (thread_count == NULL) {
        return -1;
    }
    PyObject *time_mod = PyImport_ImportModule("time");
    if (time_mod == NULL) {
        return -1;
    }
    monotonic = PyObject_GetAttrString(time_mod, "monotonic");
    Py_DECREF(time_mod);
    if (monotonic == NULL) {
        return -1;
    }
    if (PyType_Ready(&ReadyQueueType) < 0 || PyType_Ready(&CoreType) < 0 ||
        PyType_Ready(&CountersNativeType) < 0) {
        return -1;
    }
    if (PyModule_AddObjectRef(module, "ReadyQueue", (PyObject *)&ReadyQueueType) < 0 ||
        PyModule_AddObjectRef(module, "Core", (PyObject *)&CoreType) < 0 ||
        PyModule_AddObjectRef(module, "Counters", (PyObject *)&CountersNativeType) < 0) {
        return -1;
    }
    return 0;
}

static PyModuleDef_Slot native_slots[] = {
    {Py_mod_exec, native_exec},
#if PY_VERSION_HEX >= 0x030C0000
    /* Static types and module-wide state: one interpreter only. */
    {Py_mod_multiple_interpreters, Py_MOD_MULTIPLE_INTERPRETERS_NOT_SUPPORTED},
#endif
#if PY_VERSION_HEX >= 0x030D0000
    /* Relies on the GIL (see the module comment): a free-threaded
     * interpreter that loads it turns the GIL back on. */
    {Py_mod_gil, Py_MOD_GIL_USED},
#endif
    {0, NULL},
};

static struct PyModuleDef native_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "tideloop._core._native",
    .m_doc = "The native twin of tideloop's core hot paths (see scheduler.py).",
    .m_size = 0,
    .m_methods = native_methods,
    .m_slots = native_slots,
};

PyMODINIT_FUNC
PyInit__native(void)
{
    return PyModuleDef_Init(&native_module);
}
