"""d2l_ext.memory and memory_diag on tensors the page's networks do not make: FSDP2's DTensors,
jagged nested tensors, compressed sparse layouts, odd views and mixed devices; and CPU
trackers in two threads (issue 30, round 2)."""

from __future__ import annotations

import json
import textwrap
import warnings

import pytest

torch = pytest.importorskip("torch")

from d2l_ext import memory, memory_diag  # noqa: E402

K = 4  # processes of the fake group


@pytest.fixture(params=[0, K - 1], ids=["rank0", "last_rank"])
def fake_group(request):
    """A fake process group of K processes (no communication), as rank 0 or the last rank;
    destroyed after the test."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        pytest.skip("a process group exists already")
    dist.init_process_group("fake", rank=request.param, world_size=K, store=FakeStore())
    try:
        from torch.distributed.device_mesh import init_device_mesh

        yield request.param, init_device_mesh("cpu", (K,))
    finally:
        dist.destroy_process_group()


# ------------------------------------------------------------------ DTensor and FSDP2
def test_a_dtensor_counts_the_shard_this_process_holds(fake_group):
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    rank, mesh = fake_group
    w = torch.randn(8, 6)
    sharded = distribute_tensor(w, mesh, [Shard(0)])
    assert memory.tensor_bytes([sharded]) == w.nbytes // K == 2 * 6 * 4
    # the DTensor and its local tensor are one storage
    assert memory.tensor_bytes([sharded, sharded.to_local()]) == 2 * 6 * 4
    assert memory.tensor_bytes([distribute_tensor(w, mesh, [Replicate()])]) == w.nbytes
    # 7 rows in 4 chunks: 2, 2, 2 and 1; the last rank's 1 row is a view of the 2-row
    # buffer that the scatter padded it to, and the count is that buffer's, as for any view
    odd = distribute_tensor(torch.randn(7, 6), mesh, [Shard(0)])
    assert odd.to_local().nbytes == (2 if rank == 0 else 1) * 6 * 4
    assert memory.tensor_bytes([odd]) == 2 * 6 * 4


def _mlp(width_in: int, hidden: int, width_out: int) -> torch.nn.Sequential:
    return torch.nn.Sequential(torch.nn.Linear(width_in, hidden), torch.nn.ReLU(),
                               torch.nn.Linear(hidden, width_out))


def test_a_fully_sharded_model_holds_a_quarter_of_its_parameters_and_so_do_its_gradients(
        fake_group):
    from torch.distributed.fsdp import fully_shard

    _, mesh = fake_group
    net = _mlp(8, 16, 4)  # every first dimension divisible by 4
    unsharded = memory.parameter_bytes(net)
    fully_shard(net, mesh=mesh)
    assert memory.parameter_bytes(net) == unsharded // K
    net(torch.randn(5, 8)).sum().backward()
    # the gradient shards are views of one reduce-scatter output: each storage once
    assert memory.gradient_bytes(net) == unsharded // K
    optimizer = torch.optim.Adam(net.parameters())
    optimizer.step()
    # two moments of each shard, and four step counters (float32 scalars on the host)
    assert memory.optimizer_state_bytes(optimizer) == 2 * unsharded // K + 4 * 4


def test_fsdp2_pads_every_shard_to_the_first_ones_rows(fake_group):
    """Linear(10, 7): 7 rows in 4 shards of ceil(7 / 4) = 2 rows. FSDP2 allocates each
    rank's shard at 2 rows (the last rank holds 1 row and a row of padding), so every rank
    counts 2 x 10 + 2 numbers, 88 B, against 77 B for a quarter of the model. Adam's moments
    are made like the local shard, without the padding."""
    from torch.distributed.fsdp import fully_shard

    rank, mesh = fake_group
    net = torch.nn.Linear(10, 7)
    assert memory.parameter_bytes(net) // K == 77
    fully_shard(net, mesh=mesh)
    assert memory.parameter_bytes(net) == (2 * 10 + 2) * 4
    rows = 2 if rank == 0 else 1
    assert net.weight.to_local().shape == (rows, 10)
    net(torch.randn(3, 10)).sum().backward()
    optimizer = torch.optim.Adam(net.parameters())
    optimizer.step()
    assert memory.optimizer_state_bytes(optimizer) == 2 * (rows * 10 + rows) * 4 + 2 * 4


@pytest.mark.parametrize("per_layer", [False, True])
def test_saved_tensors_leave_out_the_weights_fsdp2_gathers(fake_group, per_layer):
    """Under fully_shard the forward pass runs on unsharded parameters gathered from the
    shards; SavedTensors(exclude=[net]) leaves them out as it does without sharding."""
    from torch.distributed.fsdp import fully_shard

    _, mesh = fake_group
    X = torch.randn(5, 8)
    plain = _mlp(8, 16, 4)
    with memory.SavedTensors(exclude=[plain, X]) as expected:
        plain(X).sum()
    net = _mlp(8, 16, 4)
    if per_layer:
        for layer in (net[0], net[2]):
            fully_shard(layer, mesh=mesh)
    fully_shard(net, mesh=mesh)
    with memory.SavedTensors(exclude=[net, X]) as saved:
        loss = net(X).sum()
    assert saved.nbytes == expected.nbytes == 5 * 16 * 4  # the ReLU's output only
    loss.backward()
    with memory_diag.SavedCensus(net.parameters()) as census:
        net(X).sum()
    # X, the ReLU's output twice, the second layer's gathered (unsharded) weight
    assert census.nbytes == (5 * 8 + 2 * 5 * 16 + 4 * 16) * 4


# ------------------------------------------------------------------ nested and sparse
def test_a_jagged_nested_tensor_counts_its_values_and_offsets():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # nested tensors are a prototype
        nested = torch.nested.nested_tensor([torch.randn(3, 4), torch.randn(5, 4)],
                                            layout=torch.jagged, requires_grad=True)
    values_and_offsets = 8 * 4 * 4 + 3 * 8
    assert memory.tensor_bytes([nested]) == values_and_offsets
    assert memory.tensor_bytes([nested, nested.values()]) == values_and_offsets
    with memory.SavedTensors() as saved:
        nested.sin()  # saves its input
    assert saved.nbytes == values_and_offsets
    with memory_diag.SavedCensus([nested]) as census:
        nested.sin()
    assert census.entries == [(values_and_offsets, True)]


def _review_csr() -> torch.Tensor:
    """The review's CSR matrix: converted from a dense 50 x 40 matrix with 970 nonzeros."""
    torch.manual_seed(0)
    torch.randn(50, 40).relu().to_sparse()  # the review's probe drew this matrix first
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # CSR support is in beta
        return torch.randn(50, 40).relu().to_sparse_csr()


