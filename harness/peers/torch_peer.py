#!/usr/bin/env python3
"""PyTorch peer of fsdpp: trains the same model, on the same data, with the same
optimizer settings, in plain PyTorch (single process, DDP or FSDP2), and reports
measured numbers as JSON. See harness/peers/README.md.

Runs on PyTorch 1.13 (CPU; single and ddp) and on PyTorch 2.x with CUDA (all modes;
fsdp2 needs >= 2.4). GPT-2 and Llama-shaped models need only torch and numpy: those
models, the safetensors reader/writer and the token-file readers are in this file. Qwen3
and Mixtral are transformers' own model classes (Qwen3ForCausalLM, MixtralForCausalLM),
so those need transformers too.
"""

import argparse
import bisect
import fnmatch
import gc
import json
import math
import os
import platform
import re
import resource
import signal
import socket
import struct
import subprocess
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

FORMAT = "fsdpp.torch_peer"
FORMAT_VERSION = 1
EXIT_USAGE = 2
EXIT_FSDP2_UNAVAILABLE = 3
LAUNCHED_ENV = "TORCH_PEER_LAUNCHED"  # set by --nproc for its children
STEP_SCOPE = "fsdpp.step"  # the profiler annotation of a step (harness/bench/step_profiler.h)


class PeerError(Exception):
    """A user-facing error: printed as one line, exit code 2."""


def torch_version():
    m = re.match(r"(\d+)\.(\d+)", torch.__version__)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


TORCH_2 = torch_version() >= (2, 0)
HAS_SDPA = hasattr(F, "scaled_dot_product_attention")


# ----------------------------------------------------------------------------------------
# Model configs (Hugging Face config.json field names; defaults as fsdpp's from_json)
# ----------------------------------------------------------------------------------------

_REQUIRED = object()


def _get(raw, key, default, kind, source):
    value = raw.get(key, None)
    if value is None:
        if default is _REQUIRED:
            raise PeerError("%s: key '%s' is missing" % (source, key))
        return default
    if kind is int:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value:
            raise PeerError("%s: key '%s' must be an integer, not %r" % (source, key, value))
        return int(value)
    if kind is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise PeerError("%s: key '%s' must be a number, not %r" % (source, key, value))
        return float(value)
    if kind is bool:
        if not isinstance(value, bool):
            raise PeerError("%s: key '%s' must be true or false, not %r" % (source, key, value))
        return value
    if not isinstance(value, str):
        raise PeerError("%s: key '%s' must be a string, not %r" % (source, key, value))
    return value


# Families the peer trains as transformers' own model class rather than a copy in this file
# (harness/peers/README.md): model_type -> the class.
TRANSFORMERS_FAMILIES = {"qwen3": "Qwen3ForCausalLM", "mixtral": "MixtralForCausalLM"}


def import_transformers(what):
    """The transformers module, offline (nothing is fetched); PeerError naming `what` when
    this Python has none."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    try:
        import transformers
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # stdout carries only the record and one-line summaries
    except ImportError as e:
        raise PeerError(
            "%s runs transformers' own model class: this Python cannot import transformers (%s)" % (what, e)
        ) from e
    return transformers


def transformers_config(raw, source):
    """raw config.json -> transformers' config object of its model_type, with every dropout
    and router jitter at 0 (fsdpp's models have none), and no KV cache (training)."""
    transformers = import_transformers("model_type %s" % raw.get("model_type"))
    fields = {k: v for k, v in raw.items() if k != "model_type"}
    try:
        config = transformers.AutoConfig.for_model(raw["model_type"], **fields)
    except (ValueError, KeyError, TypeError) as e:
        raise PeerError("%s: transformers %s cannot read it: %s" % (source, transformers.__version__, e)) from e
    for key, value in config.to_dict().items():
        if key.endswith(("pdrop", "dropout", "jitter_noise")) and isinstance(value, float):
            setattr(config, key, 0.0)
    config.use_cache = False
    return config


def transformers_shape(raw, path):
    """The normalized dict of a TRANSFORMERS_FAMILIES config: the shape as transformers reads
    it (its defaults for absent keys), which the peer's bookkeeping needs (positions,
    vocabulary, FLOPs); the model itself is built from `raw` by transformers."""
    config = transformers_config(raw, path)
    heads = int(config.num_attention_heads)
    c = {
        "model_type": raw["model_type"],
        "transformers_class": TRANSFORMERS_FAMILIES[raw["model_type"]],
        "vocab_size": int(config.vocab_size),
        "hidden_size": int(config.hidden_size),
        "num_hidden_layers": int(config.num_hidden_layers),
        "num_attention_heads": heads,
        "num_key_value_heads": int(config.num_key_value_heads or heads),
        "head_dim": int(getattr(config, "head_dim", None) or config.hidden_size // heads),
        "max_position_embeddings": int(config.max_position_embeddings),
        "tie_word_embeddings": bool(config.tie_word_embeddings),
        # The share of the expert weights a token runs (top-k of the experts), as fsdpp's
        # FLOPs count them (core/plan/step_time_model.h); 1 without experts.
        "expert_share": 1.0,
        "config_json": raw,
    }
    experts = getattr(config, "num_local_experts", None)
    if experts:
        c["num_local_experts"] = int(experts)
        c["num_experts_per_tok"] = int(config.num_experts_per_tok)
        c["expert_share"] = c["num_experts_per_tok"] / c["num_local_experts"]
    c["max_positions"] = c["max_position_embeddings"]
    return c


def load_model_config(path):
    """config.json (or a folder holding one) -> (normalized dict, raw dict)."""
    if os.path.isdir(path):
        path = os.path.join(path, "config.json")
    try:
        with open(path, encoding="utf-8") as f:
            raw = json.load(f)
    except OSError as e:
        raise PeerError("--model-config %s: cannot read: %s" % (path, e.strerror)) from e
    except ValueError as e:
        raise PeerError("--model-config %s: not JSON: %s" % (path, e)) from e
    if not isinstance(raw, dict):
        raise PeerError("%s: expected a JSON object" % path)
    t = raw.get("model_type")
    if t == "gpt2":
        c = {
            "model_type": "gpt2",
            "vocab_size": _get(raw, "vocab_size", _REQUIRED, int, path),
            "n_positions": _get(raw, "n_positions", 1024, int, path),
            "n_embd": _get(raw, "n_embd", _REQUIRED, int, path),
            "n_layer": _get(raw, "n_layer", _REQUIRED, int, path),
            "n_head": _get(raw, "n_head", _REQUIRED, int, path),
            "n_inner": _get(raw, "n_inner", 0, int, path),
            "layer_norm_epsilon": _get(raw, "layer_norm_epsilon", 1e-5, float, path),
        }
        act = _get(raw, "activation_function", "gelu_new", str, path)
        if act != "gelu_new":
            raise PeerError("%s: activation_function '%s' is not supported (gelu_new)" % (path, act))
        if c["n_embd"] % c["n_head"] != 0:
            raise PeerError("%s: n_embd %d is not a multiple of n_head %d" % (path, c["n_embd"], c["n_head"]))
        if c["n_inner"] <= 0:
            c["n_inner"] = 4 * c["n_embd"]
        c["max_positions"] = c["n_positions"]
        c["tie_word_embeddings"] = True
    elif t in ("llama", "mistral"):
        c = {
            "model_type": t,
            "vocab_size": _get(raw, "vocab_size", _REQUIRED, int, path),
            "hidden_size": _get(raw, "hidden_size", _REQUIRED, int, path),
            "intermediate_size": _get(raw, "intermediate_size", _REQUIRED, int, path),
            "num_hidden_layers": _get(raw, "num_hidden_layers", _REQUIRED, int, path),
            "num_attention_heads": _get(raw, "num_attention_heads", _REQUIRED, int, path),
        }
        c["num_key_value_heads"] = _get(raw, "num_key_value_heads", c["num_attention_heads"], int, path)
        head_dim = _get(raw, "head_dim", 0, int, path)
        c["head_dim"] = head_dim if head_dim > 0 else c["hidden_size"] // c["num_attention_heads"]
        c["max_position_embeddings"] = _get(raw, "max_position_embeddings", 4096, int, path)
        c["rms_norm_eps"] = _get(raw, "rms_norm_eps", 1e-6, float, path)
        c["rope_theta"] = _get(raw, "rope_theta", 10000.0, float, path)
        c["tie_word_embeddings"] = _get(raw, "tie_word_embeddings", False, bool, path)
        c["attention_bias"] = _get(raw, "attention_bias", False, bool, path)
        c["sliding_window"] = _get(raw, "sliding_window", 0, int, path)
        act = _get(raw, "hidden_act", "silu", str, path)
        if act != "silu":
            raise PeerError("%s: hidden_act '%s' is not supported (silu)" % (path, act))
        if _get(raw, "mlp_bias", False, bool, path):
            raise PeerError("%s: mlp_bias true is not supported" % path)
        scaling = raw.get("rope_scaling")
        c["rope_scaling"] = None
        if scaling is not None:
            if not isinstance(scaling, dict):
                raise PeerError("%s: rope_scaling must be an object or null" % path)
            src = path + " rope_scaling"
            kind = scaling.get("rope_type", scaling.get("type", ""))
            if kind != "llama3":
                raise PeerError("%s: rope_scaling type '%s' is not supported (llama3)" % (path, kind))
            c["rope_scaling"] = {
                "rope_type": "llama3",
                "factor": _get(scaling, "factor", 8.0, float, src),
                "low_freq_factor": _get(scaling, "low_freq_factor", 1.0, float, src),
                "high_freq_factor": _get(scaling, "high_freq_factor", 4.0, float, src),
                "original_max_position_embeddings": _get(scaling, "original_max_position_embeddings", 8192, int, src),
            }
        if c["num_attention_heads"] % c["num_key_value_heads"] != 0:
            raise PeerError("%s: num_attention_heads is not a multiple of num_key_value_heads" % path)
        c["max_positions"] = c["max_position_embeddings"]
    elif t in TRANSFORMERS_FAMILIES:
        c = transformers_shape(raw, path)
    else:
        raise PeerError(
            "%s: model_type %r is not supported by the peer (expected gpt2, llama, mistral, %s)"
            % (path, t, ", ".join(sorted(TRANSFORMERS_FAMILIES)))
        )
    return c, raw


# ----------------------------------------------------------------------------------------
# Models: parameter names and layouts exactly as Hugging Face's (and fsdpp's)
# ----------------------------------------------------------------------------------------


def _empty(shape, device):
    return nn.Parameter(torch.empty(*shape, device=device, dtype=torch.float32))


class Linear(nn.Module):
    """nn.Linear's layout ([out, in]) without its initialisation."""

    def __init__(self, nin, nout, bias, device):
        super().__init__()
        self.weight = _empty((nout, nin), device)
        self.bias = _empty((nout,), device) if bias else None

    def forward(self, x):
        return F.linear(x, self.weight, self.bias)


class Conv1D(nn.Module):
    """GPT-2's Conv1D: weight [in, out], y = x @ W + b."""

    def __init__(self, nin, nout, device):
        super().__init__()
        self.weight = _empty((nin, nout), device)
        self.bias = _empty((nout,), device)

    def forward(self, x):
        size = x.shape[:-1] + (self.weight.shape[1],)
        return torch.addmm(self.bias, x.reshape(-1, x.shape[-1]), self.weight).view(size)


class Embedding(nn.Module):
    def __init__(self, num, dim, device):
        super().__init__()
        self.weight = _empty((num, dim), device)

    def forward(self, ids):
        return F.embedding(ids, self.weight)


class LayerNorm(nn.Module):
    def __init__(self, dim, eps, device):
        super().__init__()
        self.eps = eps
        self.weight = _empty((dim,), device)
        self.bias = _empty((dim,), device)

    def forward(self, x):
        return F.layer_norm(x, (x.shape[-1],), self.weight, self.bias, self.eps)


# Llama's RMSNorm kernel (fsdpp: models/layers.h RmsNormKernel): PyTorch's fused CUDA kernel
# (torch._fused_rms_norm, what torch.nn.RMSNorm runs on CUDA) when True, else HF's eager
# formula. Set by --rms-norm; the fused kernel runs only on CUDA with x and the weight in
# one dtype, as in fsdpp.
FUSED_RMS_NORM = False


def choose_rms_norm(choice, device):
    """--rms-norm: auto is fused where this PyTorch has the kernel (CUDA), eager elsewhere."""
    available = device.type == "cuda" and hasattr(torch, "_fused_rms_norm")
    if choice == "fused" and not available:
        raise PeerError(
            "--rms-norm fused: PyTorch %s on %s has no fused RMSNorm kernel (torch._fused_rms_norm, CUDA)"
            % (torch.__version__, device.type)
        )
    return available if choice == "auto" else choice == "fused"


class RMSNorm(nn.Module):
    def __init__(self, dim, eps, device):
        super().__init__()
        self.eps = eps
        self.weight = _empty((dim,), device)

    def forward(self, x):  # as fsdpp's RmsNormImpl and HF's LlamaRMSNorm
        if FUSED_RMS_NORM and x.is_cuda and x.dtype == self.weight.dtype:
            return torch._fused_rms_norm(x, [x.shape[-1]], self.weight, self.eps)[0]
        x32 = x.float()
        normed = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * normed.to(x.dtype)


def causal_attention(q, k, v):
    """[b, h, s, d] each; scale 1/sqrt(d). SDPA where PyTorch has it (as fsdpp on 2.x),
    else fsdpp's explicit path: masked scores, softmax in fp32."""
    if HAS_SDPA:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    s, d = q.shape[-2], q.shape[-1]
    scores = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(d))
    future = torch.ones(s, k.shape[-2], dtype=torch.bool, device=q.device).triu(1)
    scores = scores.masked_fill(future, float("-inf"))
    return torch.matmul(torch.softmax(scores, -1, dtype=torch.float32).to(q.dtype), v)


def split_heads(x, heads):
    b, s, w = x.shape
    return x.view(b, s, heads, w // heads).transpose(1, 2)


def merge_heads(x):
    b, h, s, d = x.shape
    return x.transpose(1, 2).reshape(b, s, h * d)


_CHECKPOINT_KWARGS = None


def _checkpoint(fn, *args):
    """torch.utils.checkpoint, non-reentrant where this PyTorch has the switch."""
    global _CHECKPOINT_KWARGS
    import torch.utils.checkpoint as ckpt

    if _CHECKPOINT_KWARGS is None:
        import inspect

        params = inspect.signature(ckpt.checkpoint).parameters
        _CHECKPOINT_KWARGS = {"use_reentrant": False} if "use_reentrant" in params or TORCH_2 else {}
    return ckpt.checkpoint(fn, *args, **_CHECKPOINT_KWARGS)


class Block(nn.Module):
    """A transformer block; with `checkpointing`, its forward runs under
    torch.utils.checkpoint (inside any FSDP2 unit wrapping the block, as torchtitan)."""

    checkpointing = False

    def forward(self, x, *extra):
        if self.checkpointing and torch.is_grad_enabled():
            return _checkpoint(self.block_forward, x, *extra)
        return self.block_forward(x, *extra)


class Gpt2Attention(nn.Module):
    def __init__(self, c, device):
        super().__init__()
        self.heads = c["n_head"]
        self.c_attn = Conv1D(c["n_embd"], 3 * c["n_embd"], device)
        self.c_proj = Conv1D(c["n_embd"], c["n_embd"], device)

    def forward(self, x):
        q, k, v = self.c_attn(x).split(x.shape[-1], -1)
        y = causal_attention(split_heads(q, self.heads), split_heads(k, self.heads), split_heads(v, self.heads))
        return self.c_proj(merge_heads(y))


class Gpt2Mlp(nn.Module):
    def __init__(self, c, device):
        super().__init__()
        self.c_fc = Conv1D(c["n_embd"], c["n_inner"], device)
        self.c_proj = Conv1D(c["n_inner"], c["n_embd"], device)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))  # gelu_new


