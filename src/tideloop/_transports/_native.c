/*
 * tideloop._transports._native: the native twin of the stream and datagram
 * transports' per-message paths.
 *
 * Layer: transports. Written against the CPython C API only. The pure
 * Python methods in stream.py and datagram.py are the reference; this module
 * is used only where the native core runs (`_transports/native.py` decides),
 * and every behaviour is tested on both builds.
 *
 * What is here, and why (docs/performance.md has the measurements):
 * - `stream_read_ready(transport)`: SocketTransport._read_ready, both read
 *   modes and a BufferedProtocol's. The core's run phase calls it instead
 *   of the method when a read Handle's callback is that bound method (the
 *   core's "twins", `tideloop._core._native.set_twin`), so the Handle is
 *   the same object with the same callback, and only the frame is gone.
 * - `stream_write`: SocketTransport.write, installed as a method
 *   descriptor of the class (`install_write`). The common case, nothing
 *   buffered, is one send(); everything else (a partial send, a closed or
 *   half-closed transport, a sendfile in progress, a subclass, a socket that
 *   is not a plain socket.socket, a type to reject) is the pure method's.
 * - `datagram_read_ready` and `datagram_sendto`: the same for
 *   DatagramTransport, through the socket object's own methods (the
 *   address conversions are the socket module's).
 *
 * Facts / what this means for us:
 * - A transport is a Python class with __slots__: its fields live at fixed
 *   offsets that its member descriptors give (read once, by configure). The
 *   fast paths run only for instances of exactly the configured class; a
 *   subclass may redefine anything, so it gets the pure methods.
 * - A plain `socket.socket` in non-blocking mode (the loop sets it) is a
 *   file descriptor: recv() and send() on `sock.fileno()` do what the
 *   socket object's methods do, without their argument parsing or a GIL
 *   release around a call that cannot block. The fd is asked of the socket
 *   each time (a closed socket says -1, and then EBADF, as its methods
 *   would), never cached, so a closed and reused fd number is never
 *   written to. Errors are raised as the socket module raises them
 *   (PyErr_SetFromErrno gives the OSError subclass for errno), and EINTR is
 *   retried after running signal handlers (PEP 475), as it does.
 * - Any other socket object (tideloop.testing's simulated sockets, a
 *   subclass) goes through the pure method.
 * - The static read buffer: recv() fills it and a bytes object is copied out
 *   of it before any Python code runs, with the GIL held throughout (no
 *   other thread can be in between). A fresh 64 KiB bytes object per recv()
 *   (the socket module's way) costs a malloc and a realloc per message.
 *
 * Ownership: every PyObject* in module state is an owned reference; slots
 * read at offsets are borrowed from the transport and INCREF'd before any
 * Python code can run.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include "_native_common.h"
#include <errno.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <string.h>



/* The largest read of the static buffer (asyncio's max_size). */
#define READ_BUF_SIZE (256 * 1024)
static char read_buf[READ_BUF_SIZE];

/* read modes (stream.py) */
#define READ_SMALL 0
#define READ_LARGE 1
#define READ_BUFFERED 2

/* ------------------------------------------------------------------ */
/* Module-wide state: set once by configure_*(), read by the hot paths. */

static PyTypeObject *SockType = NULL;        /* socket.socket */
static PyCFunction sock_fileno = NULL;       /* _socket.socket.fileno's C function (METH_NOARGS) */
static PyTypeObject *StreamType = NULL;      /* stream.SocketTransport */
static PyObject *stream_pure_read = NULL;    /* SocketTransport._read_ready (the function) */
static PyObject *stream_pure_write = NULL;   /* the pure SocketTransport.write (the function) */
static Py_ssize_t large_read_size = 0;       /* registry.READ_BUFFER_SIZE */
static Py_ssize_t off_reader_on, off_read_mode, off_sock, off_protocol, off_large_min, off_eof,
    off_empty_waiter, off_conn_lost, off_buffer_size;

static PyTypeObject *DgramType = NULL;       /* datagram.DatagramTransport */
static PyObject *dgram_pure_read = NULL;     /* DatagramTransport._read_ready */
static PyObject *dgram_pure_sendto = NULL;   /* the pure DatagramTransport.sendto */
static PyObject *udp_read_size = NULL;       /* datagram.UDP_READ_SIZE (an int) */
static Py_ssize_t off_d_reader_on, off_d_conn_lost, off_d_read_buf, off_d_sock, off_d_protocol,
    off_d_address, off_d_buffer, off_d_connected, off_d_family;
static Py_ssize_t udp_read_len = 0;         /* UDP_READ_SIZE, as a C number */

static PyObject *s_fileno, *s_max_size, *s_data_received, *s_get_buffer, *s_buffer_updated,
    *s_read_eof, *s_fatal_error, *s_write_tail, *s_recvfrom, *s_recvfrom_into, *s_send,
    *s_sendto, *s_datagram_received, *s_error_received, *s_start_writing, *s_recv_into, *s_queue;
static PyObject *msg_read_error, *msg_write_error, *msg_data_received, *msg_get_buffer,
    *msg_buffer_updated, *msg_dgram_read_error, *msg_dgram_write_error;
static PyObject *mode_small, *mode_large, *minus_one;

/* ------------------------------------------------------------------ */
/* Errors, as the pure methods' except clauses treat them              */


/* Call self.<method>(exc[, msg]) "in the except block" of exc: with exc as
 * the handled exception, so that sys.exc_info() is exc and what the call
 * raises chains to it. Steals exc. 0, or -1 with the call's error set. */
