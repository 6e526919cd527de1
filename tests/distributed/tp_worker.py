"""One rank of the tensor-parallel test (tests/distributed/test_tensor_parallel.py starts two of these on
the gloo backend): sharded layers == the unsharded layer, outputs and gradients.

Usage: python tp_worker.py RANK WORLD_SIZE PORT. Exits 0 when every check passed; a failed check
raises (traceback on stderr, non-zero exit).
"""

from __future__ import annotations

import datetime
import sys

import torch
import torch.distributed as dist

from mamba_ssm.distributed.distributed_utils import (
    all_gather,
    all_reduce,
    allreduce_sequence_parallel_grad,
    reduce_scatter,
    sync_shared_params,
)
from mamba_ssm.distributed.tensor_parallel import (
    ColumnParallelLinear,
    ParallelEmbeddings,
    ParallelLinearFunc,
    RowParallelLinear,
    VocabParallelEmbedding,
    parallel_linear_func,
)
from mamba_ssm.modules.mamba2 import Mamba2

D_MODEL, D_STATE, HEADDIM, NGROUPS = 32, 8, 8, 2
TOL = dict(rtol=1e-9, atol=1e-10)  # float64 on both sides: sharding only changes summation order


def close(actual, expected, what):
    torch.testing.assert_close(actual, expected, **TOL, msg=lambda m: f"{what}: {m}")


def shard_mamba2(full: Mamba2, rank: int, world: int) -> dict:
    """This rank's state_dict of a Mamba2 split over ``world`` ranks, from the unsharded one's: rank r
    owns heads [r*H/world, (r+1)*H/world) and B/C groups [r*G/world, ...) (the layout of in_proj's
    rows [z, x, B, C, dt] and conv1d's channels [x, B, C] per rank, RowParallel out_proj columns)."""
    d_ssm, n, g, h = full.d_ssm, full.d_state, full.ngroups, full.nheads
    ds, gs, hs = d_ssm // world, g // world, h // world

    def blocks(t, sizes_and_shards):
        parts, start = [], 0
        for size, shard in sizes_and_shards:
            parts.append(t[start + rank * shard : start + (rank + 1) * shard])
            start += size
        return torch.cat(parts)

    sd = full.state_dict()
    layout_in = [(d_ssm, ds), (d_ssm, ds), (g * n, gs * n), (g * n, gs * n), (h, hs)]
    layout_conv = [(d_ssm, ds), (g * n, gs * n), (g * n, gs * n)]
    out = {
        "in_proj.weight": blocks(sd["in_proj.weight"], layout_in),
        "conv1d.weight": blocks(sd["conv1d.weight"], layout_conv),
        "conv1d.bias": blocks(sd["conv1d.bias"], layout_conv),
        "dt_bias": sd["dt_bias"][rank * hs : (rank + 1) * hs],
        "A_log": sd["A_log"][rank * hs : (rank + 1) * hs],
        "D": sd["D"][rank * hs : (rank + 1) * hs],
        "norm.weight": sd["norm.weight"][rank * ds : (rank + 1) * ds],
        "out_proj.weight": sd["out_proj.weight"][:, rank * ds : (rank + 1) * ds],
    }
    if "in_proj.bias" in sd:
        out["in_proj.bias"] = blocks(sd["in_proj.bias"], layout_in)
        if rank == 0:
            out["out_proj.bias"] = sd["out_proj.bias"]
    return out