class Gpt2Block(Block):
    def __init__(self, c, device):
        super().__init__()
        self.ln_1 = LayerNorm(c["n_embd"], c["layer_norm_epsilon"], device)
        self.attn = Gpt2Attention(c, device)
        self.ln_2 = LayerNorm(c["n_embd"], c["layer_norm_epsilon"], device)
        self.mlp = Gpt2Mlp(c, device)

    def block_forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class Gpt2Model(nn.Module):
    def __init__(self, c, device):
        super().__init__()
        self.wte = Embedding(c["vocab_size"], c["n_embd"], device)
        self.wpe = Embedding(c["n_positions"], c["n_embd"], device)
        self.h = nn.ModuleList([Gpt2Block(c, device) for _ in range(c["n_layer"])])
        self.ln_f = LayerNorm(c["n_embd"], c["layer_norm_epsilon"], device)

    def forward(self, tokens):
        positions = torch.arange(tokens.shape[1], dtype=torch.long, device=tokens.device)
        x = self.wte(tokens) + self.wpe(positions)
        for block in self.h:
            x = block(x)
        return self.ln_f(x)


class Gpt2LMHeadModel(nn.Module):
    def __init__(self, c, device):
        super().__init__()
        self.transformer = Gpt2Model(c, device)
        self.lm_head = Linear(c["n_embd"], c["vocab_size"], False, device)
        self.tie_weights()

    def tie_weights(self):
        self.lm_head.weight = self.transformer.wte.weight

    def blocks(self):
        return list(self.transformer.h)

    def forward(self, tokens):
        return self.lm_head(self.transformer(tokens))


def rope_inverse_frequencies(c):
    """As fsdpp (computed in float64, then float32), with Llama-3 scaling."""
    hd = c["head_dim"]
    inv = 1.0 / torch.pow(c["rope_theta"], torch.arange(0, hd, 2, dtype=torch.float64) / hd)
    s = c["rope_scaling"]
    if s:
        low_wavelen = s["original_max_position_embeddings"] / s["low_freq_factor"]
        high_wavelen = s["original_max_position_embeddings"] / s["high_freq_factor"]
        wavelen = 2 * math.pi / inv
        smooth = (s["original_max_position_embeddings"] / wavelen - s["low_freq_factor"]) / (
            s["high_freq_factor"] - s["low_freq_factor"]
        )
        blended = (1 - smooth) * inv / s["factor"] + smooth * inv
        inv = torch.where(wavelen < high_wavelen, inv, torch.where(wavelen > low_wavelen, inv / s["factor"], blended))
    return inv.to(torch.float32)


def rotate_half(x):
    x1, x2 = x.chunk(2, -1)
    return torch.cat((-x2, x1), -1)


