"""How the fixed eval generates: per prompt `n` lists of token ids (temperature None: greedy). Every rank
asks for as many prompts as the others: ZeRO-3 gathers and vLLM's server mode are collective."""

from __future__ import annotations


def end_ids(model, tokenizer) -> set[int]:
    """The ids generation stops at: the model's generation config's, else the tokenizer's."""
    config = model.generation_config
    eos = (config.eos_token_id if config is not None else None) or tokenizer.eos_token_id
    return {i for i in (eos if isinstance(eos, list) else [eos]) if i is not None}


class _Generator:
    """`generate_ids` takes token ids: the tool loop's prompt + turns are never re-tokenised."""

    def __init__(self, model, tokenizer):
        self.model, self.tokenizer, self.eos_token_ids = model, tokenizer, end_ids(model, tokenizer)

    def generate(self, prompts: list[str], n: int, temperature: float | None, max_new_tokens: int):
        ids = [self.tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
        return self.generate_ids(ids, n, temperature, max_new_tokens)


class HFGenerator(_Generator):
    def __init__(self, model, tokenizer, batch_size: int, progress: bool = False):
        super().__init__(model, tokenizer)
        self.batch_size, self.progress = batch_size, progress

    def generate_ids(self, prompt_ids: list[list[int]], n: int, temperature: float | None, max_tokens: int):
        import torch
        from tqdm.auto import tqdm
        from transformers import GenerationConfig

        # Set here, not taken from the model's generation_config.json (Qwen2.5's repetition_penalty 1.05 and
        # top_k 20, ...) or transformers' defaults (top_k 50): greedy is argmax, and sampling is the
        # temperature alone, as TRL samples in training and vLLM here.
        decoding = {"do_sample": temperature is not None, "repetition_penalty": 1.0}
        if temperature is not None:
            decoding |= {"temperature": temperature, "top_k": 0, "top_p": 1.0}  # TRL's defaults
        else:  # unused by argmax; transformers' defaults, so that a hub model's sampling ones are not flagged
            decoding |= {"temperature": 1.0, "top_k": 50, "top_p": 1.0}
        config = GenerationConfig(
            max_new_tokens=max_tokens,
            num_return_sequences=n,
            **decoding,
            eos_token_id=sorted(self.eos_token_ids) or None,
            pad_token_id=self.tokenizer.pad_token_id,
            use_cache=True,
        )
        batch_size = max(1, self.batch_size // n)
        device = next(self.model.parameters()).device
        starts = range(0, len(prompt_ids), batch_size)
        desc = "pass@k samples" if n > 1 else "eval"
        bar = tqdm(starts, desc=desc, leave=False, disable=not self.progress or len(starts) < 2)
        out = []
        for start in bar:
            batch = {"input_ids": [list(ids) for ids in prompt_ids[start : start + batch_size]]}
            enc = self.tokenizer.pad(batch, padding=True, padding_side="left", return_tensors="pt").to(device)
            with torch.no_grad():
                generated = self.model.generate(**enc, generation_config=config)
            ids = generated[:, enc["input_ids"].shape[1] :].tolist()
            out += [ids[i : i + n] for i in range(0, len(ids), n)]
        return out


class VLLMGenerator(_Generator):
    """The trainer's vLLM engine (trl.generation.vllm_generation.VLLMGeneration)."""

    def __init__(self, vllm_generation, tokenizer, model):
        super().__init__(model, tokenizer)
        self.engine, self.synced = vllm_generation, False

    def generate_ids(self, prompt_ids: list[list[int]], n: int, temperature: float | None, max_tokens: int):
        if not self.synced:  # the weights of this very step (collective: every rank takes part)
            self.engine.sync_weights()
            self.synced = True
        sampling = {"n": n, "temperature": temperature or 0.0, "max_tokens": max_tokens}  # 0: greedy
        if self.engine.mode == "server":
            return self._server(prompt_ids, sampling)
        return self._colocate(prompt_ids, sampling)

    def _colocate(self, prompt_ids: list[list[int]], sampling: dict) -> list[list[list[int]]]:
        from vllm import SamplingParams

        tp_group = getattr(self.engine, "tp_group", None)
        if self.engine.tensor_parallel_size > 1:  # one LLM per tensor-parallel group: generate the group's
            import torch.distributed as dist
            from accelerate.utils import is_peft_model

            gathered = [None] * self.engine.tensor_parallel_size
            dist.all_gather_object(gathered, prompt_ids, group=tp_group)
            rank = dist.get_rank(group=tp_group)
            flat = [p for part in gathered for p in part]
            if is_peft_model(self.engine.model):  # as TRL's generate: drain NCCL before vLLM's TP (trl#3671)
                dist.barrier(device_ids=[self.engine.accelerator.local_process_index])
        else:
            rank, flat = 0, prompt_ids
        if getattr(self.engine, "enable_sleep_mode", False):
            # sync_weights woke the weights; the KV cache sleeps between TRL's generations (as TRL's own
            # generate does, wake it). It stays awake: the next thing the trainer does is generate again.
            self.engine.llm.wake_up(tags=["kv_cache"])
        outputs = self.engine.llm.generate(
            [{"prompt_token_ids": ids} for ids in flat],
            sampling_params=SamplingParams(**sampling),
            use_tqdm=False,
        )
        result = [[list(c.token_ids) for c in o.outputs] for o in outputs]
        return result[rank * len(prompt_ids) : (rank + 1) * len(prompt_ids)]

    def _server(self, prompt_ids: list[list[int]], sampling: dict) -> list[list[list[int]]]:
        from accelerate.utils import broadcast_object_list, gather_object

        accelerator = self.engine.accelerator
        everyone = gather_object([prompt_ids])  # one entry per rank, each as long as the others
        payload = [None]
        if accelerator.is_main_process:
            flat = [p for part in everyone for p in part]
            done = self.engine.vllm_client.generate(prompts=flat, **sampling)["completion_ids"]
            n = sampling["n"]
            payload = [[done[i * n : (i + 1) * n] for i in range(len(flat))]]
        broadcast_object_list(payload, from_process=0)
        mine = accelerator.process_index * len(prompt_ids)
        return payload[0][mine : mine + len(prompt_ids)]
