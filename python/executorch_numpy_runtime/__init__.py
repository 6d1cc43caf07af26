"""Run ExecuTorch ``.pte`` programs from Python with numpy arrays, without torch.

.. code-block:: python

    import numpy as np
    from executorch_numpy_runtime import Runtime

    program = Runtime.get().load_program("model.pte")
    forward = program.load_method("forward")
    outputs = forward.execute([np.ones((2, 2), dtype=np.float32)])

The API is executorch-numpy-runtime's and ``executorch.runtime``'s (Runtime, Program, Method, MethodMeta,
Verification, BackendRegistry, OperatorRegistry, ExecuTorchResult), with numpy arrays where the latter takes torch
tensors. See docs/python.md for the full reference and the compatibility table.

Pickling: a :class:`Program` pickles as the way it was loaded, by path (the absolute path of the ``.pte``, its
``data_path`` files and its load options) when loaded from a file, by its bytes otherwise (bytes, buffers and file
objects); a :class:`Method` pickles as its program and its name. Unpickling loads a program once per process and
keeps it: a later unpickling of the same program (same file with the same mtime and size, or the same bytes; the
same ``.ptd`` files and options) returns that same Program, and a Method unpickles to that program's cached
method. So a method passed to worker processes (multiprocessing, concurrent.futures, Ray, Dask) with every item
is loaded once per worker, not once per item. A program pickled by path must be readable at that path where it is
unpickled; pickling one loaded from bytes copies its bytes into every pickle (pass large programs by path). The
ETDump recorded by a program loaded with ``enable_etdump=True`` stays with that program: a copy records its own.
"""

from __future__ import annotations

import enum
import os
import threading
from collections.abc import Mapping

import numpy as np

from .errors import (
    ERROR_CLASSES,
    BackendNotAvailable,
    ExecutionError,
    ExecuTorchError,
    IndexOutOfRangeError,
    InvalidInputError,
    InvalidTypeError,
    MethodNotFoundError,
    OperatorNotFound,
    ProgramLoadError,
)
from . import _C
from ._C import ExecuTorchResult, Method, MethodMeta, Program, TensorInfo, Verification
from ._C import StreamDecoder, Tokenizer

# typing.TYPE_CHECKING without importing typing, which costs 3 ms at import where numpy does not import it (the
# annotations are strings: from __future__ import annotations).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, BinaryIO, Dict, List, Optional, Sequence, Set, Union

    from .llm import LLM, GenerationResult, GenerationStep  # (loaded on first use at run time: __getattr__ below)

    PathLike = Union[str, "os.PathLike[str]"]
    BackendOptionValue = Union[bool, int, str]

#: Element types, numbered as in the .pte format (PyTorch's c10::ScalarType); an IntEnum, so ScalarType.Float == 6.
ScalarType = enum.IntEnum("ScalarType", _C._scalar_type_names(), module=__name__)  # type: ignore[misc]
_C._set_scalar_type_class(ScalarType)

try:  # bfloat16 arrays are real bfloat16 only when ml_dtypes is installed; otherwise raw uint16 bits.
    import ml_dtypes as _ml_dtypes  # type: ignore[import-not-found, unused-ignore]

    BFLOAT16_DTYPE: Optional[np.dtype] = np.dtype(_ml_dtypes.bfloat16)
except ImportError:
    BFLOAT16_DTYPE = None

_C._set_error_classes(ERROR_CLASSES)
_C._set_bfloat16_dtype(BFLOAT16_DTYPE)

__version__: str = _C._version()
#: The ExecuTorch release whose format and semantics this runtime follows and is tested against.
__et_version__: str = _C._executorch_version()

#: The switch executorch.runtime documents: with EXECUTORCH_PYBINDINGS_TENSOR_OUTPUT=executorch in the environment
#: at import, tensor outputs are ExecuTorchResult objects; unset (or "numpy") they are numpy arrays.
TENSOR_OUTPUT_VARIABLE = "EXECUTORCH_PYBINDINGS_TENSOR_OUTPUT"


def _tensor_output_kind() -> bool:
    value = os.environ.get(TENSOR_OUTPUT_VARIABLE, "numpy")
    if value not in ("numpy", "executorch"):
        raise InvalidInputError(
            f"{TENSOR_OUTPUT_VARIABLE}={value!r} is not understood: use 'numpy' (numpy arrays, the default) or "
            "'executorch' (ExecuTorchResult objects)"
        )
    return value == "executorch"


