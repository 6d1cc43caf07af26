"""The live-export zoo: torch modules that the official ExecuTorch exporter turns into programs at test time.

Each Model names a torch module (seeded weights), its example inputs, and the program forms it is exported in.
Sizes are small on purpose: the whole zoo, exported once and cached, has to fit in CI's time budget on two
cores, and the point is coverage of what exporters emit, not of big tensors. Only the dev venv imports this
(torch, torchvision, transformers); etnp never does.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Optional

import torch

# Program forms. Every model is exported as "portable" (no delegate) and "xnnpack" unless its `forms` says
# otherwise; the others are asked for per model.
PORTABLE = "portable"
XNNPACK = "xnnpack"
INT8 = "xnnpack_int8"  # PT2E static int8, per-channel weights (XNNPACK quantizer)
QD8 = "xnnpack_qd8"  # dynamically quantized int8 activations, per-channel int8 weights
W4 = "xnnpack_8da4w"  # torchao: int8 dynamic activations, 4-bit groupwise weights
PTD = "xnnpack_ptd"  # XNNPACK, weights in a .ptd
PORTABLE_PTD = "portable_ptd"  # portable, constants in a .ptd
BUNDLED = "bundled"  # a BundledProgram (.bpte) with the example inputs and eager outputs as its test case
DEFAULT_FORMS = (PORTABLE, XNNPACK)
# Language-model forms, made by ExecuTorch's LLM export (export_llama) with a KV cache and its custom SDPA:
LLM_FP32 = "llm_fp32"  # XNNPACK fp32 linears
LLM_PORTABLE = "llm_portable"  # no delegate: every linear on the portable operators
LLM_8DA4W = "llm_8da4w_g32"  # int8 dynamic activations, 4-bit weights in groups of 32, 8-bit embedding
LLM_8DA4W_G128 = "llm_8da4w_g128"  # groups of 128, 4-bit embedding in groups of 32
LLM_QKV = "llm_8da4w_qkv"  # 8da4w with the int8 KV cache and the quantized SDPA
LLM_FORMS = (LLM_FP32, LLM_PORTABLE, LLM_8DA4W, LLM_8DA4W_G128, LLM_QKV)
# What the language-model forms ask of export_llama: the quantization config and the model config.
LLM_FORM_OPTIONS = {
    LLM_FP32: {"xnnpack": True},
    LLM_PORTABLE: {"xnnpack": False},
    LLM_8DA4W: {"xnnpack": True, "qmode": "8da4w", "group_size": 32, "embedding_quantize": "8,0"},
    LLM_8DA4W_G128: {"xnnpack": True, "qmode": "8da4w", "group_size": 128, "embedding_quantize": "4,32"},
    LLM_QKV: {"xnnpack": True, "qmode": "8da4w", "group_size": 32, "quantize_kv_cache": True},
}
# Language-model forms made by optimum-executorch (its main_export, task "text-generation") from a transformers
# model saved to a folder: transformers' static KV cache, attention through ExecuTorch's custom SDPA
# (attn_implementation="custom_sdpa"); forward(input_ids [1, n], cache_position [n]) -> logits [1, n, vocab].
OPTIMUM_XNNPACK = "optimum_xnnpack"  # recipe "xnnpack", fp32
OPTIMUM_PORTABLE = "optimum_portable"  # recipe "portable": no delegate
OPTIMUM_8DA4W = "optimum_8da4w"  # xnnpack; int8 dynamic activations, 4-bit weights in groups of 32, int8 embedding
OPTIMUM_FORMS = (OPTIMUM_XNNPACK, OPTIMUM_8DA4W)
# What the optimum forms pass to main_export (its qlinear groups are always 32, its qembedding "8w" per row).
OPTIMUM_FORM_OPTIONS = {
    OPTIMUM_XNNPACK: {"recipe": "xnnpack"},
    OPTIMUM_PORTABLE: {"recipe": "portable"},
    OPTIMUM_8DA4W: {"recipe": "xnnpack", "qlinear": "8da4w", "qembedding": "8w"},
}
LLM_PREFILL = 64  # tokens of the first call
LLM_DECODE_STEPS = 32  # single-token calls after it
LLM_MAX_SEQ = 128


@dataclasses.dataclass
class Model:
    name: str
    build: Callable[[], torch.nn.Module]
    inputs: Callable[[torch.Generator], tuple]
    forms: tuple = DEFAULT_FORMS
    # torch.export dynamic_shapes for forward (None: static). Dynamic programs are run at several sizes.
    dynamic_shapes: Optional[Callable[[], object]] = None
    dynamic_inputs: Optional[Callable[[torch.Generator], list]] = None  # further input tuples, other sizes
    # Further methods: name -> (module factory over the built module, example inputs factory).
    extra_methods: dict = dataclasses.field(default_factory=dict)
    calibration: int = 4  # PT2E calibration batches (static int8)
    # A stateful program (mutable buffers, a KV cache): forward's case is this sequence of calls, made in order
    # on one loaded method.
    calls: Optional[Callable[[torch.Generator], list]] = None
    # A language model for ExecuTorch's LLM export: its ModelArgs (llama_transformer's params.json) and model
    # config overrides; `build` and `inputs` are unused.
    llm: Optional[dict] = None
    # A transformers decoder for optimum-executorch: its configuration class (in transformers) and arguments;
    # `build` and `inputs` are unused.
    optimum: Optional[dict] = None


def _randn(*shape):
    return lambda g: (torch.randn(*shape, generator=g),)


def _seeded(factory):
    def build():
        torch.manual_seed(0)
        model = factory()
        # Random running statistics, so that batch norms do real work (the default ones are identities).
        for m in model.modules():
            if isinstance(m, (torch.nn.BatchNorm1d, torch.nn.BatchNorm2d)):
                m.running_mean.uniform_(-0.1, 0.1)
                m.running_var.uniform_(0.5, 1.5)
        return model.eval()

    return build


# --- vision (torchvision architectures, seeded weights) --------------------------------------------------------

def _tv(name, **kwargs):
    def factory():
        import torchvision

        return getattr(torchvision.models, name)(weights=None, **kwargs)

    return _seeded(factory)


def _vit():
    import torchvision

    vit = torchvision.models.VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=2,
                                               hidden_dim=64, mlp_dim=128, num_classes=10)
    # torchvision starts the classification head at zero, which would make every output its (zero) bias.
    torch.nn.init.normal_(vit.heads.head.weight, std=0.5)
    return vit


class _SsdLiteHeads(torch.nn.Module):
    """SSDLite320-MobileNetV3's network: backbone and heads, raw box regressions and class logits. The
    anchor decoding and NMS after them are host-side post-processing, which no exported program carries."""

    def __init__(self):
        super().__init__()
        import torchvision

        det = torchvision.models.detection.ssdlite320_mobilenet_v3_large(weights=None, weights_backbone=None,
                                                                         num_classes=11)
        self.backbone, self.head = det.backbone, det.head

    def forward(self, x):
        features = list(self.backbone(x).values())
        out = self.head(features)
        return out["bbox_regression"], out["cls_logits"]


class _SegmentationLogits(torch.nn.Module):
    def __init__(self):
        super().__init__()
        import torchvision

        self.net = torchvision.models.segmentation.deeplabv3_mobilenet_v3_large(
            weights=None, weights_backbone=None, num_classes=5, aux_loss=False)

    def forward(self, x):
        return self.net(x)["out"]


# --- sequence and audio ---------------------------------------------------------------------------------------

class _Recurrent(torch.nn.Module):
    def __init__(self, cell):
        super().__init__()
        self.rnn = cell(input_size=16, hidden_size=32, num_layers=2, batch_first=True)
        self.head = torch.nn.Linear(32, 4)

    def forward(self, x):
        y, _ = self.rnn(x)
        return self.head(y)


class _Conv1dNet(torch.nn.Module):
    """A keyword-spotting style 1-D convolution stack over 40 mel bands."""

    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(
            torch.nn.Conv1d(40, 32, 5, padding=2), torch.nn.BatchNorm1d(32), torch.nn.ReLU(),
            torch.nn.Conv1d(32, 32, 3, stride=2, padding=1, groups=32), torch.nn.Conv1d(32, 48, 1), torch.nn.ReLU(),
            torch.nn.AdaptiveAvgPool1d(1), torch.nn.Flatten(), torch.nn.Linear(48, 12))

    def forward(self, x):
        return self.body(x)


class _Upsampler(torch.nn.Module):
    """A decoder-style upsampling stack (segmentation heads, autoencoders, generators): transposed convolutions,
    one with an output padding."""

    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(
            torch.nn.Conv2d(3, 16, 3, stride=2, padding=1), torch.nn.ReLU(),
            torch.nn.ConvTranspose2d(16, 8, 3, stride=2, padding=1, output_padding=1), torch.nn.ReLU(),
            torch.nn.ConvTranspose2d(8, 4, 4, stride=2, padding=1))

    def forward(self, x):
        return self.body(x)


# --- small programs for the program forms -----------------------------------------------------------------------

class _SmallCnn(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.features = torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
            torch.nn.Conv2d(8, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
            torch.nn.Flatten())
        self.classifier = torch.nn.Linear(16, 10)

    def forward(self, x):
        return torch.softmax(self.classifier(self.features(x)), dim=-1)


class _Features(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.features = model.features

    def forward(self, x):
        return self.features(x)


class _Mlp(torch.nn.Module):
    def __init__(self, d_in=64, d_hidden=256, d_out=32):
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(d_in, d_hidden), torch.nn.Linear(d_hidden, d_hidden)
        self.fc3 = torch.nn.Linear(d_hidden, d_out)

    def forward(self, x):
        return self.fc3(torch.nn.functional.gelu(self.fc2(torch.relu(self.fc1(x)))))


# --- language (transformers configurations, random weights, built offline) ---------------------------------------

class _HfLogits(torch.nn.Module):
    """A transformers model called on token ids (and a mask where the architecture takes one); returns the first
    output as a plain tensor (exported programs return tensors, not ModelOutput objects)."""

    def __init__(self, model, with_mask):
        super().__init__()
        self.model, self.with_mask = model, with_mask

    def forward(self, ids, mask=None):
        if self.with_mask:
            return self.model(input_ids=ids, attention_mask=mask)[0]
        return self.model(input_ids=ids)[0]


def _bert():
    from transformers import BertConfig, BertModel

    config = BertConfig(vocab_size=512, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=128, max_position_embeddings=64, attn_implementation="eager")
    return _HfLogits(BertModel(config, add_pooling_layer=False), with_mask=True)


def _encoder():
    return torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(
        d_model=64, nhead=4, dim_feedforward=128, dropout=0.0, batch_first=True), num_layers=2,
        enable_nested_tensor=False)


def _gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(vocab_size=512, n_positions=64, n_embd=64, n_layer=2, n_head=4,
                        attn_implementation="eager", use_cache=False)
    return _HfLogits(GPT2LMHeadModel(config), with_mask=False)


class _LlamaWithCache(torch.nn.Module):
    """A Llama-style decoder with a static KV cache kept in the program's mutable buffers, through transformers'
    ExecuTorch export wrapper: forward(token ids [1, n], cache positions [n]) -> logits [1, n, vocab]."""

    def __init__(self):
        super().__init__()
        from transformers import LlamaConfig, LlamaForCausalLM
        from transformers.integrations.executorch import TorchExportableModuleForDecoderOnlyLM

        config = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
        model = LlamaForCausalLM(config).eval()
        model.generation_config.cache_implementation = "static"
        model.generation_config.cache_config = {"batch_size": 1, "max_cache_len": 32}
        self.wrapper = TorchExportableModuleForDecoderOnlyLM(model, batch_size=1, max_cache_len=32)

    def forward(self, ids, positions):
        # The wrapper's own forward drops cache_position; the static-cache module it wraps takes it.
        return self.wrapper.model(input_ids=ids, cache_position=positions)

    def torch_export(self, ids, positions):
        """The wrapper's own export (plain torch.export of it does not lower: its cache must be registered)."""
        return self.wrapper.export(ids, cache_position=positions)