def test_a_csr_tensor_counts_the_whole_index_storage_its_column_indices_view():
    """to_sparse_csr() of a dense matrix leaves the column indices a view of a 2 x nnz
    index storage: tensor_bytes counts all of it (19,808 B), not the parts' nbytes (12,048)."""
    csr = _review_csr()
    nnz = csr.values().numel()
    parts = (csr.crow_indices(), csr.col_indices(), csr.values())
    assert csr.col_indices().untyped_storage().nbytes() == 2 * nnz * 8
    assert memory.tensor_bytes([csr]) == 51 * 8 + 2 * nnz * 8 + nnz * 4
    assert sum(p.nbytes for p in parts) == 51 * 8 + nnz * 8 + nnz * 4
    if nnz == 970:  # the review's draw (the generator's stream as PyTorch 2.13 has it)
        assert memory.tensor_bytes([csr]) == 19_808
        assert sum(p.nbytes for p in parts) == 12_048


@pytest.mark.parametrize("layout", ["csr", "csc", "bsr", "bsc", "coo"])
def test_the_census_counts_a_sparse_save_as_a_copy_allocates_it(layout):
    """Sparse saves are counted, not refused: a copy allocates the indices and values (nnz
    of each), and the matrix is recognised as the parameter it was given as."""
    torch.manual_seed(0)
    dense = torch.randn(50, 40).relu()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        matrix = {"csr": dense.to_sparse_csr, "csc": dense.to_sparse_csc,
                  "bsr": lambda: dense.to_sparse_bsr((2, 2)),
                  "bsc": lambda: dense.to_sparse_bsc((2, 2)), "coo": dense.to_sparse}[layout]()
    parts = memory._dense_parts(matrix)
    assert len(parts) == (2 if layout == "coo" else 3)
    copied = sum(p.numel() * p.element_size() for p in parts)
    assert memory_diag._copy_nbytes(matrix) == copied
    census = memory_diag.SavedCensus([matrix])
    assert census._parameter_storages == {k for k, _ in memory._storages(matrix)}
    if layout in ("csr", "coo"):  # these two multiply with autograd on a CPU
        w = torch.randn(40, 3, requires_grad=True)
        with census:
            torch.mm(matrix, w)  # saves the matrix, for w's gradient
        assert census.entries == [(copied, True)]
        nnz = dense.count_nonzero().item()
        row_pointers = 51 * 8 if layout == "csr" else nnz * 8
        assert copied == row_pointers + nnz * 8 + nnz * 4


