"""AdamW for bf16 weights (`model.dtype=bf16`; `auto` on a CPU with native bf16): fp32 math, with the
weights and both moments written back to bf16 by stochastic rounding. Rounding to nearest loses every update
under half a bf16 step (1/512 of the weight: at GRPO's learning rates, most of them); rounding up with
probability equal to the remainder keeps each update on average. Half the memory of fp32 weights with fp32
AdamW (benchmarks/RESULTS.md, "bf16 weights that learn"). On a CPU one pass of a small C kernel does it
(compiled once with the system's C compiler and cached); on a GPU, or without a compiler, the same math in
torch ops. In one process the gradient clipping is applied in the same pass (fuse_gradient_clipping)."""

import ctypes
import functools
import hashlib
import os
import shutil
import subprocess
import threading
import zlib
from collections.abc import Callable

import torch

from grpo_recipes.models.loading import cache_root

REPLACES = ("adamw_torch", "adamw_torch_fused")  # transformers' AdamW: `grpo.optim`'s default

KERNEL = r"""
#include <stdint.h>
#include <string.h>
static inline float bf16_to_f32(uint16_t x) {
    uint32_t u = (uint32_t)x << 16; float f; memcpy(&f, &u, 4); return f;
}
/* f's bits plus 16 random bits, truncated: up with probability equal to the dropped remainder */
static inline uint16_t round_stochastic(float f, uint32_t r) {
    uint32_t u; memcpy(&u, &f, 4); return (uint16_t)((u + (r & 0xFFFFu)) >> 16);
}
static inline uint32_t mix(uint32_t h) {  /* lowbias32: every input bit flips about half the output bits */
    h ^= h >> 16; h *= 0x7feb352dU; h ^= h >> 15; h *= 0x846ca68bU; h ^= h >> 16; return h;
}
#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target_clones("avx512f", "avx2", "default")))
#endif
/* rest1 = 1 - b1 and rest2 = 1 - b2 come computed in double: 1 - 0.999f is 4.7e-5 off 0.001 */
void adamw_bf16(uint16_t* p, const uint16_t* g, uint16_t* m, uint16_t* v, int64_t n, float b1,
                float rest1, float b2, float rest2, float eps, float step_size, float bias2_sqrt,
                float decay, float gscale, uint32_t seed) {
    for (int64_t i = 0; i < n; i++) {
        float gi = bf16_to_f32(g[i]) * gscale;  /* gscale: the gradient clipping's factor (1: none) */
        float mi = b1 * bf16_to_f32(m[i]) + rest1 * gi;
        float vi = b2 * bf16_to_f32(v[i]) + rest2 * gi * gi;
        float wi = bf16_to_f32(p[i]) * decay - step_size * mi / (__builtin_sqrtf(vi) / bias2_sqrt + eps);
        uint32_t r = mix((uint32_t)i * 0x9E3779B9u ^ seed);
        p[i] = round_stochastic(wi, r);
        m[i] = round_stochastic(mi, r >> 8);
        v[i] = round_stochastic(vi, r >> 16);
    }
}
"""
PIECE = 1 << 20  # elements per kernel call: pieces of the weights are shared among torch's threads


@functools.cache
def cpu_kernel() -> Callable[..., None] | str:
    """The compiled kernel, or why there is none (a string)."""
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not compiler:
        return "no C compiler (cc) found"
    library = cache_root() / "kernels" / f"adamw_bf16-{hashlib.sha256(KERNEL.encode()).hexdigest()[:16]}.so"
    if not library.exists():
        library.parent.mkdir(parents=True, exist_ok=True)
        # per process, then renamed whole: the ranks of a run may all compile at once
        source, built = library.with_suffix(f".{os.getpid()}.c"), library.with_suffix(f".{os.getpid()}.tmp")
        source.write_text(KERNEL)
        # no -march=native: the cache may be shared by machines of other CPUs (target_clones picks at load)
        command = [compiler, "-O3", "-fno-math-errno", "-shared", "-fPIC", str(source), "-o", str(built)]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=120)
        except (OSError, subprocess.TimeoutExpired) as err:
            return f"{compiler} failed: {type(err).__name__}: {err}"
        finally:
            source.unlink()
        if done.returncode:
            last = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
            return f"{compiler} failed: {last}"
        os.replace(built, library)
    try:
        kernel = ctypes.CDLL(str(library)).adamw_bf16
    except (OSError, AttributeError) as err:  # a damaged cache: the next run builds it again
        library.unlink(missing_ok=True)
        return f"cannot load {library.name}: {err}"
    kernel.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_int64] + [ctypes.c_float] * 9 + [ctypes.c_uint32]
    kernel.restype = None
    return kernel


