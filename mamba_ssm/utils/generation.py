"""Step-by-step generation for Mamba language models (upstream's ``mamba_ssm.utils.generation``):
``InferenceParams`` (the decoding state every layer reads and writes), the sampling filters, ``sample``,
``decode`` and ``GenerationMixin.generate``, with optional CUDA-graph decoding.

How decoding runs: the prompt is processed once (each layer stores its conv / SSM states or its keys and
values in ``InferenceParams.key_value_memory_dict[layer_idx]``), then every new token is one call of the
model on a (batch, 1) input with ``seqlen_offset > 0``, which sends every layer down its step path
(``Mamba.step``, ``Mamba2.step``, the KV cache of ``MHA``); the prompt is never run again.

Sampling filters (applied in this order after the repetition penalty; ``top_k=1`` is greedy argmax):

* temperature: logits / temperature;
* top-k: keep the k largest logits (Fan et al., arXiv:1805.04833);
* top-p / nucleus: keep the smallest set of most likely tokens whose probability reaches top_p (Holtzman
  et al., arXiv:1904.09751);
* min-p: keep tokens whose probability is at least min_p times the largest (Nguyen et al.,
  arXiv:2407.01082);
* repetition penalty: the logit of every token already in the sequence is divided by the penalty when
  positive and multiplied by it when negative (Keskar et al., CTRL, arXiv:1909.05858).
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Optional, Protocol, Sequence, cast

import torch
from torch import nn

if TYPE_CHECKING:
    from torch.cuda import _POOL_HANDLE  # graph_pool_handle()'s type (a tuple[int, int] NewType)

__all__ = [
    "DecodingCGCache",
    "GenerationMixin",
    "GreedySearchDecoderOnlyOutput",
    "InferenceParams",
    "LayerCache",
    "SampleDecoderOnlyOutput",
    "Streamer",
    "capture_graph",
    "decode",
    "modify_logit_for_repetition_penalty",
    "modify_logits_for_min_p_filtering",
    "modify_logits_for_top_k_filtering",
    "modify_logits_for_top_p_filtering",
    "sample",
    "update_graph_cache",
]


#: One layer's decoding cache, as its ``allocate_inference_cache`` returns it: Mamba / Mamba2
#: ``(conv_state, ssm_state)``, MHA ``(kv_cache, conv_state or None)``, Mamba3 ``(angle, ssm, k, v)``.
LayerCache = tuple[Optional[torch.Tensor], ...]
#: A captured decode step: ``run(input_ids, position_ids or None, seqlen) -> logits``.
GraphStep = Callable[[torch.Tensor, Optional[torch.Tensor], int], torch.Tensor]
#: A one-token decode step: ``run(input_ids (batch, 1), seqlen_offset) -> logits (batch, vocab)``.
DecodeStep = Callable[[torch.Tensor, int], torch.Tensor]


@dataclass
class InferenceParams:
    """Inference parameters passed to each layer's ``forward`` while generating.

    Attributes:
        max_seqlen: the longest sequence (prompt + generated tokens) the caches are for.
        max_batch_size: the largest batch the caches are for.
        seqlen_offset: tokens already processed (0 for the prompt; then the decode position).
        batch_size_offset: first batch row of this call inside the caches.
        key_value_memory_dict: per ``layer_idx`` cache; Mamba stores ``(conv_state, ssm_state)``, MHA
            ``(kv_cache, conv_state)``.
        lengths_per_sample: (batch,) int tokens already processed per sample, or None. Set during
            CUDA-graph decoding, where MHA takes each row's position from it (a tensor, not a Python int).
    """

    max_seqlen: int
    max_batch_size: int
    seqlen_offset: int = 0
    batch_size_offset: int = 0
    # Each layer reads back the tuple it stored, whose arity and Optional entries its kind decides
    # (LayerCache); Any lets each layer unpack its own form without a cast.
    key_value_memory_dict: dict[int, Any] = field(default_factory=dict)
    lengths_per_sample: Optional[torch.Tensor] = None

    def reset(self, max_seqlen: int, max_batch_size: int) -> None:
        """Start a new generation with these limits (the caches are kept, the offsets zeroed)."""
        self.max_seqlen = max_seqlen
        self.max_batch_size = max_batch_size
        self.seqlen_offset = 0
        if self.lengths_per_sample is not None:
            self.lengths_per_sample.zero_()


# --------------------------------------------------------------------------------------------------
# Sampling


def modify_logits_for_top_k_filtering(logits: torch.Tensor, top_k: int) -> None:
    """Set, in place, every logit below the ``top_k``-th largest of its row to -inf (ties kept).

    logits: (batch, vocab) float. top_k: int in [1, vocab]."""
    kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]
    logits.masked_fill_(logits < kth, float("-inf"))


def modify_logits_for_top_p_filtering(logits: torch.Tensor, top_p: float) -> None:
    """Nucleus filter, in place: keep the most likely tokens until their probability reaches ``top_p``
    (the token that crosses it included; the most likely token always), others -inf. No-op for
    top_p <= 0 or >= 1. logits: (batch, vocab) float."""
    if top_p <= 0.0 or top_p >= 1.0:
        return
    sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
    probs = torch.softmax(sorted_logits.float(), dim=-1)
    before = torch.cumsum(probs, dim=-1) - probs  # probability of the strictly more likely tokens
    drop_sorted = before >= top_p
    drop_sorted[..., 0] = False
    drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
    logits.masked_fill_(drop, float("-inf"))


def modify_logits_for_min_p_filtering(logits: torch.Tensor, min_p: float) -> None:
    """min-p filter, in place: tokens whose probability is below ``min_p`` times their row's largest get
    -inf. No-op for min_p <= 0. logits: (batch, vocab) float."""
    if min_p <= 0.0:
        return
    probs = torch.softmax(logits.float(), dim=-1)
    threshold = probs.max(dim=-1, keepdim=True).values * min_p
    logits.masked_fill_(probs < threshold, float("-inf"))


def modify_logit_for_repetition_penalty(
    logits: torch.Tensor, prev_output_tokens: torch.Tensor, repetition_penalty: float = 1.0
) -> torch.Tensor:
    """CTRL's repetition penalty, in place: each token id present in ``prev_output_tokens``
    ((batch, seqlen) int) has its logit divided by the penalty when positive, multiplied when negative.
    Returns logits ((batch, vocab))."""
    if repetition_penalty == 1.0:
        return logits
    score = torch.gather(logits, 1, prev_output_tokens)
    score = torch.where(score < 0, score * repetition_penalty, score / repetition_penalty)
    logits.scatter_(1, prev_output_tokens, score)
    return logits


def _check_sampling(
    top_k: int, top_p: float, min_p: float, temperature: float, repetition_penalty: float = 1.0
) -> None:
    if not isinstance(top_k, int) or top_k < 0:
        raise ValueError(f"top_k={top_k!r} must be an int >= 0 (1: greedy, 0: no top-k filter)")
    if not 0.0 <= top_p <= 1.0:
        raise ValueError(f"top_p={top_p!r} must be in [0, 1] (0 or 1: no nucleus filter)")
    if not 0.0 <= min_p <= 1.0:
        raise ValueError(f"min_p={min_p!r} must be in [0, 1] (0: no min-p filter)")
    if not temperature > 0.0:
        raise ValueError(f"temperature={temperature!r} must be > 0 (for greedy decoding use top_k=1)")
    if not repetition_penalty > 0.0:
        raise ValueError(f"repetition_penalty={repetition_penalty!r} must be > 0 (1.0: none)")


def sample(
    logits: torch.Tensor, top_k: int = 1, top_p: float = 0.0, min_p: float = 0.0, temperature: float = 1.0
) -> torch.Tensor:
    """One token per row from logits (batch, vocab) -> (batch,) int64.

    ``top_k=1``: argmax (greedy; the other arguments are ignored). Otherwise the logits are divided by
    ``temperature`` and filtered by top-k (when > 0), top-p and min-p, then one token is drawn from the
    softmax with ``torch.multinomial`` (seed it with ``torch.manual_seed`` for reproducible runs).

    Raises:
        ValueError: an argument out of range (named, with its range).
    """
    _check_sampling(top_k, top_p, min_p, temperature)
    if top_k == 1:
        return logits.argmax(dim=-1)
    logits = logits.float() / temperature
    if top_k > 0:
        modify_logits_for_top_k_filtering(logits, min(top_k, logits.shape[-1]))
    modify_logits_for_top_p_filtering(logits, top_p)
    modify_logits_for_min_p_filtering(logits, min_p)
    return torch.multinomial(torch.softmax(logits, dim=-1), num_samples=1).squeeze(-1)


# --------------------------------------------------------------------------------------------------
# Decoding


@dataclass
class GreedySearchDecoderOnlyOutput:
    """``generate(..., return_dict_in_generate=True)`` with top_k=1: sequences (batch, prompt + new) and,
    with ``output_scores``, one (batch, vocab) logits tensor per new token."""

    sequences: torch.Tensor
    scores: Optional[tuple[torch.Tensor, ...]] = None


@dataclass
class SampleDecoderOnlyOutput:
    """As :class:`GreedySearchDecoderOnlyOutput`, for sampled decoding (top_k != 1)."""

    sequences: torch.Tensor
    scores: Optional[tuple[torch.Tensor, ...]] = None


@dataclass
class DecodingCGCache:
    """CUDA graphs of the decode step over caches allocated for ``max_seqlen`` tokens.

    ``generate(cg=True)`` keeps one on the model (``_decoding_cache``) with ``runners``: batch_size ->
    (inference_params, run). :func:`update_graph_cache` (upstream's entry point) fills ``callables``:
    (batch_size, decoding_seqlen) -> ``run(input_ids, position_ids, seqlen)``, sharing one
    ``inference_params`` for ``max_batch_size`` rows, and sets ``run`` to dispatch on the input's shape."""

    max_seqlen: int = 0
    dtype: Optional[torch.dtype] = None
    device: Optional[torch.device] = None
    mempool: Optional[_POOL_HANDLE] = None
    runners: dict[int, tuple[InferenceParams, DecodeStep]] = field(default_factory=dict)
    max_batch_size: int = 0
    callables: dict[tuple[int, int], GraphStep] = field(default_factory=dict)
    inference_params: Optional[InferenceParams] = None
    run: Optional[GraphStep] = None


_CG_NOTICE_GIVEN = False


def _cg_unavailable(reason: str) -> None:
    global _CG_NOTICE_GIVEN  # noqa: PLW0603
    if not _CG_NOTICE_GIVEN:
        _CG_NOTICE_GIVEN = True
        warnings.warn(
            f"generate(cg=True): {reason}; decoding runs the same step path without CUDA graphs",
            RuntimeWarning,
            stacklevel=3,
        )


def _model_device_dtype(model: nn.Module) -> tuple[torch.device, torch.dtype]:
    p = next(model.parameters())
    return p.device, p.dtype


def _graph_inference_params(
    model: nn.Module,
    batch_size: int,
    max_seqlen: int,
    dtype: torch.dtype | None,
    device: torch.device | None,
    seqlen_offset: int = 0,
) -> InferenceParams:
    """InferenceParams over freshly allocated caches for ``batch_size`` rows, with the per-row lengths
    tensor that graphed decoding updates in place."""
    inference_params = InferenceParams(
        max_seqlen=max_seqlen, max_batch_size=batch_size, seqlen_offset=seqlen_offset
    )
    inference_params.key_value_memory_dict = _allocate(model)(batch_size, max_seqlen, dtype=dtype)
    inference_params.lengths_per_sample = torch.full(
        (batch_size,), seqlen_offset, dtype=torch.int32, device=device
    )
    return inference_params


def _allocate(model: nn.Module) -> Callable[..., dict[int, LayerCache]]:
    """``model.allocate_inference_cache`` (a language model's method; nn.Module types an attribute only
    as Tensor | Module)."""
    return cast("Callable[..., dict[int, LayerCache]]", model.allocate_inference_cache)


def _logits(output: Any) -> torch.Tensor:
    """The ``.logits`` (batch, seqlen, vocab) of a model's output (an object of the model's own class)."""
    logits: torch.Tensor = output.logits
    return logits


def _require_cuda_model(fn: str, model: nn.Module) -> torch.device:
    device, _ = _model_device_dtype(model)
    if device.type != "cuda" or not torch.cuda.is_available():
        raise RuntimeError(
            f"{fn}: CUDA graphs need a model on a CUDA device, this one is on {device}; decode without "
            f"graphs there (generate(..., cg=False), which is also what cg=True does on such a device)"
        )
    return device


def capture_graph(
    model: nn.Module,
    inference_params: InferenceParams,
    batch_size: int,
    max_seqlen: int,
    decoding_seqlen: int = 1,
    mempool: _POOL_HANDLE | None = None,
    n_warmups: int = 2,
) -> GraphStep:
    """Capture one decode step of ``decoding_seqlen`` tokens for ``batch_size`` rows into a CUDA graph
    (upstream's entry point).

    Args:
        model: called as ``model(input_ids, position_ids=..., inference_params=..., num_last_tokens=...)``
            returning ``.logits``, on a CUDA device. inference_params: its caches (allocated for at least
            ``batch_size`` rows and ``max_seqlen`` tokens) with ``lengths_per_sample`` (batch,) int32.
        decoding_seqlen: tokens per step. mempool: a CUDA graph memory pool handle to share, or None.
        n_warmups: eager runs on a side stream before the capture.

    Returns:
        ``run(input_ids, position_ids, seqlen) -> logits (batch_size, decoding_seqlen, vocab)``: replays the
        graph for new (batch_size, decoding_seqlen) ids with every row at position ``seqlen``
        (``position_ids`` may be None), returning a copy of the logits. ``inference_params.seqlen_offset``
        is left as it was.

    Raises:
        RuntimeError: the model is not on a CUDA device.
        ValueError: ``inference_params.lengths_per_sample`` is None.
    """
    device = _require_cuda_model("capture_graph", model)
    lengths = inference_params.lengths_per_sample
    if lengths is None:
        raise ValueError(
            "capture_graph: inference_params.lengths_per_sample is None; graphed decoding reads each row's "
            "position from it: set it to a (batch,) int32 tensor on the model's device"
        )
    input_ids = torch.zeros(batch_size, decoding_seqlen, dtype=torch.long, device=device)
    position_ids = torch.zeros(batch_size, decoding_seqlen, dtype=torch.long, device=device)
    offset_before = inference_params.seqlen_offset
    # Any offset > 0 sends every layer down its step path; MHA reads the positions from lengths_per_sample.
    inference_params.seqlen_offset = max_seqlen - decoding_seqlen
    lengths[:] = inference_params.seqlen_offset

    def step() -> torch.Tensor:
        return _logits(
            model(
                input_ids,
                position_ids=position_ids,
                inference_params=inference_params,
                num_last_tokens=decoding_seqlen,
            )
        )

    stream = torch.cuda.Stream(device=device)  # type: ignore[no-untyped-call]  # torch leaves Stream() unannotated
    stream.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(stream):
        for _ in range(n_warmups):
            step()
    torch.cuda.current_stream(device).wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, pool=mempool):
        logits = step()
    inference_params.seqlen_offset = offset_before

    def run(new_input_ids: torch.Tensor, new_position_ids: torch.Tensor | None, seqlen: int) -> torch.Tensor:
        lengths[:] = seqlen
        input_ids.copy_(new_input_ids)
        if new_position_ids is not None:
            position_ids.copy_(new_position_ids)
        graph.replay()
        return logits.clone()

    return run