def _tokens(vocab, *shape, mask=False):
    def make(g):
        ids = torch.randint(0, vocab, shape, generator=g)
        return (ids, torch.ones(shape, dtype=torch.long)) if mask else (ids,)

    return make


def _sequence_dim():
    seq = torch.export.Dim("seq", min=2, max=32)
    return {"ids": {1: seq}, "mask": {1: seq}}


def _batch_dim():
    return {"x": {0: torch.export.Dim("batch", min=1, max=8)}}


# --- language models for ExecuTorch's LLM export (llama_transformer configurations, random weights) ------------
# Small sizes of real architectures: what each architecture changes in the graph (GQA ratio, QKV bias, QK norm,
# partial rotary, tied embeddings, GELU MLP and scaled embeddings) is kept, the widths are not. The in-features
# are multiples of 128, so that groups of 128 fit.

def _llm(**params):
    base = {"dim": 128, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2, "hidden_dim": 256, "vocab_size": 512,
            "norm_eps": 1e-5, "rope_theta": 10000.0}
    base.update(params)
    return {"params": base, "model": {}}


def _smollm():
    # (SmolLM ties its output projection to the embedding; export_llama ties them only with torchao's
    # quantization of both, so the ties are not exported here.)
    return _llm(n_heads=6, n_kv_heads=2, dim=384, head_dim=64, hidden_dim=1024, rope_theta=100000.0)


