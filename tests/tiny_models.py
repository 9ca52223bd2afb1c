"""Tiny random audio-language models of real transformers families, built offline.

The tokenizer is a byte-level vocabulary (256 byte symbols, no merges) plus each family's
special tokens; the configs are the real classes shrunk to width 16 and one layer. Output
is gibberish by construction: tests check the plumbing, never the answers.
"""

from __future__ import annotations

from pathlib import Path

# Qwen2-Audio-7B-Instruct's published chat template (checks `'audio' in content`).
QWEN2_AUDIO_TEMPLATE = (
    "{% set audio_count = namespace(value=0) %}{% for message in messages %}"
    "{% if loop.first and message['role'] != 'system' %}<|im_start|>system\n"
    "You are a helpful assistant.<|im_end|>\n{% endif %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}<|im_end|>\n{% else %}"
    "{% for content in message['content'] %}{% if 'audio' in content or 'audio_url' in content %}"
    "{% set audio_count.value = audio_count.value + 1 %}Audio {{ audio_count.value }}: "
    "<|audio_bos|><|AUDIO|><|audio_eos|>\n{% elif 'text' in content %}{{ content['text'] }}"
    "{% endif %}{% endfor %}<|im_end|>\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
# A ChatML template with Audio Flamingo 3's `<sound>` placeholder (checks `content.type`).
AF3_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}"
    "{% for content in message['content'] %}{% if content['type'] == 'audio' %}<sound>"
    "{% elif content['type'] == 'text' %}{{ content['text'] }}{% endif %}{% endfor %}"
    "{% endif %}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% endif %}"
)
TINY_TEXT = dict(model_type="qwen2", hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                 num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=4096)


def _tokenizer(specials: list[str]):
    from transformers.convert_slow_tokenizer import bytes_to_unicode
    from transformers.models.qwen2.tokenization_qwen2 import Qwen2Tokenizer

    vocab = {ch: i for i, ch in enumerate(bytes_to_unicode().values())}
    for s in ["<|endoftext|>", *specials]:
        vocab[s] = len(vocab)
    return Qwen2Tokenizer(vocab=vocab, merges=[], additional_special_tokens=specials,
                          eos_token="<|im_end|>", pad_token="<|endoftext|>")


def build_qwen2_audio(path: Path) -> Path:
    import torch
    from transformers import (
        Qwen2AudioConfig,
        Qwen2AudioForConditionalGeneration,
        Qwen2AudioProcessor,
        WhisperFeatureExtractor,
    )

    tok = _tokenizer(["<|im_start|>", "<|im_end|>", "<|audio_bos|>", "<|AUDIO|>",
                      "<|audio_eos|>"])
    proc = Qwen2AudioProcessor(feature_extractor=WhisperFeatureExtractor(feature_size=128),
                               tokenizer=tok, chat_template=QWEN2_AUDIO_TEMPLATE)
    cfg = Qwen2AudioConfig(
        audio_config=dict(model_type="qwen2_audio_encoder", d_model=16, encoder_layers=1,
                          encoder_attention_heads=2, encoder_ffn_dim=32, num_mel_bins=128),
        text_config={**TINY_TEXT, "vocab_size": len(tok)},
        audio_token_index=tok.convert_tokens_to_ids("<|AUDIO|>"))
    torch.manual_seed(0)
    Qwen2AudioForConditionalGeneration(cfg).save_pretrained(path)
    proc.save_pretrained(path)
    return path


def build_audio_flamingo3(path: Path) -> Path:
    import torch
    from transformers import (
        AudioFlamingo3Config,
        AudioFlamingo3ForConditionalGeneration,
        AudioFlamingo3Processor,
        WhisperFeatureExtractor,
    )

    tok = _tokenizer(["<|im_start|>", "<|im_end|>", "<sound>"])
    proc = AudioFlamingo3Processor(feature_extractor=WhisperFeatureExtractor(feature_size=128),
                                   tokenizer=tok, chat_template=AF3_TEMPLATE)
    cfg = AudioFlamingo3Config(
        audio_config=dict(hidden_size=16, intermediate_size=32, num_attention_heads=2,
                          num_hidden_layers=1, num_mel_bins=128),
        text_config={**TINY_TEXT, "vocab_size": len(tok)},
        audio_token_id=tok.convert_tokens_to_ids("<sound>"))
    torch.manual_seed(0)
    AudioFlamingo3ForConditionalGeneration(cfg).save_pretrained(path)
    proc.save_pretrained(path)
    return path


FAMILIES = {"qwen2_audio": build_qwen2_audio, "audioflamingo3": build_audio_flamingo3}
