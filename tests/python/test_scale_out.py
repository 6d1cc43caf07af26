"""Scale-out on Ray and Dask (issue 17): the examples of docs/python.md's "Scale-out with Ray and Dask" run as
written on local clusters of two worker processes (Ray: ray.init(num_cpus=2); Dask: LocalCluster(n_workers=2,
threads_per_worker=1, processes=True)), plus a real XNNPACK model passed to the workers as a pickled Method.
Each test checks the outputs against this process (and against numpy where the result is known), that the
processes that ran the items are other processes than this one, and that each of them loaded the program once,
whatever the number of items it ran (scale_out_probe.py counts loads and calls per worker process).

Skipped when `ray` (Ray Data: also pyarrow) or `dask.distributed` is not importable. The clusters listen on the
loopback interface only, with no dashboard and no usage statistics; each is started once for the module and
shut down at its end, also after a failure, and the test checks that no process it started is left behind.
"""

import collections
import contextlib
import importlib
import os
import pathlib
import shutil
import signal
import time

import numpy as np
import pytest


def importable(module):
    try:
        importlib.import_module(module)
        return True
    except ImportError:
        return False


HAVE_RAY, HAVE_DASK = importable("ray"), importable("dask.distributed")
if not HAVE_RAY and not HAVE_DASK:
    pytest.skip("neither ray nor dask.distributed is importable (requirements-dev.txt pins both)",
                allow_module_level=True)

import executorch_numpy_runtime as et  # noqa: E402
from executorch_numpy_runtime import Runtime  # noqa: E402

import scale_out_probe as probe  # noqa: E402
from conftest import fixtures_dir  # noqa: E402
from test_docs import DOC, SCALE_OUT, doc_blocks  # noqa: E402

HERE = pathlib.Path(__file__).resolve().parent
PACKAGE_PARENT = str(pathlib.Path(et.__file__).resolve().parents[1])
START_TIMEOUT_S = 180  # starting a cluster on two busy cores
RUN_TIMEOUT_S = 120  # one example, once its cluster is up
ONE_THREAD = {"XnnpackBackend": {"num_threads": 1}}
SMALL_CNN = "exported/smallcnn_dynbatch_xnnpack_fp32"


needs_ray = pytest.mark.skipif(not HAVE_RAY, reason="ray is not importable (requirements-dev.txt pins it)")
needs_ray_data = pytest.mark.skipif(
    not HAVE_RAY or not importable("pyarrow"),
    reason="Ray Data needs ray and pyarrow (pip install 'ray[data]'); one of them is not importable")
needs_dask = pytest.mark.skipif(not HAVE_DASK, reason="dask.distributed is not importable (requirements-dev.txt pins it)")


# --- the doc's examples ----------------------------------------------------------------------------------------


def run_example(marker, namespace):
    """Runs, in `namespace`, the one ```python block of the scale-out section that contains `marker`."""
    found = [(code, line) for code, line, heading in doc_blocks() if heading == SCALE_OUT and marker in code]
    assert len(found) == 1, f"{len(found)} examples of {SCALE_OUT!r} in {DOC} contain {marker!r}"
    code, line = found[0]
    namespace.setdefault("__name__", f"docs_example_line{line}")
    exec(compile(code, f"{DOC}:{line}", "exec"), namespace)
    return namespace