static int
call_in_except(PyObject *self, PyObject *method, PyObject *exc, PyObject *msg)
{
    PyObject *previous = PyErr_GetHandledException();
    PyErr_SetHandledException(exc);
    PyObject *stack[] = {self, exc, msg};
    PyObject *r = PyObject_VectorcallMethod(method, stack,
                                            (msg ? 3 : 2) | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
    PyErr_SetHandledException(previous);
    Py_XDECREF(previous);
    Py_DECREF(exc);
    if (r == NULL) {
        return -1;
    }
    Py_DECREF(r);
    return 0;
}

enum { IGNORE_BLOCKING = 1, OSERROR_TO_PROTOCOL = 2 };

/* The current error, raised where a pure method has:
 *
 *     except (BlockingIOError, InterruptedError): <ignored>   (IGNORE_BLOCKING)
 *     except OSError as exc: protocol.error_received(exc)     (OSERROR_TO_PROTOCOL)
 *     except (SystemExit, KeyboardInterrupt): raise
 *     except BaseException as exc: self._fatal_error(exc, msg)
 *
 * Returns 1 if it was ignored, 0 once handled, -1 to propagate. */
static int
handle_error(PyObject *self, int how, PyObject *protocol, PyObject *msg)
{
    if ((how & IGNORE_BLOCKING) && (PyErr_ExceptionMatches(PyExc_BlockingIOError) ||
                                    PyErr_ExceptionMatches(PyExc_InterruptedError))) {
        PyErr_Clear();
        return 1;
    }
    if ((how & OSERROR_TO_PROTOCOL) && PyErr_ExceptionMatches(PyExc_OSError)) {
        return call_in_except(protocol, s_error_received, take_exception(), NULL);
    }
    if (PyErr_ExceptionMatches(PyExc_SystemExit) || PyErr_ExceptionMatches(PyExc_KeyboardInterrupt)) {
        return -1;
    }
    PyObject *exc = take_exception();
    if (exc == NULL) {
        return 0;
    }
    return call_in_except(self, s_fatal_error, exc, msg);
}

/* ------------------------------------------------------------------ */
/* Syscalls on a plain socket                                          */

/* sock.fileno() into *fd: 0, or -1 with an error set. A closed socket's
 * fileno() is -1, and the syscall on it then fails with EBADF, as the
 * socket's own methods do. */
static int
sock_fd(PyObject *sock, int *fd)
{
    PyObject *r;
    if (sock_fileno != NULL && Py_TYPE(sock) == SockType) {
        /* The method the lookup would find (configure_stream checked),
         * called as its descriptor calls it. */
        r = sock_fileno(sock, NULL);
    }
    else {
        PyObject *stack[] = {sock};
        r = PyObject_VectorcallMethod(s_fileno, stack, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
    }
    if (r == NULL) {
        return -1;
    }
    long v = PyLong_AsLong(r);
    Py_DECREF(r);
    if (v == -1 && PyErr_Occurred()) {
        return -1;
    }
    *fd = (int)v;
    return 0;
}

/* The socket calls of the fast paths. */
enum { OP_RECV, OP_SEND, OP_RECVFROM, OP_SENDTO };

/* recv(2), send(2), recvfrom(2) (the peer into *ss*, *len*) or sendto(2) (to
 * *ss*) on *fd*, with the socket module's EINTR rule (PEP 475: retried after
 * running signal handlers). >= 0: bytes moved; -1: EAGAIN (nothing set);
 * -2: an error is set (OSError from errno, or a signal handler's). */
static Py_ssize_t
sock_op(int op, int fd, char *buf, Py_ssize_t size, struct sockaddr_storage *ss, socklen_t *len)
{
    for (;;) {
        ssize_t n;
        switch (op) {
        case OP_RECV:
            n = recv(fd, buf, (size_t)size, 0);
            break;
        case OP_SEND:
            n = send(fd, buf, (size_t)size, 0);
            break;
        case OP_RECVFROM:
            *len = sizeof(*ss);
            n = recvfrom(fd, buf, (size_t)size, 0, (struct sockaddr *)ss, len);
            break;
        default:
            n = sendto(fd, buf, (size_t)size, 0, (const struct sockaddr *)ss, *len);
            break;
        }
        if (n >= 0) {
            return (Py_ssize_t)n;
        }
        if (errno == EINTR) {
            if (PyErr_CheckSignals() < 0) {
                return -2;
            }
            continue;
        }
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            return -1;
        }
        PyErr_SetFromErrno(PyExc_OSError);
        return -2;
    }
}

/* An int slot's value; -1 with an error set if it is not an int. */
static int
slot_long(PyObject *obj, Py_ssize_t off, long *out)
{
    PyObject *v = SLOT(obj, off);
    if (v == NULL || !PyLong_CheckExact(v)) {
        return -1;
    }
    long r = PyLong_AsLong(v);
    if (r == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return -1;
    }
    *out = r;
    return 0;
}

static PyObject *
call_pure(PyObject *func, PyObject *self)
{
    return PyObject_Vectorcall(func, &self, 1, NULL);
}


/* Call pure(self, *args, **kw) for a fast path's vectorcall arguments. */
static PyObject *
delegate(PyObject *pure, PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    Py_ssize_t total = nargs + (kwnames ? PyTuple_GET_SIZE(kwnames) : 0);
    PyObject *small[8];
    PyObject **stack = small;
    if (total + 1 > 8) {
        stack = PyMem_New(PyObject *, total + 1);
        if (stack == NULL) {
            return PyErr_NoMemory();
        }
    }
    stack[0] = self;
    for (Py_ssize_t i = 0; i < total; i++) {
        stack[i + 1] = args[i];
    }
    PyObject *r = PyObject_Vectorcall(pure, stack, nargs + 1, kwnames);
    if (stack != small) {
        PyMem_Free(stack);
    }
    return r;
}

static PyObject *
call_method0(PyObject *self, PyObject *name)
{
    PyObject *stack[] = {self};
    return PyObject_VectorcallMethod(name, stack, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
}

/* ------------------------------------------------------------------ */
/* SocketTransport._read_ready                                         */

/* A BufferedProtocol's read: get_buffer(-1), recv_into it, buffer_updated(n). */
static int
stream_read_buffered(PyObject *self, PyObject *sock)
{
    PyObject *protocol = Py_NewRef(SLOT(self, off_protocol));
    int rc = 0;
    Py_ssize_t n;
    PyObject *stack[] = {protocol, minus_one};
    PyObject *buf = PyObject_VectorcallMethod(s_get_buffer, stack, 2 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
    if (buf != NULL) {
        Py_ssize_t len = PyObject_Length(buf);
        if (len == 0) {
            PyErr_SetString(PyExc_RuntimeError, "get_buffer() returned an empty buffer");
        }
        if (len <= 0) {
            Py_CLEAR(buf);
        }
    }
    if (buf == NULL) {
        rc = handle_error(self, 0, NULL, msg_get_buffer) < 0 ? -1 : 0;
        goto done;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(buf, &view, PyBUF_WRITABLE) == 0) {
        int fd;
        if (sock_fd(sock, &fd) < 0) {
            n = -2;
        }
        else {
            n = sock_op(OP_RECV, fd, view.buf, view.len, NULL, NULL);
        }
        PyBuffer_Release(&view);
    }
    else {
        /* Not a writable buffer: sock.recv_into(buf) says what is wrong,
         * as it does on the pure path. */
        PyErr_Clear();
        PyObject *st[] = {sock, buf};
        PyObject *r = PyObject_VectorcallMethod(s_recv_into, st, 2 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
        if (r == NULL) {
            n = -2;
        }
        else {
            n = PyLong_AsSsize_t(r);
            Py_DECREF(r);
            if (n < 0) {
                n = -2;
            }
        }
    }
    if (n == -1) {
        goto done; /* nothing to read after all */
    }
    if (n == -2) {
        rc = handle_error(self, IGNORE_BLOCKING, NULL, msg_read_error) < 0 ? -1 : 0;
        goto done;
    }
    if (n == 0) {
        PyObject *r = call_method0(self, s_read_eof);
        rc = r == NULL ? -1 : 0;
        Py_XDECREF(r);
        goto done;
    }
    PyObject *nobj = PyLong_FromSsize_t(n);
    if (nobj == NULL) {
        rc = -1;
        goto done;
    }
    PyObject *st[] = {protocol, nobj};
    PyObject *r = PyObject_VectorcallMethod(s_buffer_updated, st, 2 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
    Py_DECREF(nobj);
    if (r == NULL) {
        rc = handle_error(self, 0, NULL, msg_buffer_updated) < 0 ? -1 : 0;
    }
    else {
        Py_DECREF(r);
    }
done:
    Py_XDECREF(buf);
    Py_DECREF(protocol);
    return rc;
}

/* stream_read_ready(transport): SocketTransport._read_ready(transport). */
static PyObject *
stream_read_ready(PyObject *module, PyObject *self)
{
    if (StreamType == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "configure_stream() was not called");
        return NULL;
    }
    if (Py_TYPE(self) != StreamType) {
        return call_pure(stream_pure_read, self);
    }
    PyObject *on = SLOT(self, off_reader_on);
    if (on != Py_True) {
        int truth = on == NULL ? -1 : PyObject_IsTrue(on);
        if (truth < 0) {
            return call_pure(stream_pure_read, self);
        }
        if (!truth) {
            Py_RETURN_NONE; /* detached after this run was queued */
        }
    }
    PyObject *sock = SLOT(self, off_sock);
    long mode;
    if (sock == NULL || Py_TYPE(sock) != SockType || slot_long(self, off_read_mode, &mode) < 0) {
        return call_pure(stream_pure_read, self);
    }
    Py_INCREF(sock);
    PyObject *result = NULL;
    if (mode == READ_BUFFERED) {
        if (stream_read_buffered(self, sock) == 0) {
            result = Py_NewRef(Py_None);
        }
        Py_DECREF(sock);
        return result;
    }
    Py_ssize_t size = large_read_size;
    if (mode == READ_SMALL) {
        PyObject *max_size = PyObject_GetAttr(self, s_max_size);
        size = max_size == NULL ? -1 : PyLong_AsSsize_t(max_size);
        Py_XDECREF(max_size);
        if (size <= 0 || size > READ_BUF_SIZE) {
            /* Unusual: the pure method reads it again and does as it does. */
            PyErr_Clear();
            Py_DECREF(sock);
            return call_pure(stream_pure_read, self);
        }
    }
    int fd;
    Py_ssize_t n = sock_fd(sock, &fd) < 0 ? -2 : sock_op(OP_RECV, fd, read_buf, size, NULL, NULL);
    Py_DECREF(sock);
    if (n == -1) {
        Py_RETURN_NONE;
    }
    PyObject *data = NULL;
    if (n > 0) {
        data = PyBytes_FromStringAndSize(read_buf, n);
        if (data == NULL) {
            n = -2;
        }
    }
    if (n == -2) {
        return handle_error(self, IGNORE_BLOCKING, NULL, msg_read_error) < 0 ? NULL : Py_NewRef(Py_None);
    }
    if (n == 0) {
        return call_method0(self, s_read_eof);
    }
    /* This read's size picks the next one's mode (before the protocol runs,
     * so that a set_protocol() from data_received wins). */
    long large_min;
    if (slot_long(self, off_large_min, &large_min) == 0) {
        if (n >= large_min) {
            if (mode == READ_SMALL) {
                Py_XSETREF(SLOT(self, off_read_mode), Py_NewRef(mode_large));
            }
        }
        else if (mode != READ_SMALL) {
            Py_XSETREF(SLOT(self, off_read_mode), Py_NewRef(mode_small));
        }
    }
    PyObject *protocol = SLOT(self, off_protocol);
    if (protocol == NULL) {
        PyErr_SetString(PyExc_AttributeError, "_protocol");
        Py_DECREF(data);
        return NULL;
    }
    Py_INCREF(protocol);
    PyObject *stack[] = {protocol, data};
    PyObject *r = PyObject_VectorcallMethod(s_data_received, stack, 2 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
    Py_DECREF(protocol);
    Py_DECREF(data);
    if (r == NULL) {
        return handle_error(self, 0, NULL, msg_data_received) < 0 ? NULL : Py_NewRef(Py_None);
    }
    return r;
}

/* ------------------------------------------------------------------ */
/* SocketTransport.write                                               */

static PyObject *
stream_write(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    if (StreamType == NULL || Py_TYPE(self) != StreamType || nargs != 1 || kwnames != NULL) {
        if (stream_pure_write == NULL) {
            PyErr_SetString(PyExc_RuntimeError, "configure_stream() was not called");
            return NULL;
        }
        return delegate(stream_pure_write, self, args, nargs, kwnames);
    }
    PyObject *data = args[0];
    PyObject *sock = SLOT(self, off_sock);
    long conn_lost, buffer_size;
    /* Only the common case is ours: a flat bytes-like object, nothing
     * buffered, an open transport, a plain socket. */
    if (SLOT(self, off_eof) != Py_False || SLOT(self, off_empty_waiter) != Py_None || sock == NULL ||
        Py_TYPE(sock) != SockType || slot_long(self, off_conn_lost, &conn_lost) < 0 || conn_lost ||
        slot_long(self, off_buffer_size, &buffer_size) < 0 || buffer_size) {
        return delegate(stream_pure_write, self, args, nargs, kwnames);
    }
    Py_buffer view;
    if (PyBytes_CheckExact(data)) {
        if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0) {
            return NULL;
        }
    }
    else if (PyByteArray_CheckExact(data) ||
             (PyMemoryView_Check(data) && PyMemoryView_GET_BUFFER(data)->ndim == 1 &&
              PyMemoryView_GET_BUFFER(data)->itemsize == 1)) {
        if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0) {
            PyErr_Clear(); /* a released or non-contiguous view: the pure path's words */
            return delegate(stream_pure_write, self, args, nargs, kwnames);
        }
    }
    else {
        return delegate(stream_pure_write, self, args, nargs, kwnames);
    }
    if (view.len == 0) {
        PyBuffer_Release(&view);
        Py_RETURN_NONE;
    }
    Py_INCREF(self);
    Py_INCREF(data);
    int fd;
    Py_ssize_t size = view.len;
    Py_ssize_t n = sock_fd(sock, &fd) < 0 ? -2 : sock_op(OP_SEND, fd, view.buf, size, NULL, NULL);
    PyBuffer_Release(&view);
    PyObject *result = NULL;
    if (n == size) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    if (n == -2) {
        int handled = handle_error(self, IGNORE_BLOCKING, NULL, msg_write_error);
        if (handled < 0) {
            goto done;
        }
        if (handled == 0) {
            result = Py_NewRef(Py_None);
            goto done;
        }
        n = 0; /* BlockingIOError or InterruptedError: nothing was sent */
    }
    else if (n == -1) {
        n = 0;
    }
    /* Wait for the fd, and buffer what was not sent (the pure method's tail). */
    {
        PyObject *nobj = PyLong_FromSsize_t(n);
        if (nobj != NULL) {
            PyObject *stack[] = {self, data, nobj};
            result = PyObject_VectorcallMethod(s_write_tail, stack, 3 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
            Py_DECREF(nobj);
        }
    }
done:
    Py_DECREF(data);
    Py_DECREF(self);
    return result;
}

static PyMethodDef stream_write_def = {
    "write", (PyCFunction)(void (*)(void))stream_write, METH_FASTCALL | METH_KEYWORDS,
    "write($self, data, /)\n--\n\n"
    "Write some data bytes to the transport (tideloop's native fast path; the pure\n"
    "method, SocketTransport._write_pure, does everything but the common case)."};

/* ------------------------------------------------------------------ */
/* Addresses of AF_INET and AF_INET6 datagrams                          */

/* Facts / what this means for us:
 * - The socket module turns a peer's sockaddr into a new tuple for every
 *   datagram (inet_ntop, which formats with sprintf, a str, an int), and
 *   parses the tuple given to sendto() every time (the host through the
 *   idna codec, then inet_pton, then getaddrinfo if that fails): for small
 *   datagrams, more than the syscalls.
 * - Here: the tuple the socket module would make (AF_INET: (host, port);
 *   AF_INET6: (host, port, flowinfo, scope_id), the host from inet_ntop),
 *   kept in a small table by sockaddr, so a peer's datagrams share one
 *   tuple (tuples are immutable: nobody can tell, but by identity); and a
 *   sendto() address that is such a tuple, or (host, port) with a numeric
 *   host of the socket's family that inet_pton takes, is converted here
 *   (numeric hosts are all the socket module would convert without a name
 *   lookup). Anything else (a name, a scope in the host, another family,
 *   a wrong type) takes the pure path, which asks the socket module.
 */

#define ADDR_SLOTS 256
typedef struct {
    struct sockaddr_storage sa; /* family 0: an empty slot */
    socklen_t len;
    PyObject *tuple; /* owned */
} AddrEntry;
static AddrEntry addr_table[ADDR_SLOTS];
/* The same entries by their tuple's address (for sendto): a slot number + 1. */
static unsigned short by_tuple[ADDR_SLOTS];

static inline unsigned
ptr_hash(const void *p)
{
    return (unsigned)(((uintptr_t)p >> 4) % ADDR_SLOTS);
}

static unsigned
addr_hash(const struct sockaddr *sa, socklen_t len)
{
    const unsigned char *p = (const unsigned char *)sa;
    unsigned h = 2166136261u;
    for (socklen_t i = 0; i < len; i++) {
        h = (h ^ p[i]) * 16777619u;
    }
    return h % ADDR_SLOTS;
}

/* The tuple for a received sockaddr (new reference), as the socket module
 * makes it; Py_None for an empty address; NULL with an error set. */
static PyObject *
addr_tuple(const struct sockaddr_storage *ss, socklen_t len)
{
    if (len == 0) {
        Py_RETURN_NONE;
    }
    const struct sockaddr *sa = (const struct sockaddr *)ss;
    socklen_t keylen;
    if (sa->sa_family == AF_INET && len >= (socklen_t)sizeof(struct sockaddr_in)) {
        keylen = sizeof(struct sockaddr_in);
    }
    else if (sa->sa_family == AF_INET6 && len >= (socklen_t)sizeof(struct sockaddr_in6)) {
        keylen = sizeof(struct sockaddr_in6);
    }
    else {
        PyErr_SetString(PyExc_OSError, "unexpected address family of a datagram");
        return NULL;
    }
    AddrEntry *e = &addr_table[addr_hash(sa, keylen)];
    if (e->tuple != NULL && e->len == keylen && memcmp(&e->sa, sa, keylen) == 0) {
        return Py_NewRef(e->tuple);
    }
    char host[INET6_ADDRSTRLEN];
    PyObject *tuple;
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
        if (inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host)) == NULL) {
            return PyErr_SetFromErrno(PyExc_OSError);
        }
        tuple = Py_BuildValue("(si)", host, (int)ntohs(in->sin_port));
    }
    else {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
        if (inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host)) == NULL) {
            return PyErr_SetFromErrno(PyExc_OSError);
        }
        tuple = Py_BuildValue("(siII)", host, (int)ntohs(in6->sin6_port),
                              (unsigned int)ntohl(in6->sin6_flowinfo),
                              (unsigned int)in6->sin6_scope_id);
    }
    if (tuple == NULL) {
        return NULL;
    }
    memset(&e->sa, 0, sizeof(e->sa));
    memcpy(&e->sa, sa, keylen);
    e->len = keylen;
    Py_XSETREF(e->tuple, Py_NewRef(tuple));
    by_tuple[ptr_hash(tuple)] = (unsigned short)(e - addr_table + 1);
    return tuple;
}