def update_graph_cache(
    model: nn.Module,
    cache: DecodingCGCache | None,
    batch_size: int,
    seqlen_og: int,
    max_seqlen: int,
    decoding_seqlens: Sequence[int] = (1,),
    dtype: torch.dtype | None = None,
    n_warmups: int = 2,
) -> DecodingCGCache:
    """Upstream's CUDA-graph cache: (re)allocate the decoding caches when the model's device or dtype
    changed or the batch / length grew, and capture one graph per decoding length not captured yet.

    Args:
        model: with ``allocate_inference_cache(batch, max_seqlen, dtype=...)``, on a CUDA device.
        cache: a :class:`DecodingCGCache` (None: a new one). batch_size, max_seqlen: what to decode.
        seqlen_og: the prompt length (the graphs' inference_params start there). decoding_seqlens: the
        step lengths to capture. dtype: of the caches (default the model's). n_warmups: see
        :func:`capture_graph`.

    Returns:
        the cache, with ``inference_params`` (seqlen_offset 0) and ``run(input_ids, position_ids,
        seqlen)`` dispatching on input_ids' (batch_size, decoding_seqlen).

    Raises:
        RuntimeError: the model is not on a CUDA device.
    """
    device = _require_cuda_model("update_graph_cache", model)
    cache = DecodingCGCache() if cache is None else cache
    _, model_dtype = _model_device_dtype(model)
    dtype = model_dtype if dtype is None else dtype
    inference_params = cache.inference_params
    if (
        inference_params is None
        or (cache.device, cache.dtype) != (device, dtype)
        or batch_size > cache.max_batch_size
        or max_seqlen > cache.max_seqlen
    ):
        cache.callables = {}
        cache.mempool = None
        cache.inference_params = None
        torch.cuda.empty_cache()
        cache.device, cache.dtype = device, dtype
        cache.max_batch_size, cache.max_seqlen = batch_size, max_seqlen
        inference_params = cache.inference_params = _graph_inference_params(
            model, batch_size, max_seqlen, dtype, device, seqlen_og
        )
        cache.mempool = torch.cuda.graphs.graph_pool_handle()
    for decoding_seqlen in decoding_seqlens:
        if (batch_size, decoding_seqlen) not in cache.callables:
            cache.callables[batch_size, decoding_seqlen] = capture_graph(
                model,
                inference_params,
                batch_size,
                max_seqlen,
                decoding_seqlen,
                cache.mempool,
                n_warmups,
            )

    graph_cache = cache  # (not None here; the closure reads its callables when called)

    def dispatch(input_ids: torch.Tensor, position_ids: torch.Tensor | None, seqlen: int) -> torch.Tensor:
        rows, decoding_seqlen = input_ids.shape[:2]
        return graph_cache.callables[rows, decoding_seqlen](input_ids, position_ids, seqlen)

    cache.run = dispatch
    inference_params.seqlen_offset = 0
    return cache