class LlamaAttention(nn.Module):
    def __init__(self, c, device):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
        d, bias = c["hidden_size"], c["attention_bias"]
        self.q_proj = Linear(d, self.heads * self.head_dim, bias, device)
        self.k_proj = Linear(d, self.kv_heads * self.head_dim, bias, device)
        self.v_proj = Linear(d, self.kv_heads * self.head_dim, bias, device)
        self.o_proj = Linear(self.heads * self.head_dim, d, bias, device)

    def forward(self, x, cos, sin):
        q = split_heads(self.q_proj(x), self.heads)
        k = split_heads(self.k_proj(x), self.kv_heads)
        v = split_heads(self.v_proj(x), self.kv_heads)
        cos, sin = cos.to(q.dtype), sin.to(q.dtype)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        if self.kv_heads != self.heads:  # grouped-query attention
            k = k.repeat_interleave(self.heads // self.kv_heads, 1)
            v = v.repeat_interleave(self.heads // self.kv_heads, 1)
        return self.o_proj(merge_heads(causal_attention(q, k, v)))


class LlamaMlp(nn.Module):
    def __init__(self, c, device):
        super().__init__()
        d, i = c["hidden_size"], c["intermediate_size"]
        self.gate_proj = Linear(d, i, False, device)
        self.up_proj = Linear(d, i, False, device)
        self.down_proj = Linear(i, d, False, device)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class LlamaDecoderLayer(Block):
    def __init__(self, c, device):
        super().__init__()
        self.input_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"], device)
        self.self_attn = LlamaAttention(c, device)
        self.post_attention_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"], device)
        self.mlp = LlamaMlp(c, device)

    def block_forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaModel(nn.Module):
    def __init__(self, c, device):
        super().__init__()
        self.embed_tokens = Embedding(c["vocab_size"], c["hidden_size"], device)
        self.layers = nn.ModuleList([LlamaDecoderLayer(c, device) for _ in range(c["num_hidden_layers"])])
        self.norm = RMSNorm(c["hidden_size"], c["rms_norm_eps"], device)
        self.sliding_window = c["sliding_window"]
        self._inv_freq = rope_inverse_frequencies(c)  # not a parameter or buffer
        self._rope_cache = {}

    def rope(self, s, device):
        key = (s, str(device))
        if key not in self._rope_cache:
            # As fsdpp: angles t * inv_freq in fp32, duplicated (HF's rotate_half layout).
            t = torch.arange(s, dtype=torch.float32)
            freqs = t[:, None] * self._inv_freq[None, :]  # == torch.outer (ATen implements it as this product)
            emb = torch.cat((freqs, freqs), -1)
            self._rope_cache = {key: (emb.cos().to(device), emb.sin().to(device))}
        return self._rope_cache[key]

    def forward(self, tokens):
        s = tokens.shape[1]
        if self.sliding_window > 0 and s > self.sliding_window:
            raise PeerError("sequence of %d tokens exceeds the sliding window of %d" % (s, self.sliding_window))
        cos, sin = self.rope(s, tokens.device)
        x = self.embed_tokens(tokens)
        for layer in self.layers:
            x = layer(x, cos, sin)
        return self.norm(x)


class LlamaForCausalLM(nn.Module):
    def __init__(self, c, device):
        super().__init__()
        self.tied = c["tie_word_embeddings"]
        self.model = LlamaModel(c, device)
        self.lm_head = Linear(c["hidden_size"], c["vocab_size"], False, device)
        self.tie_weights()

    def tie_weights(self):
        if self.tied:
            self.lm_head.weight = self.model.embed_tokens.weight

    def blocks(self):
        return list(self.model.layers)

    def forward(self, tokens):
        return self.lm_head(self.model(tokens))


def build_transformers_model(c, device, weights=None):
    """transformers' own model class for `c` (TRANSFORMERS_FAMILIES), fp32, SDPA attention
    (as the peer's own models), in training mode: from `weights` (an HF folder, loaded by
    from_pretrained, which maps the checkpoint's tensor names onto the class's, e.g.
    Mixtral's per-expert w1/w2/w3 onto its fused expert tensors) or initialised by
    transformers (init_parameters then sets fsdpp's distributions). Every parameter must
    come from the folder and every tensor of it must be used, else it would train other
    weights than fsdpp's."""
    transformers = import_transformers("model_type %s" % c["model_type"])
    config = transformers_config(c["config_json"], "model_type " + c["model_type"])
    model_class = getattr(transformers, c["transformers_class"])
    if weights is None:
        with torch.device(device):
            model = transformers.AutoModelForCausalLM.from_config(
                config, attn_implementation="sdpa", dtype=torch.float32
            )
        return model.train()
    folder = weights if os.path.isdir(weights) else None
    if folder is None:
        raise PeerError("--weights %s: %s is loaded from an HF folder, not a file" % (weights, c["transformers_class"]))
    try:
        model, info = model_class.from_pretrained(
            folder,
            config=config,
            dtype=torch.float32,
            attn_implementation="sdpa",
            local_files_only=True,
            output_loading_info=True,
        )
    except (OSError, ValueError, KeyError, RuntimeError) as e:
        raise PeerError(
            "--weights %s: transformers cannot load it as %s: %s" % (weights, c["transformers_class"], e)
        ) from e
    tied = c["tie_word_embeddings"]
    problems = {
        k: sorted(x for x in v if not (tied and k == "missing_keys" and x.endswith("lm_head.weight")))
        for k, v in info.items()
        if k in ("missing_keys", "unexpected_keys", "mismatched_keys")
    }
    problems = {k: v for k, v in problems.items() if v}
    if problems:
        raise PeerError(
            "--weights %s: does not match %s: %s" % (weights, c["transformers_class"], json.dumps(problems))
        )
    return model.to(device).train()


def build_model(c, device):
    """Parameters allocated on `device`, uninitialised (fill with materialize())."""
    if c["model_type"] == "gpt2":
        return Gpt2LMHeadModel(c, device)
    if c["model_type"] in TRANSFORMERS_FAMILIES:
        return build_transformers_model(c, device)
    return LlamaForCausalLM(c, device)


def decoder_blocks(model):
    """The model's transformer blocks, in order: the FSDP2 units and what activation
    checkpointing recomputes (transformers' models: model.layers, its decoder layers)."""
    if hasattr(model, "blocks"):
        return model.blocks()
    return list(model.model.layers)


def set_checkpointing(model, on):
    """Activation checkpointing of every block, non-reentrant: the peer's own blocks run
    under _checkpoint; transformers' decoder layers under its gradient checkpointing (each
    GradientCheckpointingLayer's call, inside the layer's FSDP2 unit)."""
    if hasattr(model, "blocks"):
        for block in model.blocks():
            block.checkpointing = on
    elif on:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})


def forward_logits(model, tokens):
    """(logits [b, s, vocab], auxiliary loss or None): the peer's own models return the
    logits; transformers' return a ModelOutput holding them and, for a mixture of experts
    whose config sets output_router_logits, its load-balancing loss (aux_loss)."""
    out = model(tokens)
    if torch.is_tensor(out):
        return out, None
    aux = getattr(out, "aux_loss", None)
    return out.logits, aux


def unique_parameters(model):
    """[(names, parameter)] once per parameter object, in registration order; a tie has
    several names, the first is the one save_pretrained stores (as fsdpp)."""
    order, names = [], {}
    for mod_name, mod in model.named_modules():
        for pname, p in mod._parameters.items():
            if p is None:
                continue
            full = (mod_name + "." if mod_name else "") + pname
            if id(p) not in names:
                names[id(p)] = []
                order.append(p)
            names[id(p)].append(full)
    return [(names[id(p)], p) for p in order]


def fnv1a(text):
    h = 0xCBF29CE484222325
    for b in text.encode("utf-8"):
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


@torch.no_grad()
def init_parameters(model, seed, std=0.02):
    """Random init with fsdpp's distributions (init_rows): N(0, std=0.02) for 2-D+ weights,
    zeros for biases, ones for norm weights. Each parameter has its own generator seeded
    from (seed, name), so the values do not depend on the mode or world size (but differ
    from fsdpp's bits and between CPU and CUDA)."""
    for names, p in unique_parameters(model):
        name = names[0]
        if p.dim() >= 2:
            g = torch.Generator(device=p.device)
            g.manual_seed((seed * 0x9E3779B97F4A7C15 ^ fnv1a(name)) & 0x7FFFFFFFFFFFFFFF)
            p.normal_(0.0, std, generator=g)
        elif name.endswith("bias"):
            p.zero_()
        else:
            p.fill_(1.0)


# ----------------------------------------------------------------------------------------
# safetensors (8-byte little-endian header length, JSON header, raw little-endian data)
# ----------------------------------------------------------------------------------------


class SafetensorsFile:
    def __init__(self, path):
        self.path = path
        try:
            with open(path, "rb") as f:
                head = f.read(8)
                if len(head) != 8:
                    raise PeerError("%s: not a safetensors file (shorter than 8 bytes)" % path)
                (n,) = struct.unpack("<Q", head)
                size = os.fstat(f.fileno()).st_size
                if n > size - 8:
                    raise PeerError("%s: header length %d exceeds the file" % (path, n))
                header = json.loads(f.read(n).decode("utf-8"))
        except OSError as e:
            raise PeerError("%s: cannot read: %s" % (path, e.strerror)) from e
        except ValueError as e:
            raise PeerError("%s: bad safetensors header: %s" % (path, e)) from e
        header.pop("__metadata__", None)
        self.header = header
        self.base = 8 + n
        self.size = size
        self._map = None

    def _bytes(self):
        if self._map is None:
            self._map = np.memmap(self.path, dtype=np.uint8, mode="r")
        return self._map

    def tensor(self, name):
        """The stored tensor as float32 (CPU)."""
        info = self.header[name]
        dtype, shape = info["dtype"], [int(s) for s in info["shape"]]
        begin, end = (int(x) for x in info["data_offsets"])
        widths = {"F32": 4, "F16": 2, "BF16": 2, "F64": 8}
        if dtype not in widths:
            raise PeerError("%s: tensor '%s' has dtype %s (expected F32, BF16 or F16)" % (self.path, name, dtype))
        count = int(np.prod(shape)) if shape else 1
        if end - begin != count * widths[dtype] or self.base + end > self.size:
            raise PeerError("%s: tensor '%s' has bad data_offsets" % (self.path, name))
        raw = self._bytes()[self.base + begin : self.base + end]
        if dtype == "F32":
            arr = raw.view("<f4").astype(np.float32)
        elif dtype == "F64":
            arr = raw.view("<f8").astype(np.float32)
        elif dtype == "F16":
            arr = raw.view("<f2").astype(np.float32)
        else:  # bf16: the high half of a float32, exactly
            arr = (raw.view("<u2").astype(np.uint32) << 16).view(np.float32)
        return torch.from_numpy(arr.reshape(shape))


class Checkpoint:
    """model.safetensors, a folder with it, or a folder with model.safetensors.index.json."""

    def __init__(self, path):
        files = []
        if os.path.isdir(path):
            index = os.path.join(path, "model.safetensors.index.json")
            single = os.path.join(path, "model.safetensors")
            if os.path.exists(single):
                files = [single]
            elif os.path.exists(index):
                with open(index, encoding="utf-8") as f:
                    weight_map = json.load(f).get("weight_map", {})
                files = [os.path.join(path, n) for n in sorted(set(weight_map.values()))]
            else:
                raise PeerError("--weights %s: no model.safetensors or model.safetensors.index.json" % path)
        elif os.path.exists(path):
            files = [path]
        else:
            raise PeerError("--weights %s: no such file or folder" % path)
        self.files = [SafetensorsFile(f) for f in files]
        self.where = {}
        for f in self.files:
            for name in f.header:
                self.where.setdefault(name, f)

    def find(self, aliases):
        for alias in aliases:
            candidates = [alias]
            for prefix in ("transformer.", "model."):
                if alias.startswith(prefix):
                    candidates.append(alias[len(prefix) :])
            for c in candidates:
                if c in self.where:
                    return c
        return None


