"""How far the training passes' shared prompts move the gradient, against bf16's own noise, on the embedded
model (benchmarks/RESULTS.md, "Each prompt once in the training passes"):

    python -m benchmarks.check_shared_prompts

The default run's two prompts, each with 8 completions of random tokens (lengths 10-25), bf16 weights under
autocast, a random advantage per row, as two passes of 8 (the embedded model's split when this was
measured; one pass of 16 since). Prints the largest log-prob difference and the gradient's relative L2
difference of (1) each prompt once against whole rows and (2), for scale, whole rows as one pass of 16
against two of 8.
"""

from __future__ import annotations

import copy

import torch

from benchmarks.common import machine


def main() -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl.trainer.utils import add_fused_lm_head

    from grpo_common.formats import get_format
    from grpo_recipes.models.loading import ensure_embedded
    from grpo_recipes.train.attention import recipe_attention
    from grpo_recipes.train.completion_head import completion_logprob_head

    path = ensure_embedded("smollm2-135m-instruct")
    tokenizer = AutoTokenizer.from_pretrained(path)
    base = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16)
    system = get_format("answer_tag").system_prompt  # the default run's
    prompts = [
        tokenizer.apply_chat_template(
            [{"role": "system", "content": system}, {"role": "user", "content": q}],
            tokenize=False,
            add_generation_prompt=True,
        )
        for q in ("Calculate 49 + 90.", "Calculate 7 + 5.")
    ]
    enc = tokenizer(prompts, return_tensors="pt", padding=True, padding_side="left")
    width = enc["input_ids"].shape[1]
    gen = torch.Generator().manual_seed(0)
    completions = torch.randint(100, 20000, (16, 32), generator=gen)
    completion_mask = (torch.arange(32) < torch.arange(10, 26).unsqueeze(1)).long()
    ids = torch.cat([enc["input_ids"].repeat_interleave(8, 0), completions], 1)
    mask = torch.cat([enc["attention_mask"].repeat_interleave(8, 0), completion_mask], 1)
    labels = ids.masked_fill(mask == 0, -100)
    labels[:, :width] = -100
    advantages = torch.randn(16, 1, generator=gen)

    def model(share: bool):
        m = copy.deepcopy(base)
        add_fused_lm_head(m, temperature=1.0, outputs=("log_probs", "entropy"))
        completion_logprob_head(m, 1.0, share_prompts=share)
        recipe_attention(m)
        return m

    def run(m, passes):
        m.zero_grad()
        log_probs = []
        for rows in passes:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                out = m(
                    input_ids=ids[rows], attention_mask=mask[rows], labels=labels[rows], fused_lm_head=True
                )
            (out.log_probs * advantages[rows]).sum().backward()
            log_probs.append(out.log_probs.detach())
        return torch.cat(log_probs), torch.cat([p.grad.float().flatten() for p in m.parameters()])

    halves, whole = [slice(0, 8), slice(8, 16)], [slice(0, 16)]
    reference = run(model(share=False), halves)
    print(f"machine: {machine()}")
    for name, got in (
        ("each prompt once vs whole rows (2 passes of 8)", run(model(share=True), halves)),
        ("whole rows, 1 pass of 16 vs 2 passes of 8    ", run(model(share=False), whole)),
    ):
        dlogp = (got[0] - reference[0]).abs().max().item()
        rel = ((got[1] - reference[1]).norm() / reference[1].norm()).item()
        print(f"{name}: max |d log-prob| {dlogp:.2e}, gradient relative L2 {100 * rel:.2f} %")


if __name__ == "__main__":
    main()