def _capture_step(
    model: nn.Module, batch_size: int, max_seqlen: int, cache: DecodingCGCache, n_warmups: int = 2
) -> tuple[InferenceParams, DecodeStep]:
    """Capture model's one-token step for ``batch_size`` rows into a CUDA graph; returns
    (inference_params, run) with ``run(input_ids (batch, 1), seqlen_offset) -> logits (batch, vocab)``."""
    inference_params = _graph_inference_params(model, batch_size, max_seqlen, cache.dtype, cache.device)
    replay = capture_graph(model, inference_params, batch_size, max_seqlen, 1, cache.mempool, n_warmups)

    def run(new_input_ids: torch.Tensor, seqlen_offset: int) -> torch.Tensor:
        return replay(new_input_ids, None, seqlen_offset)[:, -1]

    return inference_params, run


def _graph_runner(
    model: nn.Module, batch_size: int, max_length: int
) -> tuple[InferenceParams, DecodeStep] | None:
    """(inference_params, run) for CUDA-graph decoding, or None when graphs cannot be used (said once)."""
    device, dtype = _model_device_dtype(model)
    if device.type != "cuda" or not torch.cuda.is_available():
        _cg_unavailable(f"CUDA graphs need a CUDA device and the model is on {device}")
        return None
    cache: DecodingCGCache | None = getattr(model, "_decoding_cache", None)
    if cache is None or cache.max_seqlen < max_length or cache.dtype != dtype or cache.device != device:
        cache = DecodingCGCache(
            max_seqlen=max_length, dtype=dtype, device=device, mempool=torch.cuda.graphs.graph_pool_handle()
        )
        # A plain attribute (nn.Module.__setattr__ stores a non-tensor value exactly so; its annotation
        # admits only tensors and modules).
        object.__setattr__(model, "_decoding_cache", cache)
    if batch_size not in cache.runners:
        try:
            cache.runners[batch_size] = _capture_step(model, batch_size, cache.max_seqlen, cache)
        except Exception as exc:  # noqa: BLE001  (a layer whose step cannot be captured)
            _cg_unavailable(f"capturing the decode step failed ({exc.__class__.__name__}: {exc})")
            return None
    inference_params, run = cache.runners[batch_size]
    inference_params.reset(cache.max_seqlen, batch_size)
    return inference_params, run


