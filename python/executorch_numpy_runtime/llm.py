"""Text generation with language-model programs (ExecuTorch's LLM export, optimum-executorch), torch-free.

.. code-block:: python

    from executorch_numpy_runtime import LLM

    llm = LLM("llama.pte", "tokenizer.json")
    for step in llm.stream("Once upon a time", max_new_tokens=32):
        print(step.text, end="", flush=True)
    result = llm.generate("Once upon a time", max_new_tokens=32)   # the whole text, ids and speed figures

The loop is etnp's C++ Generator (the same as ``etnp generate``): the program's metadata methods give the
context length and the BOS and EOS ids, the prompt is prefilled in one call where the shapes allow, and each
decode step runs with the GIL released. See docs/llm.md.
"""

import dataclasses
import os
from typing import Any, Dict, Iterator, List, Optional, Sequence, Union

from . import _C
from .errors import InvalidInputError, InvalidTypeError

__all__ = ["LLM", "GenerationResult", "GenerationStep"]


@dataclasses.dataclass(frozen=True)
class GenerationStep:
    """One generated token and the text it completes ("" for EOS, or while a UTF-8 sequence is incomplete)."""

    token: int
    text: str


@dataclasses.dataclass(frozen=True)
class GenerationResult:
    """A finished generation: the text and ids (EOS included when it ended the generation), why it stopped
    ("eos", "max_new_tokens", "context_full", "stop_string" or "callback") and the speed figures."""

    text: str
    ids: List[int]
    prompt_ids: List[int]
    stop_reason: str
    prompt_tokens: int
    generated_tokens: int
    prefill_tokens_per_second: float
    decode_tokens_per_second: float
    first_token_seconds: float
    prefill_seconds: float
    decode_seconds: float
    peak_rss_bytes: int


def _short_int(value: int) -> str:
    """An int for a message: its digits, or how many there are when that is a lot."""
    return str(value) if value.bit_length() <= 128 else f"<int of {value.bit_length()} bits>"


def _result(values: Dict[str, Any]) -> GenerationResult:
    return GenerationResult(**{f.name: values[f.name] for f in dataclasses.fields(GenerationResult)})


