"""A checkpoint's tokenizer and chat template (`wgc_models.layers.chat_template`) against
transformers' ``apply_chat_template`` on a tiny tokenizer saved by transformers itself."""

from __future__ import annotations

from pathlib import Path

import pytest

from wgc_models.layers.chat_template import ChatTemplate, PromptFormat, TemplateError

# Llama 3's instruct template, shortened (header tokens around each role, `eot` after a turn)
TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' }}"
    "{{ message['content'] | trim }}{{ '<|eot_id|>' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}"
    "{% endif %}"
)
SPECIAL = ["<|begin_of_text|>", "<|eot_id|>", "<|start_header_id|>", "<|end_header_id|>"]
TEXTS = ["hello there", "  héllo, wörld!  ", "say <|eot_id|> literally"]


def _tokenizer(template: str | None):
    transformers = pytest.importorskip("transformers")
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300, special_tokens=SPECIAL, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(["hello there world, say it literally"] * 20, trainer)
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.TemplateProcessing(
        single="<|begin_of_text|> $A", special_tokens=[("<|begin_of_text|>", bos)]
    )
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<|begin_of_text|>", eos_token="<|eot_id|>"
    )
    if template is not None:
        fast.chat_template = template
    return fast


@pytest.mark.parametrize("text", TEXTS)
def test_the_template_renders_and_tokenizes_as_transformers(tmp_path: Path, text: str) -> None:
    fast = _tokenizer(TEMPLATE)
    fast.save_pretrained(tmp_path)
    ours = PromptFormat.from_folder(tmp_path)
    assert ours.template is not None
    messages = [{"role": "user", "content": text}]
    want = fast.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    want = want["input_ids"] if isinstance(want, dict) or hasattr(want, "keys") else want
    assert ours.ids(text) == list(want)
    # the specials left out (a special token typed in the text is one, as in transformers)
    body = text.strip().replace("<|eot_id|>", "")
    assert ours.text(ours.ids(text)) == f"user\n\n{body}assistant\n\n"


def test_without_a_template_the_tokenizer_adds_its_bos(tmp_path: Path) -> None:
    fast = _tokenizer(None)
    fast.save_pretrained(tmp_path)
    ours = PromptFormat.from_folder(tmp_path)
    assert ours.template is None
    assert ours.ids("hello there") == fast("hello there")["input_ids"]


def test_the_template_runs_in_a_sandbox() -> None:
    hostile = ChatTemplate("{{ messages.__class__.__mro__[1].__subclasses__() }}")
    with pytest.raises(TemplateError, match="fails"):
        hostile.render([{"role": "user", "content": "x"}])
    with pytest.raises(TemplateError, match="does not parse"):
        ChatTemplate("{% for %}")
    loud = ChatTemplate("{{ raise_exception('only user turns') }}")
    with pytest.raises(TemplateError, match="only user turns"):
        loud.render([])


def test_a_folder_without_a_tokenizer_is_refused(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"no `tokenizer\.json`"):
        PromptFormat.from_folder(tmp_path)