def _eos_set(eos_token_id: int | Sequence[int] | None) -> list[int] | None:
    if eos_token_id is None:
        return None
    ids = [eos_token_id] if isinstance(eos_token_id, int) else list(eos_token_id)
    if not ids or not all(isinstance(i, int) for i in ids):
        raise ValueError(f"eos_token_id={eos_token_id!r} must be an int or a list of ints")
    return ids


@torch.no_grad()
def _check_prompt_ids(input_ids: torch.Tensor, model: nn.Module) -> None:
    """Raise ValueError naming the token id and the vocabulary size when a prompt id is outside the
    rows of ``model``'s input embedding (found through ``get_input_embeddings()`` or
    ``backbone.embedding``; models with neither are not checked). Without it the embedding lookup fails
    with torch's bare "index out of range in self" (CPU) or a device-side assert (CUDA)."""
    get_input_embeddings = getattr(model, "get_input_embeddings", None)
    embedding = (
        get_input_embeddings()
        if get_input_embeddings is not None
        else getattr(getattr(model, "backbone", None), "embedding", None)
    )
    rows = getattr(embedding, "num_embeddings", None)
    if rows is None or input_ids.numel() == 0:
        return
    low, high = int(input_ids.min()), int(input_ids.max())
    if low < 0 or high >= rows:
        bad = low if low < 0 else high
        raise ValueError(
            f"decode: input_ids holds token id {bad}, outside the model's vocabulary of {rows} "
            f"embedding rows (ids 0..{rows - 1}); encode the prompt with the tokenizer that "
            f"matches this model's vocab_size"
        )


