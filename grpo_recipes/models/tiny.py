"""A tiny random causal LM with a character-level chat tokenizer: nothing is downloaded."""

import string

CHATML = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] "
    "+ '<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' "
    "}}{% endif %}"
)
SPECIALS = ["<pad>", "<unk>", "<|im_start|>", "<|im_end|>"]


def tiny_tokenizer():
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    chars = sorted(set(string.printable) - {"\x0b", "\x0c", "\r"})
    vocab = {tok: i for i, tok in enumerate(SPECIALS + chars)}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    backend.decoder = decoders.Fuse()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        pad_token="<pad>",
        unk_token="<unk>",
        eos_token="<|im_end|>",
        bos_token=None,
        additional_special_tokens=["<|im_start|>"],
    )
    tokenizer.chat_template = CHATML
    return tokenizer


def tiny_model(tokenizer, seed: int = 0, hidden_size: int = 32):
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        pad_token_id=pad,
        eos_token_id=eos,
        bos_token_id=None,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    model.generation_config = GenerationConfig(eos_token_id=eos, pad_token_id=pad)
    return model
