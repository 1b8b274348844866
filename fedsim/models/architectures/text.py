"""Language models from ``transformers`` configs: ``gpt2`` (causal) and ``bert`` (masked), with LoRA adapters.

A text model is built for a text data set's shape (``fedsim.data.text.TextDataset``): the builder reads
``in_channels`` as the vocabulary size, ``num_classes`` as the outputs (the vocabulary for next-token
prediction, the classes for classification) and ``image_size`` as the sequence length. Its forward takes
(B, L) token ids and returns logits shaped for ``nn.CrossEntropyLoss`` against the data set's targets: (B, V, L)
for next-token prediction, (B, C) for classification, so clients train it exactly as they train images.

``transformers`` (about 4 s to import) and ``peft`` are imported in the builder only, never by image runs.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal, cast

import torch
from pydantic import Field
from torch import nn

from fedsim.models.registry import MODELS, ModelConfig, ModelError

#: the modality attacks check (adversary.inversion.options.AttackOptions.refusal)
TEXT = "text"


class TextModelConfig(ModelConfig):
    name: Literal["gpt2", "bert"]
    init: Literal["default"] = Field("default", description="the transformers config's own initialisation")
    task: Literal["next-token", "classification"] = Field(
        "next-token", description="the data set's task (data.task): next-token prediction or one label per sequence"
    )
    layers: int = Field(2, ge=1, le=96, description="transformer blocks")
    hidden: int = Field(64, ge=8, le=16384, description="hidden size (a multiple of heads)")
    heads: int = Field(2, ge=1, le=128, description="attention heads")
    dropout: float = Field(0.0, ge=0, lt=1, description="dropout of embeddings, attention and residuals")
    pad_id: int = Field(0, ge=0, description="the tokenizer's padding id (0 for a tokenizer fedsim trains)")
    pretrained: str | None = Field(
        None, description="a hub model or local folder to start from (transformers' from_pretrained; null = config)"
    )
    lora_rank: int | None = Field(None, ge=1, description="train LoRA adapters of this rank only (null = every weight)")
    lora_alpha: float = Field(16.0, gt=0, description="LoRA's scaling numerator (scale = alpha / rank)")
    lora_targets: list[str] | None = Field(
        None, description="modules given adapters (null = the attention projections: c_attn for gpt2, query/value)"
    )


class TextModel(nn.Module):
    """A ``transformers`` model behind the (B, L) ids -> logits interface fedsim's training uses."""

    modality: ClassVar[str] = TEXT

    def __init__(self, network: nn.Module, architecture: str, task: str, pad_id: int) -> None:
        super().__init__()
        self.network = network
        self.architecture = architecture
        self.task = task
        self.pad_id = pad_id

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        # right padding: a causal model's real tokens never see it anyway; a masked one is told by the mask
        mask = (ids != self.pad_id).long()
        # one row of positions per sequence: the models' own default is a single row broadcast over the batch,
        # and per-sample gradients (DP-SGD) of the position embeddings need each sequence's own
        positions = torch.arange(ids.shape[1], device=ids.device).expand_as(ids)
        logits = self.network(input_ids=ids, attention_mask=mask, position_ids=positions).logits
        return logits.transpose(1, 2) if self.task == "next-token" else logits

    def base(self) -> nn.Module:
        """The transformers model under any LoRA wrapper (GPT2LMHeadModel, BertForSequenceClassification, ...)."""
        network: Any = self.network
        return network.get_base_model() if hasattr(network, "get_base_model") else network


def _config(cfg: TextModelConfig, vocab_size: int, num_outputs: int, length: int) -> Any:
    import transformers

    if cfg.hidden % cfg.heads:
        raise ModelError(f"model.hidden = {cfg.hidden}: must be a multiple of model.heads = {cfg.heads}")
    if cfg.name == "gpt2":
        # num_labels: a PretrainedConfig keyword that transformers' annotations of the subclasses omit
        return transformers.GPT2Config(  # type: ignore[call-arg]
            vocab_size=vocab_size,
            n_positions=length,
            n_embd=cfg.hidden,
            n_layer=cfg.layers,
            n_head=cfg.heads,
            resid_pdrop=cfg.dropout,
            embd_pdrop=cfg.dropout,
            attn_pdrop=cfg.dropout,
            pad_token_id=cfg.pad_id,
            bos_token_id=None,  # GPT-2's own (50256) lies outside a small vocabulary
            eos_token_id=None,
            num_labels=num_outputs,
        )
    return transformers.BertConfig(  # type: ignore[call-arg]  # num_labels, as above
        vocab_size=vocab_size,
        max_position_embeddings=length,
        hidden_size=cfg.hidden,
        num_hidden_layers=cfg.layers,
        num_attention_heads=cfg.heads,
        intermediate_size=4 * cfg.hidden,
        hidden_dropout_prob=cfg.dropout,
        attention_probs_dropout_prob=cfg.dropout,
        pad_token_id=cfg.pad_id,
        num_labels=num_outputs,
    )


