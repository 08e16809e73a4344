"""Target 3: the batched fixed eval vs a one-prompt-at-a-time generate loop on the same problems.

    python benchmarks/bench_eval.py [--problems 64] [--repeat 3]

Prints both times (median of --repeat), the speed-up and whether the greedy outputs are identical.
"""

from __future__ import annotations

import argparse

import torch

from benchmarks.common import default_setup, machine, timed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--problems", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    from grpo_recipes.evaluation.evaluator import FixedEvaluator

    cfg, taskset, _, rows, model, tokenizer = default_setup(eval_size=args.problems)
    model.eval()
    max_new = cfg["grpo"]["max_completion_length"]
    e = cfg["eval"]
    batched = FixedEvaluator(
        rows,
        taskset,
        tokenizer,
        "answer_tag",
        e,
        max_new_tokens=max_new,
    )
    indices = list(range(len(rows)))

    def one_at_a_time():
        """The plain loop: one chat prompt, one generate call, no padding."""
        out = []
        for i in indices:
            enc = tokenizer(batched.texts[i], return_tensors="pt", add_special_tokens=False)
            with torch.no_grad():
                ids = model.generate(
                    **enc,
                    max_new_tokens=max_new,
                    do_sample=False,
                    top_p=None,
                    top_k=None,
                    temperature=None,
                    pad_token_id=tokenizer.pad_token_id,
                )
            out.append(tokenizer.decode(ids[0, enc["input_ids"].shape[1] :], skip_special_tokens=True))
        return out

    print(f"machine: {machine()}")
    print(
        f"{len(rows)} problems, greedy, max {max_new} new tokens, eval batch size {cfg['eval']['batch_size']}"
    )
    t_batched, all_b, result_b = timed(lambda: [c for c, *_ in batched.generate(model, indices)], args.repeat)
    t_single, all_s, result_s = timed(one_at_a_time, args.repeat)
    same = sum(a == b for a, b in zip(result_b, result_s))
    print(f"batched fixed eval:      {t_batched:7.2f} s  (runs: {', '.join(f'{t:.2f}' for t in all_b)})")
    print(f"one prompt at a time:    {t_single:7.2f} s  (runs: {', '.join(f'{t:.2f}' for t in all_s)})")
    print(f"speed-up:                {t_single / t_batched:7.2f} x   (target >= 4)")
    print(f"identical greedy outputs: {same}/{len(rows)}")


if __name__ == "__main__":
    main()