class Streamer(Protocol):
    """What :func:`decode` calls on its ``streamer`` (transformers' ``TextStreamer`` has both)."""

    def put(self, value: torch.Tensor) -> None:
        """Receive the prompt (batch, seqlen), then each new token (batch,), on the CPU."""

    def end(self) -> None:
        """Decoding finished."""


def decode(
    input_ids: torch.Tensor,
    model: nn.Module,
    max_length: int,
    top_k: int = 1,
    top_p: float = 0.0,
    min_p: float = 0.0,
    temperature: float = 1.0,
    repetition_penalty: float = 1.0,
    eos_token_id: int | Sequence[int] | None = None,
    teacher_outputs: torch.Tensor | None = None,
    vocab_size: int | None = None,
    cg: bool = False,
    enable_timing: bool = False,
    output_scores: bool = False,
    streamer: Streamer | None = None,
) -> GreedySearchDecoderOnlyOutput | SampleDecoderOnlyOutput:
    """Generate up to ``max_length`` tokens in all (prompt included) from ``model``.

    Args:
        input_ids: (batch, seqlen) int64 prompt. model: called as ``model(ids, inference_params=...,
            num_last_tokens=1)`` returning an object with ``.logits`` (batch, 1, vocab); must have
            ``allocate_inference_cache`` for ``cg=True``.
        max_length: prompt + generated tokens (> seqlen).
        top_k, top_p, min_p, temperature, repetition_penalty: see :func:`sample` and the module docstring.
        eos_token_id: an int or list of ints: a row that produced one keeps producing the first of them;
            decoding stops when every row has.
        teacher_outputs: (batch, >= max_length) int: use these tokens instead of sampled ones (testing).
        vocab_size: only the first vocab_size logits are used (drops the padded vocabulary rows).
        cg: decode with CUDA graphs (captured once per batch size and kept on the model); without a CUDA
            device the same decode runs without them (said once, as a RuntimeWarning).
        enable_timing: print the prompt and decode times.
        output_scores: keep each step's logits (after the repetition penalty).
        streamer: an object with ``put(tensor)`` / ``end()`` (transformers' TextStreamer works): gets the
            prompt, then each new token (batch, ) on the CPU.

    Returns:
        GreedySearchDecoderOnlyOutput (top_k == 1) or SampleDecoderOnlyOutput: ``sequences`` (batch,
        seqlen + new tokens), ``scores`` (a tuple of (batch, vocab), or None).

    Raises:
        ValueError: input_ids not (batch, seqlen) ints or holding an id outside the model's embedding
            rows, max_length <= seqlen, a sampling argument out of range, a bad eos_token_id.
    """
    if not isinstance(input_ids, torch.Tensor) or input_ids.dim() != 2 or input_ids.is_floating_point():
        raise ValueError(
            f"decode: input_ids must be a (batch, seqlen) integer tensor, got "
            f"{getattr(input_ids, 'shape', type(input_ids).__name__)}"
        )
    batch_size, seqlen = input_ids.shape
    if not isinstance(max_length, int) or max_length <= seqlen:
        raise ValueError(
            f"decode: max_length={max_length!r} must be larger than the prompt's {seqlen} tokens "
            f"(it counts prompt + new tokens); pass max_length={seqlen} + the number of new tokens"
        )
    _check_prompt_ids(input_ids, model)
    _check_sampling(top_k, top_p, min_p, temperature, repetition_penalty)
    eos = _eos_set(eos_token_id)
    if teacher_outputs is not None and (
        teacher_outputs.shape[0] != batch_size or teacher_outputs.shape[1] < max_length
    ):
        raise ValueError(
            f"decode: teacher_outputs must be ({batch_size}, >= {max_length}), got "
            f"{tuple(teacher_outputs.shape)}"
        )
    if streamer is not None:
        streamer.put(input_ids.cpu())

    runner = _graph_runner(model, batch_size, max_length) if cg else None
    run: DecodeStep | None
    if runner is not None:
        inference_params, run = runner
    else:
        inference_params, run = InferenceParams(max_seqlen=max_length, max_batch_size=batch_size), None

    def logits_for(ids: torch.Tensor) -> torch.Tensor:
        if run is not None and inference_params.seqlen_offset > 0:
            logits = run(ids, inference_params.seqlen_offset)
        else:
            logits = _logits(model(ids, inference_params=inference_params, num_last_tokens=1))[:, -1]
        return logits[:, :vocab_size] if vocab_size is not None else logits

    timed = enable_timing and input_ids.is_cuda
    start = time.perf_counter()
    sequences = input_ids
    scores: list[torch.Tensor] = []
    finished = torch.zeros(batch_size, dtype=torch.bool, device=input_ids.device)
    logits = logits_for(input_ids)
    inference_params.seqlen_offset += seqlen
    if timed:
        torch.cuda.synchronize()
    prompt_done = time.perf_counter()
    while True:
        if repetition_penalty != 1.0:
            logits = modify_logit_for_repetition_penalty(logits.clone(), sequences, repetition_penalty)
        if output_scores:
            scores.append(logits.clone())
        step = sequences.shape[1]
        if teacher_outputs is not None:
            token = teacher_outputs[:, step]
        else:
            token = sample(logits, top_k=top_k, top_p=top_p, min_p=min_p, temperature=temperature)
        if eos is not None:
            token = torch.where(finished, torch.full_like(token, eos[0]), token)
            finished |= torch.isin(token, torch.tensor(eos, device=token.device))
        sequences = torch.cat([sequences, token[:, None].to(sequences.dtype)], dim=1)
        if streamer is not None:
            streamer.put(token.cpu())
        if sequences.shape[1] >= max_length or (eos is not None and bool(finished.all())):
            break
        logits = logits_for(token[:, None].to(input_ids.dtype))
        inference_params.seqlen_offset += 1
    if streamer is not None:
        streamer.end()
    if enable_timing:
        if timed:
            torch.cuda.synchronize()
        end = time.perf_counter()
        new = sequences.shape[1] - seqlen
        print(
            f"generate: prompt ({batch_size} x {seqlen} tokens) {(prompt_done - start) * 1e3:.1f} ms, "
            f"decoding {new} tokens {(end - prompt_done) * 1e3:.1f} ms"
        )
    kept = tuple(scores) if output_scores else None
    if top_k == 1:
        return GreedySearchDecoderOnlyOutput(sequences=sequences, scores=kept)
    return SampleDecoderOnlyOutput(sequences=sequences, scores=kept)


