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


def _tokenizer(specials: list[str], named: dict[str, str] | None = None):
    """Byte-level vocabulary + `specials`; `named` gives some of them attribute names
    (`tok.audio_token`, `tok.audio_token_id`), as the omni families' processors read."""
    from transformers.convert_slow_tokenizer import bytes_to_unicode
    from transformers.models.qwen2.tokenization_qwen2 import Qwen2Tokenizer

    vocab = {ch: i for i, ch in enumerate(bytes_to_unicode().values())}
    for s in ["<|endoftext|>", *specials]:
        vocab[s] = len(vocab)
    extra = {"extra_special_tokens": named} if named else {}
    return Qwen2Tokenizer(vocab=vocab, merges=[], additional_special_tokens=specials,
                          eos_token="<|im_end|>", pad_token="<|endoftext|>", **extra)


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


# A ChatML template with the omni families' audio placeholder (Qwen2.5-Omni's and
# Qwen3-Omni's published templates put `<|audio_bos|><|AUDIO|><|audio_eos|>` for an audio).
OMNI_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}"
    "{% for content in message['content'] %}{% if content['type'] == 'audio' %}"
    "<|audio_bos|><|AUDIO|><|audio_eos|>{% elif content['type'] == 'text' %}"
    "{{ content['text'] }}{% endif %}{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
OMNI_TOKENS = {"audio_token": "<|AUDIO|>", "image_token": "<|IMAGE|>",
               "video_token": "<|VIDEO|>", "audio_bos_token": "<|audio_bos|>",
               "audio_eos_token": "<|audio_eos|>", "vision_bos_token": "<|vision_bos|>",
               "vision_eos_token": "<|vision_eos|>"}


def _save_processor_parts(path: Path, processor_class: str, tok, feature_extractor,
                          template: str, image_processor_type: str | None = None) -> None:
    """Save a processor as its parts plus `processor_config.json`, the way a published
    checkpoint is laid out, without building the image/video processors (torchvision).
    As in the published omni checkpoints, one `preprocessor_config.json` holds the audio
    feature extractor's settings and names the image processor."""
    import json

    tok.save_pretrained(path)
    feature_extractor.save_pretrained(path)
    if image_processor_type:
        pre = path / "preprocessor_config.json"
        merged = {**json.loads(pre.read_text()), "image_processor_type": image_processor_type}
        pre.write_text(json.dumps(merged), encoding="utf-8")
    (path / "chat_template.jinja").write_text(template, encoding="utf-8")
    (path / "processor_config.json").write_text(
        json.dumps({"processor_class": processor_class}), encoding="utf-8")


def _omni_ids(tok) -> dict[str, int]:
    ids = {k: tok.convert_tokens_to_ids(v) for k, v in OMNI_TOKENS.items()}
    return dict(audio_token_id=ids["audio_token"], image_token_id=ids["image_token"],
                video_token_id=ids["video_token"], audio_start_token_id=ids["audio_bos_token"],
                audio_end_token_id=ids["audio_eos_token"],
                vision_start_token_id=ids["vision_bos_token"],
                vision_end_token_id=ids["vision_eos_token"], user_token_id=0)


def build_qwen2_5_omni(path: Path) -> Path:
    import torch
    from transformers import (
        Qwen2_5OmniConfig,
        Qwen2_5OmniForConditionalGeneration,
        WhisperFeatureExtractor,
    )

    tok = _tokenizer(["<|im_start|>", "<|im_end|>", *OMNI_TOKENS.values()], OMNI_TOKENS)
    ids = _omni_ids(tok)
    thinker = dict(
        audio_config=dict(d_model=16, encoder_layers=1, encoder_attention_heads=2,
                          encoder_ffn_dim=32, num_mel_bins=128, output_dim=16, n_window=50),
        vision_config=dict(depth=1, hidden_size=16, intermediate_size=32, num_heads=2,
                           out_hidden_size=16, fullatt_block_indexes=[0]),
        text_config={**TINY_TEXT, "model_type": "qwen2_5_omni_text", "vocab_size": len(tok),
                     "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0,
                                         "mrope_section": [2, 1, 1]}},
        audio_token_index=ids.pop("audio_token_id"), image_token_index=ids.pop("image_token_id"),
        video_token_index=ids.pop("video_token_id"), **ids)
    # The published checkpoint is the full model; without audio output only its thinker
    # is built and saved, which is exactly what the backend loads.
    cfg = Qwen2_5OmniConfig(thinker_config=thinker, enable_audio_output=False)
    torch.manual_seed(0)
    Qwen2_5OmniForConditionalGeneration(cfg).save_pretrained(path)
    torch.save({}, path / "spk_dict.pt")  # the published layout; the talker's voices, unused
    _save_processor_parts(path, "Qwen2_5OmniProcessor", tok,
                          WhisperFeatureExtractor(feature_size=128), OMNI_TEMPLATE,
                          "Qwen2VLImageProcessor")
    return path


