"""Which kernels run many programs at once (TTIR analysis), and the run-time guard.

Canonicalisation turns a side-effect-free ``if`` into a select, so the TTIR can
be branch-free where the Python kernel still branches; the executor then sees
the programs diverge at run time, undoes the batch's writes and reruns it one
program at a time.
"""

import dataclasses

import torch
import triton
import triton.language as tl

from flagos_triton import analysis, binary, launcher


@triton.jit
def pid_loop_kernel(out_ptr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    acc = tl.zeros([BLOCK], tl.float32)
    for i in range(pid):  # noqa: B007 (a Triton kernel: the loop is what is tested)
        acc += 1.0
    tl.store(out_ptr + pid * BLOCK + tl.arange(0, BLOCK), acc)


@triton.jit
def arg_loop_kernel(out_ptr, n_iter, flag, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    acc = tl.zeros([BLOCK], tl.float32)
    for i in range(n_iter):  # noqa: B007 (a Triton kernel: the loop is what is tested)
        acc += pid
    if flag > 0:  # uniform branch: a kernel argument
        acc = acc * 2
    tl.store(out_ptr + pid * BLOCK + tl.arange(0, BLOCK), acc)


@triton.jit
def while_kernel(out_ptr, limit, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    i = 0
    while i < limit:
        i += 1
    tl.store(out_ptr + pid * BLOCK + tl.arange(0, BLOCK), tl.full([BLOCK], i, tl.int32))


@triton.jit
def loaded_branch_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    s = tl.load(x_ptr + pid)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    if s > 0:
        tl.store(out_ptr + offs, tl.full([BLOCK], -1.0, tl.float32))
    else:
        tl.store(out_ptr + offs, tl.full([BLOCK], 1.0, tl.float32))


@triton.jit
def write_then_branch_kernel(x_ptr, acc_ptr, out_ptr, counter_ptr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    tl.store(acc_ptr + offs, tl.load(acc_ptr + offs) + 1.0)  # not idempotent
    tl.atomic_add(counter_ptr + offs % 3, 1)  # duplicates inside the batch
    s = tl.load(x_ptr + pid)
    v = tl.full([BLOCK], 1.0, tl.float32)
    if s > 0:  # becomes a select in TTIR; the programs still diverge in Python
        v = v * -1.0
    tl.store(out_ptr + offs, v)


def _program(compile_kernel, fn, sig, consts):
    return binary.load(compile_kernel(fn, sig, consts).kernel)


def test_analysis_verdicts(compile_kernel):
    p = _program(compile_kernel, pid_loop_kernel, {"out_ptr": "*fp32", "BLOCK": "constexpr"}, {"BLOCK": 8})
    assert not p.batch_ok and "loop" in p.batch_reason
    p = _program(
        compile_kernel,
        arg_loop_kernel,
        {"out_ptr": "*fp32", "n_iter": "i32", "flag": "i32", "BLOCK": "constexpr"},
        {"BLOCK": 8},
    )
    assert p.batch_ok, p.batch_reason
    p = _program(compile_kernel, while_kernel, {"out_ptr": "*i32", "limit": "i32", "BLOCK": "constexpr"}, {"BLOCK": 8})
    assert not p.batch_ok and "while" in p.batch_reason
    p = _program(
        compile_kernel, loaded_branch_kernel, {"x_ptr": "*fp32", "out_ptr": "*fp32", "BLOCK": "constexpr"}, {"BLOCK": 8}
    )
    assert not p.batch_ok and "branch" in p.batch_reason


def test_results_of_each_verdict(compile_kernel):
    k = compile_kernel(pid_loop_kernel, {"out_ptr": "*fp32", "BLOCK": "constexpr"}, {"BLOCK": 8})
    out = torch.empty(6, 8)
    k[(6, 1, 1)](out, 8)
    assert torch.equal(out, torch.arange(6, dtype=torch.float32)[:, None].expand(6, 8))
    k = compile_kernel(
        arg_loop_kernel, {"out_ptr": "*fp32", "n_iter": "i32", "flag": "i32", "BLOCK": "constexpr"}, {"BLOCK": 8}
    )
    k[(6, 1, 1)](out, 3, 1, 8)
    assert torch.equal(out, (torch.arange(6, dtype=torch.float32) * 6)[:, None].expand(6, 8))


def test_divergence_after_writes_is_rolled_back(compile_kernel, rng):
    k = compile_kernel(
        write_then_branch_kernel,
        {"x_ptr": "*fp32", "acc_ptr": "*fp32", "out_ptr": "*fp32", "counter_ptr": "*i32", "BLOCK": "constexpr"},
        {"BLOCK": 8},
    )
    program = binary.load(k.kernel)
    assert program.batch_ok  # the TTIR has no branch left
    x = torch.randn(16, generator=rng)
    x[0], x[1] = 1.0, -1.0
    acc = torch.arange(128, dtype=torch.float32).reshape(16, 8)
    out = torch.empty(16, 8)
    counter = torch.zeros(128, dtype=torch.int32)
    launcher.run(program, (16, 1, 1), (x, acc, out, counter, 8), batch_elements=64)
    assert torch.equal(acc, torch.arange(128, dtype=torch.float32).reshape(16, 8) + 1)
    assert torch.equal(out, torch.where(x > 0, -1.0, 1.0)[:, None].expand(16, 8))
    assert torch.equal(counter[:3], torch.tensor([43, 43, 42], dtype=torch.int32))


def test_forced_batching_of_a_branchy_kernel_is_still_right(compile_kernel, rng):
    k = compile_kernel(loaded_branch_kernel, {"x_ptr": "*fp32", "out_ptr": "*fp32", "BLOCK": "constexpr"}, {"BLOCK": 8})
    program = binary.load(k.kernel)
    assert not program.batch_ok
    forced = dataclasses.replace(program, batch_ok=True)
    x = torch.randn(16, generator=rng)
    out = torch.empty(16, 8)
    launcher.run(forced, (16, 1, 1), (x, out, 8))
    assert torch.equal(out, torch.where(x > 0, -1.0, 1.0)[:, None].expand(16, 8))


SAMPLE_TTIR = """
module {
  tt.func public @k(%arg0: !tt.ptr<f32> {tt.divisibility = 16 : i32}, %arg1: i32) attributes {noinline = false} {
    %c0_i32 = arith.constant 0 : i32
    %c1_i32 = arith.constant 1 : i32
    %0 = tt.get_program_id x : i32
    %1 = arith.addi %0, %c1_i32 : i32
    %2 = scf.for %arg2 = %c0_i32 to %arg1 step %c1_i32 iter_args(%arg3 = %c0_i32) -> (i32)  : i32 {
      %4 = arith.addi %arg3, %1 : i32
      scf.yield %4 : i32
    }
    %3 = scf.for %arg4 = %c0_i32 to %2 step %c1_i32 iter_args(%arg5 = %c0_i32) -> (i32)  : i32 {
      scf.yield %arg5 : i32
    }
    tt.return
  }
}
"""


def test_analysis_follows_loop_carried_values():
    # %2 is carried through a loop from the program id: the second loop's bound varies.
    ok, reason = analysis.batchable(SAMPLE_TTIR)
    assert not ok and "loop" in reason
    ok, _ = analysis.batchable(SAMPLE_TTIR.replace("%4 = arith.addi %arg3, %1", "%4 = arith.addi %arg3, %c1_i32"))
    assert ok
