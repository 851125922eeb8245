/*
 * What tideloop's two native modules share (tideloop._core._native and
 * tideloop._transports._native): the member-type names across Python
 * versions, reading a __slots__ field's offset off its member descriptor,
 * and taking the raised exception. CPython C API only; static functions, so
 * each module has its own copy and no symbol is exported.
 */
#ifndef TIDELOOP_NATIVE_COMMON_H
#define TIDELOOP_NATIVE_COMMON_H

#include <Python.h>
#include <structmember.h>

#if PY_VERSION_HEX >= 0x030C0000
#define TL_T_OBJECT_EX Py_T_OBJECT_EX
#define TL_T_BOOL Py_T_BOOL
#define TL_T_LONGLONG Py_T_LONGLONG
#define TL_T_DOUBLE Py_T_DOUBLE
#define TL_READONLY Py_READONLY
#else
#define TL_T_OBJECT_EX T_OBJECT_EX
#define TL_T_BOOL T_BOOL
#define TL_T_LONGLONG T_LONGLONG
#define TL_T_DOUBLE T_DOUBLE
#define TL_READONLY READONLY
#endif

/* The field of an object at a __slots__ offset (a PyObject *, maybe NULL). */
#define SLOT(obj, off) (*(PyObject **)((char *)(obj) + (off)))

/* The offset of *type*'s object slot *name* (its member descriptor's): 0,
 * or -1 with an error set if *name* is not an object slot. */
static int
slot_offset(PyTypeObject *type, const char *name, Py_ssize_t *out)
{
    PyObject *descr = PyObject_GetAttrString((PyObject *)type, name);
    if (descr == NULL) {
        return -1;
    }
    if (!Py_IS_TYPE(descr, &PyMemberDescr_Type)) {
        PyErr_Format(PyExc_TypeError, "%.100s.%s is not a __slots__ member", type->tp_name, name);
        Py_DECREF(descr);
        return -1;
    }
    PyMemberDef *def = ((PyMemberDescrObject *)descr)->d_member;
    if (def->type != TL_T_OBJECT_EX) {
        PyErr_Format(PyExc_TypeError, "%.100s.%s is not an object slot", type->tp_name, name);
        Py_DECREF(descr);
        return -1;
    }
    *out = def->offset;
    Py_DECREF(descr);
    return 0;
}

/* The raised exception, taken and normalized (with its traceback), or NULL
 * if none was raised: a new reference. */
static PyObject *
take_exception(void)
{
#if PY_VERSION_HEX >= 0x030C0000
    return PyErr_GetRaisedException();
#else
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    if (type == NULL) {
        return NULL;
    }
    PyErr_NormalizeException(&type, &value, &tb);
    if (tb != NULL && value != NULL) {
        PyException_SetTraceback(value, tb);
    }
    Py_XDECREF(type);
    Py_XDECREF(tb);
    return value;
#endif
}

#endif /* TIDELOOP_NATIVE_COMMON_H */