def check_mamba2(pg, rank, world, use_mem_eff_path, sequence_parallel):
    what = f"Mamba2(mem_eff={use_mem_eff_path}, sequence_parallel={sequence_parallel})"
    kw = dict(
        d_state=D_STATE,
        headdim=HEADDIM,
        ngroups=NGROUPS,
        chunk_size=8,
        bias=True,
        use_mem_eff_path=use_mem_eff_path,
        dtype=torch.float64,
    )
    torch.manual_seed(0)
    full = Mamba2(D_MODEL, **kw)
    with torch.no_grad():
        full.D.uniform_(-1, 1)
        full.norm.weight.uniform_(0.5, 1.5)
    sharded = Mamba2(D_MODEL, process_group=pg, sequence_parallel=sequence_parallel, **kw)
    assert sharded.nheads == full.nheads // world and sharded.ngroups == full.ngroups // world, what
    sharded.load_state_dict(shard_mamba2(full, rank, world), strict=True)

    batch, seqlen = 2, 13
    gen = torch.Generator().manual_seed(3)
    u = torch.randn(batch, seqlen, D_MODEL, dtype=torch.float64, generator=gen)
    g = torch.randn(batch, seqlen, D_MODEL, dtype=torch.float64, generator=gen)
    u_full = u.clone().requires_grad_(True)
    out_full = full(u_full)
    (out_full * g).sum().backward()
    full_grads = shard_mamba2_grads(full, rank, world)

    if sequence_parallel:  # this rank's rows of the flattened (batch * seqlen, d_model) input
        rows = batch * seqlen // world
        u_local = (
            u.reshape(batch * seqlen, D_MODEL)[rank * rows : (rank + 1) * rows].clone().requires_grad_(True)
        )
        out = sharded(u_local, seqlen=seqlen)
        g_local = g.reshape(batch * seqlen, D_MODEL)[rank * rows : (rank + 1) * rows]
        close(
            out,
            out_full.detach().reshape(batch * seqlen, D_MODEL)[rank * rows : (rank + 1) * rows],
            what + " output",
        )
        (out * g_local).sum().backward()
        close(
            u_local.grad,
            u_full.grad.reshape(batch * seqlen, D_MODEL)[rank * rows : (rank + 1) * rows],
            what + " input grad",
        )
    else:
        u_local = u.clone().requires_grad_(True)
        out = sharded(u_local)
        close(out, out_full.detach(), what + " output")
        (out * g).sum().backward()
        close(u_local.grad, u_full.grad, what + " input grad")
    for name, p in sharded.named_parameters():
        close(p.grad, full_grads[name], f"{what} grad of {name}")


def shard_mamba2_grads(full, rank, world):
    """The unsharded layer's gradients, sliced like its parameters."""
    saved = {k: v.detach().clone() for k, v in full.state_dict().items()}
    with torch.no_grad():
        for name, p in full.named_parameters():
            p.copy_(p.grad)
    grads = {k: v.clone() for k, v in shard_mamba2(full, rank, world).items()}  # copies, not views
    full.load_state_dict(saved)
    return grads


