"""Qwen3-Omni's prompt from the checkpoint's chat template (`wgc_models.qwen3_omni.prompt`),
segment by segment, against transformers' ``apply_chat_template`` on the same tokenizer.

The template is a representative one in the published Qwen3-Omni form (ChatML turns; a user
turn's content a list of parts, an audio part ``<|audio_start|><|audio_pad|><|audio_end|>``; an
optional system turn), written here: the exact published text was not at hand."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from wgc_models._shared.speech import TINY_TOKENIZERS, text_codec
from wgc_models.qwen3_omni.config import TINY
from wgc_models.qwen3_omni.omni_config import OmniConfig
from wgc_models.qwen3_omni.prompt import ChatPrompt, audio_ids
from wgc_models.qwen3_omni.template import TemplatePrompt, chat_prompt
from wgc_runtime.contract.node import NodeError

TEMPLATE = (
    "{%- if messages[0]['role'] == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}{%- if message['role'] != 'system' %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' }}"
    "{%- if message['content'] is string %}{{- message['content'] }}"
    "{%- else %}{%- for part in message['content'] %}"
    "{%- if part['type'] == 'audio' %}{{- '<|audio_start|><|audio_pad|><|audio_end|>' }}"
    "{%- elif part['type'] == 'image' %}{{- '<|vision_start|><|image_pad|><|vision_end|>' }}"
    "{%- elif part['type'] == 'text' %}{{- part['text'] }}{%- endif %}"
    "{%- endfor %}{%- endif %}"
    "{{- '<|im_end|>\\n' }}{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
# a request's segments: text, or audio of so many encoder frames
CONVERSATIONS: list[list[str | int]] = [
    ["hello there"],
    [3],
    ["  héllo, wörld!  ", 2, "and\nthen"],
    [4, "what is said?"],
]


def _folder(tmp_path: Path, template: str | None) -> Path:
    shutil.copy(TINY_TOKENIZERS / "qwen3_omni" / "tokenizer.json", tmp_path / "tokenizer.json")
    config: dict[str, object] = {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}
    if template is not None:
        config["chat_template"] = template
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    return tmp_path


def _ours(folder: Path) -> TemplatePrompt | ChatPrompt:
    codec = text_codec("", "qwen3_omni")
    cfg = OmniConfig.from_dict(TINY)
    return chat_prompt({"checkpoint": str(folder)}, codec, cfg.tokens, audio_ids(codec, cfg))


def _segments(prompt: TemplatePrompt | ChatPrompt, segments: list[str | int]) -> list[int]:
    ids: list[int] = []
    for i, seg in enumerate(segments):
        opened = i > 0
        ids += prompt.text(seg, opened) if isinstance(seg, str) else prompt.audio(seg, opened)
    return ids + prompt.reply(True)


@pytest.mark.parametrize("segments", CONVERSATIONS)
def test_segments_equal_transformers_apply_chat_template(
    tmp_path: Path, segments: list[str | int]
) -> None:
    transformers = pytest.importorskip("transformers")
    folder = _folder(tmp_path, TEMPLATE)
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_file=str(folder / "tokenizer.json"), chat_template=TEMPLATE
    )
    parts = [
        {"type": "text", "text": s} if isinstance(s, str) else {"type": "audio", "audio": "a.wav"}
        for s in segments
    ]
    want = fast.apply_chat_template(
        [{"role": "user", "content": parts}], add_generation_prompt=True, tokenize=True
    )
    want = list(want["input_ids"] if hasattr(want, "keys") else want)
    pad = fast.convert_tokens_to_ids("<|audio_pad|>")
    frames = iter(s for s in segments if isinstance(s, int))
    expanded = [i for t in want for i in ([pad] * next(frames) if t == pad else [t])]
    prompt = _ours(folder)
    assert isinstance(prompt, TemplatePrompt)
    assert _segments(prompt, segments) == expanded
    # the built-in layout is this same ChatML form: the fallback agrees with the template
    assert _segments(_ours(_folder(tmp_path, None)), segments) == expanded


def test_a_system_turn_the_template_writes_is_in_the_opening(tmp_path: Path) -> None:
    system = "{{- '<|im_start|>system\\nYou are a helper.<|im_end|>\\n' }}"
    prompt = _ours(_folder(tmp_path, system + TEMPLATE))
    assert isinstance(prompt, TemplatePrompt)
    codec = text_codec("", "qwen3_omni")
    assert codec.decode(prompt.whole("hi")) == "system\nYou are a helper.\nuser\nhi\nassistant\n"


def test_a_folder_without_a_template_keeps_the_built_in_layout(tmp_path: Path) -> None:
    assert isinstance(_ours(_folder(tmp_path, None)), ChatPrompt)


@pytest.mark.parametrize(
    "bad",
    [
        TEMPLATE.replace("{{- part['text'] }}", "{{- part['text'] | upper }}"),
        TEMPLATE.replace("{{- part['text'] }}", "{{- part['text'] + ' ' }}"),
        "{{ messages[0]['content'][0]['text'] }}{% if add_generation_prompt %}x{% endif %}",
        "{% for m in messages %}",
    ],
)
def test_a_template_not_rendered_part_by_part_is_refused(tmp_path: Path, bad: str) -> None:
    with pytest.raises(NodeError, match="chat template"):
        _ours(_folder(tmp_path, bad))
