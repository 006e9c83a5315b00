"""A DLPack capsule of a tensor said to be on a device whose memory is never read: the
checks that come before any driver call, tested on machines without a GPU."""
import ctypes


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.c_void_p),
                ("byte_offset", ctypes.c_uint64)]


class _DLManaged(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


_keep = []


def fake_cuda(shape, device_type=2, code=2, bits=32):
    """A DLPack capsule of a tensor (float32 unless code, bits say otherwise) said to be
    on CUDA device 0, whose data is never read: validation and the driver lookup come
    first."""
    dims = (ctypes.c_int64 * len(shape))(*shape)
    data = 0x10000000 + len(_keep) * 0x1000000  # apart: outputs must not overlap inputs
    m = _DLManaged(_DLTensor(data, _DLDevice(device_type, 0), len(shape), code, bits, 1, dims,
                             None, 0), None, None)
    _keep.append((dims, m))
    new = ctypes.pythonapi.PyCapsule_New
    new.restype, new.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    return new(ctypes.addressof(m), b"dltensor", None)