def _network(cfg: TextModelConfig, vocab_size: int, num_outputs: int, length: int) -> nn.Module:
    import transformers

    kind: type[transformers.PreTrainedModel] | None = {
        ("gpt2", "next-token"): transformers.GPT2LMHeadModel,
        ("gpt2", "classification"): transformers.GPT2ForSequenceClassification,
        ("bert", "classification"): transformers.BertForSequenceClassification,
    }.get((cfg.name, cfg.task))
    if kind is None:
        raise ModelError(f"model.task = '{cfg.task}': model '{cfg.name}' is trained for classification only")
    if cfg.pretrained is None:
        return kind(_config(cfg, vocab_size, num_outputs, length))
    try:
        network = kind.from_pretrained(cfg.pretrained, num_labels=num_outputs, pad_token_id=cfg.pad_id)
    except OSError as error:  # transformers' one error type for a missing folder, an unknown name and offline
        first = str(error).strip().splitlines()[0]
        raise ModelError(f"model.pretrained = '{cfg.pretrained}': cannot be loaded ({first})") from None
    if network.config.vocab_size != vocab_size:
        raise ModelError(
            f"model.pretrained = '{cfg.pretrained}': its vocabulary has {network.config.vocab_size} tokens, the "
            f"data set's tokenizer {vocab_size}; set data.tokenizer to the model's"
        )
    return network


def with_lora(network: nn.Module, cfg: TextModelConfig) -> nn.Module:
    """Freeze ``network`` and give the targets LoRA adapters (peft); the classifier head trains too."""
    import peft

    targets = cfg.lora_targets or (["c_attn"] if cfg.name == "gpt2" else ["query", "value"])
    config = peft.LoraConfig(
        r=cast(int, cfg.lora_rank),  # set: with_lora runs only then
        lora_alpha=cfg.lora_alpha,  # type: ignore[arg-type]  # peft annotates int; it only divides by it
        target_modules=targets,
        lora_dropout=0.0,
        fan_in_fan_out=cfg.name == "gpt2",  # GPT-2's Conv1D stores its weight as (in, out)
        task_type="SEQ_CLS" if cfg.task == "classification" else "CAUSAL_LM",
    )
    try:
        return peft.get_peft_model(network, config)
    except ValueError as error:
        raise ModelError(f"model.lora_targets = {targets}: {str(error).splitlines()[0]}") from None


def build_text_model(cfg: TextModelConfig, vocab_size: int, num_outputs: int, length: int) -> TextModel:
    """The model of ``cfg`` for a vocabulary, an output count and a sequence length."""
    if cfg.task == "next-token" and num_outputs != vocab_size:
        raise ModelError(
            f"model.task = 'next-token': the data set has {num_outputs} classes, not a vocabulary of {vocab_size}; "
            "set data.task: next-token, or model.task: classification"
        )
    network = _network(cfg, vocab_size, num_outputs, length)
    if cfg.lora_rank is not None:
        network = with_lora(network, cfg)
    return TextModel(network, cfg.name, cfg.task, cfg.pad_id)


MODELS.register(
    "gpt2",
    help="a GPT-2-style causal transformer from a transformers config (model.layers, hidden, heads) or "
    "model.pretrained; next-token prediction or classification; LoRA with model.lora_rank",
    config=TextModelConfig,
)(build_text_model)
MODELS.register(
    "bert",
    help="a BERT-style masked transformer from a transformers config or model.pretrained; classification; "
    "LoRA with model.lora_rank",
    config=TextModelConfig,
)(build_text_model)