@torch.no_grad()
def load_weights(model, path, model_type):
    ckpt = Checkpoint(path)
    for names, p in unique_parameters(model):
        stored = ckpt.find(names)
        if stored is None:
            raise PeerError(
                "%s: no tensor '%s' (expected shape %s for %s)" % (path, names[0], list(p.shape), model_type)
            )
        t = ckpt.where[stored].tensor(stored)
        if list(t.shape) != list(p.shape):
            raise PeerError(
                "%s: tensor '%s' has shape %s, the config implies %s" % (path, stored, list(t.shape), list(p.shape))
            )
        p.copy_(t)


def write_atomic(path, data):
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    tmp = os.path.join(d, ".%s.tmp.%d" % (os.path.basename(path), os.getpid()))
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def save_safetensors(path, named):
    """[(name, float32 tensor)] -> one safetensors file (F32)."""
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name, t in named:
        b = t.detach().to("cpu", torch.float32).contiguous().numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [offset, offset + len(b)]}
        blobs.append(b)
        offset += len(b)
    h = json.dumps(header, separators=(",", ":")).encode("utf-8")
    h += b" " * ((8 - len(h) % 8) % 8)
    write_atomic(path, struct.pack("<Q", len(h)) + h + b"".join(blobs))


# ----------------------------------------------------------------------------------------
# Token data: fsdpp .tok shards, llm.c .bin files, raw token files; fsdpp's window order
# ----------------------------------------------------------------------------------------

_LLMC_MAGIC = 20240520


def open_token_file(path, raw_dtype):
    """A file's tokens as a numpy array (memory-mapped)."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(1024)
    if head[:8] == b"FSDPPTOK":
        if len(head) < 64:
            raise PeerError("%s: truncated fsdpp token shard header" % path)
        version, dtype, count = struct.unpack_from("<IIQ", head, 8)
        if version != 1 or dtype not in (1, 2) or any(head[32:64]):
            raise PeerError(
                "%s: fsdpp token shard version %d dtype %d is not supported (expected 1, 1|2)" % (path, version, dtype)
            )
        width = 2 if dtype == 1 else 4
        if size != 64 + count * width:
            raise PeerError("%s: header says %d tokens but the file has %d bytes" % (path, count, size))
        return (
            np.memmap(path, dtype="<u2" if width == 2 else "<u4", mode="r", offset=64, shape=(count,))
            if count
            else np.zeros(0, np.int64)
        )
    if len(head) >= 12 and struct.unpack_from("<i", head, 0)[0] == _LLMC_MAGIC:
        _, version, count = struct.unpack_from("<iii", head, 0)
        if version != 1:
            raise PeerError("%s: llm.c token file version %d is not supported (expected 1)" % (path, version))
        if size != 1024 + 2 * count:
            raise PeerError("%s: header says %d tokens but the file has %d bytes" % (path, count, size))
        return np.memmap(path, dtype="<u2", mode="r", offset=1024, shape=(count,)) if count else np.zeros(0, np.int64)
    if raw_dtype == "auto":
        raise PeerError(
            "%s: not an fsdpp .tok or llm.c .bin file; give --tokens-dtype uint16|uint32|int32 for raw tokens" % path
        )
    np_dtype = {"uint16": "<u2", "uint32": "<u4", "int32": "<i4"}[raw_dtype]
    width = np.dtype(np_dtype).itemsize
    if size % width:
        raise PeerError("%s: %d bytes is not a whole number of %s tokens" % (path, size, raw_dtype))
    return np.memmap(path, dtype=np_dtype, mode="r") if size else np.zeros(0, np.int64)


def expand_token_spec(spec):
    """fsdpp's data spec: comma-separated files, folders (their *.tok/*.bin, by name) or
    patterns (matching names in a folder, by name)."""
    files = []
    for entry in spec.split(","):
        entry = entry.strip()
        if not entry:
            raise PeerError("--tokens '%s': empty entry" % spec)
        d, name = os.path.split(entry)
        if any(ch in name for ch in "*?["):
            d = d or "."
            if not os.path.isdir(d):
                raise PeerError("--tokens %s: no such directory %s" % (entry, d))
            found = sorted(
                n for n in os.listdir(d) if fnmatch.fnmatchcase(n, name) and os.path.isfile(os.path.join(d, n))
            )
            if not found:
                raise PeerError("--tokens %s: no file matches" % entry)
            files += [os.path.join(d, n) for n in found]
        elif os.path.isdir(entry):
            found = sorted(
                n
                for n in os.listdir(entry)
                if os.path.splitext(n)[1] in (".tok", ".bin") and os.path.isfile(os.path.join(entry, n))
            )
            if not found:
                raise PeerError("--tokens %s: no token files in this directory" % entry)
            files += [os.path.join(entry, n) for n in found]
        elif os.path.exists(entry):
            files.append(entry)
        else:
            raise PeerError("--tokens %s: no such file or directory" % entry)
    return files


class TokenData:
    def __init__(self, arrays, source):
        self.arrays = [a for a in arrays if len(a)]
        self.starts = []
        n = 0
        for a in self.arrays:
            self.starts.append(n)
            n += len(a)
        self.num_tokens = n
        self.source = source

    @staticmethod
    def open(spec, raw_dtype):
        return TokenData([open_token_file(f, raw_dtype) for f in expand_token_spec(spec)], spec)

    @staticmethod
    def random(count, vocab, seed):
        g = torch.Generator().manual_seed(seed)
        return TokenData([torch.randint(0, vocab, (count,), generator=g, dtype=torch.int32).numpy()], "random")

    def num_windows(self, seq_len):
        return 0 if self.num_tokens < seq_len + 1 else (self.num_tokens - 1) // seq_len

    def read(self, begin, count):
        out = np.empty(count, dtype=np.int64)
        done = 0
        f = bisect.bisect_right(self.starts, begin) - 1
        while done < count:
            a, off = self.arrays[f], begin + done - self.starts[f]
            take = min(count - done, len(a) - off)
            out[done : done + take] = a[off : off + take]
            done += take
            f += 1
        return out

    def windows(self, indices, seq_len):
        """Window w = tokens[w*T .. w*T + T] (T+1 tokens): inputs its first T, targets its last T."""
        rows = np.stack([self.read(w * seq_len, seq_len + 1) for w in indices])
        return rows[:, :-1], rows[:, 1:]


_M64 = 0xFFFFFFFFFFFFFFFF


def _mix64(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return z ^ (z >> 31)


def epoch_permutation(n, seed, epoch):
    """fsdpp's data::epoch_permutation: Fisher-Yates driven by splitmix64, bit for bit."""
    golden = 0x9E3779B97F4A7C15
    state = (_mix64((seed + golden) & _M64) + epoch) & _M64
    perm = list(range(n))
    if n < 2:
        return perm
    # The i-th draw is mix(state + (i+1)*golden): vectorised with numpy's wrapping uint64.
    with np.errstate(over="ignore"):
        k = np.arange(1, n, dtype=np.uint64)
        z = np.uint64(state) + k * np.uint64(golden)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        draws = (z ^ (z >> np.uint64(31))).tolist()
    for step, i in enumerate(range(n - 1, 0, -1)):
        j = (draws[step] * (i + 1)) >> 64
        perm[i], perm[j] = perm[j], perm[i]
    return perm


class Sampler:
    """fsdpp's DistributedSampler (grad_accum 1): the step starting at position p gives
    rank r the windows at positions p + r*B .. p + r*B + B - 1."""

    def __init__(self, num_windows, batch, world, rank, shuffle, seed):
        self.n, self.batch, self.world, self.rank, self.shuffle, self.seed = (
            num_windows,
            batch,
            world,
            rank,
            shuffle,
            seed,
        )
        self._perms = {}

    def window_at(self, position):
        if not self.shuffle:
            return position % self.n
        epoch = position // self.n
        if epoch not in self._perms:
            if len(self._perms) > 1:
                self._perms.pop(min(self._perms))
            self._perms[epoch] = epoch_permutation(self.n, self.seed, epoch)
        return self._perms[epoch][position % self.n]

    def step_windows(self, step):
        first = step * self.batch * self.world + self.rank * self.batch
        return [self.window_at(first + b) for b in range(self.batch)]


# ----------------------------------------------------------------------------------------
# Helpers
# ----------------------------------------------------------------------------------------


def lr_at(step, max_lr, min_lr, warmup, total, decay):
    """fsdpp's optim::LrSchedule::at."""
    if step < warmup:
        return max_lr * (step + 1) / warmup
    if decay == "constant":
        return max_lr
    p = min(1.0, max(0.0, (step - warmup) / max(1, total - 1 - warmup)))
    if decay == "linear":
        return max_lr - (max_lr - min_lr) * p
    return min_lr + (max_lr - min_lr) * 0.5 * (1.0 + math.cos(math.pi * p))


def cpu_count():
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def peak_rss_bytes():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