def check_linears_and_embeddings(pg, rank, world):
    torch.manual_seed(1)
    x = torch.randn(6, 10, dtype=torch.float64)
    w1, b1 = torch.randn(12, 10, dtype=torch.float64), torch.randn(12, dtype=torch.float64)
    w2, b2 = torch.randn(5, 12, dtype=torch.float64), torch.randn(5, dtype=torch.float64)
    col = ColumnParallelLinear(10, 12, pg, sequence_parallel=False, dtype=torch.float64)
    row = RowParallelLinear(12, 5, pg, sequence_parallel=False, dtype=torch.float64)
    c = 12 // world
    with torch.no_grad():
        col.weight.copy_(w1[rank * c : (rank + 1) * c])
        col.bias.copy_(b1[rank * c : (rank + 1) * c])
        row.weight.copy_(w2[:, rank * c : (rank + 1) * c])
        if rank == 0:
            row.bias.copy_(b2)
    assert (row.bias is None) == (rank != 0)
    close(
        row(col(x)), torch.nn.functional.linear(torch.nn.functional.linear(x, w1, b1), w2, b2), "column->row"
    )
    # parallel_linear_func (upstream's ParallelLinearFunc): this rank's token rows gathered, its weight
    # block applied; the gradient of x is reduce-scattered back to the rank's rows.
    assert issubclass(ParallelLinearFunc, torch.autograd.Function)
    rows = x[rank * 3 : (rank + 1) * 3].clone().requires_grad_(True)
    wl = w1[rank * c : (rank + 1) * c].clone().requires_grad_(True)
    y = parallel_linear_func(rows, wl, b1[rank * c : (rank + 1) * c], pg, sequence_parallel=True)
    close(y, torch.nn.functional.linear(x, w1, b1)[:, rank * c : (rank + 1) * c], "parallel_linear_func")
    gy = torch.arange(y.numel(), dtype=torch.float64).view(y.shape) / 10
    (y * gy).sum().backward()
    full_gy = torch.cat([torch.arange(6 * c, dtype=torch.float64).view(6, c) / 10] * world, dim=1)
    close(rows.grad, (full_gy @ w1)[rank * 3 : (rank + 1) * 3], "parallel_linear_func dx")
    close(wl.grad, gy.t() @ x, "parallel_linear_func dweight")
    # The autograd collectives: all_gather / reduce_scatter / all_reduce and their gradients.
    t = torch.full((2, 3), float(rank + 1), dtype=torch.float64, requires_grad=True)
    gathered = all_gather(t, pg)
    close(
        gathered.detach(),
        torch.cat([torch.full((2, 3), float(r + 1), dtype=torch.float64) for r in range(world)]),
        "all_gather",
    )
    gathered.sum().backward()
    close(
        t.grad, torch.full((2, 3), float(world), dtype=torch.float64), "all_gather backward (reduce-scatter)"
    )
    s = torch.arange(4 * world, dtype=torch.float64).reshape(2 * world, 2) * (rank + 1)
    scattered = reduce_scatter(s, pg)
    total = sum(r + 1 for r in range(world))
    close(
        scattered,
        (torch.arange(4 * world, dtype=torch.float64).reshape(2 * world, 2) * total)[2 * rank : 2 * rank + 2],
        "reduce_scatter",
    )
    close(
        all_reduce(torch.ones(3, dtype=torch.float64) * rank, pg),
        torch.ones(3, dtype=torch.float64) * sum(range(world)),
        "all_reduce",
    )
    # Embeddings: vocabulary-parallel word embeddings + column-parallel positions == the full lookup.
    vocab, dim, maxpos = 16, 8, 20
    gen = torch.Generator().manual_seed(2)  # the same on every rank (layer inits draw rank-dependent amounts)
    words = torch.randn(vocab, dim, dtype=torch.float64, generator=gen)
    pos = torch.randn(maxpos, dim, dtype=torch.float64, generator=gen)
    emb = ParallelEmbeddings(dim, vocab, maxpos, pg, sequence_parallel=False, dtype=torch.float64)
    v, d = vocab // world, dim // world
    with torch.no_grad():
        emb.word_embeddings.weight.copy_(words[rank * v : (rank + 1) * v])
        emb.position_embeddings.weight.copy_(pos[:, rank * d : (rank + 1) * d])
    ids = torch.tensor([[0, 15, 7, 8, 3], [9, 9, 1, 14, 6]])
    close(emb(ids), words[ids] + pos[torch.arange(5)], "ParallelEmbeddings")
    sp = ParallelEmbeddings(dim, vocab, 0, pg, sequence_parallel=True, dtype=torch.float64)
    with torch.no_grad():
        sp.word_embeddings.weight.copy_(words[rank * v : (rank + 1) * v])
    close(
        sp(ids, combine_batch_seqlen_dim=True),
        words[ids].reshape(10, dim)[rank * 5 : (rank + 1) * 5],
        "ParallelEmbeddings (sequence parallel)",
    )
    try:
        VocabParallelEmbedding(15, 4, process_group=pg)
    except ValueError as e:
        assert "multiple of the world size" in str(e)
    else:
        raise AssertionError("VocabParallelEmbedding(15) over 2 ranks must raise")


def check_shared_and_sequence_parallel_params(pg, rank, world):
    net = torch.nn.Linear(3, 2, dtype=torch.float64)
    with torch.no_grad():
        net.weight.fill_(rank + 1.0)
        net.bias.fill_(rank + 1.0)
    net.weight._shared_params = True  # replicated: rank 0's values win
    net.bias._sequence_parallel = True  # sees this rank's tokens: gradients summed
    sync_shared_params(net, pg)
    close(net.weight.detach(), torch.ones(2, 3, dtype=torch.float64), "sync_shared_params")
    close(
        net.bias.detach(), torch.full((2,), rank + 1.0, dtype=torch.float64), "unmarked parameter untouched"
    )
    net.bias.grad = torch.full((2,), rank + 1.0, dtype=torch.float64)
    net.weight.grad = torch.full((2, 3), rank + 1.0, dtype=torch.float64)
    allreduce_sequence_parallel_grad(net, pg)
    close(
        net.bias.grad,
        torch.full((2,), float(sum(range(1, world + 1))), dtype=torch.float64),
        "allreduce_sequence_parallel_grad",
    )
    close(net.weight.grad, torch.full((2, 3), rank + 1.0, dtype=torch.float64), "unmarked gradient untouched")


def main():
    rank, world, port = (int(a) for a in sys.argv[1:4])
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=60),
    )
    try:
        pg = dist.group.WORLD
        check_linears_and_embeddings(pg, rank, world)
        check_shared_and_sequence_parallel_params(pg, rank, world)
        for mem_eff in (True, False):
            for sequence_parallel in (False, True):
                check_mamba2(pg, rank, world, mem_eff, sequence_parallel)
        dist.barrier()
    finally:
        dist.destroy_process_group()
    print(f"rank {rank}: ok")


if __name__ == "__main__":
    main()
