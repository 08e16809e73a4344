"""A scripted "model" for the tool-loop tests: on PYTHONPATH with SCRIPTED_TOOL_CALLS=1, Python imports this
at start-up, and every `generate` (the tiny random model's: character tokenizer) writes a python tool call
printing the question's arithmetic, then, once it has read a tool result, `[ANSWER] <that result>`. A random
model never calls a tool; this drives training's tool loop (TRL's) and the fixed eval's through the real
code paths. Tests in-process call `install()` themselves."""

import os
import re

CALL = '<tool_call>\n{{"name": "python", "arguments": {{"code": "print({expr})"}}}}\n</tool_call><|im_end|>'
ANSWER = "[ANSWER] {result}<|im_end|>"


def scripted_reply(text: str) -> str:
    """The reply to a rendered conversation: a tool call printing the question's arithmetic, or, once a tool
    result is in view, the answer. A question starting "Keep" is never answered: it calls the tool again."""
    blocks = [b.split("<|im_end|>")[0] for b in text.split("<|im_start|>user\n")[1:]]
    question = next((b for b in reversed(blocks) if not b.startswith("<tool_response>")), "")
    results = re.findall(
        r"<tool_response>\n(.*?)\n</tool_response>", text.split(question)[-1], flags=re.DOTALL
    )
    if results and not question.startswith("Keep"):
        return ANSWER.format(result=results[-1].strip())
    expr = max(re.findall(r"[\d(][\d\s+\-*/()]*", question) or ["0"], key=len)
    return CALL.format(expr=expr.strip())


def install(reply=None):
    """Patch GenerationMixin.generate (every model's) so that the model's real generate runs with each token
    forced to the script's (a logits processor first in line: the others, and the sampler, see a certain
    token); `reply(rendered text) -> reply text`, default `scripted_reply`. Returns the original."""
    reply = reply or scripted_reply
    import torch
    import transformers

    from grpo_recipes.models.tiny import tiny_tokenizer

    original, tokenizer = transformers.GenerationMixin.generate, tiny_tokenizer()

    class Force(transformers.LogitsProcessor):
        def __init__(self, replies: list[list[int]], start: int):
            self.replies, self.start = replies, start

        def __call__(self, input_ids, scores):
            step = input_ids.shape[1] - self.start
            forced = torch.full_like(scores, float("-inf"))
            for row, reply in enumerate(self.replies):
                forced[row, reply[step] if step < len(reply) else tokenizer.eos_token_id] = 0.0
            return forced

    def generate(self, *args, input_ids=None, generation_config=None, logits_processor=None, **kwargs):
        config = generation_config or self.generation_config
        n = config.num_return_sequences or 1
        replies = [
            tokenizer(reply(tokenizer.decode(ids).replace("<pad>", "")), add_special_tokens=False)[
                "input_ids"
            ]
            for ids in input_ids.tolist()
            for _ in range(n)
        ]
        processors = transformers.LogitsProcessorList(
            [Force(replies, input_ids.shape[1]), *(logits_processor or [])]
        )
        return original(
            self, *args, input_ids=input_ids, generation_config=config, logits_processor=processors, **kwargs
        )

    transformers.GenerationMixin.generate = generate
    return original


if os.environ.get("SCRIPTED_TOOL_CALLS") == "1":
    install()
