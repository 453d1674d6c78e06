"""Loading checkpoints: bad input gets an error that names the problem; tokenizers read as transformers reads them."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from assignment.model.checkpoint import load_checkpoint, save_checkpoint
from assignment.model.config import CheckpointError, ModelConfig
from assignment.model.llama import Transformer, decode_one_token, prefill
from assignment.model.tokenizer import Tokenizer

pytestmark = pytest.mark.kit
CONFIG = dict(
    vocab_size=300,
    hidden_size=64,
    intermediate_size=96,
    num_hidden_layers=2,
    num_attention_heads=2,
    num_key_value_heads=1,
    head_dim=32,
    bos_token_id=1,
    eos_token_id=[2],
)
TEXT = (
    "The history of the world is long. Once upon a time there was a small model that learned to write. "
    "Naïve café ☕ 🙂 — it read the same text again and again.\n"
) * 20
TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}{{ m['role'] | capitalize }}: {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}Assistant:{% endif %}"
)


def write_tokenizer(folder, add_bos: bool = True) -> None:
    from tokenizers import Tokenizer as Backend
    from tokenizers import decoders, models, pre_tokenizers, processors, trainers

    backend = Backend(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<unk>", "<s>", "</s>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    backend.train_from_iterator([TEXT], trainer)
    if add_bos:
        backend.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    backend.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "bos_token": "<s>",
                "eos_token": {
                    "__type": "AddedToken",
                    "content": "</s>",
                    "lstrip": False,
                    "normalized": False,
                    "rstrip": False,
                    "single_word": False,
                    "special": True,
                },
                "chat_template": TEMPLATE,
                "tokenizer_class": "PreTrainedTokenizerFast",
            }
        )
    )


@pytest.fixture
def checkpoint(tmp_path):
    torch.manual_seed(0)
    model = Transformer(ModelConfig(**CONFIG))
    save_checkpoint(model, tmp_path, dtype=torch.float32, generation_config={"eos_token_id": [2, 7]})
    write_tokenizer(tmp_path)
    return tmp_path


def rewrite_config(folder, **changes):
    raw = json.loads((folder / "config.json").read_text())
    raw.update(changes)
    (folder / "config.json").write_text(json.dumps(raw))


def test_saved_checkpoint_round_trips(checkpoint):
    loaded = load_checkpoint(checkpoint, max_seq_len=16)
    assert loaded.config.num_key_value_heads == 1 and loaded.model.max_seq_len == 16
    assert loaded.tokenizer.stop_ids == (2, 7), "stop tokens come from generation_config.json and the config"
    logits = prefill(loaded.model, torch.tensor([[5, 6, 7]]), torch.arange(3))
    assert logits.shape == (1, 300) and logits.dtype == torch.float32


@pytest.mark.parametrize("missing", ["config.json", "model.safetensors", "tokenizer.json"])
def test_missing_file_is_named(checkpoint, missing):
    (checkpoint / missing).unlink()
    with pytest.raises(CheckpointError, match=missing.replace(".", r"\.")):
        load_checkpoint(checkpoint)


def test_not_a_directory(tmp_path):
    with pytest.raises(CheckpointError, match="not a checkpoint directory"):
        load_checkpoint(tmp_path / "nowhere")


def test_unsupported_architecture_is_named(checkpoint):
    rewrite_config(checkpoint, architectures=["GPT2LMHeadModel"])
    with pytest.raises(CheckpointError, match="GPT2LMHeadModel"):
        load_checkpoint(checkpoint)


def test_unsupported_rope_scaling_is_named(checkpoint):
    rewrite_config(checkpoint, rope_scaling={"rope_type": "yarn", "factor": 4.0})
    with pytest.raises(CheckpointError, match="yarn"):
        load_checkpoint(checkpoint)


def test_missing_tensor_is_named(checkpoint):
    tensors = load_file(checkpoint / "model.safetensors")
    del tensors["model.layers.1.mlp.up_proj.weight"]
    save_file(tensors, checkpoint / "model.safetensors")
    with pytest.raises(CheckpointError, match=r"model\.layers\.1\.mlp\.up_proj\.weight"):
        load_checkpoint(checkpoint)


def test_wrong_shape_is_named(checkpoint):
    tensors = load_file(checkpoint / "model.safetensors")
    tensors["model.layers.0.self_attn.k_proj.weight"] = torch.zeros(64, 64)
    save_file(tensors, checkpoint / "model.safetensors")
    with pytest.raises(CheckpointError, match=r"model\.layers\.0\.self_attn\.k_proj\.weight has shape \(64, 64\)"):
        load_checkpoint(checkpoint)


def test_missing_shard_is_named(checkpoint):
    index = {
        "weight_map": {name: "model-00001-of-00002.safetensors" for name in load_file(checkpoint / "model.safetensors")}
    }
    (checkpoint / "model.safetensors").unlink()
    (checkpoint / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(CheckpointError, match="model-00001-of-00002.safetensors"):
        load_checkpoint(checkpoint)


def test_head_dim_the_kernels_lack_is_refused_for_kernel_attention(checkpoint):
    rewrite_config(checkpoint, head_dim=48, hidden_size=96)
    with pytest.raises(CheckpointError):  # the tensors no longer fit either: named as such
        load_checkpoint(checkpoint)
    from assignment import tasks
    from assignment.model import attention

    causal_kernel = tasks.attention("t5")
    with pytest.raises(ValueError, match="head_dim 48"):
        attention.get(causal_kernel, 48, "cuda")
    with pytest.raises(ValueError, match="GPU"):
        attention.get(causal_kernel, 64, "cpu")
    with pytest.raises(ValueError, match="not one the model knows"):
        attention.get("flash", 64, "cpu")


def test_prompt_longer_than_the_cache_is_refused(checkpoint):
    model = load_checkpoint(checkpoint, max_seq_len=8).model
    with pytest.raises(ValueError, match="capacity of 8 tokens"):
        prefill(model, torch.zeros(1, 9, dtype=torch.long), torch.arange(9))
    prefill(model, torch.zeros(1, 8, dtype=torch.long), torch.arange(8))
    with pytest.raises(ValueError, match="capacity"):
        decode_one_token(model, torch.zeros(1, 1, dtype=torch.long), torch.tensor([8]))


def test_positions_must_be_consecutive_and_tokens_in_range(checkpoint):
    model = load_checkpoint(checkpoint, max_seq_len=8).model
    with pytest.raises(ValueError, match="consecutive"):
        prefill(model, torch.zeros(1, 3, dtype=torch.long), torch.tensor([0, 2, 3]))
    with pytest.raises(ValueError, match="token ids must lie in"):
        prefill(model, torch.full((1, 2), 300), torch.arange(2))
    with pytest.raises(ValueError, match="one token per sequence"):
        decode_one_token(model, torch.zeros(1, 2, dtype=torch.long), torch.tensor([0]))


def test_sliding_window_longer_than_supported_is_refused(checkpoint):
    rewrite_config(checkpoint, architectures=["MistralForCausalLM"], model_type="mistral", sliding_window=16)
    with pytest.raises(ValueError, match="sliding window of 16"):
        load_checkpoint(checkpoint, max_seq_len=32)
    assert load_checkpoint(checkpoint).model.max_seq_len == 16


def test_tokenizer_matches_transformers(checkpoint):
    transformers = pytest.importorskip("transformers")
    theirs = transformers.AutoTokenizer.from_pretrained(checkpoint)
    ours = Tokenizer.from_dir(checkpoint)
    for text in ("The history of", " naïve café ☕ 🙂", "", "Once upon a time\n\nthere"):
        assert ours.encode(text) == theirs(text)["input_ids"], text
        assert ours.encode(text, add_bos=False) == theirs(text, add_special_tokens=False)["input_ids"], text
        ids = ours.encode(text)
        assert ours.decode(ids) == theirs.decode(ids, skip_special_tokens=True)
    messages = [{"role": "user", "content": "Tell me about tea."}]
    assert ours.apply_chat_template(messages) == theirs.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True
    )


def test_cut_utf8_character_decodes_to_replacement_char(checkpoint):
    tok = Tokenizer.from_dir(checkpoint)
    ids = tok.encode("🙂", add_bos=False)
    pieces = [tok.decode(ids[:n]) for n in range(1, len(ids) + 1)]
    assert pieces[-1] == "🙂"
    if len(ids) > 1:
        assert pieces[0].endswith("\ufffd"), "a partial character must decode to U+FFFD (what streaming detects)"


def test_bos_added_when_the_config_asks_and_the_tokenizer_does_not(checkpoint):
    write_tokenizer(checkpoint, add_bos=False)
    config = json.loads((checkpoint / "tokenizer_config.json").read_text())
    assert Tokenizer.from_dir(checkpoint).encode("The")[0] != 1
    (checkpoint / "tokenizer_config.json").write_text(json.dumps({**config, "add_bos_token": True}))
    assert Tokenizer.from_dir(checkpoint).encode("The")[0] == 1


def test_no_chat_template_is_a_clear_error(checkpoint):
    config = json.loads((checkpoint / "tokenizer_config.json").read_text())
    del config["chat_template"]
    (checkpoint / "tokenizer_config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="no chat template"):
        Tokenizer.from_dir(checkpoint).apply_chat_template([{"role": "user", "content": "hi"}])


def test_fused_projections_give_the_same_logits_and_save_the_same_tensors(tmp_path):
    torch.manual_seed(0)
    model = Transformer(ModelConfig(**CONFIG)).eval().requires_grad_(False)
    tokens = torch.randint(0, CONFIG["vocab_size"], (2, 9))
    before = model(tokens)
    state = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    model.fuse_projections()
    after = model(tokens)
    assert (after - before).abs().max().item() < 1e-6, "fusing q/k/v and gate/up changed the logits"
    attn = model.layers[0].self_attn
    assert (
        attn.k_proj.weight.data_ptr()
        == attn.qkv_weight[CONFIG["num_attention_heads"] * CONFIG["head_dim"] :].data_ptr()
    )
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, state[name]), f"{name} changed when fusing"
    save_checkpoint(model, tmp_path, dtype=torch.float32)  # views of one matrix must still save one by one
    for name, tensor in load_file(tmp_path / "model.safetensors").items():
        assert torch.equal(tensor, state[name.removeprefix("model.")]), name
