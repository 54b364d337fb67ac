"""The tiny byte-level BPE tokenizers the random-weight examples speak through, and the
script that trains them (``python -m wgc_models._shared.tiny_tokenizers`` rewrites
the shipped files; a test checks that retraining gives them back byte for byte).

One BPE is trained on the small English `CORPUS` below (GPT-2's byte-level pre-tokenizer and
decoder, as Llama 3's and Qwen's tokenizers are): the 256 byte tokens, then merges up to
`REGULAR` ids. Each family's file adds its special tokens after those, where the real
tokenizers have theirs (at the end of the vocabulary), so the tiny vocabulary is `SIZE` = 512
ids: `orpheus/tokenizer.json` with Llama 3's specials (``<|begin_of_text|>`` first, then
``<|end_of_text|>``, reserved ids and ``<|eot_id|>`` nine after the first, as 128000 / 128009 in
the real one), `qwen3_omni/tokenizer.json` with Qwen's chat, audio, vision and TTS specials;
`llama/tokenizer.json` with Llama 3's and its post-processor (``<|begin_of_text|>`` first;
the tiny Llama's text placements: its param ``tokenizer = "tiny"``) and
`bagel/tokenizer.json` with Qwen's (BAGEL's tokenizer is Qwen2.5's, its ``<|im_start|>``,
``<|im_end|>``, ``<|vision_start|>`` and ``<|vision_end|>`` among them: the ``tiny-text``
model); `pi05/tokenizer.json` with Gemma's specials (``<pad>``, ``<eos>``, ``<bos>``, ``<unk>``,
as ids 0-3 of PaliGemma's vocabulary, then its chat turns and eight of its ``<locNNNN>``
tokens; π0.5's tiny prompt: `wgc_models.pi05.text`). The tiny configs carry the ids these files
give (a test checks them).
"""

from __future__ import annotations

from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

HERE = Path(__file__).resolve().parents[1]
SIZE = 512
SPECIALS = 16
REGULAR = SIZE - SPECIALS  # ids of the trained vocabulary: 256 bytes + merges

ORPHEUS_SPECIALS = (
    "<|begin_of_text|>",
    "<|end_of_text|>",
    "<|reserved_special_token_0|>",
    "<|reserved_special_token_1|>",
    "<|finetune_right_pad_id|>",
    "<|reserved_special_token_2|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eom_id|>",
    "<|eot_id|>",
    *(f"<|reserved_special_token_{i}|>" for i in range(3, 9)),
)
QWEN_SPECIALS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|audio_start|>",
    "<|audio_end|>",
    "<|audio_pad|>",
    "<|tts_pad|>",
    "<|tts_bos|>",
    "<|tts_eos|>",
    "<|image_pad|>",
    "<|video_pad|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
)
# Gemma's (PaliGemma's) specials: its first six ids, its turn markers, then location tokens
# as PaliGemma appends them (1024 ``<locNNNN>`` from id 256000; eight here)
GEMMA_SPECIALS = (
    "<pad>",
    "<eos>",
    "<bos>",
    "<unk>",
    "<mask>",
    "[@BOS@]",
    "<start_of_turn>",
    "<end_of_turn>",
    *(f"<loc{i:04d}>" for i in range(8)),
)
FILES = {
    "orpheus": ORPHEUS_SPECIALS,
    "qwen3_omni": QWEN_SPECIALS,
    "llama": ORPHEUS_SPECIALS,  # Llama 3's specials
    "bagel": QWEN_SPECIALS,  # Qwen2.5's, BAGEL's four among them
    "pi05": GEMMA_SPECIALS,  # PaliGemma's
}

CORPUS = """\
The user asked the assistant to read the story aloud, and the assistant spoke in a calm voice.
Hello there! How are you today? I am well, thank you, and I hope you are well too.
The system says: you are a helpful assistant who can hear, see, speak and write.
A voice model turns text into speech: it reads the words and then it sings them back.
tara: hello, my name is Tara, and I like to talk about the weather and the sea.
leah: good morning, everyone. It is a bright and sunny morning in the city.
jess: I think that we should go to the park this afternoon, if it does not rain.
leo: the train leaves at seven, so we have to be at the station before then.
dan: let me tell you a story about a ship that sailed across the ocean.
mia: can you hear me? I am speaking slowly so that every word is clear.
zac: the music was loud, but the singer's voice was louder than the drums.
zoe: thank you for listening, and have a wonderful evening with your family.
The user said hello, and the assistant answered hello back with a smile in its voice.
Speech is sound that carries words; audio is a wave sampled many thousand times a second.
Every frame of sound is a small piece of time, and every token is a small piece of text.
When the model speaks, the listener hears the answer while the model is still thinking.
Good evening. The news today is about the river, the mountains and the people who live there.
She sells sea shells by the sea shore, and the shells she sells are surely sea shells.
The quick brown fox jumps over the lazy dog, and then the dog wakes up and barks.
Please say that again, a little slower this time, so that I can write it down.
What is the time? It is half past three in the afternoon, and the sun is still high.
The assistant can answer questions, tell stories, translate words and read poems aloud.
user: what is the weather like? assistant: it is warm and windy, with a little rain.
user: tell me a joke. assistant: why did the sound wave cross the road? to get to the ear.
system: speak clearly and kindly, and keep every answer short and simple to follow.
One, two, three, four, five, six, seven, eight, nine, ten: the numbers count the beats.
The children laughed and the birds sang, and the whole garden was full of happy noise.
I would like to hear a song about the moon, the stars and the long quiet night.
Listen to the rain on the window; it taps and ticks like a clock that never stops.
Thank you very much. You are welcome. Have a nice day, and see you again tomorrow.
system
You are a friendly voice assistant.
user
Hello, can you say something nice?
assistant
Of course. You are doing a great job, and today is a good day.
user
Read this sentence out loud, please.
assistant
Sure, here it is, read slowly and clearly.
system
Answer in one short sentence.
user
Where is the station?
assistant
The station is two streets away, next to the old market.
"""


def train() -> Tokenizer:
    """The shared byte-level BPE (no special tokens yet): `REGULAR` ids."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=REGULAR,
        min_frequency=1,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    # several copies, so the dialogue words ("user", "assistant", ...) become single tokens
    tok.train_from_iterator([CORPUS] * 4, trainer=trainer)
    size = tok.get_vocab_size()
    if size != REGULAR:
        raise RuntimeError(f"the corpus gave {size} regular ids, not {REGULAR}: lengthen it")
    return tok


def build(family: str) -> Tokenizer:
    tok = train()
    tok.add_special_tokens(list(FILES[family]))  # pyright: ignore[reportUnknownMemberType] (stub: untyped list)
    if family == "llama":  # Llama 3's post-processor: <|begin_of_text|> before the text
        bos = FILES[family][0]
        tok.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A",
            pair=f"{bos} $A {bos} $B:1",
            special_tokens=[(bos, REGULAR)],
        )
    return tok


def path_of(family: str) -> Path:
    return HERE / family / "tokenizer.json"


def main() -> None:
    for family in FILES:
        build(family).save(str(path_of(family)), pretty=False)
        print(f"wrote {path_of(family)}")


if __name__ == "__main__":
    main()