class LLM:
    """A language-model program with its tokenizer.

    Args:
        program: a path to the ``.pte`` (loaded with :meth:`Runtime.load_program`, with ``data_path`` and
            ``backend_options``), or a loaded :class:`Program`.
        tokenizer: a path to ``tokenizer.json``, a SentencePiece ``.model`` or a tiktoken file, a loaded
            :class:`Tokenizer`, or None to generate from token ids only.
        method: the method that maps token ids to logits (default ``forward``).

    One LLM holds one KV cache: its generations run one at a time (a new one ends the previous stream). Use
    one LLM per thread to generate concurrently; they may share a Program.
    """

    def __init__(self, program: Any, tokenizer: Any = None, *, method: str = "forward",
                 data_path: Any = None, backend_options: Any = None) -> None:
        from . import Program, Runtime, Tokenizer  # the package's, once it is imported

        if isinstance(program, Program):
            if data_path is not None or backend_options is not None:
                raise InvalidInputError("data_path and backend_options apply when the program is given as a path")
            self.program = program
        else:
            self.program = Runtime.get().load_program(program, data_path=data_path, backend_options=backend_options)
        if tokenizer is None or isinstance(tokenizer, Tokenizer):
            self.tokenizer = tokenizer
        elif isinstance(tokenizer, str) or hasattr(tokenizer, "__fspath__"):
            self.tokenizer = Tokenizer(os.fspath(tokenizer))
        else:
            raise InvalidTypeError(f"tokenizer must be a path, a Tokenizer or None, got {type(tokenizer).__name__}")
        if not isinstance(method, str):
            raise InvalidTypeError(f"method must be a str, got {type(method).__name__}")
        self._generator = _C.Generator(self.program, method)

    @property
    def metadata(self) -> Dict[str, Any]:
        """What the program's metadata methods say: max_seq_len, max_context_len, bos_id, eos_ids, vocab_size,
        use_kv_cache."""
        return self._generator.metadata

    def _start(self, prompt: Union[str, Sequence[int]], max_new_tokens: Optional[int], temperature: float,
               top_p: float, seed: int, stop: Union[None, str, Sequence[str]], add_bos: bool) -> Any:
        limit = -1 if max_new_tokens is None else max_new_tokens
        for name, value in (("max_new_tokens", limit), ("seed", seed)):
            if not isinstance(value, int) or isinstance(value, bool):
                raise InvalidTypeError(f"{name} must be an int, got {type(value).__name__}")
        if seed < 0 or seed >= 1 << 64:
            raise InvalidInputError(f"seed must be >= 0 and < 2**64, got {_short_int(seed)}")
        if limit >= 1 << 63:
            raise InvalidInputError(f"max_new_tokens must be < 2**63, got {_short_int(limit)}")
        for name, number in (("temperature", temperature), ("top_p", top_p)):
            if not isinstance(number, (int, float)) or isinstance(number, bool):
                raise InvalidTypeError(f"{name} must be a number, got {type(number).__name__}")
        stops = [stop] if isinstance(stop, str) else list(stop or [])
        if not all(isinstance(s, str) for s in stops):
            raise InvalidTypeError("stop must be a str or a list of str")
        if isinstance(prompt, str):
            if self.tokenizer is None:
                raise InvalidInputError("a text prompt needs a tokenizer: LLM(program, tokenizer), or give token ids")
            return self._generator.start_text(self.tokenizer, prompt, limit, float(temperature), float(top_p), seed,
                                              stops, bool(add_bos))
        try:
            if isinstance(prompt, (bytes, bytearray)):  # not text, and not ids either
                raise TypeError
            ids = [int(i) for i in prompt]
        except (TypeError, ValueError):
            raise InvalidTypeError(f"prompt must be a str or a sequence of token ids, got {type(prompt).__name__}") from None
        for i in ids:
            if not -(1 << 63) <= i < 1 << 63:
                raise InvalidInputError(f"token id {_short_int(i)} does not fit in int64")
        if stops:
            raise InvalidInputError("stop strings need text: give the prompt as text, with a tokenizer")
        return self._generator.start_ids(ids, limit, float(temperature), float(top_p), seed, bool(add_bos))

    def stream(self, prompt: Union[str, Sequence[int]], *, max_new_tokens: Optional[int] = None,
               temperature: float = 0.0, top_p: float = 1.0, seed: int = 0,
               stop: Union[None, str, Sequence[str]] = None, add_bos: bool = True) -> Iterator[GenerationStep]:
        """Yields each generated token as it comes (see :meth:`generate` for the arguments). Stops on EOS,
        max_new_tokens, a full context or a stop string; closing the iterator early stops the generation."""
        generation = self._start(prompt, max_new_tokens, temperature, top_p, seed, stop, add_bos)
        try:
            while True:
                step = generation.next()
                if step is None:
                    return
                yield GenerationStep(*step)
        finally:
            generation.stop()

    def generate(self, prompt: Union[str, Sequence[int]], *, max_new_tokens: Optional[int] = None,
                 temperature: float = 0.0, top_p: float = 1.0, seed: int = 0,
                 stop: Union[None, str, Sequence[str]] = None, add_bos: bool = True) -> GenerationResult:
        """Generates from ``prompt`` (text, through the tokenizer, or token ids) to the end.

        Args:
            max_new_tokens: at most this many tokens (None: until EOS or a full context).
            temperature: 0 is greedy (the default: the same tokens every run); above 0 samples.
            top_p: nucleus sampling's probability mass (1: all tokens).
            seed: the sampler's seed.
            stop: a text (or texts) that ends generation once generated; the text through it is kept.
            add_bos: prepend the program's (or tokenizer's) BOS id.
        """
        generation = self._start(prompt, max_new_tokens, temperature, top_p, seed, stop, add_bos)
        while generation.next() is not None:
            pass
        return _result(generation.result())

    def __repr__(self) -> str:
        meta = self.metadata
        return f"<LLM context {meta['max_context_len']} tokens, vocab {meta['vocab_size']}>"
