"""Program and Method pickle (issue 17): a program loaded from a path pickles by path (with its .ptd paths and
load options), one loaded from bytes by its bytes; unpickling loads a program once per process and returns that
same Program afterwards; a Method pickles as its program and its name. Tested in this process and in two
`multiprocessing` workers (spawn), which run the method on many items and compare with this process."""

import io
import multiprocessing
import os
import pathlib
import pickle
import sys
import time

import numpy as np
import pytest

from conftest import fixture_path
import executorch_numpy_runtime as et
from executorch_numpy_runtime import Runtime, Verification

HERE = pathlib.Path(__file__).resolve().parent


@pytest.fixture(autouse=True)
def fresh_cache():
    et._UNPICKLED_PROGRAMS.clear()
    yield
    et._UNPICKLED_PROGRAMS.clear()


def roundtrip(obj):
    return pickle.loads(pickle.dumps(obj))


def test_program_from_a_path_pickles_by_path(fixtures):
    path = fixture_path(fixtures, "nprt/add.pte")
    program = Runtime.get().load_program(path, verification=Verification.Minimal,
                                         backend_options={"XnnpackBackend": {"num_threads": 1}})
    data = pickle.dumps(program)
    assert len(data) < 1000 and os.fsencode(os.path.abspath(path)) in data  # the path, not the file
    first = pickle.loads(data)
    assert first is not program and first.method_names == program.method_names
    assert pickle.loads(data) is first  # loaded once per process
    assert roundtrip(first) is first
    state = first._pickle_state
    assert state["verification"] == "Minimal" and state["backend_options"] == {"XnnpackBackend": {"num_threads": 1}}
    x = np.arange(3, dtype=np.float32)
    np.testing.assert_array_equal(first.load_method("forward")([x, x])[0], 2 * x)


def test_program_with_ptd_pickles_its_data_paths(fixtures):
    pte = fixture_path(fixtures, "upstream/linear.pte")
    ptd = fixture_path(fixtures, "upstream/linear.ptd")
    program = Runtime.get().load_program(str(pte), data_path=ptd)
    copy = roundtrip(program)
    assert copy._pickle_state["data_paths"] == [os.path.abspath(ptd)]  # absolute, symlinks kept as given
    forward, forward_copy = program.load_method("forward"), copy.load_method("forward")
    x = np.ones(forward.metadata.input_tensor_meta(0).sizes(), np.float32)
    np.testing.assert_array_equal(forward_copy([x])[0], forward([x])[0])


def test_changed_file_is_loaded_again(fixtures, tmp_path):
    path = tmp_path / "add.pte"
    path.write_bytes(fixture_path(fixtures, "nprt/add.pte").read_bytes())
    data = pickle.dumps(Runtime.get().load_program(path))
    first = pickle.loads(data)
    os.utime(path, ns=(1, 1))  # another mtime: the file may have changed
    assert pickle.loads(data) is not first


def test_program_from_bytes_pickles_by_bytes(fixtures):
    raw = fixture_path(fixtures, "nprt/add.pte").read_bytes()
    x = np.arange(3, dtype=np.float32)
    copies = []
    for source in (raw, bytearray(raw), memoryview(raw), np.frombuffer(raw, np.uint8), io.BytesIO(raw)):
        program = Runtime.get().load_program(source)
        data = pickle.dumps(program)
        assert raw in data
        copies.append(pickle.loads(data))
        np.testing.assert_array_equal(copies[-1].load_method("forward")([x, x])[0], 2 * x)
    assert all(c is copies[0] for c in copies)  # same bytes, same options: one program per process


def test_method_pickles_as_program_and_name(fixtures):
    raw = fixture_path(fixtures, "nprt/add.pte").read_bytes()
    method = Runtime.get().load_program(raw).load_method("forward")
    copy = roundtrip(method)
    assert copy.name == "forward" and copy is roundtrip(method)  # the cached program's cached method
    both = pickle.loads(pickle.dumps([method, method]))
    assert both[0] is both[1] is copy
    x = np.arange(3, dtype=np.float32)
    np.testing.assert_array_equal(copy([x, x])[0], method([x, x])[0])


def test_programs_loaded_otherwise_refuse_to_pickle(fixtures):
    program = Runtime.get().load_program(fixture_path(fixtures, "nprt/add.pte"))
    program._pickle_state = None
    with pytest.raises(et.InvalidTypeError, match="this Program cannot be pickled"):
        pickle.dumps(program)


# --- worker processes -----------------------------------------------------------------------------------------


_loads = []  # in a worker: the programs Runtime.load_program loaded there


def _worker_init(python_dir):
    sys.path.insert(0, python_dir)
    import executorch_numpy_runtime as worker_et

    load_program = worker_et.Runtime.load_program

    def counting_load_program(self, *args, **kwargs):
        _loads.append(args[0] if isinstance(args[0], str) else type(args[0]).__name__)
        return load_program(self, *args, **kwargs)

    worker_et.Runtime.load_program = counting_load_program


def _run_item(args):
    """In a worker: run the pickled method on one item; say which program object ran it."""
    method, item = args
    import executorch_numpy_runtime as worker_et

    (out,) = method([item, item])
    time.sleep(0.02)  # give the other worker time to start and take items too
    return os.getpid(), (len(_loads), len(worker_et._UNPICKLED_PROGRAMS)), out


@pytest.mark.parametrize("by", ["path", "bytes"])
def test_map_over_items_in_spawned_workers(fixtures, by):
    path = fixture_path(fixtures, "nprt/add.pte")
    program = Runtime.get().load_program(path if by == "path" else path.read_bytes())
    method = program.load_method("forward")
    items = [np.full(3, i, np.float32) for i in range(24)]
    expected = [method([x, x])[0] for x in items]
    python_dir = str(pathlib.Path(et.__file__).resolve().parents[1])
    context = multiprocessing.get_context("spawn")
    with context.Pool(2, initializer=_worker_init, initargs=(python_dir,)) as pool:
        results = pool.map(_run_item, [(method, x) for x in items], chunksize=3)
    pids = {pid for pid, _, _ in results}
    assert 1 <= len(pids) <= 2 and os.getpid() not in pids
    # Each worker loaded the program once (and cached it), whatever the number of items it ran.
    assert all(counts == (1, 1) for _, counts, _ in results), [counts for _, counts, _ in results]
    for (_, _, got), want in zip(results, expected):
        np.testing.assert_array_equal(got, want)
