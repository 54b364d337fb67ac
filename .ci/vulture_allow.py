"""What vulture (`.ci/run`) would call dead but is used by name, so it is allowed here.

Every entry says why. Anything else vulture finds in wgc/, wgc_runtime/, wgc_models/, tests/ or
benchmarks/ fails CI: remove the dead code instead of adding it here.
"""

# ruff: noqa: B018, F821

# node implementations: the runtime imports them by the `impl "module:Class"` of a .walk file
VitEncoder, VaeEncoder, CombineCfg, VaeDecoder, SnacDecoder, AudioEncoder, VisionEncoder
Thinker, Talker, Code2Wav, VideoEncoder, Predictor, RolloutPredictor, AcPredictorMpc, MpcScorer
ChunkSelector, Detokenizer
Draft, Target  # wgc_models/llama/speculative.walk

# checkpoint names and config fields the real models carry: V-JEPA 2-AC's predictor holds an
# extrinsics encoder it never uses here (its checkpoints load strictly); BAGEL's config's shift
_.extrinsics_encoder
_.timestep_shift
TextEncoder, Dit, Solver, Frontend, Encoder, Decoder  # wan22, whisper
CountingLM, Vocoder  # benchmarks/models/tts.walk

# benchmarks/hot_path.py: run by name in a child Python of the checkout measured
_.measure

# enum members the contract defines for every value the compiler can lower
FLOAT, STR, TORCH, TRITON, FLASHINFER, EAGER, INDUCTOR

# the node API: what node implementations read (NodeContext.tp_size, Node.out_dtype)
tp_size
_.out_dtype

# multiprocessing.shared_memory internals cleared so a live view keeps the mapping
_._buf
_._mmap

# the formatter's printer dispatches `<kind>_decl` methods by name
_.model_decl, _.param_decl, _.option_decl, _.node_decl, _.stream_decl, _.walk_decl
_.flow_decl, _.subflow_decl

# transformers' generation config, read by `generate()`
_.eos_token_id

# a `tokenizers.Tokenizer`'s pre-tokenizer and normalizer, set as attributes the library reads
_.pre_tokenizer
_.normalizer

# pytest hooks, marks and autouse fixtures
pytest_addoption, pytest_runtest_setup, pytest_runtest_call, pytestmark
_cwd, _no_leaks, _at_root, _in_root

# `wgc check --imports` UI tests: node classes named by `impl` strings, port lists read by name
Lazy, Plain, Renamed, _.INPUTS, _.OUTPUTS

# pyzmq's ThreadAuthenticator calls a credentials provider's `callback(domain, key)` by name
_.callback

# `wgc_runtime.host.inputs.Limits`: read by name (`getattr(limits, name)`, `--limit NAME=VALUE`)
_.file_bytes

# a module-level `__getattr__` (PEP 562): Python calls it for a missing attribute
# (`wgc_runtime.core.conductor.ConductorCore`, imported on first use)
_.__getattr__

# the OpenAI request fields the bodies declare (`wgc_runtime/host/server/schemas.py`): read by name
# through `model_dump` (`openai_fields`), each mapped to an option or refused (`openai_params`)
_.max_completion_tokens, _.presence_penalty, _.frequency_penalty, _.logit_bias, _.logprobs
_.top_logprobs, _.tools, _.tool_choice, _.function_call, _.parallel_tool_calls, _.prediction
_.web_search_options, _.reasoning_effort, _.service_tier, _.speed, _.instructions
_.stream_format, _.quality, _.background, _.moderation, _.output_format, _.output_compression

# benchmarks/host_overhead.py swaps Orpheus's node impls for these by their `impl` strings
FakeLM, FakeVocoder

# tokenizers' and transformers' objects read these attributes (a tokenizer's post-processor,
# a fast tokenizer's chat template) when the tests' tiny tokenizers are saved and applied
_.post_processor
_.chat_template