@contextlib.contextmanager
def deadline(seconds, what):
    def expired(signum, frame):
        raise TimeoutError(f"{what} took more than {seconds} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@pytest.fixture
def model_dir(programs, tmp_path, monkeypatch):
    """The examples' folder: model.pte, forward(x, y) = x + y on float32[2, 2] (programs.py's add)."""
    shutil.copy(programs["add"], tmp_path / "model.pte")
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture(scope="module")
def add_forward(programs):
    """The examples' program, run in this process for reference."""
    return Runtime.get().load_program(programs["add"], backend_options=ONE_THREAD).load_method("forward")


# --- clusters --------------------------------------------------------------------------------------------------


def child_pids():
    """This process's descendants, but multiprocessing's resource tracker: one per process that uses
    multiprocessing (Dask's LocalCluster starts it), which lives as long as this process."""
    psutil = pytest.importorskip("psutil")
    pids = set()
    for child in psutil.Process().children(recursive=True):
        try:
            if "multiprocessing.resource_tracker" not in " ".join(child.cmdline()):
                pids.add(child.pid)
        except psutil.NoSuchProcess:
            pass
    return pids


def check_no_process_left(before, what, timeout_s=30.0):
    end = time.monotonic() + timeout_s
    while True:
        left = child_pids() - before
        if not left or time.monotonic() > end:
            break
        time.sleep(0.2)
    assert not left, f"processes of {what} still running after its shutdown: {sorted(left)}"


class Cluster:
    """A running cluster: the namespace its examples run in, and where its workers log their loads and calls."""

    def __init__(self, namespace, probe_dir):
        self.namespace = namespace
        self.probe_dir = str(probe_dir)

    def run_example(self, marker):
        with deadline(RUN_TIMEOUT_S, f"the example with {marker!r}"):
            return run_example(marker, dict(self.namespace))

    @contextlib.contextmanager
    def activity(self):
        """Yields a dict that is filled on exit with {pid: Counter(load=..., call=...)}: what each worker process
        did in the block."""
        before = probe.counts(self.probe_dir)
        done = {}
        yield done
        for pid, counter in probe.counts(self.probe_dir).items():
            delta = counter - before.get(pid, collections.Counter())
            if delta:
                done[pid] = delta


def check_activity(activity, calls, processes, worker_pids=None):
    """`calls` items ran in `processes` worker processes (other processes than this one, among `worker_pids`),
    each of which loaded the program once."""
    assert os.getpid() not in activity
    assert sum(counter["call"] for counter in activity.values()) == calls, activity
    assert all(counter["load"] == 1 for counter in activity.values()), activity
    assert len(activity) in processes, activity
    if worker_pids is not None:
        assert set(activity) <= set(worker_pids), (activity, worker_pids)


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory):
    """The doc's ray.init(num_cpus=2, ...), with the workers' environment added: where the package and the probe
    are, the probe installed in every worker, the loopback address."""
    import ray

    probe_dir = tmp_path_factory.mktemp("ray-probe")
    before = child_pids()
    start = ray.init
    python_path = [PACKAGE_PARENT, str(HERE)] + [p for p in [os.environ.get("PYTHONPATH")] if p]

    def init(*args, **kwargs):
        kwargs.setdefault("_node_ip_address", "127.0.0.1")
        kwargs.setdefault("object_store_memory", 128 << 20)
        kwargs["runtime_env"] = {
            "env_vars": {"PYTHONPATH": os.pathsep.join(python_path), probe.PROBE_VARIABLE: str(probe_dir),
                         "RAY_USAGE_STATS_ENABLED": "0"},
            "worker_process_setup_hook": probe.install,
        }
        return start(*args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RAY_USAGE_STATS_ENABLED", "0")
        patch.setattr(ray, "init", init)
        namespace = {}
        try:
            with deadline(START_TIMEOUT_S, "starting Ray"):
                run_example("ray.init(", namespace)
            yield Cluster(namespace, probe_dir)
        finally:
            try:
                run_example("ray.shutdown()", dict(namespace))
            finally:
                ray.shutdown()
    check_no_process_left(before, "the Ray cluster")


@pytest.fixture(scope="module")
def dask_cluster(tmp_path_factory):
    """The doc's LocalCluster(n_workers=2, threads_per_worker=1, processes=True) and its Client, with the probe
    installed in both workers."""
    probe_dir = tmp_path_factory.mktemp("dask-probe")
    before = child_pids()
    namespace = {}
    try:
        with deadline(START_TIMEOUT_S, "starting the Dask cluster"):
            run_example("LocalCluster(", namespace)
            namespace["client"].wait_for_workers(2, timeout=START_TIMEOUT_S)
            namespace["client"].run(probe.install, str(probe_dir))
        yield Cluster(namespace, probe_dir)
    finally:
        if "client" in namespace:
            run_example("cluster.close()", dict(namespace))
        elif "cluster" in namespace:
            namespace["cluster"].close()
    check_no_process_left(before, "the Dask cluster")


def small_cnn(fixtures_root):
    """The fixture's program path, 12 inputs (its stored one first) and its golden output with tolerances."""
    if fixtures_root is None:
        pytest.skip("shared fixtures not found (expected ../shared/fixtures or $ETNP_FIXTURES)")
    path = fixtures_root / f"{SMALL_CNN}.pte"
    golden = fixtures_root / f"{SMALL_CNN}.golden" / "forward__b1"
    if not path.is_file() or not golden.is_dir():
        pytest.skip(f"fixture {SMALL_CNN} not found in {fixtures_root}")
    rng = np.random.default_rng(17)
    inputs = [np.load(golden / "input_0.npy")] + [rng.standard_normal((1, 3, 32, 32), np.float32) for _ in range(11)]
    return path, inputs, np.load(golden / "output_0.npy")


def check_small_cnn(outputs, reference, inputs, golden):
    assert len(outputs) == len(inputs)
    for got, x in zip(outputs, inputs):
        np.testing.assert_array_equal(got[0], reference([x])[0])  # same program, options and thread count
    np.testing.assert_allclose(outputs[0][0], golden, rtol=1e-4, atol=1e-5)  # the official runtime's output


# --- Ray -------------------------------------------------------------------------------------------------------


@needs_ray_data
def test_ray_data_map_batches_example(ray_cluster, model_dir, add_forward):
    with ray_cluster.activity() as activity:
        results = ray_cluster.run_example("map_batches")["results"]
    assert [row["id"] for row in results] == list(range(64))
    for row in results:
        x, y = np.full((2, 2), row["id"], np.float32), np.ones((2, 2), np.float32)
        np.testing.assert_array_equal(row["sum"], add_forward([x, y])[0])
        np.testing.assert_array_equal(row["sum"], x + y)
    # Two actors, each built once; on a job this small the first actor up may run every batch before the
    # second one is (Ray Data does not wait for the whole pool).
    check_activity(activity, calls=64, processes={1, 2})


@needs_ray
def test_ray_actor_pool_example(ray_cluster, model_dir, add_forward):
    with ray_cluster.activity() as activity:
        namespace = ray_cluster.run_example("ActorPool(")
    for out, x in zip(namespace["outputs"], namespace["items"]):
        np.testing.assert_array_equal(out, add_forward([x, x])[0])
        np.testing.assert_array_equal(out, x + x)
    check_activity(activity, calls=32, processes={2})


@needs_ray
def test_ray_actors_built_with_a_pickled_method(ray_cluster):
    import ray
    from ray.util import ActorPool

    path, inputs, golden = small_cnn(fixtures_dir())
    forward = Runtime.get().load_program(path, backend_options=ONE_THREAD).load_method("forward")
    runner = ray.remote(num_cpus=1)(probe.Runner)
    with ray_cluster.activity() as activity, deadline(RUN_TIMEOUT_S, "the actors"):
        actors = [runner.remote(forward) for _ in range(2)]
        pids = ray.get([actor.pid.remote() for actor in actors])
        outputs = list(ActorPool(actors).map(lambda actor, x: actor.run.remote([x]), inputs))
        for actor in actors:
            ray.kill(actor)
    check_small_cnn(outputs, forward, inputs, golden)
    check_activity(activity, calls=len(inputs), processes={2}, worker_pids=pids)  # both built
    assert len(set(pids)) == 2 and os.getpid() not in pids


# --- Dask ------------------------------------------------------------------------------------------------------


@needs_dask
def test_dask_map_and_bag_example(dask_cluster, model_dir, add_forward):
    worker_pids = dask_cluster.namespace["client"].run(os.getpid).values()
    assert len(set(worker_pids)) == 2 and os.getpid() not in worker_pids
    with dask_cluster.activity() as activity:
        namespace = dask_cluster.run_example("client.map(")
    for outputs in (namespace["outputs"], namespace["bag_outputs"]):
        for out, x in zip(outputs, namespace["items"]):
            np.testing.assert_array_equal(out, add_forward([x, x])[0])
            np.testing.assert_array_equal(out, x + x)
    check_activity(activity, calls=64, processes={1, 2}, worker_pids=worker_pids)


@needs_dask
def test_dask_tasks_with_a_method_loaded_from_bytes(dask_cluster):
    path, inputs, golden = small_cnn(fixtures_dir())
    forward = Runtime.get().load_program(path.read_bytes(), backend_options=ONE_THREAD).load_method("forward")
    client = dask_cluster.namespace["client"]
    with dask_cluster.activity() as activity, deadline(RUN_TIMEOUT_S, "the tasks"):
        outputs = client.gather(client.map(probe.call, [[x] for x in inputs], method=forward))
    check_small_cnn(outputs, forward, inputs, golden)
    check_activity(activity, calls=len(inputs), processes={1, 2}, worker_pids=client.run(os.getpid).values())