# --- transformers decoders for optimum-executorch (configurations, random weights, saved to a folder offline) ----

def _hf_decoder(config_class, **overrides):
    base = {"vocab_size": 512, "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": LLM_MAX_SEQ,
            "bos_token_id": 1, "eos_token_id": 2, "tie_word_embeddings": False}
    base.update(overrides)
    return {"config": config_class, "params": base}


MODELS = [
    # vision
    Model("resnet18", _tv("resnet18"), _randn(1, 3, 64, 64), forms=(PORTABLE, XNNPACK, INT8)),
    Model("mobilenet_v2", _tv("mobilenet_v2"), _randn(1, 3, 64, 64), forms=(PORTABLE, XNNPACK, INT8, PTD)),
    Model("mobilenet_v3_small", _tv("mobilenet_v3_small"), _randn(1, 3, 64, 64)),
    Model("efficientnet_b0", _tv("efficientnet_b0"), _randn(1, 3, 64, 64)),
    Model("squeezenet1_1", _tv("squeezenet1_1"), _randn(1, 3, 64, 64)),
    Model("shufflenet_v2_x0_5", _tv("shufflenet_v2_x0_5"), _randn(1, 3, 64, 64)),
    Model("vit_tiny", _seeded(_vit), _randn(1, 3, 32, 32)),
    Model("deeplabv3_mobilenet_v3", _seeded(_SegmentationLogits), _randn(1, 3, 64, 64)),
    Model("ssdlite_mobilenet_v3", _seeded(_SsdLiteHeads), _randn(1, 3, 128, 128)),
    Model("upsampler", _seeded(_Upsampler), _randn(1, 3, 32, 32), forms=(PORTABLE, XNNPACK, INT8)),
    # language
    # (PT2E quantization of the whole BERT fails in the exporter: its index ops get float indices; the
    # encoder below carries the transformer qd8 case.)
    Model("bert_tiny", _seeded(_bert), _tokens(512, 1, 16, mask=True)),
    Model("bert_tiny_dynseq", _seeded(_bert), _tokens(512, 1, 16, mask=True), dynamic_shapes=_sequence_dim,
          dynamic_inputs=lambda g: [_tokens(512, 1, 5, mask=True)(g), _tokens(512, 1, 32, mask=True)(g)]),
    Model("encoder_layer", _seeded(_encoder), _randn(1, 16, 64), forms=(PORTABLE, XNNPACK, QD8)),
    Model("gpt2_tiny", _seeded(_gpt2), _tokens(512, 1, 16)),
    Model("llama_kv_tiny", _seeded(_LlamaWithCache),
          lambda g: (torch.randint(0, 256, (1, 4), generator=g), torch.arange(4, dtype=torch.long)),
          # a prefill of 4 tokens, then two more chunks of 4 at the next positions
          calls=lambda g: [(torch.randint(0, 256, (1, 4), generator=g), torch.arange(4 * k, 4 * k + 4))
                           for k in range(3)]),
    # sequence and audio
    Model("gru", _seeded(lambda: _Recurrent(torch.nn.GRU)), _randn(1, 12, 16)),
    Model("lstm", _seeded(lambda: _Recurrent(torch.nn.LSTM)), _randn(1, 12, 16)),
    Model("conv1d_kws", _seeded(_Conv1dNet), _randn(1, 40, 49)),
    # program forms and quantization
    Model("smallcnn_dynbatch", _seeded(_SmallCnn), _randn(2, 3, 32, 32), forms=(PORTABLE, XNNPACK),
          dynamic_shapes=_batch_dim,
          dynamic_inputs=lambda g: [(torch.randn(1, 3, 32, 32, generator=g),),
                                    (torch.randn(8, 3, 32, 32, generator=g),)]),
    Model("smallcnn_two_methods", _seeded(_SmallCnn), _randn(1, 3, 32, 32), forms=(PORTABLE, XNNPACK, BUNDLED),
          extra_methods={"features": (_Features, _randn(2, 3, 32, 32))}),
    Model("mlp", _seeded(_Mlp), _randn(4, 64), forms=(PORTABLE, XNNPACK, QD8, W4, PORTABLE_PTD)),
    # language models (ExecuTorch's LLM export)
    Model("llm_smollm", None, None, forms=LLM_FORMS, llm=_smollm()),
    Model("llm_qwen2", None, None, forms=(LLM_FP32, LLM_8DA4W),
          llm=_llm(attention_qkv_bias=True, use_hf_rope=True, rope_theta=1000000.0, norm_eps=1e-6)),
    Model("llm_qwen3", None, None, forms=(LLM_FP32, LLM_8DA4W),
          llm=_llm(use_qk_norm=True, qk_norm_before_rope=True, use_hf_rope=True, head_dim=64, n_kv_heads=1)),
    Model("llm_phi3", None, None, forms=(LLM_FP32, LLM_8DA4W),
          llm=_llm(use_hf_rope=True, partial_rotary_factor=0.75, n_kv_heads=4)),
    Model("llm_gemma", None, None, forms=(LLM_FP32, LLM_8DA4W),
          llm=_llm(act_fn="gelu_approx", rms_norm_add_unit_offset=True, embedding_scale_factor=11.3137,
                   n_kv_heads=1, head_dim=64)),
    # language models (optimum-executorch)
    Model("optimum_llama", None, None, forms=OPTIMUM_FORMS + (OPTIMUM_PORTABLE,),
          optimum=_hf_decoder("LlamaConfig")),
    Model("optimum_qwen3", None, None, forms=OPTIMUM_FORMS,
          optimum=_hf_decoder("Qwen3Config", head_dim=64, num_key_value_heads=1, rope_theta=1000000.0)),
    Model("optimum_qwen2", None, None, forms=OPTIMUM_FORMS, optimum=_hf_decoder("Qwen2Config", rms_norm_eps=1e-6)),
    Model("optimum_phi3", None, None, forms=OPTIMUM_FORMS,
          optimum=_hf_decoder("Phi3Config", partial_rotary_factor=0.75, num_key_value_heads=4, pad_token_id=0)),
    Model("optimum_gemma", None, None, forms=OPTIMUM_FORMS,
          optimum=_hf_decoder("GemmaConfig", head_dim=64, num_key_value_heads=1)),
]

BY_NAME = {m.name: m for m in MODELS}


def cases():
    """(model name, form) for every program of the zoo."""
    return [(m.name, form) for m in MODELS for form in m.forms]