def reset_peak_rss():
    """Linux >= 4.0: writing 5 to clear_refs resets VmHWM. Returns whether it worked."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def vm_hwm_bytes():
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def log(msg):
    print("torch_peer: " + msg, flush=True)


def fsdp2_import():
    try:
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard  # 2.6+

        return fully_shard, MixedPrecisionPolicy
    except ImportError:
        from torch.distributed._composable.fsdp import MixedPrecisionPolicy, fully_shard  # 2.4, 2.5

        return fully_shard, MixedPrecisionPolicy


def fsdp2_offload_policy(device):
    """FSDP2's CPUOffloadPolicy, wherever this PyTorch keeps it: pinned host memory (its
    default) when computing on CUDA; pinning needs a GPU, so a CPU run keeps plain memory."""
    try:
        from torch.distributed.fsdp import CPUOffloadPolicy  # 2.6+
    except ImportError:
        from torch.distributed._composable.fsdp import CPUOffloadPolicy  # 2.4, 2.5
    return CPUOffloadPolicy(pin_memory=device.type == "cuda")


def fsdp2_unavailable_reason(device):
    """None when FSDP2 can run here: on CUDA with PyTorch >= 2.4, on the CPU over Gloo with
    PyTorch >= 2.6 (where fully_shard's CPU path and Gloo's reduce_scatter work)."""
    have = "PyTorch %s%s" % (torch.__version__, " with CUDA" if torch.cuda.is_available() else " without CUDA")
    if device == "cpu" and torch_version() < (2, 6):
        return "FSDP2 on the CPU (Gloo) needs PyTorch >= 2.6; this is %s" % have
    if device == "cuda" and (torch_version() < (2, 4) or not torch.cuda.is_available()):
        return "FSDP2 needs PyTorch >= 2.4 with CUDA; this is %s" % have
    try:
        fsdp2_import()
    except ImportError as e:
        return "fully_shard cannot be imported from %s: %s" % (have, e)
    return None


# ----------------------------------------------------------------------------------------
# Command line
# ----------------------------------------------------------------------------------------


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="torch_peer.py",
        description="PyTorch peer of fsdpp: the same model, data and optimizer in plain PyTorch "
        "(single, DDP or FSDP2); measured numbers as JSON.",
    )
    p.add_argument("--mode", choices=["single", "ddp", "fsdp2"], default="single")
    p.add_argument("--nproc", type=int, default=0, help="spawn N local ranks (ddp, fsdp2); else torchrun's env or 1")
    p.add_argument(
        "--budget-s", type=float, default=0, help="with --nproc: stop the ranks after this many seconds (exit 124)"
    )
    p.add_argument("--model-config", help="HF config.json (or its folder); default: the --weights folder's")
    p.add_argument(
        "--weights", help="model.safetensors, or an HF folder (single file or sharded); default: random init"
    )
    p.add_argument(
        "--tokens",
        help="token data: fsdpp .tok / llm.c .bin / raw files, folders, patterns, "
        "comma-separated; default: random tokens",
    )
    p.add_argument(
        "--tokens-dtype",
        choices=["auto", "uint16", "uint32", "int32"],
        default="auto",
        help="element type of raw token files (fsdpp and llm.c files are recognised by their magic)",
    )
    p.add_argument("--no-shuffle", action="store_true", help="windows in file order (fsdpp's --no-shuffle)")
    p.add_argument(
        "--fixed-batch",
        action="store_true",
        help="train every step on one batch per rank drawn as fsdpp bench-step draws it (with --weights "
        "from fsdpp's init, the same run as fsdpp's bench cell)",
    )
    p.add_argument("--batch-size", type=int, default=8, help="windows per rank per step")
    p.add_argument("--seq-len", type=int, default=0, help="tokens per window (default: the model's positions)")
    p.add_argument("--steps", type=int, default=10, help="measured steps")
    p.add_argument("--warmup", type=int, default=2, help="unmeasured steps before them")
    p.add_argument("--lr", type=float, default=3e-4, help="peak learning rate (fsdpp --lr)")
    p.add_argument("--min-lr", type=float, default=0.0)
    p.add_argument("--lr-warmup-steps", type=int, default=0, help="linear LR warmup (fsdpp --warmup-steps)")
    p.add_argument(
        "--lr-schedule",
        choices=["cosine", "linear", "constant"],
        default="cosine",
        help="over warmup + steps optimizer steps, as fsdpp with --max-steps warmup+steps",
    )
    p.add_argument("--weight-decay", type=float, default=0.0, help="AdamW decay of 2-D+ parameters")
    p.add_argument("--adam-beta1", type=float, default=0.9)
    p.add_argument("--adam-beta2", type=float, default=0.999)
    p.add_argument("--adam-eps", type=float, default=1e-8)
    p.add_argument(
        "--adam-impl",
        choices=["auto", "forloop", "foreach", "fused"],
        default="auto",
        help="torch.optim.AdamW implementation (auto: PyTorch's default)",
    )
    p.add_argument(
        "--rms-norm",
        choices=["auto", "eager", "fused"],
        default="auto",
        help="Llama's RMSNorm: PyTorch's fused CUDA kernel or HF's eager formula (auto: fused where "
        "this PyTorch has it, on CUDA; as fsdpp's default)",
    )
    p.add_argument(
        "--grad-clip", type=float, default=0.0, help="clip the global grad 2-norm (0: off; the norm is measured anyway)"
    )
    p.add_argument("--mixed-precision", choices=["fp32", "bf16"], default="fp32")
    p.add_argument("--activation-checkpointing", action="store_true")
    p.add_argument(
        "--cpu-offload",
        action="store_true",
        help="fsdp2: CPUOffloadPolicy (pinned host shards, gradients and AdamW state; AdamW steps on the CPU), "
        "as fsdpp --cpu-offload",
    )
    p.add_argument(
        "--threads", type=int, default=0, help="torch.set_num_threads (default: cores / local ranks; on CUDA at most 4)"
    )
    p.add_argument(
        "--bind-cores",
        action="store_true",
        help="with --nproc: pin each rank to its own --threads CPUs and its OpenMP threads to them "
        "(OMP_PROC_BIND=close, OMP_PLACES=threads unless set), as fsdpp --bind-cores",
    )
    p.add_argument("--device", choices=["cpu", "cuda"], default=None, help="default: cuda if available")
    p.add_argument("--seed", type=int, default=1234, help="init, random tokens and data order (fsdpp --seed)")
    p.add_argument("--init-std", type=float, default=0.02, help="random init: std of 2-D+ weights (fsdpp: 0.02)")
    p.add_argument("--out", help="write the JSON record here (atomically)")
    p.add_argument(
        "--eval-loss-only",
        action="store_true",
        help="no training: mean cross-entropy of the first windows (file order) with the loaded weights",
    )
    p.add_argument(
        "--eval-windows",
        type=int,
        default=-1,
        help="with --eval-loss-only: windows scored (default: --batch-size; 0: all, as fsdpp eval)",
    )
    p.add_argument(
        "--export-init",
        metavar="DIR",
        help="write the initial model as an HF folder (config.json, model.safetensors) and exit",
    )
    p.add_argument(
        "--matmul-peak",
        action="store_true",
        help="also time a large matmul (8192^3 CUDA, 1024^3 CPU) in the run's dtype",
    )
    p.add_argument("--log-freq", type=int, default=0, help="print a line every N steps (rank 0; 0: first and last)")
    p.add_argument(
        "--profile-trace",
        metavar="FILE",
        help="rank 0 records the measured steps with torch.profiler into this Chrome trace, each step "
        "annotated '%s' as fsdpp bench-step --profile-trace (slows them)" % STEP_SCOPE,
    )
    a = p.parse_args(argv)
    for name in ("batch_size", "steps"):
        if getattr(a, name) < 1:
            p.error("--%s must be >= 1" % name.replace("_", "-"))
    for name in ("warmup", "seq_len", "nproc", "threads", "lr_warmup_steps"):
        if getattr(a, name) < 0:
            p.error("--%s must be >= 0" % name.replace("_", "-"))
    if a.model_config is None and a.weights is None:
        p.error("give --model-config (and/or --weights from an HF folder with config.json)")
    if a.fixed_batch and a.tokens:
        p.error("--fixed-batch draws its own tokens: drop --tokens %s" % a.tokens)
    if a.cpu_offload and a.mode != "fsdp2":
        p.error("--cpu-offload is FSDP2's CPUOffloadPolicy: it needs --mode fsdp2, not --mode %s" % a.mode)
    if a.device is None:
        a.device = "cuda" if torch.cuda.is_available() else "cpu"
    return a


# ----------------------------------------------------------------------------------------
# Launching ranks
# ----------------------------------------------------------------------------------------


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent():
    """In a child: SIGTERM when the launcher dies (Linux prctl PR_SET_PDEATHSIG)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)
    except (OSError, AttributeError):
        pass


class _Terminated(Exception):
    pass


def _raise_terminated(signum, frame):
    raise _Terminated()


def rank_cpus(allowed, local_rank, threads):
    """fsdpp's launcher.h rank_cpus: rank r gets allowed[r*t .. r*t+t-1] (sorted), wrapping
    around when ranks x threads exceed the CPUs (ranks then share them)."""
    take = min(len(allowed), threads)
    return sorted(allowed[(local_rank * threads + j) % len(allowed)] for j in range(take))


def launch(argv, nproc, budget_s, bind_threads=0):
    """Run this script as `nproc` ranks (like torchrun --standalone); returns the exit code:
    the first failing rank's, 124 when budget_s (> 0) ran out, 143 on SIGTERM.
    bind_threads > 0: pin rank r to rank_cpus(this process's CPUs, r, bind_threads)."""
    signal.signal(signal.SIGTERM, _raise_terminated)
    deadline = time.monotonic() + budget_s if budget_s > 0 else None
    env = dict(os.environ)
    env.update(
        {
            "MASTER_ADDR": env.get("MASTER_ADDR", "127.0.0.1"),
            "MASTER_PORT": str(free_port()),
            "WORLD_SIZE": str(nproc),
            "LOCAL_WORLD_SIZE": str(nproc),
            LAUNCHED_ENV: "1",
        }
    )
    children = []
    try:
        if bind_threads > 0:
            allowed = sorted(os.sched_getaffinity(0))
            env.setdefault("OMP_PROC_BIND", "close")
            env.setdefault("OMP_PLACES", "threads")
        for r in range(nproc):
            e = dict(env, RANK=str(r), LOCAL_RANK=str(r))
            cpus = rank_cpus(allowed, r, bind_threads) if bind_threads > 0 else None

            def start(cpus=cpus):
                _die_with_parent()
                if cpus:
                    os.sched_setaffinity(0, cpus)

            children.append(
                subprocess.Popen([sys.executable, os.path.abspath(__file__)] + argv, env=e, preexec_fn=start)
            )
        code = 0
        running = list(children)
        while running:
            for c in list(running):
                rc = c.poll()
                if rc is None:
                    continue
                running.remove(c)
                if rc != 0 and code == 0:
                    code = rc
                    log("rank %d exited with %d; stopping the other ranks" % (children.index(c), rc))
                    for other in running:
                        other.terminate()
            if deadline is not None and running and time.monotonic() > deadline:
                log("--budget-s %g ran out; stopping the ranks" % budget_s)
                for other in running:
                    other.terminate()
                return 124
            time.sleep(0.05)
        return code
    except KeyboardInterrupt:
        return 130
    except _Terminated:
        return 143
    finally:
        for c in children:
            if c.poll() is None:
                c.terminate()
                try:
                    c.wait(10)
                except subprocess.TimeoutExpired:
                    c.kill()


# ----------------------------------------------------------------------------------------
# Measurement
# ----------------------------------------------------------------------------------------


