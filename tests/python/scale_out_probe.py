"""Worker-side helpers of test_scale_out.py, imported by the Ray and Dask worker processes (so kept free of pytest).

`install(directory)` makes the process count what it does: every `Runtime.load_program` and every call of a
`Method` appends a line ("load" or "call") to `<directory>/<pid>.log`. The test reads them back with `counts()`,
which tells how many times each worker process loaded a program and how many items it ran. Files, not return
values, so that the counts of Ray Data's actors survive the actors.
"""

import collections
import os
from typing import Dict, Optional, Sequence

PROBE_VARIABLE = "ETNP_SCALE_PROBE"  # the folder of the logs, in the workers' environment


def _record(directory: str, event: str) -> None:
    with open(os.path.join(directory, f"{os.getpid()}.log"), "a") as log:
        log.write(event + "\n")


def install(directory: Optional[str] = None) -> int:
    """Counts this process's program loads and method calls into `directory` (default $ETNP_SCALE_PROBE).
    Idempotent. Returns the pid."""
    directory = directory or os.environ[PROBE_VARIABLE]
    import executorch_numpy_runtime as et

    if not getattr(et.Runtime.load_program, "_probe", False):
        load_program, call = et.Runtime.load_program, et.Method.__call__

        def counting_load_program(self, *args, **kwargs):
            _record(directory, "load")
            return load_program(self, *args, **kwargs)

        def counting_call(self, *args, **kwargs):
            _record(directory, "call")
            return call(self, *args, **kwargs)

        counting_load_program._probe = True
        et.Runtime.load_program = counting_load_program
        et.Method.__call__ = counting_call
    return os.getpid()


def counts(directory: str) -> Dict[int, collections.Counter]:
    """{pid: Counter({"load": n, "call": m})} of every process that logged into `directory`."""
    result = {}
    for name in os.listdir(directory):
        if name.endswith(".log"):
            with open(os.path.join(directory, name)) as log:
                result[int(name[:-4])] = collections.Counter(log.read().split())
    return result


def call(inputs: Sequence, method) -> list:
    """A task: runs `method` (pickled with the task; unpickled to the worker's cached program) on `inputs`."""
    return method(list(inputs))


class Runner:
    """A Ray actor's state: the method it was built with, unpickled once in the actor's process."""

    def __init__(self, method):
        self.method = method

    def run(self, inputs: Sequence) -> list:
        return self.method(list(inputs))

    def pid(self) -> int:
        return os.getpid()