def build_qwen3_omni_moe(path: Path) -> Path:
    import torch
    from transformers import (
        Qwen3OmniMoeConfig,
        Qwen3OmniMoeForConditionalGeneration,
        WhisperFeatureExtractor,
    )

    tok = _tokenizer(["<|im_start|>", "<|im_end|>", *OMNI_TOKENS.values()], OMNI_TOKENS)
    ids = _omni_ids(tok)
    thinker = dict(
        audio_config=dict(d_model=16, encoder_layers=1, encoder_attention_heads=2,
                          encoder_ffn_dim=32, num_mel_bins=128, output_dim=16,
                          downsample_hidden_size=8),
        vision_config=dict(depth=1, hidden_size=16, intermediate_size=32, num_heads=2,
                           out_hidden_size=16, num_position_embeddings=16,
                           deepstack_visual_indexes=[0]),
        text_config={**TINY_TEXT, "model_type": "qwen3_omni_moe_text", "vocab_size": len(tok),
                     "head_dim": 8, "moe_intermediate_size": 8, "num_experts": 4,
                     "num_experts_per_tok": 2,
                     "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0,
                                         "mrope_section": [2, 1, 1]}},
        **ids)
    cfg = Qwen3OmniMoeConfig(thinker_config=thinker, enable_audio_output=False)
    torch.manual_seed(0)
    Qwen3OmniMoeForConditionalGeneration(cfg).save_pretrained(path)
    _save_processor_parts(path, "Qwen3OmniMoeProcessor", tok,
                          WhisperFeatureExtractor(feature_size=128), OMNI_TEMPLATE,
                          "Qwen2VLImageProcessor")
    return path


# Phi-4-multimodal's chat format: <|user|>…<|end|><|assistant|>, one <|audio|> per clip.
PHI4_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|>"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}"
    "{% for content in message['content'] %}{% if content['type'] == 'audio' %}<|audio|>"
    "{% elif content['type'] == 'text' %}{{ content['text'] }}{% endif %}{% endfor %}"
    "{% endif %}<|end|>{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def build_phi4_multimodal(path: Path) -> Path:
    import torch
    from transformers import (
        Phi4MultimodalConfig,
        Phi4MultimodalFeatureExtractor,
        Phi4MultimodalForCausalLM,
    )

    named = {"image_token": "<|image|>", "audio_token": "<|audio|>"}
    tok = _tokenizer(["<|user|>", "<|assistant|>", "<|system|>", "<|end|>", "<|im_end|>",
                      *named.values()], named)
    tok.eos_token = "<|end|>"
    image_id, audio_id = (tok.convert_tokens_to_ids(v) for v in named.values())
    cfg = Phi4MultimodalConfig(
        vocab_size=len(tok), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=4096,
        original_max_position_embeddings=4096, bos_token_id=tok.pad_token_id,
        pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id,
        vision_config=dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                           num_attention_heads=2, image_size=28, crop_size=28,
                           image_token_id=image_id),
        audio_config=dict(hidden_size=16, intermediate_size=32, num_blocks=1,
                          num_attention_heads=2, ext_pw_out_channel=16,
                          depthwise_separable_out_channel=16, nemo_conv_channels=16,
                          audio_token_id=audio_id))
    torch.manual_seed(0)
    Phi4MultimodalForCausalLM(cfg).save_pretrained(path)
    _save_processor_parts(path, "Phi4MultimodalProcessor", tok,
                          Phi4MultimodalFeatureExtractor(), PHI4_TEMPLATE,
                          "Phi4MultimodalImageProcessor")
    return path


# Gemma 3n's chat format: the system text opens the first user turn; one
# <audio_soft_token> per clip, which the processor expands to 188 soft tokens.
GEMMA3N_TEMPLATE = (
    "{{ bos_token }}{% set first = namespace(system='') %}"
    "{% for message in messages %}{% if message['role'] == 'system' %}"
    "{% for item in message['content'] %}"
    "{% set first.system = first.system + item['text'] + '\\n\\n' %}{% endfor %}"
    "{% else %}<start_of_turn>{{ 'model' if message['role'] == 'assistant' else message['role'] }}\n"
    "{% if loop.index0 <= 1 %}{{ first.system }}{% endif %}"
    "{% for item in message['content'] %}{% if item['type'] == 'audio' %}<audio_soft_token>"
    "{% elif item['type'] == 'text' %}{{ item['text'] | trim }}{% endif %}{% endfor %}"
    "<end_of_turn>\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
)