/* sendto()'s address as a sockaddr of *family*: 1 converted, 0 not ours
 * (the pure path asks the socket module), -1 error. */
static int
addr_sockaddr(PyObject *addr, int family, struct sockaddr_storage *ss, socklen_t *len)
{
    if (!PyTuple_CheckExact(addr)) {
        return 0;
    }
    /* One of ours, most likely: the tuple a datagram came from. */
    unsigned slot = by_tuple[ptr_hash(addr)];
    if (slot && addr_table[slot - 1].tuple == addr) {
        AddrEntry *e = &addr_table[slot - 1];
        if (((const struct sockaddr *)&e->sa)->sa_family != family) {
            return 0;
        }
        memcpy(ss, &e->sa, e->len);
        *len = e->len;
        return 1;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(addr);
    if (n < 2 || !PyUnicode_CheckExact(PyTuple_GET_ITEM(addr, 0)) ||
        !PyLong_CheckExact(PyTuple_GET_ITEM(addr, 1))) {
        return 0;
    }
    const char *host = PyUnicode_AsUTF8(PyTuple_GET_ITEM(addr, 0));
    if (host == NULL) {
        PyErr_Clear();
        return 0;
    }
    long port = PyLong_AsLong(PyTuple_GET_ITEM(addr, 1));
    if (port < 0 || port > 65535) {
        PyErr_Clear();
        return 0; /* the socket module's error */
    }
    memset(ss, 0, sizeof(*ss));
    if (family == AF_INET && n == 2) {
        struct sockaddr_in *in = (struct sockaddr_in *)ss;
        if (inet_pton(AF_INET, host, &in->sin_addr) != 1) {
            return 0;
        }
        in->sin_family = AF_INET;
        in->sin_port = htons((unsigned short)port);
        *len = sizeof(*in);
        return 1;
    }
    if (family == AF_INET6 && n <= 4 && strchr(host, '%') == NULL) {
        struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;
        unsigned long flowinfo = 0, scope_id = 0;
        if (n > 2) {
            if (!PyLong_CheckExact(PyTuple_GET_ITEM(addr, 2))) {
                return 0;
            }
            flowinfo = PyLong_AsUnsignedLong(PyTuple_GET_ITEM(addr, 2));
            if (flowinfo > 0xfffff) {
                PyErr_Clear();
                return 0;
            }
        }
        if (n > 3) {
            if (!PyLong_CheckExact(PyTuple_GET_ITEM(addr, 3))) {
                return 0;
            }
            scope_id = PyLong_AsUnsignedLong(PyTuple_GET_ITEM(addr, 3));
            if (scope_id == (unsigned long)-1 && PyErr_Occurred()) {
                PyErr_Clear();
                return 0;
            }
        }
        if (inet_pton(AF_INET6, host, &in6->sin6_addr) != 1) {
            return 0;
        }
        in6->sin6_family = AF_INET6;
        in6->sin6_port = htons((unsigned short)port);
        in6->sin6_flowinfo = htonl((uint32_t)flowinfo);
        in6->sin6_scope_id = (uint32_t)scope_id;
        *len = sizeof(*in6);
        return 1;
    }
    return 0;
}


/* ------------------------------------------------------------------ */
/* DatagramTransport._read_ready and sendto                            */

static PyObject *
dgram_read_ready(PyObject *module, PyObject *self)
{
    if (DgramType == NULL || SockType == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "configure_stream() and configure_datagram() were not called");
        return NULL;
    }
    if (Py_TYPE(self) != DgramType) {
        return call_pure(dgram_pure_read, self);
    }
    PyObject *on = SLOT(self, off_d_reader_on);
    long conn_lost;
    if (on == NULL || (on != Py_True && on != Py_False) ||
        slot_long(self, off_d_conn_lost, &conn_lost) < 0 || SLOT(self, off_d_read_buf) == NULL ||
        SLOT(self, off_d_sock) == NULL) {
        return call_pure(dgram_pure_read, self);
    }
    if (on == Py_False || conn_lost) {
        Py_RETURN_NONE; /* detached after this run was queued */
    }
    if (Py_TYPE(SLOT(self, off_d_sock)) != SockType) {
        return call_pure(dgram_pure_read, self); /* a simulated socket, say */
    }
    PyObject *buf = Py_NewRef(SLOT(self, off_d_read_buf));
    PyObject *sock = Py_NewRef(SLOT(self, off_d_sock));
    PyObject *data = NULL, *addr = NULL, *result = NULL;
    PyObject *r;
    long family = 0;
    if (buf == Py_None && slot_long(self, off_d_family, &family) == 0 &&
        (family == AF_INET || family == AF_INET6)) {
        /* recvfrom(2) here, the address from the table (see addr_tuple). */
        struct sockaddr_storage ss;
        socklen_t len = 0;
        int fd;
        Py_ssize_t n = sock_fd(sock, &fd) < 0 ? -2 : sock_op(OP_RECVFROM, fd, read_buf, udp_read_len, &ss, &len);
        if (n == -1) {
            result = Py_NewRef(Py_None);
            goto done;
        }
        if (n >= 0) {
            data = PyBytes_FromStringAndSize(read_buf, n);
            addr = data ? addr_tuple(&ss, len) : NULL;
        }
    }
    else if (buf == Py_None) {
        PyObject *stack[] = {sock, udp_read_size};
        r = PyObject_VectorcallMethod(s_recvfrom, stack, 2 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
        if (r != NULL) {
            if (PyTuple_CheckExact(r) && PyTuple_GET_SIZE(r) == 2) {
                data = Py_NewRef(PyTuple_GET_ITEM(r, 0));
                addr = Py_NewRef(PyTuple_GET_ITEM(r, 1));
            }
            else {
                PyErr_SetString(PyExc_TypeError, "recvfrom() must return (data, address)");
            }
            Py_DECREF(r);
        }
    }
    else {
        PyObject *stack[] = {sock, buf};
        r = PyObject_VectorcallMethod(s_recvfrom_into, stack, 2 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
        if (r != NULL) {
            Py_buffer view;
            if (!PyTuple_CheckExact(r) || PyTuple_GET_SIZE(r) != 2) {
                PyErr_SetString(PyExc_TypeError, "recvfrom_into() must return (nbytes, address)");
            }
            else if (PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE) == 0) {
                Py_ssize_t n = PyLong_AsSsize_t(PyTuple_GET_ITEM(r, 0));
                if (!(n == -1 && PyErr_Occurred())) {
                    if (n < 0) {
                        n = 0;
                    }
                    data = PyBytes_FromStringAndSize(view.buf, n < view.len ? n : view.len);
                    addr = Py_NewRef(PyTuple_GET_ITEM(r, 1));
                }
                PyBuffer_Release(&view);
            }
            Py_DECREF(r);
        }
    }
    if (data == NULL || addr == NULL) {
        Py_CLEAR(data);
        Py_CLEAR(addr);
        PyObject *protocol = SLOT(self, off_d_protocol);
        Py_XINCREF(protocol);
        int handled = handle_error(self, IGNORE_BLOCKING | OSERROR_TO_PROTOCOL,
                                   protocol ? protocol : Py_None, msg_dgram_read_error);
        Py_XDECREF(protocol);
        result = handled < 0 ? NULL : Py_NewRef(Py_None);
        goto done;
    }
    PyObject *protocol = SLOT(self, off_d_protocol);
    if (protocol == NULL) {
        PyErr_SetString(PyExc_AttributeError, "_protocol");
        goto done;
    }
    Py_INCREF(protocol);
    PyObject *stack[] = {protocol, data, addr};
    result = PyObject_VectorcallMethod(s_datagram_received, stack, 3 | PY_VECTORCALL_ARGUMENTS_OFFSET,
                                       NULL);
    Py_DECREF(protocol);
done:
    Py_XDECREF(data);
    Py_XDECREF(addr);
    Py_DECREF(buf);
    Py_DECREF(sock);
    return result;
}

static PyObject *
dgram_sendto(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    if (DgramType == NULL || SockType == NULL || Py_TYPE(self) != DgramType || nargs < 1 || nargs > 2 || kwnames != NULL) {
        if (dgram_pure_sendto == NULL) {
            PyErr_SetString(PyExc_RuntimeError, "configure_datagram() was not called");
            return NULL;
        }
        return delegate(dgram_pure_sendto, self, args, nargs, kwnames);
    }
    PyObject *data = args[0];
    PyObject *addr = nargs > 1 ? args[1] : Py_None;
    if (!PyBytes_CheckExact(data) && !PyByteArray_CheckExact(data) && !PyMemoryView_Check(data)) {
        return delegate(dgram_pure_sendto, self, args, nargs, kwnames);
    }
    PyObject *address = SLOT(self, off_d_address);
    PyObject *buffer = SLOT(self, off_d_buffer);
    PyObject *connected = SLOT(self, off_d_connected);
    PyObject *sock = SLOT(self, off_d_sock);
    if (address == NULL || buffer == NULL || connected == NULL || sock == NULL ||
        Py_TYPE(sock) != SockType || (connected != Py_True && connected != Py_False)) {
        return delegate(dgram_pure_sendto, self, args, nargs, kwnames);
    }
    /* The pure method's checks, where they let the datagram through. */
    int has_address = PyObject_IsTrue(address);
    if (has_address < 0) {
        return NULL;
    }
    long conn_lost;
    if (slot_long(self, off_d_conn_lost, &conn_lost) < 0) {
        return delegate(dgram_pure_sendto, self, args, nargs, kwnames);
    }
    if (has_address) {
        if (addr != Py_None) {
            int same = PyObject_RichCompareBool(addr, address, Py_EQ);
            if (same < 0) {
                return NULL;
            }
            if (!same) {
                return delegate(dgram_pure_sendto, self, args, nargs, kwnames);
            }
        }
        if (conn_lost) {
            return delegate(dgram_pure_sendto, self, args, nargs, kwnames);
        }
        addr = address;
    }
    if (buffer != Py_None) {
        int queued = PyObject_IsTrue(buffer);
        if (queued < 0) {
            return NULL;
        }
        if (queued) {
            return delegate(dgram_pure_sendto, self, args, nargs, kwnames);
        }
    }
    Py_INCREF(self);
    Py_INCREF(data);
    Py_INCREF(addr);
    Py_INCREF(sock);
    PyObject *result = NULL;
    PyObject *r = NULL;
    /* send(2)/sendto(2) here for AF_INET and AF_INET6 and an address we can
     * convert (see addr_sockaddr); else the socket object's methods. */
    int direct = 0;
    long family = 0;
    struct sockaddr_storage ss;
    socklen_t sslen = 0;
    if (slot_long(self, off_d_family, &family) == 0 && (family == AF_INET || family == AF_INET6)) {
        if (connected == Py_True) {
            direct = 1;
        }
        else {
            direct = addr_sockaddr(addr, (int)family, &ss, &sslen);
            if (direct < 0) {
                goto done;
            }
        }
    }
    Py_buffer view;
    if (direct && PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0) {
        PyErr_Clear(); /* a strided or released view: the socket module says what is wrong */
        direct = 0;
    }
    if (direct) {
        int fd;
        Py_ssize_t n = sock_fd(sock, &fd) < 0 ? -2
                       : connected == Py_True
                           ? sock_op(OP_SEND, fd, view.buf, view.len, NULL, NULL)
                           : sock_op(OP_SENDTO, fd, view.buf, view.len, &ss, &sslen);
        PyBuffer_Release(&view);
        if (n == -1) {
            /* The socket is full: BlockingIOError, as the socket's method raises. */
            errno = EAGAIN;
            PyErr_SetFromErrno(PyExc_OSError);
        }
        r = n >= 0 ? Py_NewRef(Py_None) : NULL;
    }
    else if (connected == Py_True) {
        PyObject *stack[] = {sock, data};
        r = PyObject_VectorcallMethod(s_send, stack, 2 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
    }
    else {
        PyObject *stack[] = {sock, data, addr};
        r = PyObject_VectorcallMethod(s_sendto, stack, 3 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
    }
    if (r != NULL) {
        Py_DECREF(r);
        result = Py_NewRef(Py_None);
        goto done;
    }
    PyObject *protocol = SLOT(self, off_d_protocol);
    Py_XINCREF(protocol);
    int handled = handle_error(self, IGNORE_BLOCKING | OSERROR_TO_PROTOCOL, protocol ? protocol : Py_None,
                               msg_dgram_write_error);
    Py_XDECREF(protocol);
    if (handled < 0) {
        goto done;
    }
    if (handled == 0) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    /* The socket is full: wait for it, and queue a copy (the pure tail). */
    r = call_method0(self, s_start_writing);
    if (r == NULL) {
        goto done;
    }
    Py_DECREF(r);
    {
        PyObject *stack[] = {self, data, addr};
        result = PyObject_VectorcallMethod(s_queue, stack, 3 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
    }
done:
    Py_DECREF(sock);
    Py_DECREF(addr);
    Py_DECREF(data);
    Py_DECREF(self);
    return result;
}

static PyMethodDef dgram_sendto_def = {
    "sendto", (PyCFunction)(void (*)(void))dgram_sendto, METH_FASTCALL | METH_KEYWORDS,
    "sendto($self, data, addr=None, /)\n--\n\n"
    "Send data to addr (tideloop's native fast path; the pure method,\n"
    "DatagramTransport._sendto_pure, does everything but the common case)."};


/* ------------------------------------------------------------------ */
/* FdTransport.is_closing and WriteFlowControl.get_write_buffer_size    */

/* Asked once per message by asyncio's streams (StreamWriter.drain() asks
 * is_closing()) and by libraries' writers: a Python frame to read a slot. */
static Py_ssize_t off_b_closing = -1, off_b_buffer_size = -1;

static PyObject *
read_slot(PyObject *self, Py_ssize_t off, const char *name)
{
    PyObject *v = off < 0 ? NULL : SLOT(self, off);
    if (v == NULL) {
        PyErr_Format(PyExc_AttributeError, "'%.100s' object has no attribute '%s'",
                     Py_TYPE(self)->tp_name, name);
        return NULL;
    }
    return Py_NewRef(v);
}

static PyObject *
base_is_closing(PyObject *self, PyObject *Py_UNUSED(ignored))
{
    return read_slot(self, off_b_closing, "_closing");
}

static PyObject *
base_get_write_buffer_size(PyObject *self, PyObject *Py_UNUSED(ignored))
{
    return read_slot(self, off_b_buffer_size, "_buffer_size");
}

static PyMethodDef is_closing_def = {
    "is_closing", (PyCFunction)base_is_closing, METH_NOARGS,
    "is_closing($self, /)\n--\n\nReturn True if the transport is closing or closed."};
static PyMethodDef get_write_buffer_size_def = {
    "get_write_buffer_size", (PyCFunction)base_get_write_buffer_size, METH_NOARGS,
    "get_write_buffer_size($self, /)\n--\n\nReturn the current size of the write buffer."};

/* configure_base(FdTransport, WriteFlowControl): their native is_closing
 * and get_write_buffer_size methods. */
static PyObject *
configure_base(PyObject *module, PyObject *args)
{
    PyObject *base, *flow;
    if (!PyArg_ParseTuple(args, "O!O!:configure_base", &PyType_Type, &base, &PyType_Type, &flow)) {
        return NULL;
    }
    if (!PyType_IsSubtype((PyTypeObject *)flow, (PyTypeObject *)base)) {
        PyErr_SetString(PyExc_TypeError, "the flow-control class must extend the base class");
        return NULL;
    }
    if (slot_offset((PyTypeObject *)base, "_closing", &off_b_closing) < 0 ||
        slot_offset((PyTypeObject *)base, "_buffer_size", &off_b_buffer_size) < 0) {
        return NULL;
    }
    PyObject *closing = PyDescr_NewMethod((PyTypeObject *)base, &is_closing_def);
    PyObject *size = closing ? PyDescr_NewMethod((PyTypeObject *)flow, &get_write_buffer_size_def) : NULL;
    if (size == NULL) {
        Py_XDECREF(closing);
        return NULL;
    }
    PyObject *r = PyTuple_Pack(2, closing, size);
    Py_DECREF(closing);
    Py_DECREF(size);
    return r;
}

/* ------------------------------------------------------------------ */
/* configure                                                           */


/* configure_stream(cls, socket_type, read_ready, write, large_read_size):
 * returns the native write method of cls (a method descriptor). */
static PyObject *
configure_stream(PyObject *module, PyObject *args)
{
    PyObject *cls, *sock_type, *read, *write;
    Py_ssize_t large;
    if (!PyArg_ParseTuple(args, "O!O!OOn:configure_stream", &PyType_Type, &cls, &PyType_Type,
                          &sock_type, &read, &write, &large)) {
        return NULL;
    }
    if (large <= 0 || large > READ_BUF_SIZE) {
        PyErr_Format(PyExc_ValueError, "large_read_size must be in 1..%d", READ_BUF_SIZE);
        return NULL;
    }
    PyTypeObject *t = (PyTypeObject *)cls;
    if (slot_offset(t, "_reader_on", &off_reader_on) < 0 ||
        slot_offset(t, "_read_mode", &off_read_mode) < 0 || slot_offset(t, "_sock", &off_sock) < 0 ||
        slot_offset(t, "_protocol", &off_protocol) < 0 ||
        slot_offset(t, "_large_min", &off_large_min) < 0 || slot_offset(t, "_eof", &off_eof) < 0 ||
        slot_offset(t, "_empty_waiter", &off_empty_waiter) < 0 ||
        slot_offset(t, "_conn_lost", &off_conn_lost) < 0 ||
        slot_offset(t, "_buffer_size", &off_buffer_size) < 0) {
        return NULL;
    }
    /* socket.socket.fileno: _socket.socket's own METH_NOARGS method, unless
     * a Python release overrides it (then it is called by name). */
    PyObject *fileno = PyObject_GetAttr(sock_type, s_fileno);
    if (fileno == NULL) {
        return NULL;
    }
    sock_fileno = NULL;
    if (Py_IS_TYPE(fileno, &PyMethodDescr_Type)) {
        PyMethodDef *def = ((PyMethodDescrObject *)fileno)->d_method;
        if ((def->ml_flags & (METH_NOARGS | METH_VARARGS | METH_O | METH_FASTCALL | METH_KEYWORDS |
                              METH_METHOD)) == METH_NOARGS) {
            sock_fileno = def->ml_meth;
        }
    }
    Py_DECREF(fileno); /* the type holds the descriptor, and we hold the type */
    Py_XSETREF(StreamType, (PyTypeObject *)Py_NewRef(cls));
    Py_XSETREF(SockType, (PyTypeObject *)Py_NewRef(sock_type));
    Py_XSETREF(stream_pure_read, Py_NewRef(read));
    Py_XSETREF(stream_pure_write, Py_NewRef(write));
    large_read_size = large;
    return PyDescr_NewMethod(t, &stream_write_def);
}

/* configure_datagram(cls, read_ready, sendto, udp_read_size): returns the
 * native sendto method of cls. */
static PyObject *
configure_datagram(PyObject *module, PyObject *args)
{
    PyObject *cls, *read, *sendto, *size;
    if (!PyArg_ParseTuple(args, "O!OOO!:configure_datagram", &PyType_Type, &cls, &read, &sendto,
                          &PyLong_Type, &size)) {
        return NULL;
    }
    PyTypeObject *t = (PyTypeObject *)cls;
    if (slot_offset(t, "_reader_on", &off_d_reader_on) < 0 ||
        slot_offset(t, "_conn_lost", &off_d_conn_lost) < 0 ||
        slot_offset(t, "_read_buf", &off_d_read_buf) < 0 || slot_offset(t, "_sock", &off_d_sock) < 0 ||
        slot_offset(t, "_protocol", &off_d_protocol) < 0 ||
        slot_offset(t, "_address", &off_d_address) < 0 ||
        slot_offset(t, "_buffer", &off_d_buffer) < 0 ||
        slot_offset(t, "_connected", &off_d_connected) < 0 ||
        slot_offset(t, "_family", &off_d_family) < 0) {
        return NULL;
    }
    udp_read_len = PyLong_AsSsize_t(size);
    if (udp_read_len <= 0 || udp_read_len > READ_BUF_SIZE) {
        if (!PyErr_Occurred()) {
            PyErr_Format(PyExc_ValueError, "udp_read_size must be in 1..%d", READ_BUF_SIZE);
        }
        return NULL;
    }
    Py_XSETREF(DgramType, (PyTypeObject *)Py_NewRef(cls));
    Py_XSETREF(dgram_pure_read, Py_NewRef(read));
    Py_XSETREF(dgram_pure_sendto, Py_NewRef(sendto));
    Py_XSETREF(udp_read_size, Py_NewRef(size));
    return PyDescr_NewMethod(t, &dgram_sendto_def);
}

/* clear_caches(): empty the address table (what a reference-leak check
 * does between runs, as CPython's regrtest clears the interpreter's caches:
 * a bounded cache fills up over runs and is not a leak). */
static PyObject *
clear_caches(PyObject *module, PyObject *Py_UNUSED(ignored))
{
    for (int i = 0; i < ADDR_SLOTS; i++) {
        Py_CLEAR(addr_table[i].tuple);
        addr_table[i].len = 0;
        by_tuple[i] = 0;
    }
    Py_RETURN_NONE;
}

static PyMethodDef native_methods[] = {
    {"stream_read_ready", (PyCFunction)stream_read_ready, METH_O,
     "stream_read_ready(transport): SocketTransport._read_ready, natively."},
    {"datagram_read_ready", (PyCFunction)dgram_read_ready, METH_O,
     "datagram_read_ready(transport): DatagramTransport._read_ready, natively."},
    {"configure_stream", (PyCFunction)configure_stream, METH_VARARGS,
     "configure_stream(cls, socket_type, read_ready, write, large_read_size) -> write method"},
    {"clear_caches", (PyCFunction)clear_caches, METH_NOARGS,
     "clear_caches(): empty the datagram address table (for reference-leak checks)."},
    {"configure_base", (PyCFunction)configure_base, METH_VARARGS,
     "configure_base(FdTransport, WriteFlowControl) -> (is_closing, get_write_buffer_size) methods"},
    {"configure_datagram", (PyCFunction)configure_datagram, METH_VARARGS,
     "configure_datagram(cls, read_ready, sendto, udp_read_size) -> sendto method"},
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
    INTERN(s_fileno, "fileno");
    INTERN(s_max_size, "max_size");
    INTERN(s_data_received, "data_received");
    INTERN(s_get_buffer, "get_buffer");
    INTERN(s_buffer_updated, "buffer_updated");
    INTERN(s_read_eof, "_read_eof");
    INTERN(s_fatal_error, "_fatal_error");
    INTERN(s_write_tail, "_write_tail");
    INTERN(s_recv_into, "recv_into");
    INTERN(s_recvfrom, "recvfrom");
    INTERN(s_recvfrom_into, "recvfrom_into");
    INTERN(s_send, "send");
    INTERN(s_sendto, "sendto");
    INTERN(s_datagram_received, "datagram_received");
    INTERN(s_error_received, "error_received");
    INTERN(s_start_writing, "_start_writing");
    INTERN(s_queue, "_queue");
    INTERN(msg_read_error, "Fatal read error on socket transport");
    INTERN(msg_write_error, "Fatal write error on socket transport");
    INTERN(msg_data_received, "Fatal error: protocol.data_received() call failed.");
    INTERN(msg_get_buffer, "Fatal error: protocol.get_buffer() call failed.");
    INTERN(msg_buffer_updated, "Fatal error: protocol.buffer_updated() call failed.");
    INTERN(msg_dgram_read_error, "Fatal read error on datagram transport");
    INTERN(msg_dgram_write_error, "Fatal write error on datagram transport");
    mode_small = PyLong_FromLong(READ_SMALL);
    mode_large = PyLong_FromLong(READ_LARGE);
    minus_one = PyLong_FromLong(-1);
    if (mode_small == NULL || mode_large == NULL || minus_one == NULL) {
        return -1;
    }
    return 0;
}

static PyModuleDef_Slot native_slots[] = {
    {Py_mod_exec, native_exec},
#if PY_VERSION_HEX >= 0x030C0000
    /* Module-wide state and a static buffer: one interpreter only. */
    {Py_mod_multiple_interpreters, Py_MOD_MULTIPLE_INTERPRETERS_NOT_SUPPORTED},
#endif
#if PY_VERSION_HEX >= 0x030D0000
    /* The static read buffer relies on the GIL (see the module comment). */
    {Py_mod_gil, Py_MOD_GIL_USED},
#endif
    {0, NULL},
};

static struct PyModuleDef native_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "tideloop._transports._native",
    .m_doc = "The native twin of tideloop's stream and datagram transports' per-message paths.",
    .m_size = 0,
    .m_methods = native_methods,
    .m_slots = native_slots,
};

PyMODINIT_FUNC
PyInit__native(void)
{
    return PyModuleDef_Init(&native_module);
}
