"""The engine: the one layer between the native binding (qtts._core) and the Python API.

An Engine owns the native model (the mapped weights and their metadata), one compute session
(KV cache, compute buffers, the codec decoder's streaming state) and the lock that serialises
its use (docs/architecture.md, "Layers"). Nothing else in qtts touches a native handle.

The lock is taken once per operation, visibly: `with engine.session() as s:` yields a
SessionHandle with the compute methods, valid until the block ends. A stream holds it between
chunks: any thread may advance the stream, and every other use of the engine waits until the
stream ends or is closed (engine_lock.EngineLock).
"""
from __future__ import annotations

import contextlib
import itertools
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ..._native import core, forward_ggml_log, sync_ggml_debug
from ..settings.config import SETTING_SPECS, GenerationConfig, settings_of
from .engine_lock import EngineLock

CLOSED = "this qtts.Model is closed (close() was called): load the model again to use it"

# What a generation returns: codes [frames, code groups] int32, the stop reason ("eos",
# "max_new_tokens", "budget", "cancelled"; None while a stepped generation goes on) and the
# native timings (prefill_ms, talker_ms, predictor_ms, frames).
Generated = tuple[np.ndarray, str | None, dict[str, float]]
# What a batch step returns per slot that was active: (slot, codes, stop reason or None, timings).
SlotStep = tuple[int, np.ndarray, str | None, dict[str, float]]


def native_params(config: GenerationConfig) -> Any:
    """A piece's GenerationConfig as the binding's GenerateParams: each declared setting fills the
    native field its declaration names (config.Setting.native), then the seed and frame budget."""
    if isinstance(config.frame_budget, str):
        raise ValueError("a request's frame_budget must be resolved for its text first (GenerationConfig.for_piece)")
    params = core.GenerateParams(seed=config.seed, frame_budget=config.frame_budget or 0)  # 0: no runaway guard
    for name, spec in settings_of(type(config)).items():
        *path, field = spec.native.split(".")
        target = params
        for part in path:  # talker / subtalker: the binding hands out the member itself, not a copy
            target = getattr(target, part)
        setattr(target, field, getattr(config, name))
    return params


def read_defaults(native: Any) -> dict[str, Any]:
    """A native model's generation defaults (its copy of generation_config.json) by qwen-tts name:
    the only reader of the binding's GenerationDefaults, which has the native fields of the
    settings declared in_model."""
    d = native.generation_defaults
    out: dict[str, Any] = {}
    for name, spec in SETTING_SPECS.items():
        if spec.in_model:
            value = d
            for part in spec.native.split("."):
                value = getattr(value, part)
            out[name] = value
    return out


def read_tokenizer(path: str) -> tuple[list[str], list[int], list[str]]:
    """(tokens, token types, merges) of a qtts GGUF file, read by the native parser (gguf-py takes
    seconds over a 151k vocabulary)."""
    tokens, types, merges = core.read_tokenizer(path)
    return list(tokens), list(types), list(merges)


def check_gguf_path(path: Path) -> None:
    """A model file's path before the native loader sees it (a TTS model's or an aligner's)."""
    if path.is_dir():
        raise ValueError(f"{path} is a directory: convert a Hugging Face checkpoint first with "
                         f"`qtts-cli convert {path} -o model.gguf`")
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such model file")


def sample_tokens(logits: np.ndarray, do_sample: bool, temperature: float, top_k: int, top_p: float,
                  seed: int) -> list[int]:
    """The native sampler over rows of logits [n, vocab], one token per row (benchmarks)."""
    return list(core.sample_tokens(logits, do_sample, temperature, top_k, top_p, seed))


def read_bandwidth(n_bytes: int, n_threads: int, passes: int = 5) -> float:
    """The machine's stream (read) bandwidth in GB/s: n_threads threads summing a buffer of
    n_bytes, the best of `passes` (benchmarks)."""
    return float(core.read_bandwidth(n_bytes, n_threads, passes))


def set_matmul_path(path: str) -> None:
    """The quantized weights' kernels for this process: "native" or "ggml" (benchmarks)."""
    core.ops.set_matmul_path(path)


def quantize_rows(rows: np.ndarray, type_name: str, n_threads: int = 1) -> np.ndarray:
    """F32 rows [n, k] in a ggml weight type, one row of bytes each: [n, row bytes] (benchmarks)."""
    data = np.frombuffer(core.quantize(rows, type_name, n_threads), dtype=np.uint8)
    return data.reshape(rows.shape[0], -1)