# ------------------------------------------------------------------ odd inputs
def test_odd_views_zero_sizes_and_mixed_devices():
    x = torch.zeros(10)
    assert memory.tensor_bytes([x[:0]]) == 40  # an empty view still holds its storage
    assert memory.tensor_bytes([torch.empty(0), torch.empty(0, 3)]) == 0
    assert memory.tensor_bytes([torch.zeros(1).expand(1000)]) == 4  # stride 0: one number
    assert memory.tensor_bytes([x, x.view(torch.uint8), x.view(2, 5).t()]) == 40
    c = torch.zeros(4, dtype=torch.complex64)
    assert memory.tensor_bytes([c, torch.view_as_real(c)]) == 32
    meta = torch.empty(10, device="meta")
    # a meta storage and a CPU storage never share a key, also when both have no address
    assert memory.tensor_bytes([meta, x, meta[2:], torch.empty(0, device="meta")]) == 80
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        strided_nested = torch.nested.nested_tensor([torch.zeros(3), torch.zeros(5)])
    assert memory.tensor_bytes([strided_nested]) == 8 * 4  # one buffer of both
    w = torch.zeros(3, 4, device="meta", requires_grad=True)
    with memory_diag.SavedCensus([w]) as census:
        (torch.ones(2, 3, device="meta", requires_grad=True) @ w).sum()
    # the input and the weight; the meta weight is recognised through its storage
    assert sorted(census.entries) == [(2 * 3 * 4, False), (3 * 4 * 4, True)]


# ------------------------------------------------------------------ two threads
TWO_THREADS = textwrap.dedent("""
    import json, os, threading
    os.environ["KINETO_LOG_LEVEL"] = "6"
    import torch
    from d2l_ext import memory

    results = {}
    holding, tried = threading.Event(), threading.Event()

    def attempt(name, **kwargs):
        try:
            with memory.Tracker("cpu", **kwargs) as tracker:
                y = torch.empty(3_000_000, dtype=torch.uint8)
                tracker.mark("y")
                del y
            results[name] = tracker.readings[0].allocated
        except RuntimeError as error:
            results[name] = str(error)

    def hold(make):
        with make() as tracker:
            x = torch.empty(1_000_000, dtype=torch.uint8)
            if isinstance(tracker, memory.Tracker):
                tracker.mark("x")
            holding.set()
            tried.wait(60)
        if isinstance(tracker, memory.Tracker):
            results["holder"] = tracker.readings[0].allocated

    def other_thread():
        holding.wait(60)
        attempt("during")
        attempt("malloc", source="malloc")
        tried.set()

    def run(make):
        holding.clear(); tried.clear()
        threads = [threading.Thread(target=hold, args=(make,)),
                   threading.Thread(target=other_thread)]
        for t in threads: t.start()
        for t in threads: t.join()

    run(lambda: memory.Tracker("cpu"))
    attempt("after")
    by_tracker = dict(results)
    results.clear()
    run(lambda: torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]))
    attempt("after")
    by_profiler = dict(results)

    def fails():
        try:
            with memory.Tracker("cpu"):
                raise KeyError("inside")
        except KeyError:
            pass
    t = threading.Thread(target=fails); t.start(); t.join()
    attempt("after an error in another thread")
    print(json.dumps({"tracker": by_tracker, "profiler": by_profiler, "error": results,
                      "flag": memory.Tracker._profiler_thread}))
""")


def test_a_cpu_tracker_in_a_second_thread_is_refused_not_a_crash(run_python):
    """Kineto runs one profiler session per process: a second CPU tracker, or one started
    while another thread's torch.profiler records, crashed the process (SIGSEGV). Now it
    is refused, the first goes on, a malloc tracker (no profiler) runs, and trackers run
    again once the first has ended."""
    done = run_python(TWO_THREADS)
    assert done.returncode == 0, f"rc {done.returncode}: {done.stderr[-2000:]}"
    out = json.loads(done.stdout.strip().splitlines()[-1])
    tracker, profiler = out["tracker"], out["profiler"]
    assert "a CPU Tracker runs in another thread" in tracker["during"]
    assert "a torch.profiler session runs in another thread" in profiler["during"]
    assert tracker["holder"] == 1_000_000  # the first tracker's reading is whole
    for run in (tracker, profiler):
        assert run["malloc"] >= 3_000_000  # the C library's books: every thread's bytes
        assert run["after"] == 3_000_000
    assert out["error"]["after an error in another thread"] == 3_000_000
    assert out["flag"] is None
