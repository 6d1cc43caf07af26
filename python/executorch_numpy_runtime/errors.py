"""Exceptions raised by executorch_numpy_runtime.

Every failure of the runtime is an :class:`ExecuTorchError`; its subclass says what went wrong and its attributes
say where. The attributes that do not apply are ``None``.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing at run time (see __init__.py)
if TYPE_CHECKING:
    from typing import Optional

__all__ = [
    "ExecuTorchError",
    "ProgramLoadError",
    "BackendNotAvailable",
    "OperatorNotFound",
    "ExecutionError",
    "InvalidInputError",
    "MethodNotFoundError",
    "IndexOutOfRangeError",
    "InvalidTypeError",
]


class ExecuTorchError(Exception):
    """Base class of every error the runtime raises.

    Attributes:
        kind: the runtime's error kind, the name of the C++ ``etnp::ErrorKind`` (a key of :data:`ERROR_CLASSES`;
            a :class:`MethodNotFoundError` has kind ``"InvalidArgument"``).
        detail: the message without the context prefix.
        method: name of the method involved.
        instruction: index of the failing instruction.
        operator: operator of the failing instruction (``"aten::add.out"``).
        backend: backend id of the failing delegate (``"XnnpackBackend"``).
        input_index: index of the rejected method input.
    """

    def __init__(
        self,
        message: str,
        *,
        kind: Optional[str] = None,
        detail: Optional[str] = None,
        method: Optional[str] = None,
        instruction: Optional[int] = None,
        operator: Optional[str] = None,
        backend: Optional[str] = None,
        input_index: Optional[int] = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.kind = kind
        self.detail = detail if detail is not None else message
        self.method = method
        self.instruction = instruction
        self.operator = operator
        self.backend = backend
        self.input_index = input_index

    def __str__(self) -> str:
        return self.message


class ProgramLoadError(ExecuTorchError):
    """The file (or its .ptd data) is not a valid ExecuTorch program, or part of it is malformed."""


class BackendNotAvailable(ExecuTorchError):
    """The program delegates to a backend this runtime does not have (see :attr:`backend`)."""


class OperatorNotFound(ExecuTorchError):
    """The program calls an operator this runtime does not have (see :attr:`operator`)."""


class ExecutionError(ExecuTorchError):
    """A kernel or delegate failed while the method ran (see :attr:`instruction`, :attr:`operator`)."""


class InvalidInputError(ExecutionError, ValueError):
    """A bad argument: a method input of the wrong count, dtype, shape or layout (see :attr:`input_index`), a
    rejected :meth:`Method.set_output` binding, a bad backend option, a malformed ETDump given to
    :func:`parse_etdump`, ...

    It is an :class:`ExecutionError`, where executorch-numpy-runtime puts shape and dtype mismatches, and a
    ``ValueError``, which ``executorch.runtime`` documents for rejected bindings.
    """


class MethodNotFoundError(ProgramLoadError, KeyError):
    """The program has no method of that name; the message lists the methods it has. A
    :class:`ProgramLoadError` (as executorch-numpy-runtime raises it) and a ``KeyError``."""

    def __str__(self) -> str:  # KeyError would quote the message
        return self.message


class IndexOutOfRangeError(InvalidInputError, IndexError):
    """An index past the end of a method's inputs, outputs, attributes or planned buffers; also an
    ``IndexError``."""


class InvalidTypeError(InvalidInputError, TypeError):
    """An argument of a type the call does not take (a method name that is not a str, a program that is neither
    a path, bytes nor a file, ...); also a ``TypeError``."""


#: Which class each runtime error kind raises: one per C++ ``etnp::ErrorKind`` (``_C._error_kinds()``) and one for
#: each failure the binding detects itself (``"MethodNotFound"``, ``"IndexOutOfRange"``, ``"InvalidType"``). The classes are defined here, not made by the extension, so that they exist (and document
#: themselves) before it loads; the extension rejects this table at import when a kind has no class.
ERROR_CLASSES = {
    "ProgramLoadError": ProgramLoadError,
    "BackendNotAvailable": BackendNotAvailable,
    "OperatorNotFound": OperatorNotFound,
    "ExecutionError": ExecutionError,
    "InvalidArgument": InvalidInputError,
    "MethodNotFound": MethodNotFoundError,
    "IndexOutOfRange": IndexOutOfRangeError,
    "InvalidType": InvalidTypeError,
}