def time_matmul(weights: np.ndarray, type_name: str, x: np.ndarray, *, n_threads: int, repeats: int, copies: int,
                huge_pages: bool) -> np.ndarray:
    """Seconds of each of `repeats` timed graphs multiplying `copies` copies of the quantized
    weights by x on the current matmul path (set_matmul_path; bench matmul)."""
    return np.asarray(core.ops.time_matmul(weights, type_name, x, n_threads=n_threads, repeats=repeats,
                                           copies=copies, huge_pages=huge_pages))


def build_info() -> dict[str, Any]:
    """The ggml version, the devices its backends offer and the CPU features the native core sees."""
    return {"ggml": str(core.ggml_version()), "devices": available_devices(),
            "cpu_features": list(core.cpu_features())}


def available_devices() -> list[dict[str, str]]:
    """The devices the installed libggml's backends offer (name, description, type), in ggml's
    order: "auto" takes the first GPU, else the CPU."""
    return [{k: str(v) for k, v in d.items()} for d in core.devices()]


class Engine:
    """The native model, its compute session and their lock. Metadata reads take no lock (the
    model is immutable once loaded); computation goes through `session()`."""

    def __init__(self, path: str, device: str = "auto", n_threads: int = 1, ops: str = "auto",
                 huge_pages: bool = True, precision: str = "auto") -> None:
        self._init()
        sync_ggml_debug()
        try:
            self._native_model = core.Model(path, device, core.Ops.__members__[ops], huge_pages,
                                            core.Precision.__members__[precision])
            self._session = core.Session(self._native_model, n_threads)
        finally:
            forward_ggml_log()

    def _init(self) -> None:
        self._native_model: Any = None
        self._session: Any = None
        self._vocoder: Any = None  # the pipelined streams' second session (SessionHandle.vocoder)
        self._lock = EngineLock()
        self._stream_ids = itertools.count(1)
        self._batches: weakref.WeakSet[Batch] = weakref.WeakSet()  # released by close()
        self.closed = False

    @classmethod
    def metadata(cls, path: str) -> Engine:
        """The model alone, for reading its metadata (no compute session, nothing computed; the
        weights stay mapped, none read into huge pages)."""
        engine = cls.__new__(cls)
        engine._init()
        try:
            engine._native_model = core.Model(path, "cpu", huge_pages=False)
        finally:
            forward_ggml_log()
        return engine

    @property
    def _model(self) -> Any:
        self.require_open()
        return self._native_model

    def require_open(self) -> None:
        """RuntimeError once the engine is closed."""
        if self.closed:
            raise RuntimeError(CLOSED)

    def close(self) -> None:
        """Free the native model, its sessions (KV caches, compute buffers, thread pools) and its
        batches now; idempotent. Waits for the operation or stream in progress, as any caller of
        the lock does; refuses (RuntimeError) while a batch has sequences in its slots (a
        running Scheduler) or a stream no other thread can finish holds the lock."""
        if self.closed:
            return
        try:
            self._lock.__enter__()
        except RuntimeError as e:
            raise RuntimeError(f"cannot close this qtts.Model now: {e}") from None
        try:
            if self.closed:  # closed by another thread meanwhile
                return
            if any(b._native is not None and len(b._native.active) for b in self._batches):
                raise RuntimeError("cannot close this qtts.Model while a Scheduler runs requests on it: close the "
                                   "Scheduler first (Scheduler.close(), or close(cancel=True) to stop them)")
            for batch in list(self._batches):
                batch._native = None
            # the last references: CPython frees each native object (and its threads) right here
            self._vocoder = self._session = self._native_model = None
            self.closed = True
        finally:
            self._lock.__exit__()
            forward_ggml_log()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- metadata ---------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return str(self._model.name)

    @property
    def variant(self) -> str:
        return str(self._model.variant)

    @property
    def size(self) -> str:
        return str(self._model.size)

    @property
    def device(self) -> str:
        return str(self._model.device)

    @property
    def component_devices(self) -> dict[str, str]:
        return dict(self._model.component_devices)

    @property
    def ops(self) -> str:
        return str(self._model.ops)

    @property
    def precision(self) -> str:
        return str(self._model.precision)

    @property
    def huge_page_bytes(self) -> int:
        return int(self._model.huge_page_bytes)

    @property
    def packed_bytes(self) -> int:
        """Bytes of Q8_0 weights packed at load for the quantized matmul (docs/kernels.md, "Packed Q8_0")."""
        return int(self._model.packed_bytes)

    @property
    def portable_weight_bytes(self) -> int:
        return int(self._model.portable_weight_bytes)

    @property
    def weight_bytes(self) -> int:
        return int(self._model.weight_bytes)

    @property
    def speakers(self) -> list[tuple[str, int, str]]:
        """(name, codec id, dialect or "") of each speaker."""
        return [(str(n), int(i), str(d)) for n, i, d in self._model.speakers]

    @property
    def languages(self) -> dict[str, int]:
        """Every language's codec id, dialects included."""
        return dict(self._model.languages)

    @property
    def text_ids(self) -> dict[str, int]:
        return dict(self._model.text_ids)

    @property
    def codec_ids(self) -> dict[str, int]:
        return dict(self._model.codec_ids)

    @property
    def generation_defaults(self) -> dict[str, Any]:
        return read_defaults(self._model)

    @property
    def hparams(self) -> dict[str, dict]:
        return dict(self._model.hparams)

    @property
    def num_code_groups(self) -> int:
        """Codes per frame: codebook 0 from the talker, the rest from the code predictor."""
        return int(self._model.hparams["talker"]["num_code_groups"])

    @property
    def sample_rate(self) -> int:
        return int(self._model.hparams["codec_decoder"]["sample_rate"])

    @property
    def samples_per_frame(self) -> int:
        """Audio samples per codec frame (the codec decoder's hop)."""
        return int(self._model.hparams["codec_decoder"]["hop_length"])

    @property
    def frame_rate(self) -> float:
        """Codec frames per second of audio."""
        return self.sample_rate / self.samples_per_frame

    def tensor_info(self) -> list[tuple[str, str, int]]:
        """(name, type, element count) of every tensor in the file."""
        return list(self._model.tensor_info())

    def tensor_data(self, prefix: str) -> list[tuple[str, str, bytes]]:
        """(name, type, raw bytes) of every tensor whose name starts with `prefix`."""
        return list(self._model.tensor_data(prefix))

    def empty_codes(self) -> np.ndarray:
        return np.zeros((0, self.num_code_groups), dtype=np.int32)

    # -- computation ------------------------------------------------------------------------
    @contextlib.contextmanager
    def session(self) -> Iterator[SessionHandle]:
        """The compute session for one operation: other threads wait until the block ends."""
        self.require_open()
        if self._session is None:
            raise RuntimeError("this engine was opened for its metadata only (Engine.metadata)")
        with self._lock:
            self.require_open()  # closed while this call waited
            handle = SessionHandle(self._session, self._lock, self._vocoder_session)
            try:
                yield handle
            finally:
                handle._close()
                forward_ggml_log()

    def _vocoder_session(self, n_threads: int) -> Any:
        """The second session, with a pool of `n_threads` threads, that pipelined streams vocode on
        while this one generates (docs/serving.md, "Pipelined streaming"); made on first use.
        Called under the lock."""
        if self._vocoder is None or self._vocoder.n_threads != n_threads:
            self._vocoder = None  # its buffers go before the new session's are made
            self._vocoder = core.Session(self._native_model, n_threads)
        return self._vocoder

    def own_session(self) -> SessionHandle:
        """A compute session of the caller's own (its own buffers, threads as this engine's, and
        decode streams), used outside the engine lock: for a caller that runs one operation on it
        at a time and drops it before the engine closes (the Scheduler's pipelined vocoder,
        docs/serving.md "Batched vocoder")."""
        self.require_open()
        if self._session is None:
            raise RuntimeError("this engine was opened for its metadata only (Engine.metadata)")
        return SessionHandle(core.Session(self._native_model, int(self._session.n_threads)), self._lock)

    def release_vocoder_session(self) -> None:
        """Give the second session's buffers back (the split went serial); called under the lock."""
        self._vocoder = None

    def memory(self) -> dict[str, int]:
        """Bytes the sessions hold now: kv_cache, compute_buffers, and vocoder_compute_buffers (the
        pipelined streams' second session). A read of sizes that takes no lock, so that it can be
        watched between chunks of an open stream."""
        if self._session is None:
            return {"kv_cache": 0, "compute_buffers": 0, "vocoder_compute_buffers": 0}
        voc = self._vocoder
        return {**self._session.memory(),
                "vocoder_compute_buffers": 0 if voc is None else int(voc.memory()["compute_buffers"])}

    def cancel(self) -> None:
        """Stop a generation running in another thread after its current frame (takes no lock)."""
        if self._session is not None:
            self._session.cancel()

    def batch(self, max_batch: int) -> Batch:
        """Slots for up to max_batch generations stepped together (docs/serving.md,
        "Batching"); driven through SessionHandle.batch_*."""
        self.require_open()
        if self._session is None:
            raise RuntimeError("this engine was opened for its metadata only (Engine.metadata)")
        batch = Batch(core.Batch(self._session, max_batch))  # allocates its own buffer only: no lock
        self._batches.add(batch)
        return batch

    def new_stream_id(self) -> int:
        """A codec decode stream id no one else uses (stream 0 is the single-stream API's)."""
        return next(self._stream_ids)