def synchronize(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def start_profiler(device):
    """torch.profiler over CPU operators, and on CUDA the device activity, as fsdpp's
    StepProfiler (harness/bench/step_profiler.h) records."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    profiler = torch.profiler.profile(activities=activities)
    profiler.start()
    return profiler


def save_profile(profiler, path):
    profiler.stop()
    partial = path + ".partial"
    if os.path.dirname(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
    profiler.export_chrome_trace(partial)
    os.replace(partial, path)


def matmul_peak(device, dtype):
    n = 8192 if device.type == "cuda" else 1024
    iters = 20 if device.type == "cuda" else 5
    g = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(n, n, device=device, generator=g).to(dtype)
    b = torch.randn(n, n, device=device, generator=g).to(dtype)
    for _ in range(3):
        c = a @ b
    synchronize(device)
    t0 = time.perf_counter()
    for _ in range(iters):
        c = a @ b
    synchronize(device)
    dt = time.perf_counter() - t0
    del a, b, c
    return {
        "n": n,
        "dtype": str(dtype).replace("torch.", ""),
        "iterations": iters,
        "seconds": dt,
        "flops_per_s": 2.0 * n**3 * iters / dt,
    }


def matmul_parameters(model, expert_share=1.0):
    """Parameters that enter a matmul, counted as fsdpp's model_flops_per_token counts them
    (core/plan/step_time_model.h): every weight of 2+ dimensions except position embeddings;
    the token embedding is a lookup when an lm_head.weight is listed (tied or not), and the
    head then counts once; expert weights (names holding ".experts.") at the share of them a
    token runs. PlanPeerFlops.* holds this against fsdpp's count."""
    named = list(model.named_parameters(remove_duplicate=False))
    separate_head = any(name == "lm_head.weight" for name, _ in named)
    total = 0
    for name, p in named:
        if p.dim() < 2 or "wpe" in name or "embed_positions" in name:
            continue
        if ("wte" in name or "embed_tokens" in name) and separate_head:
            continue
        total += p.numel() * expert_share if ".experts." in name else p.numel()
    return total


def flops_per_token(c, seq_len, matmul_params):
    """Model FLOPs per token, fsdpp's formula: 6 * matmul parameters + 12 * layers * seq_len *
    attention width (forward + backward, causal not halved; recomputation not counted)."""
    if c["model_type"] == "gpt2":
        layers, width = c["n_layer"], c["n_embd"]
    else:
        layers, width = c["num_hidden_layers"], c["num_attention_heads"] * c["head_dim"]
    return 6 * matmul_params + 12 * layers * seq_len * width


def device_description(device):
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return cpu_name()


# ----------------------------------------------------------------------------------------
# Main paths
# ----------------------------------------------------------------------------------------


def prepare_model(args, c, device):
    if args.weights and c["model_type"] in TRANSFORMERS_FAMILIES:
        return build_transformers_model(c, device, args.weights)
    model = build_model(c, device)
    if args.weights:
        load_weights(model, args.weights, c["model_type"])
    else:
        init_parameters(model, args.seed, args.init_std)
    return model


def bench_step_batch(seed, rank, batch_size, seq_len, vocab):
    """The batch fsdpp bench-step trains on every step (harness/bench/step_bench.cpp): one
    [batch, seq_len + 1] draw of randint(0, vocab) from a CPU generator seeded
    seed * 1000003 + rank, split into inputs and next-token targets."""
    g = torch.Generator().manual_seed(seed * 1000003 + rank)
    tokens = torch.randint(0, vocab, (batch_size, seq_len + 1), generator=g, dtype=torch.int64)
    return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()


def seq_len_for(args, c):
    t = args.seq_len or c["max_positions"]
    if t > c["max_positions"]:
        raise PeerError("--seq-len %d is above the model's %d positions" % (t, c["max_positions"]))
    return t


def open_tokens(args, c, seq_len, min_windows):
    if args.tokens:
        data = TokenData.open(args.tokens, args.tokens_dtype)
        if data.num_windows(seq_len) < 1:
            raise PeerError(
                "--tokens %s: %d tokens, fewer than one window of seq_len %d (expected at least %d)"
                % (args.tokens, data.num_tokens, seq_len, seq_len + 1)
            )
        return data
    return TokenData.random(min_windows * seq_len + 1, c["vocab_size"], args.seed)


def check_vocab(x, vocab, source):
    top = int(x.max()) if x.size else 0
    if top >= vocab:
        raise PeerError("--tokens %s: token id %d is outside the model's vocabulary of %d" % (source, top, vocab))


def run_export_init(args, c, raw):
    model = prepare_model(args, c, torch.device("cpu"))
    os.makedirs(args.export_init, exist_ok=True)
    if c["model_type"] in TRANSFORMERS_FAMILIES:  # transformers writes its class's checkpoint layout
        model.save_pretrained(args.export_init)
        log("wrote %s (transformers %s)" % (args.export_init, c["transformers_class"]))
        return 0
    named = [(names[0], p) for names, p in unique_parameters(model)]
    save_safetensors(os.path.join(args.export_init, "model.safetensors"), named)
    config = dict(raw)
    config["torch_dtype"] = "float32"
    write_atomic(os.path.join(args.export_init, "config.json"), (json.dumps(config, indent=2) + "\n").encode("utf-8"))
    log("wrote %s (%d tensors, %d parameters)" % (args.export_init, len(named), sum(p.numel() for _, p in named)))
    return 0


@torch.no_grad()
def run_eval(args, c):
    device = torch.device(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    model = prepare_model(args, c, device)
    if args.mixed_precision == "bf16":
        model = model.to(torch.bfloat16)  # as fsdpp eval --dtype bf16: the weights in bf16
    model.eval()
    seq_len = seq_len_for(args, c)
    windows = args.eval_windows if args.eval_windows >= 0 else args.batch_size
    data = open_tokens(args, c, seq_len, max(windows, 1))
    available = data.num_windows(seq_len)
    if windows == 0:
        windows = available
    if windows > available:
        raise PeerError("--eval-windows %d: the data has only %d windows of %d tokens" % (windows, available, seq_len))
    total = 0.0
    for first in range(0, windows, args.batch_size):
        idx = list(range(first, min(windows, first + args.batch_size)))
        x, y = data.windows(idx, seq_len)
        check_vocab(x, c["vocab_size"], data.source)
        check_vocab(y, c["vocab_size"], data.source)
        logits = forward_logits(model, torch.from_numpy(x).to(device))[0].float()
        total += F.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), torch.from_numpy(y).to(device).reshape(-1), reduction="sum"
        ).item()
    tokens = windows * seq_len
    result = {
        "format": FORMAT + ".eval",
        "version": FORMAT_VERSION,
        "loss": total / tokens,
        "perplexity": math.exp(min(total / tokens, 700.0)),
        "tokens": tokens,
        "windows": windows,
        "seq_len": seq_len,
        "torch_version": torch.__version__,
        "model_type": c["model_type"],
        "weights": args.weights,
        "dtype": args.mixed_precision,
        "device": args.device,
    }
    text = json.dumps(result)
    print(text, flush=True)
    if args.out:
        write_atomic(args.out, (text + "\n").encode("utf-8"))
    return 0


def grad_norm_and_clip(params, max_norm, sharded_group, device):
    """Global gradient 2-norm (a 0-d fp32 tensor, no host sync); clips like
    torch.nn.utils.clip_grad_norm_ (coef = max_norm / (norm + 1e-6), at most 1) when
    max_norm > 0. With FSDP2 the local shards' squares are summed across the group."""
    grads = []
    for p in params:
        g = p.grad
        if g is None:
            continue
        if hasattr(g, "to_local"):
            g = g.to_local()
        if g.numel():
            grads.append(g)
    if not grads:  # (FSDP2: this rank holds no gradient elements; it still joins the all-reduce)
        sq = torch.zeros((), device=device)
        if sharded_group is not None:
            import torch.distributed as dist

            dist.all_reduce(sq, op=dist.ReduceOp.SUM, group=sharded_group)
        return sq.sqrt()
    if hasattr(torch, "_foreach_norm"):
        norms = torch._foreach_norm(grads, 2.0)
    else:
        norms = [torch.norm(g, 2.0) for g in grads]
    # Offloaded gradients are host tensors: their sum of squares joins the group's
    # collective on the compute device (NCCL reduces only CUDA tensors).
    sq = torch.stack([n.float() for n in norms]).pow(2).sum().to(device)
    if sharded_group is not None:
        import torch.distributed as dist

        dist.all_reduce(sq, op=dist.ReduceOp.SUM, group=sharded_group)
    norm = sq.sqrt()
    if max_norm > 0:
        coef = torch.clamp(max_norm / (norm + 1e-6), max=1.0)
        if TORCH_2 and hasattr(torch, "_foreach_mul_"):
            torch._foreach_mul_(grads, coef.to(grads[0].device))
        else:
            for g in grads:
                g.mul_(coef.to(g.device))
    return norm


class Ranks:
    """Where this process stands: its rank, the world, its place on this machine."""

    def __init__(self, args):
        launched = os.environ.get(LAUNCHED_ENV) == "1"
        env_world = int(os.environ.get("WORLD_SIZE", "1")) if "RANK" in os.environ else None
        if env_world is not None and args.nproc > 1 and not launched:
            raise PeerError("--nproc with a launcher's environment (RANK is set): use one or the other")
        self.world = env_world or 1
        self.rank = int(os.environ.get("RANK", "0"))
        self.local_rank = int(os.environ.get("LOCAL_RANK", str(self.rank)))
        self.local_world = int(os.environ.get("LOCAL_WORLD_SIZE", str(self.world)))
        if args.mode == "single" and self.world > 1:
            raise PeerError("--mode single runs one process; use --mode ddp or fsdp2 for %d ranks" % self.world)
        self.distributed = args.mode in ("ddp", "fsdp2")
        self.lead = self.rank == 0