class GenerationMixin:
    """Adds :meth:`generate` to a language model whose ``forward(input_ids, inference_params=None,
    num_last_tokens=0)`` returns ``.logits``."""

    def allocate_inference_cache(
        self, batch_size: int, max_seqlen: int, dtype: torch.dtype | None = None, **kwargs: Any
    ) -> dict[int, LayerCache]:
        """{layer_idx: cache}; a model that supports ``cg=True`` implements it."""
        raise NotImplementedError(f"{type(self).__name__}.allocate_inference_cache is needed for cg=True")

    def generate(
        self,
        input_ids: torch.Tensor,
        max_length: int,
        top_k: int = 1,
        top_p: float = 0.0,
        min_p: float = 0.0,
        temperature: float = 1.0,
        return_dict_in_generate: bool = False,
        output_scores: bool = False,
        **kwargs: Any,
    ) -> torch.Tensor | GreedySearchDecoderOnlyOutput | SampleDecoderOnlyOutput:
        """Generate up to ``max_length`` tokens in all (prompt included); see :func:`decode` for every
        argument (``repetition_penalty``, ``eos_token_id``, ``cg``, ``enable_timing``, ``streamer``,
        ``vocab_size``, ``teacher_outputs`` go through ``kwargs``).

        Returns:
            sequences (batch, prompt + new tokens) int64, or with ``return_dict_in_generate`` the
            output object (``sequences``, ``scores``).
        """
        output = decode(
            input_ids,
            cast(nn.Module, self),  # the mixin is mixed into an nn.Module (MambaLMHeadModel)
            max_length,
            top_k=top_k,
            top_p=top_p,
            min_p=min_p,
            temperature=temperature,
            output_scores=output_scores,
            **kwargs,
        )
        if not output_scores:
            output.scores = None
        return output if return_dict_in_generate else output.sequences