def stochastic_round_(x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """fp32 `x` in place to the bf16 values above or below it, up with probability equal to the remainder."""
    bits = x.view(torch.int32)
    noise = torch.randint(0, 1 << 16, x.shape, dtype=torch.int32, device=x.device, generator=generator)
    bits.add_(noise).bitwise_and_(-65536)
    return x


class BF16AdamW(torch.optim.Optimizer):
    """torch's AdamW (decoupled weight decay, no amsgrad) whose moments have the weights' dtype; bf16 weights
    and moments are written back by stochastic rounding, other dtypes as computed. Deterministic given
    `seed`, which the state dict keeps (its param groups): a resumed run rounds as the uninterrupted one."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, seed=0):
        super().__init__(
            params, {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay, "seed": seed}
        )
        self.grad_scale = 1.0  # the next step's gradient clipping factor (fuse_gradient_clipping sets it)

    def __setstate__(self, state):  # load_state_dict's; torch casts the moments to the weights' dtype
        super().__setstate__(state)
        for group in self.param_groups:  # a torch AdamW's state (a run resumed on bf16 weights) has no seed
            group.setdefault("seed", self.defaults["seed"])

    @torch.no_grad()
    def step(self, closure=None):
        loss = None if closure is None else closure()
        scale, self.grad_scale = self.grad_scale, 1.0  # a step clips once
        calls = []  # the C kernel's, run on torch's threads together
        for g_index, group in enumerate(self.param_groups):
            (b1, b2), lr = group["betas"], group["lr"]
            for p_index, p in enumerate(group["params"]):
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["step"] = torch.tensor(0.0)
                    state["exp_avg"], state["exp_avg_sq"] = torch.zeros_like(p), torch.zeros_like(p)
                state["step"] += 1
                t = int(state["step"])
                bias = (lr / (1 - b1**t), (1 - b2**t) ** 0.5, 1 - lr * group["weight_decay"])
                scalars = (b1, 1 - b1, b2, 1 - b2, group["eps"], *bias, scale)
                seed = zlib.crc32(f"{group['seed']} {g_index} {p_index} {t}".encode())
                tensors = (p, p.grad, state["exp_avg"], state["exp_avg_sq"])
                if self._on_kernel(tensors):
                    ptrs, n = [x.data_ptr() for x in tensors], p.numel()
                    for i in range(0, n, PIECE):  # 2 bytes an element
                        piece = (*[q + 2 * i for q in ptrs], min(PIECE, n - i), *scalars, (seed + i) % 2**32)
                        calls.append(piece)
                else:
                    self._torch_step(*tensors, *scalars, seed)
        self._run(calls)
        return loss

    @staticmethod
    def _on_kernel(tensors) -> bool:
        on_cpu = all(
            x.device.type == "cpu" and x.dtype == torch.bfloat16 and x.is_contiguous() for x in tensors
        )
        return on_cpu and not isinstance(cpu_kernel(), str)

    @staticmethod
    def _run(calls) -> None:
        """The kernel calls split among torch's threads (ctypes releases the GIL)."""
        if not calls:  # every weight on the torch ops (a GPU): no kernel is built or asked for
            return
        kernel, threads = cpu_kernel(), min(torch.get_num_threads(), len(calls))
        shares = [calls[k::threads] for k in range(threads)]
        workers = [threading.Thread(target=lambda s=s: [kernel(*c) for c in s]) for s in shares[1:]]
        for w in workers:
            w.start()
        for c in shares[0]:
            kernel(*c)
        for w in workers:
            w.join()

    @staticmethod
    def _torch_step(p, grad, m, v, b1, rest1, b2, rest2, eps, step_size, bias2_sqrt, decay, scale, seed):
        g = grad.float() if scale == 1.0 else grad.float().mul_(scale)
        m32 = m.float().lerp_(g, rest1)
        v32 = v.float().mul_(b2).addcmul_(g, g, value=rest2)
        w32 = p.float().mul_(decay).addcdiv_(m32, v32.sqrt().div_(bias2_sqrt).add_(eps), value=-step_size)
        generator = torch.Generator(p.device).manual_seed(seed)
        for out, x in ((p, w32), (m, m32), (v, v32)):
            out.copy_(stochastic_round_(x, generator) if out.dtype == torch.bfloat16 else x)


def install(trainer) -> str | None:
    """BF16AdamW in place of the trainer's AdamW where some trained weights are bf16, the optimizer is
    transformers' AdamW (`grpo.optim`'s default) and no engine keeps fp32 master weights (DeepSpeed, FSDP);
    returns how it runs, or None where it does not replace it."""
    args = trainer.args
    trained_bf16 = any(p.requires_grad and p.dtype == torch.bfloat16 for p in trainer.model.parameters())
    engine = trainer.is_deepspeed_enabled or trainer.is_fsdp_enabled
    if not trained_bf16 or args.optim not in REPLACES or engine:
        return None
    kwargs = {"lr": args.learning_rate, "betas": (args.adam_beta1, args.adam_beta2), "eps": args.adam_epsilon}
    trainer.optimizer_cls_and_kwargs = (BF16AdamW, {**kwargs, "seed": args.seed})
    how = "torch ops on the GPU"
    if trainer.accelerator.device.type == "cpu":
        kernel = cpu_kernel()
        how = f"torch ops, slower: {kernel}" if isinstance(kernel, str) else "one C kernel pass"
    if fuse_gradient_clipping(trainer):
        how += ", the gradient clipping folded in"
    return f"AdamW on the bf16 weights in fp32 math, weights and moments rounded stochastically ({how})"


def fuse_gradient_clipping(trainer) -> bool:
    """Clip in BF16AdamW's own pass: in one process without a loss scaler, the trainer's
    `accelerator.clip_grad_norm_` returns the total norm (what it logs) and leaves the gradients as they are,
    and the next step scales each as it reads it, in fp32. torch's clip writes every bf16 gradient once more
    (~70 ms of a default CPU step, benchmarks/RESULTS.md). Another optimizer, or an infinite max_norm (the
    norm asked for the log alone), gets accelerate's clip. Returns whether it is installed."""
    import math

    from accelerate.utils import DistributedType

    accelerator = trainer.accelerator
    one = getattr(accelerator, "distributed_type", None) == DistributedType.NO
    if not one or getattr(accelerator, "scaler", None) is not None:
        return False
    clip = accelerator.clip_grad_norm_

    def clip_grad_norm_(parameters, max_norm, norm_type=2):
        optimizer = getattr(trainer.optimizer, "optimizer", trainer.optimizer)  # accelerate's wrapper's
        if not isinstance(optimizer, BF16AdamW) or not math.isfinite(max_norm):
            return clip(parameters, max_norm, norm_type)
        norm = torch.nn.utils.get_total_norm([p.grad for p in parameters if p.grad is not None], norm_type)
        optimizer.grad_scale = min(1.0, max_norm / (float(norm) + 1e-6))  # torch's factor, in fp32
        return norm

    accelerator.clip_grad_norm_ = clip_grad_norm_
    return True