def training_device(args, ranks):
    """This rank's device (on CUDA, GPU local_rank, made current); sets the intra-op threads."""
    if args.device == "cuda":
        if not torch.cuda.is_available():
            raise PeerError("--device cuda: this PyTorch %s has no CUDA device" % torch.__version__)
        if ranks.distributed and ranks.local_world > torch.cuda.device_count():
            raise PeerError(
                "%d local ranks but %d CUDA device(s): NCCL needs one GPU per rank"
                % (ranks.local_world, torch.cuda.device_count())
            )
        torch.cuda.set_device(ranks.local_rank)
        device = torch.device("cuda", ranks.local_rank)
    else:
        device = torch.device("cpu")
    # Default intra-op threads: cores / local ranks on CPU (as fsdpp); on CUDA at most 4 (the
    # host only launches kernels, and more threads made FSDP2's GPU steps slower: the figure
    # is in harness/peers/README.md).
    share = max(1, cpu_count() // ranks.local_world)
    torch.set_num_threads(args.threads or (share if device.type == "cpu" else min(4, share)))
    return device


def init_process_group(device, ranks):
    """The default process group: NCCL on CUDA, Gloo on the CPU; a local rendezvous by default."""
    import torch.distributed as dist

    if "MASTER_ADDR" not in os.environ:
        os.environ["MASTER_ADDR"] = "127.0.0.1"
    if "MASTER_PORT" not in os.environ:
        os.environ["MASTER_PORT"] = str(free_port())
    backend = "nccl" if device.type == "cuda" else "gloo"
    if device.type == "cuda" and torch_version() >= (2, 3):
        try:  # binds the NCCL communicator to this rank's GPU (eager init)
            dist.init_process_group(backend, rank=ranks.rank, world_size=ranks.world, device_id=device)
        except TypeError:
            dist.init_process_group(backend, rank=ranks.rank, world_size=ranks.world)
    else:
        dist.init_process_group(backend, rank=ranks.rank, world_size=ranks.world)


class Batches:
    """Each step's (inputs, targets) for this rank: bench-step's fixed batch, or windows of
    token data in the sampler's order."""

    def __init__(self, args, c, seq_len, total_steps, ranks):
        self.args, self.c, self.seq_len = args, c, seq_len
        if args.fixed_batch:
            self.data = None
            self.fixed = bench_step_batch(args.seed, ranks.rank, args.batch_size, seq_len, c["vocab_size"])
        else:
            self.data = open_tokens(args, c, seq_len, total_steps * args.batch_size * ranks.world)
            self.sampler = Sampler(
                self.data.num_windows(seq_len), args.batch_size, ranks.world, ranks.rank, not args.no_shuffle, args.seed
            )

    def at(self, step, device):
        if self.data is None:
            return self.fixed[0].to(device), self.fixed[1].to(device)
        xs, ys = self.data.windows(self.sampler.step_windows(step), self.seq_len)
        check_vocab(xs, self.c["vocab_size"], self.data.source)
        check_vocab(ys, self.c["vocab_size"], self.data.source)
        return (torch.from_numpy(xs).to(device, non_blocking=True), torch.from_numpy(ys).to(device, non_blocking=True))

    def description(self):
        """The record's "data" entry."""
        args, seq_len = self.args, self.seq_len
        if self.data is None:
            return {
                "tokens": "fixed batch per rank (fsdpp bench-step's)",
                "num_tokens": args.batch_size * (seq_len + 1),
                "windows": args.batch_size,
                "shuffle": False,
            }
        return {
            "tokens": self.data.source,
            "num_tokens": self.data.num_tokens,
            "windows": self.data.num_windows(seq_len),
            "shuffle": not args.no_shuffle,
        }


def parallelize(args, model, device, ranks):
    """`model` as the mode trains it -> (the module to call, FSDP2's group or None, the
    precision in words). DDP wraps it; FSDP2 shards every block, then the root, in place."""
    bf16 = args.mixed_precision == "bf16"
    autocast_words = "torch.autocast(bf16), fp32 weights and gradients"
    if args.mode == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP

        train_model = DDP(model, device_ids=[ranks.local_rank] if device.type == "cuda" else None)
        return train_model, None, autocast_words if bf16 else "fp32"
    if args.mode == "fsdp2":
        from torch.distributed.device_mesh import init_device_mesh

        fully_shard, MixedPrecisionPolicy = fsdp2_import()
        mesh = init_device_mesh(device.type, (ranks.world,))
        mp = (
            MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
            if bf16
            else MixedPrecisionPolicy()
        )
        extra = {}
        if args.cpu_offload:
            # torchtitan's offload: every group's shards, gradients and (through them) the
            # optimizer state live in pinned host memory; AdamW then steps on the CPU.
            extra["offload_policy"] = fsdp2_offload_policy(device)
        # Each decoder layer is one unit, then the root (embedding, final norm, head). A
        # mixture of experts' layer (Mixtral) holds its router and every expert in that unit,
        # as torchtitan's apply_fsdp shards a MoE block whole without expert parallelism: the
        # all-gathers and reduce-scatters then do not depend on where the router sends each
        # rank's tokens (a unit per expert would issue its collectives only on ranks whose
        # tokens reached it), and transformers' experts are fused [experts, ...] tensors that
        # FSDP2 shards on dim 0 (experts >= ranks here; torchtitan shards dim 1 otherwise).
        blocks = decoder_blocks(model)
        for i, block in enumerate(blocks):
            # torchtitan: the last block stays unsharded after forward (backward needs it at once).
            fully_shard(block, mesh=mesh, mp_policy=mp, reshard_after_forward=i < len(blocks) - 1, **extra)
        fully_shard(model, mesh=mesh, mp_policy=mp, **extra)
        precision = (
            "FSDP2 MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32), fp32 master weights" if bf16 else "fp32"
        )
        if args.cpu_offload:
            precision += ", CPUOffloadPolicy(pin_memory=%s)" % extra["offload_policy"].pin_memory
        return model, mesh.get_group(), precision
    return model, None, autocast_words if bf16 else "fp32"


def make_adamw(args, params):
    """AdamW with weight decay on matrices only (dim >= 2), in the implementation --adam-impl names."""
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    groups = [
        g
        for g in ({"params": decay, "weight_decay": args.weight_decay}, {"params": no_decay, "weight_decay": 0.0})
        if g["params"]
    ]
    opt_kwargs = {"lr": args.lr, "betas": (args.adam_beta1, args.adam_beta2), "eps": args.adam_eps}
    if args.adam_impl == "foreach":
        opt_kwargs["foreach"] = True
    elif args.adam_impl == "fused":
        opt_kwargs["fused"] = True
    elif args.adam_impl == "forloop":
        opt_kwargs["foreach"] = False
    return torch.optim.AdamW(groups, **opt_kwargs)


class StepLog:
    """What the steps measured on this rank: seconds, loss and gradient norm per step (warmup
    included), the learning rates, the measured steps' total seconds."""

    def __init__(self):
        self.step_s, self.losses, self.norms, self.lrs = [], [], [], []
        self.total_s = None
        self.rss_reset = False


def run_steps(args, device, ranks, batches, train_model, params, optimizer, sharded_group, total_steps):
    """Warmup then measured steps: forward, backward, clip, AdamW. The clock (and the memory
    peaks, and the profiler) start after the warmup, behind a barrier."""
    import torch.distributed as dist

    autocast = args.mixed_precision == "bf16" and args.mode != "fsdp2"
    hf_config = getattr(getattr(train_model, "module", train_model), "config", None)  # (DDP holds it as .module)
    aux_coef = getattr(hf_config, "router_aux_loss_coef", 0.0)

    def compute_loss(x, y):
        if autocast:
            with torch.autocast(device_type=device.type, dtype=torch.bfloat16):
                logits, aux = forward_logits(train_model, x)
        else:
            logits, aux = forward_logits(train_model, x)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), y.reshape(-1))
        if aux is not None:  # as fsdpp (and transformers with labels): mean CE + coef x load balancing
            loss = loss + aux_coef * aux
        return loss

    steps = StepLog()
    t_start = None
    profiler = None
    for step in range(total_steps):
        if step == args.warmup:
            synchronize(device)
            if ranks.distributed:
                dist.barrier()
            if device.type == "cuda":
                torch.cuda.reset_peak_memory_stats(device)
            steps.rss_reset = reset_peak_rss()
            if args.profile_trace and ranks.lead:
                profiler = start_profiler(device)
            t_start = time.perf_counter()
        with torch.profiler.record_function(STEP_SCOPE):
            t0 = time.perf_counter()
            x, y = batches.at(step, device)
            loss = compute_loss(x, y)
            loss.backward()
            norm = grad_norm_and_clip(params, args.grad_clip, sharded_group, device)
            lr = lr_at(step, args.lr, args.min_lr, args.lr_warmup_steps, total_steps, args.lr_schedule)
            for g in optimizer.param_groups:
                g["lr"] = lr
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            synchronize(device)
            steps.step_s.append(time.perf_counter() - t0)
            steps.losses.append(loss.detach())
            steps.norms.append(norm.detach())
            steps.lrs.append(lr)
            if ranks.lead and (
                step == 0 or step + 1 == total_steps or (args.log_freq and (step + 1) % args.log_freq == 0)
            ):
                log(
                    "step %d/%d | loss%s %.4f | %.1f ms%s"
                    % (
                        step + 1,
                        total_steps,
                        " (rank 0)" if ranks.distributed else "",
                        loss.item(),
                        steps.step_s[-1] * 1e3,
                        " (warmup)" if step < args.warmup else "",
                    )
                )
    synchronize(device)
    steps.total_s = time.perf_counter() - t_start
    if profiler is not None:
        save_profile(profiler, args.profile_trace)
    return steps