def build_gemma3n(path: Path) -> Path:
    """Gemma-3n, laid out as google/gemma-3n-E4B-it is: the vocabulary ends with the vision
    and then the audio soft-token ranges (their own embedders), and the checkpoint holds
    vision-tower weights. The tower itself (timm's MobileNet-V5, which needs torchvision)
    is left out while building, exactly as the backend leaves it out while loading; the
    tensor saved under its name checks that such weights are skipped."""
    import json

    import torch
    from safetensors.torch import load_file, save_file
    from transformers import Gemma3nAudioFeatureExtractor, Gemma3nConfig, Gemma3nForConditionalGeneration
    from transformers.convert_slow_tokenizer import bytes_to_unicode
    from transformers.models.qwen2.tokenization_qwen2 import Qwen2Tokenizer

    from agl.backends._transformers_loading import without_submodels

    vocab = {ch: i for i, ch in enumerate(bytes_to_unicode().values())}
    for s in ["<|endoftext|>", "<start_of_turn>", "<end_of_turn>", "<start_of_image>", "<start_of_audio>"]:
        vocab[s] = len(vocab)
    n_text = len(vocab)  # the per-layer embedding covers text tokens only
    vision = ["<end_of_image>", "<image_soft_token>", *(f"<vision_{i}>" for i in range(6))]
    audio = ["<end_of_audio>", "<audio_soft_token>", *(f"<audio_{i}>" for i in range(6))]
    for s in vision + audio:
        vocab[s] = len(vocab)
    named = {"image_token": "<image_soft_token>", "boi_token": "<start_of_image>",
             "eoi_token": "<end_of_image>", "audio_token": "<audio_soft_token>",
             "boa_token": "<start_of_audio>", "eoa_token": "<end_of_audio>"}
    tok = Qwen2Tokenizer(vocab=vocab, merges=[], additional_special_tokens=list(vocab)[256:],
                         eos_token="<end_of_turn>", pad_token="<|endoftext|>",
                         extra_special_tokens=named)
    ids = tok.convert_tokens_to_ids
    cfg = Gemma3nConfig(
        text_config=dict(vocab_size=len(tok), vocab_size_per_layer_input=n_text, hidden_size=16,
                         intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
                         num_key_value_heads=1, head_dim=8, hidden_size_per_layer_input=8,
                         laurel_rank=4, num_kv_shared_layers=0, sliding_window=32,
                         layer_types=["sliding_attention", "full_attention"],
                         activation_sparsity_pattern=[0.95, 0.0], max_position_embeddings=4096,
                         pad_token_id=tok.pad_token_id, bos_token_id=tok.pad_token_id,
                         eos_token_id=ids("<end_of_turn>")),
        vision_config=dict(hidden_size=16, vocab_size=len(vision), vocab_offset=ids(vision[0])),
        audio_config=dict(hidden_size=16, vocab_size=len(audio), vocab_offset=ids(audio[0]),
                          conf_num_attention_heads=2, conf_num_hidden_layers=1,
                          sscp_conv_channel_size=(4, 4)),
        boi_token_id=ids("<start_of_image>"), eoi_token_id=ids("<end_of_image>"),
        image_token_id=ids("<image_soft_token>"), boa_token_id=ids("<start_of_audio>"),
        eoa_token_id=ids("<end_of_audio>"), audio_token_id=ids("<audio_soft_token>"))
    torch.manual_seed(0)
    with without_submodels(("gemma3n_vision",)):
        Gemma3nForConditionalGeneration(cfg).save_pretrained(path)
    weights = load_file(path / "model.safetensors")
    weights["model.vision_tower.timm_model.conv_stem.conv.weight"] = torch.randn(8, 3, 3, 3)
    save_file(weights, path / "model.safetensors", metadata={"format": "pt"})
    _save_processor_parts(path, "Gemma3nProcessor", tok, Gemma3nAudioFeatureExtractor(),
                          GEMMA3N_TEMPLATE, "SiglipImageProcessorFast")
    proc_cfg = path / "processor_config.json"
    proc_cfg.write_text(json.dumps({**json.loads(proc_cfg.read_text()), "audio_seq_length": 188,
                                    "image_seq_length": 256}), encoding="utf-8")
    return path


FAMILIES = {"qwen2_audio": build_qwen2_audio, "audioflamingo3": build_audio_flamingo3,
            "qwen2_5_omni": build_qwen2_5_omni, "qwen3_omni_moe": build_qwen3_omni_moe,
            "phi4_multimodal": build_phi4_multimodal, "gemma3n": build_gemma3n}