class SessionHandle:
    """The compute methods of an engine's session, valid inside `with engine.session()`."""

    def __init__(self, session: Any, lock: EngineLock, vocoder: Callable[[int], Any] | None = None) -> None:
        self._session: Any = session
        self._lock = lock
        self._make_vocoder = vocoder
        self._vocoder: SessionHandle | None = None

    def _close(self) -> None:
        if self._session is not None and self._session.threads != self._session.n_threads:
            self._session.threads = self._session.n_threads
        self._session = None
        if self._vocoder is not None:
            self._vocoder._close()

    @property
    def native(self) -> Any:
        if self._session is None:
            raise RuntimeError("this engine session is closed: use it inside its `with engine.session()` block")
        return self._session

    def _require_open(self) -> None:
        if self._session is None:
            raise RuntimeError("this engine session is closed: use it inside its `with engine.session()` block")

    @contextlib.contextmanager
    def suspended(self) -> Iterator[None]:
        """Around a stream's yield: the caller's code runs while the stream keeps the session."""
        with self._lock.suspended():
            yield

    # threads
    @property
    def n_threads(self) -> int:
        """The session's threads (the Model's n_threads)."""
        return int(self.native.n_threads)

    @property
    def threads(self) -> int:
        """Threads the next computations run on, 1 .. n_threads (back to n_threads when the block
        ends); results do not depend on it."""
        return int(self.native.threads)

    @threads.setter
    def threads(self, n: int) -> None:
        self.native.threads = n

    def vocoder(self, n_threads: int) -> SessionHandle:
        """The engine's second session with a pool of n_threads threads (set `threads` to use
        fewer), for vocoding in a worker thread while this one generates; valid (and covered by
        this handle's lock) until the block ends."""
        self._require_open()
        if self._make_vocoder is None:
            raise RuntimeError("this session handle has no second session")
        if self._vocoder is None or self._vocoder.native.n_threads != n_threads:
            self._vocoder = SessionHandle(self._make_vocoder(n_threads), self._lock)
        return self._vocoder

    # embeddings and codecs
    def text_embed(self, ids: list[int]) -> np.ndarray:
        """The talker's projected text embedding P(ids), shape [len(ids), hidden]."""
        return self.native.text_embed([int(i) for i in ids])

    def codec_embed(self, ids: list[int]) -> np.ndarray:
        """Rows C(ids) of the talker's codec embedding, shape [len(ids), hidden]."""
        return self.native.codec_embed([int(i) for i in ids])

    def frame_embed(self, codes: np.ndarray) -> np.ndarray:
        """The talker's input vector of each codec frame (the sum of its code groups' embeddings)."""
        return self.native.frame_embed(codes)

    def decode(self, codes: np.ndarray) -> np.ndarray:
        return self.native.decode(np.asarray(codes))

    def speaker_embed(self, mel: np.ndarray) -> np.ndarray:
        return self.native.speaker_embed(mel)

    def encode(self, wav: np.ndarray) -> np.ndarray:
        return self.native.encode(wav)

    def decode_stream_reset(self, silent_frames: int = 0, stream: int = 0) -> None:
        """Start codec decode stream `stream` (0, or an id from Engine.new_stream_id)."""
        self.native.decode_stream_reset(silent_frames=silent_frames, stream=stream)

    def decode_stream_push(self, codes: np.ndarray, stream: int = 0) -> np.ndarray:
        return self.native.decode_stream_push(codes, stream=stream)

    def decode_streams_push(self, items: list[tuple[int, np.ndarray]]) -> list[np.ndarray]:
        """The next frames of several streams decoded together (docs/serving.md, "Batched
        vocoder"): each stream's samples, the same as decode_stream_push gives it alone."""
        return list(self.native.decode_streams_push(list(items)))

    def decode_stream_close(self, stream: int) -> None:
        self.native.decode_stream_close(stream)

    def decode_stages(self, codes: np.ndarray, names: list[str]) -> dict[str, np.ndarray]:
        """Named codec decoder intermediates, each [time, channels]."""
        return dict(self.native.decode_stages(codes, names))

    # generation
    def generate(self, embeddings: np.ndarray, trailing: np.ndarray, config: GenerationConfig) -> Generated:
        """A whole piece's generation in one native call."""
        return self.native.generate(embeddings, trailing, native_params(config))

    def generate_begin(self, embeddings: np.ndarray, trailing: np.ndarray, config: GenerationConfig,
                       text_open: bool = False) -> None:
        """Prefill a piece's prompt; generate_next then steps the loop. text_open: the trailing
        text is streamed in with generate_append (docs/model.md, "Text streamed in")."""
        self.native.generate_begin(embeddings, trailing, native_params(config), text_open)

    def generate_next(self, n_frames: int) -> Generated:
        """Up to `n_frames` more frames; the stop reason is None while the generation goes on
        (the timings' "needs_text": it waits for generate_append)."""
        return self.native.generate_next(n_frames)

    def generate_append(self, rows: np.ndarray, text_final: bool, config: GenerationConfig) -> None:
        """Streamed text: more trailing rows, whether they end the text (EOS included), and the
        config of the piece's text so far (its frame budget)."""
        self.native.generate_append(rows, text_final, native_params(config).frame_budget)

    # batched generation (Engine.batch)
    def batch_add(self, batch: Batch, embeddings: np.ndarray, trailing: np.ndarray, config: GenerationConfig,
                  text_open: bool = False) -> int:
        """Prefill a piece's prompt into a free slot of `batch`; the slot id. text_open: the
        trailing text is streamed in with batch_append; the slot sits out the frames whose text
        has not come (the step's timings say "needs_text")."""
        self._require_open()
        return int(batch._native.add(embeddings, trailing, native_params(config), text_open))

    def batch_append(self, batch: Batch, slot: int, rows: np.ndarray, text_final: bool,
                     config: GenerationConfig) -> None:
        """Streamed text of a text-open slot, as generate_append: more trailing rows, whether
        they end the text (EOS included), the config of the piece's text so far."""
        self._require_open()
        batch._native.append(slot, rows, text_final, native_params(config).frame_budget)

    def batch_step(self, batch: Batch, n_frames: int) -> list[SlotStep]:
        """Up to n_frames frames of every active slot, stepped together."""
        self._require_open()
        return [(int(i), c, r, dict(t)) for i, c, r, t in batch._native.step(n_frames)]

    def batch_active(self, batch: Batch) -> list[int]:
        """Ids of the slots holding a generation."""
        self._require_open()
        return list(batch._native.active)

    def batch_remove(self, batch: Batch, slot: int) -> None:
        self._require_open()
        batch._native.remove(slot)

    def talker_prefill(self, embeddings: np.ndarray, n_ctx: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """The talker over a prompt: (logits, normed hidden state) of its last position; the KV
        cache is sized for n_ctx positions (0: the prompt's)."""
        return self.native.talker_prefill(embeddings, n_ctx)

    def talker_step(self, codes: list[int], text: np.ndarray, n_past: int) -> tuple[np.ndarray, np.ndarray]:
        """One decode step after talker_prefill: (logits, normed hidden state)."""
        return self.native.talker_step(codes, text, n_past)

    # state and profiling
    @property
    def prefill_chunk(self) -> int:
        return int(self.native.prefill_chunk)

    @prefill_chunk.setter
    def prefill_chunk(self, value: int) -> None:
        self.native.prefill_chunk = value

    def set_profiling(self, on: bool, ops: bool = True) -> None:
        """ops=False: no per-op times, graphs computed whole (Session::set_profiling)."""
        self.native.set_profiling(on, ops)

    def profile(self) -> dict[str, float]:
        return dict(self.native.profile())


class Batch:
    """An engine's batch slots (qtts._core.Batch); stepped through a SessionHandle under the lock."""

    def __init__(self, native: Any) -> None:
        self._native = native

    @property
    def max_batch(self) -> int:
        return int(self._native.max_batch)

    @property
    def talker_step_nodes(self) -> int:
        """Nodes of the last batched talker step's graph, the same whatever the number of slots
        (docs/serving.md, "Batching"); 0 before the first step."""
        return int(self._native.talker_step_nodes)

    @property
    def cache_bytes(self) -> int:
        """Bytes of the shared talker KV cache now."""
        return int(self._native.cache_bytes)

    def cancel(self, slot: int) -> None:
        """Stop a slot at its next frame, from any thread (takes no lock: an atomic flag)."""
        self._native.cancel(slot)