def reduce_across_ranks(args, device, ranks, steps):
    """The slowest rank's measured step times and total, the mean loss per step, rank 0's
    gradient norms, every rank's memory peaks -> (step_ms, total_s, losses, norms, per_rank)."""
    import torch.distributed as dist

    red_device = device if device.type == "cuda" else torch.device("cpu")
    times = torch.tensor(steps.step_s[args.warmup :] + [steps.total_s], dtype=torch.float64, device=red_device)
    loss_t = torch.stack([loss.float() for loss in steps.losses]).to(red_device, torch.float64)
    norm_t = torch.stack([n.float().to(red_device) for n in steps.norms]).to(torch.float64)
    mem = torch.tensor(
        [
            torch.cuda.max_memory_allocated(device) if device.type == "cuda" else -1,
            torch.cuda.max_memory_reserved(device) if device.type == "cuda" else -1,
            peak_rss_bytes(),
            (vm_hwm_bytes() or -1) if steps.rss_reset else -1,
        ],
        dtype=torch.float64,
        device=red_device,
    )
    mems = [mem]
    if ranks.distributed:
        dist.all_reduce(times, op=dist.ReduceOp.MAX)
        dist.all_reduce(loss_t, op=dist.ReduceOp.SUM)
        loss_t /= ranks.world
        mems = [torch.zeros_like(mem) for _ in range(ranks.world)]
        dist.all_gather(mems, mem)
    times, loss_l, norm_l = times.cpu().tolist(), loss_t.cpu().tolist(), norm_t.cpu().tolist()
    per_rank = []
    for r, m in enumerate(mems):
        v = [int(x) for x in m.cpu().tolist()]
        per_rank.append(
            {
                "rank": r,
                "max_memory_allocated_bytes": v[0] if v[0] >= 0 else None,
                "max_memory_reserved_bytes": v[1] if v[1] >= 0 else None,
                "peak_rss_bytes": v[2],
                "peak_rss_measured_bytes": v[3] if v[3] >= 0 else None,
            }
        )
    return [t * 1e3 for t in times[:-1]], times[-1], loss_l, norm_l, per_rank


def train_record(args, c, device, ranks, run):
    """The peer's JSON record of a training run (FORMAT, FORMAT_VERSION): the configuration,
    the measured steps and the memory peaks. `run` holds the values run_train gathered."""
    import torch.distributed as dist

    seq_len, peak = run["seq_len"], run["peak"]
    step_ms, total_s, loss_l, norm_l = run["step_ms"], run["total_s"], run["losses"], run["norms"]
    tokens_per_step = ranks.world * args.batch_size * seq_len
    fpt = flops_per_token(c, seq_len, run["matmul_parameters"])
    tokens_per_s = tokens_per_step * args.steps / total_s
    sorted_ms = sorted(step_ms)
    record = {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "available": True,
        "mode": args.mode,
        "world_size": ranks.world,
        "torch_version": torch.__version__,
        "cuda_version": torch.version.cuda,
        "python_version": platform.python_version(),
        "device": device.type,
        "device_name": device_description(device),
        "threads": torch.get_num_threads(),
        # Rank 0's main thread's CPUs (--bind-cores narrows them to its slice).
        "cpu_affinity": sorted(os.sched_getaffinity(0)),
        "backend": dist.get_backend() if ranks.distributed else None,
        "model_type": c["model_type"],
        "parameters": run["parameters"],
        "model_config": c,
        "config": vars(args),
        "seq_len": seq_len,
        "batch_size_per_rank": args.batch_size,
        "tokens_per_step": tokens_per_step,
        "warmup_steps": args.warmup,
        "steps": args.steps,
        "precision": run["precision"],
        "attention": "sdpa" if HAS_SDPA else "explicit masked softmax",
        "activation_checkpointing": args.activation_checkpointing,
        "tf32_matmul": bool(device.type == "cuda" and torch.backends.cuda.matmul.allow_tf32),
        "data": run["data"],
        "step_ms": step_ms,
        "step_ms_mean": sum(step_ms) / len(step_ms),
        "step_ms_median": (sorted_ms[len(sorted_ms) // 2] + sorted_ms[(len(sorted_ms) - 1) // 2]) / 2,
        "step_ms_min": sorted_ms[0],
        "total_s": total_s,
        "tokens_per_s": tokens_per_s,
        "tokens_per_s_per_rank": tokens_per_s / ranks.world,
        "losses": loss_l[args.warmup :],
        "warmup_losses": loss_l[: args.warmup],
        "grad_norms": norm_l[args.warmup :],
        "lrs": run["lrs"][args.warmup :],
        "memory": {
            "per_rank": run["per_rank"],
            "note": "CUDA: peaks since the start of the measured steps; peak_rss_bytes: "
            "getrusage ru_maxrss of the whole process; peak_rss_measured_bytes: VmHWM "
            "since the start of the measured steps (reset via /proc/self/clear_refs)",
        },
        "flops_per_token_estimate": fpt,
        "model_flops_per_s": tokens_per_s * fpt,
        "matmul_peak": peak,
        "mfu_vs_matmul_peak": (tokens_per_s / ranks.world * fpt / peak["flops_per_s"]) if peak else None,
    }
    if c["model_type"] == "llama":  # which RMSNorm ran, as fsdpp's record says it
        record["rms_norm"] = "fused" if FUSED_RMS_NORM else "eager"
    if c["model_type"] in TRANSFORMERS_FAMILIES:  # whose model class ran, and its kernels
        import transformers

        record["model_class"] = "transformers %s %s" % (transformers.__version__, c["transformers_class"])
        record["attention"] = "sdpa (transformers' attn_implementation)"
        if "num_local_experts" in c:
            record["experts_implementation"] = run["experts_implementation"]
    record["cross_entropy"] = "composite"  # F.cross_entropy(logits.float()), as fsdpp's record says it
    return record


def report(args, record, losses):
    """One summary line on stderr; the record to --out (with one line of key numbers on
    stdout), else the record on stdout."""
    log(
        "%.1f tokens/s, step %.1f ms (median of %d), loss %.4f -> %.4f"
        % (record["tokens_per_s"], record["step_ms_median"], args.steps, losses[0], losses[-1])
    )
    if args.out:  # the record to the file, one line of key numbers to stdout
        write_atomic(args.out, (json.dumps(record, indent=1) + "\n").encode("utf-8"))
        keys = ("mode", "world_size", "tokens_per_s", "step_ms_median", "losses", "memory")
        print(json.dumps({k: record[k] for k in keys}), flush=True)
        log("wrote " + args.out)
    else:
        print(json.dumps(record), flush=True)


def run_train(args, c):
    """Trains `c` as --mode says (single, DDP, FSDP2) and prints or writes rank 0's record."""
    import torch.distributed as dist

    ranks = Ranks(args)
    device = training_device(args, ranks)
    global FUSED_RMS_NORM
    FUSED_RMS_NORM = choose_rms_norm(args.rms_norm, device)
    if ranks.distributed:
        init_process_group(device, ranks)

    seq_len = seq_len_for(args, c)
    total_steps = args.warmup + args.steps
    batches = Batches(args, c, seq_len, total_steps, ranks)
    model = prepare_model(args, c, device)
    params_count = sum(p.numel() for _, p in unique_parameters(model))
    matmul_params = matmul_parameters(model, c.get("expert_share", 1.0))
    set_checkpointing(model, args.activation_checkpointing)
    train_model, sharded_group, precision = parallelize(args, model, device, ranks)
    params = list(model.parameters())
    optimizer = make_adamw(args, params)

    peak = None
    if args.matmul_peak:
        peak = matmul_peak(device, torch.bfloat16 if args.mixed_precision == "bf16" else torch.float32)
    if device.type == "cuda":
        torch.cuda.empty_cache()
    if ranks.lead:
        log(
            "%s %s, %d parameters, %d rank(s) on %s, %s, %d+%d steps of %d x %d tokens per rank"
            % (
                args.mode,
                c["model_type"],
                params_count,
                ranks.world,
                device_description(device),
                args.mixed_precision,
                args.warmup,
                args.steps,
                args.batch_size,
                seq_len,
            )
        )
    steps = run_steps(args, device, ranks, batches, train_model, params, optimizer, sharded_group, total_steps)

    step_ms, total_s, losses, norms, per_rank = reduce_across_ranks(args, device, ranks, steps)
    if ranks.distributed:
        dist.barrier()
    if ranks.lead:
        run = {
            "seq_len": seq_len,
            "peak": peak,
            "parameters": params_count,
            "matmul_parameters": matmul_params,
            "precision": precision,
            "data": batches.description(),
            "step_ms": step_ms,
            "total_s": total_s,
            "losses": losses,
            "norms": norms,
            "lrs": steps.lrs,
            "per_rank": per_rank,
            "experts_implementation": getattr(getattr(model, "config", None), "_experts_implementation", None),
        }
        report(args, train_record(args, c, device, ranks, run), losses)
    if ranks.distributed:
        # DDP's reducer and FSDP2's state must go while the process group lives: with gloo on
        # PyTorch 1.13, a DDP model destroyed after destroy_process_group hung a rank at exit.
        del train_model, model, optimizer, params
        gc.collect()
        dist.barrier()
        dist.destroy_process_group()
    return 0


def main(argv):
    args = parse_args(argv)
    try:
        if args.mode == "fsdp2" and not args.eval_loss_only and not args.export_init:
            reason = fsdp2_unavailable_reason(args.device)
            if reason:
                print("torch_peer: fsdp2 not available: " + reason, flush=True)
                if args.out and os.environ.get("RANK", "0") == "0":
                    write_atomic(
                        args.out,
                        (
                            json.dumps(
                                {
                                    "format": FORMAT,
                                    "version": FORMAT_VERSION,
                                    "available": False,
                                    "mode": "fsdp2",
                                    "reason": reason,
                                    "torch_version": torch.__version__,
                                }
                            )
                            + "\n"
                        ).encode("utf-8"),
                    )
                return EXIT_FSDP2_UNAVAILABLE
        c, raw = load_model_config(
            args.model_config or (args.weights if os.path.isdir(args.weights) else os.path.dirname(args.weights) or ".")
        )
        if args.export_init:
            return run_export_init(args, c, raw)
        if args.eval_loss_only:
            return run_eval(args, c)
        if args.nproc > 1 and os.environ.get(LAUNCHED_ENV) != "1":
            if args.mode == "single":
                raise PeerError("--nproc %d needs --mode ddp or fsdp2" % args.nproc)
            if "RANK" in os.environ:
                raise PeerError("--nproc with a launcher's environment (RANK is set): use one or the other")
            bind_threads = 0
            if args.bind_cores:
                bind_threads = args.threads or max(1, len(os.sched_getaffinity(0)) // args.nproc)
            return launch(argv, args.nproc, args.budget_s, bind_threads)
        return run_train(args, c)
    except PeerError as e:
        print("torch_peer: error: %s" % e, file=sys.stderr, flush=True)
        return EXIT_USAGE


if __name__ == "__main__":
    # `torch_peer.py serve` answers a suite's single-process calls in one process
    # (harness/references/serve.py): every mode sets its own threads and seeds.
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "references"))
    from serve import main_or_serve

    sys.exit(main_or_serve(main))
