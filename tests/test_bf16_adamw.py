"""AdamW on bf16 weights (grpo_recipes/models/bf16_adamw.py): the same update as torch's AdamW on average,
where rounding to nearest loses it; the C kernel and the torch ops agree; the state resumes exactly; and a
run with model.dtype=bf16 trains with it."""

import copy
import types

import pytest
import torch

from grpo_recipes.models import bf16_adamw
from grpo_recipes.models.bf16_adamw import BF16AdamW
from tests.conftest import read_jsonl, run_train

LR = 1e-5


@pytest.fixture(params=["kernel", "torch ops"])
def path(request, monkeypatch):
    """Each test twice: on the C kernel, and on the torch ops a GPU or a machine without a compiler uses."""
    if request.param == "kernel":
        assert not isinstance(bf16_adamw.cpu_kernel(), str), bf16_adamw.cpu_kernel()  # cc is in CI's image
    else:
        monkeypatch.setattr(bf16_adamw, "cpu_kernel", lambda: "no C compiler (cc) found")
    return request.param


def weights_and_gradients(n=200_000, steps=200, seed=0):
    gen = torch.Generator().manual_seed(seed)
    w0 = torch.randn(n, generator=gen) * 0.05
    # a steady part as large as the noise, down for even weights and up for odd ones: each step moves a weight
    # by ~0.7 lr, far under half a bf16 step at |w| ~ 0.05 (1.2e-4); the steps add up to a drift of ~1.4e-3
    # (bf16 values, so that fp32 weights get the same gradients)
    steady = torch.tensor([1e-3, -1e-3]).repeat(n // 2)
    grads = [(torch.randn(n, generator=gen) * 1e-3 + steady).bfloat16().float() for _ in range(steps)]
    return w0, grads


def train(param, optimizer, grads):
    for g in grads:
        param.grad = g.to(param.dtype)
        optimizer.step()
    return param.detach().float()


def test_bf16_weights_move_as_fp32_adamw_moves_them_where_rounding_to_nearest_loses_it(path):
    w0, grads = weights_and_gradients()
    start = w0.bfloat16().float()  # the bf16 weights' start: the drift is measured from there
    ref = torch.nn.Parameter(w0.clone())
    drift_fp32 = train(ref, torch.optim.AdamW([ref], lr=LR, weight_decay=0.0), grads) - w0
    ours = torch.nn.Parameter(w0.bfloat16())
    drift = train(ours, BF16AdamW([ours], lr=LR), grads) - start
    nearest = torch.nn.Parameter(w0.bfloat16())
    drift_nearest = train(nearest, torch.optim.AdamW([nearest], lr=LR, weight_decay=0.0), grads) - start

    for half in (slice(0, None, 2), slice(1, None, 2)):  # the weights pushed down, then those pushed up
        expected = drift_fp32[half].mean().item()
        assert 1e-3 < abs(expected) < 2e-3
        assert drift[half].mean().item() == pytest.approx(expected, rel=0.02)  # unbiased, over 100k weights
        assert abs(drift_nearest[half].mean()) < abs(expected) / 2  # rounding to nearest loses much of it


def test_fp32_weights_get_torch_adamw_exactly(monkeypatch):
    """The same update rule as torch's AdamW, weight decay included; no rounding for fp32 weights, and no C
    kernel built or asked for (as for weights on a GPU)."""

    def not_asked():
        raise AssertionError("the C kernel was asked for")

    monkeypatch.setattr(bf16_adamw, "cpu_kernel", not_asked)
    w0, grads = weights_and_gradients(n=1000, steps=5)
    ref, ours = torch.nn.Parameter(w0.clone()), torch.nn.Parameter(w0.clone())
    expected = train(ref, torch.optim.AdamW([ref], lr=1e-3, weight_decay=0.1, betas=(0.8, 0.99)), grads)
    got = train(ours, BF16AdamW([ours], lr=1e-3, weight_decay=0.1, betas=(0.8, 0.99)), grads)
    torch.testing.assert_close(got, expected, rtol=1e-6, atol=1e-7)


def test_each_value_rounds_to_a_neighbour_of_the_exact_one_without_bias(path):
    """One step: every weight and moment lands on one of the two bf16 values around the exact fp32 result
    (the same step on fp32 weights), up with probability equal to the remainder: the rounding errors, in
    units of each value's bf16 step, average zero."""
    w0, grads = weights_and_gradients(n=100_000, steps=1)
    results = {}
    for dtype in (torch.float32, torch.bfloat16):
        p = torch.nn.Parameter(w0.bfloat16().to(dtype))
        opt = BF16AdamW([p], lr=1e-2)
        train(p, opt, grads)
        results[dtype] = [p.detach().float(), *(opt.state[p][k].float() for k in ("exp_avg", "exp_avg_sq"))]
    for exact, rounded in zip(results[torch.float32], results[torch.bfloat16]):
        nonzero = exact != 0
        exact, rounded = exact[nonzero], rounded[nonzero]
        step = 2.0 ** (torch.floor(torch.log2(exact.abs())) - 7)  # bf16's spacing at each exact value
        error = (rounded - exact) / step
        assert (
            error.abs().max().item() < 1.001
        )  # (the kernel fuses multiply-adds: its last fp32 bit may differ)
        assert abs(error.mean().item()) < 0.01  # 1e5 values: one part in a hundred is ~20 standard errors


def test_a_resumed_optimizer_rounds_as_the_uninterrupted_one(path):
    w0, grads = weights_and_gradients(n=50_000, steps=6)
    p = torch.nn.Parameter(w0.bfloat16())
    opt = BF16AdamW([p], lr=LR, seed=7)
    train(p, opt, grads[:3])
    saved_weights, saved_state = (
        p.detach().clone(),
        copy.deepcopy(opt.state_dict()),
    )  # as a checkpoint keeps it
    uninterrupted = train(p, opt, grads[3:])

    q = torch.nn.Parameter(saved_weights)
    resumed = BF16AdamW([q], lr=LR)  # the seed comes back with the state
    resumed.load_state_dict(saved_state)
    assert resumed.param_groups[0]["seed"] == 7 and resumed.state[q]["exp_avg"].dtype == torch.bfloat16
    assert torch.equal(train(q, resumed, grads[3:]), uninterrupted)


def test_it_takes_over_a_torch_adamw_state_as_a_resume_onto_bf16_weights_does(path):
    """A run saved on fp32 weights and resumed where `model.dtype: auto` loads bf16 (another machine): its
    optimizer.pt is torch AdamW's, with fp32 moments and no rounding seed."""
    w0, grads = weights_and_gradients(n=50_000, steps=6)
    p32 = torch.nn.Parameter(w0.clone())
    fp32 = torch.optim.AdamW([p32], lr=LR)
    train(p32, fp32, grads[:3])
    q = torch.nn.Parameter(p32.detach().bfloat16())
    resumed = BF16AdamW([q], lr=LR, seed=3)
    resumed.load_state_dict(copy.deepcopy(fp32.state_dict()))  # as optimizer.pt holds it
    assert resumed.param_groups[0]["seed"] == 3 and resumed.state[q]["exp_avg_sq"].dtype == torch.bfloat16
    after = train(q, resumed, grads[3:])
    expected = train(p32, fp32, grads[3:])
    assert (after - expected).abs().max() < 2e-3  # a bf16 step or two at |w| ~ 0.2 apart, not a fresh start
    assert int(resumed.state[q]["step"]) == 6


def test_without_a_compiler_the_torch_ops_run_and_the_run_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("GRPO_RECIPES_CACHE", str(tmp_path))  # nothing compiled yet
    monkeypatch.setenv("CC", "false")  # a compiler that fails
    bf16_adamw.cpu_kernel.cache_clear()
    try:
        assert bf16_adamw.cpu_kernel() == "false failed: exit 1"
        assert bf16_adamw.install(fake_trainer(torch.bfloat16)).endswith(
            "(torch ops, slower: false failed: exit 1)"
        )
        w0, grads = weights_and_gradients(n=1000, steps=2)
        p = torch.nn.Parameter(w0.bfloat16())
        assert not torch.equal(train(p, BF16AdamW([p], lr=1e-2), grads), w0.bfloat16().float())
    finally:
        bf16_adamw.cpu_kernel.cache_clear()


def test_a_damaged_kernel_in_the_cache_is_dropped_and_built_again(tmp_path, monkeypatch):
    monkeypatch.setenv("GRPO_RECIPES_CACHE", str(tmp_path / "first"))
    bf16_adamw.cpu_kernel.cache_clear()
    try:
        assert not isinstance(bf16_adamw.cpu_kernel(), str)
        (library,) = (tmp_path / "first" / "kernels").glob("*.so")
        # another cache (this process keeps the first one loaded) holding it cut short, as by a full disk
        damaged = tmp_path / "second" / "kernels" / library.name
        damaged.parent.mkdir(parents=True)
        damaged.write_bytes(library.read_bytes()[:100])
        monkeypatch.setenv("GRPO_RECIPES_CACHE", str(tmp_path / "second"))
        bf16_adamw.cpu_kernel.cache_clear()
        assert bf16_adamw.cpu_kernel().startswith(f"cannot load {library.name}:")  # this run: torch ops
        bf16_adamw.cpu_kernel.cache_clear()
        assert not isinstance(bf16_adamw.cpu_kernel(), str)  # the next one compiles it again
        assert damaged.stat().st_size > 1000
    finally:
        bf16_adamw.cpu_kernel.cache_clear()


def fake_trainer(dtype, optim="adamw_torch_fused", deepspeed=False, trained=True):
    model = torch.nn.Linear(4, 4, dtype=dtype).requires_grad_(trained)
    args = types.SimpleNamespace(
        optim=optim, learning_rate=LR, adam_beta1=0.9, adam_beta2=0.999, adam_epsilon=1e-8, seed=3
    )
    accelerator = types.SimpleNamespace(device=torch.device("cpu"))
    return types.SimpleNamespace(
        model=model,
        args=args,
        accelerator=accelerator,
        is_deepspeed_enabled=deepspeed,
        is_fsdp_enabled=False,
        optimizer_cls_and_kwargs=None,
    )


@pytest.mark.parametrize(
    "trainer, replaced",
    [
        (fake_trainer(torch.bfloat16), True),
        (fake_trainer(torch.bfloat16, optim="adamw_torch"), True),
        (fake_trainer(torch.float32), False),  # fp32 weights: TRL's AdamW
        (fake_trainer(torch.bfloat16, trained=False), False),  # a frozen bf16 base (LoRA)
        (fake_trainer(torch.bfloat16, optim="sgd"), False),  # the user's own choice of optimizer
        (fake_trainer(torch.bfloat16, deepspeed=True), False),  # DeepSpeed keeps fp32 master weights
    ],
)
def test_adamw_is_replaced_only_for_trained_bf16_weights(trainer, replaced):
    how = bf16_adamw.install(trainer)
    assert (how is not None) is replaced
    if replaced:
        cls, kwargs = trainer.optimizer_cls_and_kwargs
        assert cls is BF16AdamW and kwargs == {"lr": LR, "betas": (0.9, 0.999), "eps": 1e-8, "seed": 3}
        assert how.endswith("(one C kernel pass)")


@pytest.mark.slow
def test_a_bf16_run_trains_its_weights_with_the_rounding_adamw(tmp_path):
    run = run_train(
        "model=tiny_random",
        "model.dtype=bf16",
        "max_steps=2",
        "grpo.save_steps=2",
        "eval.size=4",
        "learning_rate=1e-4",
        f"output_root={tmp_path}",
    )
    assert run.returncode == 0, run.stderr[-3000:]
    log = run.stdout + run.stderr
    assert "AdamW on the bf16 weights in fp32 math, weights and moments rounded stochastically" in log
    assert "rounds away on" not in log  # the warning for weights AdamW cannot move is not given
    checkpoint = next(tmp_path.glob("*/checkpoint-2"))
    state = torch.load(checkpoint / "optimizer.pt", weights_only=True)
    assert all(group["seed"] == 0 for group in state["param_groups"])  # the run's seed
    moments = [s["exp_avg"] for s in state["state"].values()]
    assert moments and all(m.dtype == torch.bfloat16 for m in moments)
    assert read_jsonl(next(tmp_path.glob("*/metrics.jsonl")))[-1]["step"] == 2


def test_a_gradient_scale_is_applied_as_the_gradients_are_read(path):
    """The clipping factor folded into the step: the same update as stepping on gradients scaled first (by
    0.5 here, exact in bf16), bit for bit, and for one step only."""
    w0, grads = weights_and_gradients(n=4_096, steps=3)
    scaled, prescaled = (torch.nn.Parameter(w0.bfloat16()) for _ in range(2))
    opt_scaled, opt_prescaled = BF16AdamW([scaled], lr=LR, seed=1), BF16AdamW([prescaled], lr=LR, seed=1)
    for g in grads:
        scaled.grad, prescaled.grad = g.bfloat16(), (g * 0.5).bfloat16()
        opt_scaled.grad_scale = 0.5
        opt_scaled.step()
        opt_prescaled.step()
        assert opt_scaled.grad_scale == 1.0  # reset: the next step clips only if asked again
    assert torch.equal(scaled, prescaled)


def test_gradient_clipping_is_folded_into_the_step():
    """In one process the trainer's accelerator.clip_grad_norm_ returns torch's total norm and leaves the
    gradients as they are; the optimizer gets torch's clipping factor; another optimizer, or the log's
    infinite max_norm, gets accelerate's clip."""
    from accelerate import Accelerator

    model = torch.nn.Linear(8, 8, dtype=torch.bfloat16)
    for p in model.parameters():
        p.grad = torch.full_like(p, 0.5)
    optimizer = BF16AdamW(model.parameters(), lr=LR)
    trainer = types.SimpleNamespace(accelerator=Accelerator(cpu=True), optimizer=optimizer)
    assert bf16_adamw.fuse_gradient_clipping(trainer)
    grads = [p.grad.clone() for p in model.parameters()]
    norm = trainer.accelerator.clip_grad_norm_(model.parameters(), 1.0)
    expected = torch.nn.utils.get_total_norm(grads)
    assert torch.equal(norm, expected) and expected > 1
    assert all(torch.equal(p.grad, g) for p, g in zip(model.parameters(), grads, strict=True))
    assert optimizer.grad_scale == pytest.approx(1.0 / (expected.item() + 1e-6))
    trainer.accelerator.clip_grad_norm_(model.parameters(), float("inf"))  # the norm for the log alone
    trainer.optimizer = torch.optim.AdamW(model.parameters(), lr=LR)  # not ours: accelerate clips
    trainer.accelerator.clip_grad_norm_(model.parameters(), 1.0)
    assert all((p.grad < g).all() for p, g in zip(model.parameters(), grads, strict=True))