_C._set_result_outputs(_tensor_output_kind())

__all__ = [
    "Runtime",
    "Program",
    "Method",
    "MethodMeta",
    "TensorInfo",
    "ExecuTorchResult",
    "Verification",
    "ScalarType",
    "BackendRegistry",
    "OperatorRegistry",
    "runtime_info",
    "default_limits",
    "parse_etdump",
    "Tokenizer",
    "StreamDecoder",
    "LLM",
    "GenerationResult",
    "GenerationStep",
    "BFLOAT16_DTYPE",
    "ExecuTorchError",
    "ProgramLoadError",
    "BackendNotAvailable",
    "OperatorNotFound",
    "ExecutionError",
    "InvalidInputError",
    "MethodNotFoundError",
    "IndexOutOfRangeError",
    "InvalidTypeError",
    "__version__",
    "__et_version__",
]

# The language-model API (llm.py) loads on first use: importing the package stays as cheap as the runtime
# itself (dataclasses and what it imports cost a few milliseconds at every start).
_LAZY = {"LLM", "GenerationResult", "GenerationStep"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from . import llm

        return getattr(llm, name)
    raise AttributeError("module %r has no attribute %r" % (__name__, name))


def __dir__() -> List[str]:
    return sorted(set(globals()) | _LAZY)


def _str_arg(value: Any, name: str) -> str:
    if not isinstance(value, str):
        raise InvalidTypeError(f"{name} must be a str, got {type(value).__name__}")
    return value


def _as_dict(options: Any) -> Any:
    # A dict goes to the extension as is; another mapping is copied; anything else is refused there, by name.
    return dict(options) if isinstance(options, Mapping) and not isinstance(options, dict) else options


class BackendRegistry:
    """The delegate backends compiled into the runtime, and their process-wide options."""

    @property
    def registered_backend_names(self) -> List[str]:
        """Names of every registered backend (whether or not it is available on this machine)."""
        return list(_C._registered_backend_names())

    def is_available(self, backend_name: str) -> bool:
        """True when ``backend_name`` is registered and can run here; False for unknown names."""
        return bool(_C._backend_is_available(_str_arg(backend_name, "backend_name")))

    def option_names(self, backend_name: str) -> List[str]:
        """The options ``backend_name`` understands. Raises BackendNotAvailable for an unknown backend."""
        return list(_C._backend_option_names(_str_arg(backend_name, "backend_name")))

    def get_option(
        self, backend_name: str, options: Mapping[str, BackendOptionValue]
    ) -> Dict[str, BackendOptionValue]:
        """The backend's current values for the keys of ``options``, whose values give the expected types:
        ``get_option("XnnpackBackend", {"num_threads": 0})`` returns ``{"num_threads": 2}``.

        Raises BackendNotAvailable for an unknown backend, and InvalidInputError for an unknown key or an option
        whose type differs from the one given.
        """
        return dict(_C._backend_get_options(_str_arg(backend_name, "backend_name"), _as_dict(options)))

    def set_option(self, backend_name: str, options: Mapping[str, BackendOptionValue]) -> None:
        """Sets process-wide options of a backend, all or none (methods loaded afterwards use them), e.g.
        ``set_option("XnnpackBackend", {"weight_cache_enabled": True})``.

        Raises BackendNotAvailable for an unknown backend, and InvalidInputError for an unknown key or a bad
        value (then no option changes).
        """
        _C._backend_set_options(_str_arg(backend_name, "backend_name"), _as_dict(options))


class OperatorRegistry:
    """The operators (kernels) compiled into the runtime."""

    @property
    def operator_names(self) -> Set[str]:
        """Names of every registered operator, e.g. ``"aten::add.out"``."""
        return set(_C._operator_names())


_MAX_PATH_BYTES = 4096  # PATH_MAX: longer bytes are a file's contents given for its path


def _short_repr(value: Any, limit: int = 60) -> str:
    """repr(value) cut to about `limit` characters, for messages that echo what the caller passed."""
    if isinstance(value, (str, bytes, bytearray)) and len(value) > limit:
        return repr(value[:limit]) + "..."
    try:
        text = repr(value)
    except Exception:  # e.g. an int with more digits than sys.get_int_max_str_digits()
        return f"<{type(value).__name__}>"
    return text if len(text) <= limit + 10 else text[:limit] + "..."


def _as_path(value: Any, name: str = "path") -> bytes:
    """`value` (str, bytes or os.PathLike) as a path in the file system's encoding, as the extension takes it."""
    try:
        path = os.fspath(value)
    except TypeError:
        raise InvalidTypeError(f"{name} must be a path (str or os.PathLike), got {type(value).__name__}") from None
    if isinstance(path, bytes):
        if len(path) > _MAX_PATH_BYTES or b"\0" in path:
            raise InvalidTypeError(
                f"{name} must be a path (str or os.PathLike), got bytes of {len(path)} bytes that cannot be a path "
                "(the file's contents? pass its path)"
            )
        return path
    if "\0" in path:
        raise InvalidInputError(f"{name} {_short_repr(path)} contains a NUL character")
    return os.fsencode(path)


def _data_paths(data_path: Union[None, PathLike, Sequence[PathLike]]) -> List[bytes]:
    if data_path is None:
        return []
    if isinstance(data_path, (str, bytes)) or hasattr(data_path, "__fspath__"):
        return [_as_path(data_path, "data_path")]
    if isinstance(data_path, (list, tuple)):
        return [_as_path(p, f"data_path[{i}]") for i, p in enumerate(data_path)]
    raise InvalidTypeError(
        f"data_path must be a path (str or os.PathLike) or a list of paths, got {type(data_path).__name__}"
    )


def default_limits() -> Dict[str, int]:
    """The resource limits :meth:`Runtime.load_program` applies unless told otherwise (0: no bound).

    ``max_method_bytes`` (half of physical memory) bounds what one method holds: planned arenas, storage kept for
    unplanned tensors, constants made at load, packed weights and delegate memory. ``max_tensor_bytes`` bounds the
    largest tensor a program declares (and so every resize). ``max_instructions_per_execute`` stops a program
    whose jumps loop. ``max_methods``, ``max_values`` and ``max_instructions`` bound what a program declares.
    """
    return dict(_C._default_limits())


def _limits(limits: Optional[Mapping[str, int]]) -> Optional[Dict[str, int]]:
    if limits is None:
        return None
    if not isinstance(limits, Mapping):
        raise InvalidTypeError(f"limits must map limit names to ints, got {type(limits).__name__}")
    known = _C._default_limits()
    checked: Dict[str, int] = {}
    for name, value in limits.items():
        if name not in known:
            raise InvalidInputError(
                f"limits: there is no limit {_short_repr(name)}; the limits are {', '.join(known)}"
            )
        if not isinstance(value, int) or isinstance(value, bool):
            raise InvalidTypeError(f"limits[{name!r}] must be an int, got {type(value).__name__}")
        if not 0 <= value < 1 << 64:
            raise InvalidInputError(f"limits[{name!r}] must be in [0, 2**64) (0: no bound), got {value}")
        checked[name] = int(value)
    return checked


class Runtime:
    """The runtime: loads programs, and knows the backends and operators it was built with.

    Use :meth:`Runtime.get` for the process-wide instance. One Runtime (and any Program) may be used from any
    number of threads.
    """

    _instance: Optional["Runtime"] = None
    _instance_lock = threading.Lock()

    def __init__(self) -> None:
        self.backend_registry = BackendRegistry()
        self.operator_registry = OperatorRegistry()

    @staticmethod
    def get() -> "Runtime":
        """The Runtime singleton."""
        with Runtime._instance_lock:
            if Runtime._instance is None:
                Runtime._instance = Runtime()
            return Runtime._instance

    def load_program(
        self,
        data: Union[PathLike, bytes, bytearray, memoryview, BinaryIO],
        *,
        verification: Verification = Verification.InternalConsistency,
        enable_etdump: bool = False,
        debug_buffer_size: int = 0,
        data_path: Union[None, PathLike, Sequence[PathLike]] = None,
        backend_options: Optional[Mapping[str, Mapping[str, BackendOptionValue]]] = None,
        limits: Optional[Mapping[str, int]] = None,
    ) -> Program:
        """Loads a program.

        Args:
            data: a path (str or os.PathLike; the file is memory-mapped), the program's bytes (bytes, bytearray,
                memoryview or any C-contiguous buffer: used in place and kept alive by the Program, not copied),
                or a binary file-like object (read from its current position).
            verification: how much of the file to check (default: everything, InternalConsistency).
            enable_etdump: record an ETDump (per-instruction and per-delegate timings of every call) that
                :meth:`Program.write_etdump_result_to_file` writes.
            debug_buffer_size: with enable_etdump, bytes kept for logging the method outputs of each call.
            data_path: a ``.ptd`` file, or a list of them, holding data the program keeps outside the ``.pte``.
            backend_options: per-backend options for this program's delegates,
                e.g. ``{"XnnpackBackend": {"num_threads": 2}}``.
            limits: bounds for files that are not trusted, e.g. ``{"max_method_bytes": 1 << 30}``: any of the
                keys of :func:`default_limits` (which has their defaults; 0 means no bound). A program beyond one
                is refused with ProgramLoadError, an execute beyond ``max_instructions_per_execute`` fails with
                ExecutionError (docs/security.md).

        Raises:
            ProgramLoadError: the data is not a valid program (the message says what it is instead).
            InvalidTypeError: ``data`` is none of the accepted types (also a TypeError).
        """
        if not isinstance(verification, Verification):
            raise InvalidTypeError(f"verification must be a Verification, got {type(verification).__name__}")
        if not isinstance(debug_buffer_size, int) or isinstance(debug_buffer_size, bool):
            raise InvalidTypeError(f"debug_buffer_size must be an int, got {type(debug_buffer_size).__name__}")
        if debug_buffer_size < 0:
            raise InvalidInputError(f"debug_buffer_size must be >= 0, got {debug_buffer_size}")
        paths = _data_paths(data_path)
        if backend_options is not None and not isinstance(backend_options, Mapping):
            raise InvalidTypeError(
                "backend_options must map backend names to dicts of options, got " f"{type(backend_options).__name__}"
            )
        options = None if backend_options is None else {str(k): _as_dict(v) for k, v in backend_options.items()}
        bounds = _limits(limits)
        args = (verification, bool(enable_etdump), int(debug_buffer_size), paths, options, bounds)
        state: Dict[str, Any] = {
            "data_paths": [os.path.abspath(os.fsdecode(p)) for p in paths],
            "verification": verification.name,
            "enable_etdump": bool(enable_etdump),
            "debug_buffer_size": int(debug_buffer_size),
            "backend_options": options,
            "limits": bounds,
        }
        if isinstance(data, str) or hasattr(data, "__fspath__"):
            path = _as_path(data, "data")
            program = _C._load_program_file(path, *args)
            state["path"] = os.path.abspath(os.fsdecode(path))
        elif isinstance(data, (bytes, bytearray, memoryview)):
            program = _C._load_program_buffer(data, *args)
            state["data"] = data
        elif hasattr(data, "read"):
            content = data.read()
            if not isinstance(content, (bytes, bytearray, memoryview)):
                raise InvalidTypeError("the file-like object must be opened in binary mode (read() returned "
                                f"{type(content).__name__})")
            program = _C._load_program_buffer(content, *args)
            state["data"] = content
        else:
            try:
                view = memoryview(data)  # type: ignore[arg-type]  # numpy uint8 arrays, array.array, ...
            except TypeError:
                raise InvalidTypeError(
                    "data must be a path, bytes, bytearray, memoryview or a binary file-like object, got "
                    f"{type(data).__name__}"
                ) from None
            program = _C._load_program_buffer(view, *args)
            state["data"] = view
        program._pickle_state = state
        return program


# --- Pickling ---------------------------------------------------------------------------------------------------
#
# A Program pickles as the way it was loaded: by path (with its .ptd paths and load options) when it was loaded
# from a file, by its bytes otherwise. Unpickling loads it once per process: later unpicklings of the same program
# (same file, unchanged since, or same bytes; same .ptd files and options) return that same Program, so mapping a
# method over many items in worker processes does not reload it per item. A Method pickles as its program and its
# name and unpickles to that program's (cached) method.

_UNPICKLED_PROGRAMS: Dict[Any, Program] = {}
_UNPICKLED_LOCK = threading.Lock()


def _freeze(value: Any) -> Any:
    if isinstance(value, Mapping):
        return tuple(sorted((str(k), _freeze(v)) for k, v in value.items()))
    return value


def _file_identity(path: str) -> Any:
    try:
        st = os.stat(path)
    except OSError:
        return (path, None, None)  # loading reports the missing file
    return (path, st.st_mtime_ns, st.st_size)


def _reduce_program(program: Program) -> Any:
    state = program._pickle_state
    if state is None:
        raise InvalidTypeError("this Program cannot be pickled: it was not loaded by Runtime.load_program")
    payload = {k: v for k, v in state.items() if k != "data"}
    if "data" in state:
        data = state["data"]
        payload["data"] = data if isinstance(data, bytes) else memoryview(data).tobytes()
        if "sha256" not in state:  # computed once per program, on its first pickling
            import hashlib

            state["sha256"] = hashlib.sha256(payload["data"]).hexdigest()
        payload["sha256"] = state["sha256"]
    return (_unpickle_program, (payload,))


def _unpickle_program(payload: Dict[str, Any]) -> Program:
    """Loads a pickled Program, or returns the one this process already loaded for it."""
    data_paths = list(payload.get("data_paths", []))
    options = payload.get("backend_options")
    source = ("path", _file_identity(payload["path"])) if "path" in payload else ("sha256", payload["sha256"])
    key = (
        source,
        tuple(_file_identity(p) for p in data_paths),
        payload["verification"],
        payload["enable_etdump"],
        payload["debug_buffer_size"],
        _freeze(options),
        _freeze(payload.get("limits")),
    )
    with _UNPICKLED_LOCK:  # held while loading: concurrent unpicklings of one program load it once
        program = _UNPICKLED_PROGRAMS.get(key)
        if program is None:
            program = Runtime.get().load_program(
                payload["path"] if "path" in payload else payload["data"],
                verification=Verification.__members__[payload["verification"]],
                enable_etdump=payload["enable_etdump"],
                debug_buffer_size=payload["debug_buffer_size"],
                data_path=data_paths or None,
                backend_options=options,
                limits=payload.get("limits"),
            )
            _UNPICKLED_PROGRAMS[key] = program
        return program


def _reduce_method(method: Method) -> Any:
    return (_unpickle_method, (method._program, method.name))


def _unpickle_method(program: Program, name: str) -> Method:
    return program.load_method(name)


Program.__reduce__ = _reduce_program  # type: ignore[assignment]
Method.__reduce__ = _reduce_method  # type: ignore[assignment]


def parse_etdump(data: Union[PathLike, bytes, bytearray, memoryview]) -> List[Dict[str, Any]]:
    """Decodes an ETDump (a file written by :meth:`Program.write_etdump_result_to_file`, or by the official
    runtime) into a list of run blocks, each a dict with ``name``, ``profile_events``, ``allocation_events`` and
    ``debug_events`` (lists of dicts with the ETDump schema's field names).

    Raises InvalidInputError when the bytes are not a valid ETDump.
    """
    if isinstance(data, str) or hasattr(data, "__fspath__"):
        with open(_as_path(data, "data"), "rb") as f:
            data = f.read()
    elif not isinstance(data, bytes):
        try:
            data = memoryview(data).tobytes()  # bytearray, memoryview, numpy uint8 arrays, ...
        except TypeError:
            raise InvalidTypeError(
                "parse_etdump: data must be a path (str or os.PathLike) or bytes-like (bytes, bytearray, memoryview), "
                f"got {type(data).__name__}"
            ) from None
    return _C._parse_etdump(data)


def runtime_info() -> Dict[str, Any]:
    """What this runtime is and can do, with executorch-numpy-runtime's keys first: ``executorch_version``,
    ``backends`` (registered), ``operators``, ``kernel_libs``, ``supported_dtypes`` and ``bfloat16``; then
    ``version`` (of etnp), ``schema``, ``available_backends``, ``numpy_version``, ``num_threads`` and
    ``packed_weight_cache`` (``entries`` and ``bytes`` of the weights that methods loaded with XnnpackBackend's
    ``weight_cache_enabled`` share, each counted once)."""
    backends = list(_C._registered_backend_names())
    return {
        "executorch_version": __et_version__,
        "backends": backends,
        "operators": sorted(_C._operator_names()),
        "kernel_libs": list(_C._kernel_libraries()),
        "supported_dtypes": list(_C._supported_dtypes()),
        "bfloat16": "ml_dtypes.bfloat16" if BFLOAT16_DTYPE is not None else "uint16-passthrough",
        "version": __version__,
        "schema": _C._schema_identifier(),
        "available_backends": [name for name in backends if _C._backend_is_available(name)],
        "numpy_version": np.__version__,
        "num_threads": int(_C._num_threads()),
        "packed_weight_cache": dict(_C._packed_weight_cache_stats()),
    }
