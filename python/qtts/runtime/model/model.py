"""The loaded model: the user API over the engine (native weights, compute session, lock) and
the tokenizer."""
from __future__ import annotations

import asyncio
import dataclasses
import os
import threading
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ...threads import resolve_threads
from ..aligner.aligner import Aligner, open_aligner
from ..audio.audio import Audio, AudioChunk, Timings
from ..audio.timestamps import WordStream
from ..audio.voice import Voice, VoiceCache
from ..engine.context import ModelContext
from ..engine.engine import Engine, SessionHandle, check_gguf_path, read_tokenizer
from ..engine.pipeline import ThreadSplit, check_vocoder_threads
from ..scheduling.scheduler import Scheduler
from ..settings.generation import GenerationResult, per_frame_timings
from ..settings.options import LoadOptions, RequestOptions, StreamOptions, batch_size
from ..synthesis import cloning, speech, speech_text
from ..synthesis.request import STREAMED_TEXT, Request, build_request
from ..synthesis.text_stream import TextFeed
from ..text.text import SplitSentences
from ..text.tokenizer import Tokenizer, TokenizerData
from .compat import QwenTTSCompat


class Model(QwenTTSCompat):
    """A Qwen3-TTS model loaded from a qtts GGUF file (see `qtts-cli convert`).

    close() (or `with qtts.load(...) as model:`) frees its weights, buffers and thread pools at
    once instead of when the object is collected; a closed model refuses work.

    `context` is what the request helpers see of it (qtts.runtime.engine.context.ModelContext);
    `engine` is the low-level layer (qtts.runtime.engine.engine.Engine): the native model, its compute
    session and their lock, with stage access for tests and benchmarks (`with
    model.engine.session() as s:` then s.talker_prefill, s.decode_stages, s.memory(),
    s.set_profiling ...)."""

    def __init__(self, path: str | os.PathLike[str], *, n_threads: int | None = None, device: str = "auto",
                 voice_cache: str | os.PathLike[str] | bool = True, ops: str = "auto",
                 vocoder_threads: int | None = None, huge_pages: bool = True, precision: str = "auto",
                 aligner: str | os.PathLike[str] | Aligner | None = None):
        """voice_cache: where encoded reference clips are kept (True: $QTTS_CACHE/voices, False: off).
        ops: how the vocoder, codec encoder and speaker encoder run, and the talker's and code
        predictor's attention: "native" (custom CPU ops), "portable" (stock ggml ops, on any
        device) or "auto" (native on the CPU, portable elsewhere).
        vocoder_threads: pipelined synthesis, the vocoder on this many of the n_threads while the
        generation runs on the rest (0: serial; None: chosen from the first requests' timings;
        the samples are the same either way, docs/serving.md "Pipelined streaming").
        huge_pages: on the CPU, read the matrices every frame streams into transparent huge pages
        (Linux; 10-25% faster generation) instead of mapping them from the file; False keeps them
        mapped, shared through the page cache with other processes that load the same file
        (docs/architecture.md "Weights in huge pages").
        precision: "exact" (F32 throughout, what the parity tests hold to) or "fast": on a GPU
        the device's TF32/BF16 kernels where ggml picks them, on a CPU with AMX tiles the vocoder's
        convs in BF16 (about 3x faster; docs/kernels.md, "BF16 convs"). "auto" is fast, except
        for an F32 file on the CPU. Process-wide on a GPU (docs/gpu.md, "Precision").
        aligner: the forced aligner that word_timestamps=True times words with (docs/aligner.md): a
        converted .gguf or a repo id, loaded with this model's threads, device, ops and precision
        and closed with it, or a qtts.Aligner (which stays the caller's to close)."""
        self._open(path, LoadOptions.of(locals()))

    def _open(self, path: str | os.PathLike[str], opts: LoadOptions) -> None:
        """Load the file with options packed and checked once (LoadOptions)."""
        if not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"path must be a str or os.PathLike, got {type(path).__name__}")
        self.path = Path(path)
        check_gguf_path(self.path)
        self.options = opts
        self.n_threads = resolve_threads(opts.n_threads)
        check_vocoder_threads(opts.vocoder_threads, self.n_threads)
        self.aligner, self._owns_aligner = open_aligner(opts)
        try:
            self.engine = Engine(str(self.path), opts.device, self.n_threads, opts.ops, opts.huge_pages,
                                 opts.precision)
        except BaseException:
            self._close_aligner()
            raise
        self._split = ThreadSplit(self.n_threads, opts.vocoder_threads, self.engine.device == "CPU")
        tokenizer = Tokenizer.from_data(TokenizerData(*read_tokenizer(str(self.path))))
        voice_cache = opts.voice_cache
        if voice_cache is True:
            from ...convert.registry import cache_dir

            voice_cache = cache_dir() / "voices"
        self.context = ModelContext.build(self.engine, tokenizer, VoiceCache(voice_cache) if voice_cache else None,
                                          self.aligner)
        self._feeds: set[TextFeed] = set()  # streamed texts being read, woken by cancel()

    def close(self) -> None:
        """Free the weights, the compute buffers and the thread pools now. An operation or a
        stream in progress in another thread is waited for; a stream that no other thread can
        finish, or a Scheduler with requests in its slots, make close() raise RuntimeError
        instead (finish or close them first). Closing twice does nothing; afterwards every method
        that computes raises RuntimeError. An aligner loaded with the model is closed too."""
        self.engine.close()
        self._close_aligner()

    def _close_aligner(self) -> None:
        if self._owns_aligner and self.aligner is not None:
            self.aligner.close()

    @property
    def closed(self) -> bool:
        return self.engine.closed

    def __enter__(self) -> Model:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def tokenizer(self) -> Tokenizer:
        return self.context.tokenizer

    @property
    def voice_cache(self) -> VoiceCache | None:
        return self.context.voice_cache

    @property
    def variant(self) -> str:
        return self.context.variant

    @property
    def size(self) -> str:
        return self.context.size

    @property
    def device(self) -> str:
        return self.engine.device

    @property
    def devices(self) -> dict[str, str]:
        """Where each network runs, as "<device>/<path>" (e.g. "CPU/native"): the device its
        weights live on and its graph's ops, "native" (custom CPU ops) or "portable" (stock ggml
        ops; the talker and code predictor are native on the CPU device only)."""
        return self.engine.component_devices

    @property
    def precision(self) -> str:
        """The arithmetic after "auto" was resolved: "exact" (F32) or "fast" (on the CPU only
        where it has AMX tiles)."""
        return self.engine.precision

    @property
    def ops(self) -> str:
        """The audio networks' (and on the CPU the attention's) path after "auto" was resolved:
        "native" or "portable"."""
        return self.engine.ops

    @property
    def vocoder_threads(self) -> int | None:
        """The pipeline's split: the vocoder's threads (the generation has the rest), 0 for serial
        synthesis, None while the automatic choice is still measuring."""
        return self._split.vocoder_threads

    @property
    def speakers(self) -> list[str]:
        return self.context.speaker_names

    @property
    def languages(self) -> list[str]:
        return list(self.context.languages)

    @property
    def generation_defaults(self) -> dict[str, float | int | bool]:
        return dict(self.context.defaults)

    @property
    def hparams(self) -> dict[str, dict]:
        return self.engine.hparams

    def text_embedding(self, ids: list[int] | np.ndarray) -> np.ndarray:
        """The talker's projected text embedding P(ids), shape [len(ids), hidden]."""
        with self.engine.session() as s:
            return s.text_embed([int(i) for i in ids])

    @property
    def hidden_size(self) -> int:
        return self.context.hidden_size

    @property
    def num_code_groups(self) -> int:
        return self.context.num_code_groups

    @property
    def fingerprint(self) -> str:
        """Identifies the speaker encoder voices are made with (the same for every quantization
        of one checkpoint); empty for models without one."""
        return self.context.fingerprint

    def speaker_embedding(self, ref_audio: cloning.AudioSource | np.ndarray) -> np.ndarray:
        """The x-vector of a reference clip (base models): a path, a (samples, sample_rate) tuple or
        24 kHz samples, as the reference's extract_speaker_embedding after its resampling."""
        self.engine.require_open()
        return cloning.speaker_embedding(self.context, cloning.reference_samples(self.context, ref_audio))

    def encode(self, ref_audio: cloning.AudioSource | np.ndarray) -> np.ndarray:
        """Codec codes [ceil(samples / samples per frame), code groups] of a clip (the reference speech
        tokenizer's encode; 1920 samples per frame and 16 groups in the released models)."""
        self.engine.require_open()
        return cloning.encode(self.context, cloning.reference_samples(self.context, ref_audio))

    def create_voice(self, ref_audio: cloning.AudioSource | np.ndarray, ref_text: str | None = None, *,
                     x_vector_only_mode: bool = False) -> Voice:
        """A cloned voice from a reference clip (base models). In-context cloning (the default) needs
        ref_text, the clip's transcript; x_vector_only_mode uses the speaker embedding alone.
        Repeated clips come from the voice cache."""
        return cloning.create_voice(self.context, ref_audio, ref_text, x_vector_only_mode)[0]

    @property
    def codec_ids(self) -> dict[str, int]:
        """Codec-stream control ids (pad, bos, eos, think, nothink, think_bos, think_eos)."""
        return dict(self.context.codec_ids)

    def codec_embedding(self, ids: list[int] | np.ndarray) -> np.ndarray:
        """Rows C(ids) of the talker's codec embedding, shape [len(ids), hidden]."""
        with self.engine.session() as s:
            return s.codec_embed([int(i) for i in ids])

    def decode(self, codes: np.ndarray) -> np.ndarray:
        """The waveform of codec codes [n, code groups] (the reference's chunked decode): float32
        [n * samples per frame]."""
        with self.engine.session() as s:
            return s.decode(np.asarray(codes))

    def generate_codes(self, text: str, *, language: str = "auto", speaker: str | None = None,
                       instruct: str | None = None, non_streaming_mode: bool | None = None, seed: int | None = None,
                       frame_budget: int | str | None = "auto", voice: Voice | None = None,
                       **sampling: Any) -> GenerationResult:
        """Codec codes [frames, 16] for `text` (CustomVoice: a speaker; VoiceDesign: an instruct;
        Base: a cloned voice from create_voice).

        `sampling` takes the settings of qtts.GenerationConfig by their qwen-tts names (do_sample,
        temperature, top_k, top_p, repetition_penalty, subtalker_*, max_new_tokens, min_new_tokens).
        Settings left out or None take the model's generation_defaults; non_streaming_mode defaults
        to True, as in the reference's generate_custom_voice / generate_voice_design (False for
        base models, as generate_voice_clone). At most
        max_new_tokens - 1 frames come out. The same seed gives the same codes.

        frame_budget guards against runaway generation (a lost EOS): "auto" derives a generous
        limit from the text, an integer sets one, None disables it. Ctrl-C or cancel() from
        another thread stops the loop within one frame (KeyboardInterrupt / stop_reason
        "cancelled").
        """
        req = build_request(self.context, text, RequestOptions.of({**locals(), "split_sentences": False}), sampling)
        with self.engine.session() as s:
            ((codes, stop_reason, raw),) = speech.generate_piece(self.context, s, req, 0, Timings())
        assert stop_reason is not None
        return GenerationResult(codes, stop_reason, req.config.seed, per_frame_timings(raw))

    @property
    def sample_rate(self) -> int:
        return self.context.sample_rate

    def synthesize(self, text: str, *, speaker: str | None = None, language: str = "auto",
                   instruct: str | None = None, voice: Voice | None = None,
                   ref_audio: cloning.AudioSource | np.ndarray | None = None, ref_text: str | None = None,
                   x_vector_only_mode: bool = False, seed: int | None = None, split_sentences: SplitSentences = "auto",
                   frame_budget: int | str | None = "auto", non_streaming_mode: bool | None = None,
                   word_timestamps: bool = False, progress: speech.ProgressCallback | None = None,
                   **sampling: Any) -> Audio:
        """Speech for `text`, all at once. `sampling` takes the generate_codes settings
        (do_sample, temperature, top_k, top_p, repetition_penalty, subtalker_*, max_new_tokens).
        Long text is synthesized sentence by sentence with the same voice, the pieces joined with a
        short pause: split_sentences="auto" (the default, as the CLI) splits text over
        SPLIT_ABOVE_CHARS (200) characters into pieces of at most that many, cutting at sentence
        ends, then clause marks, then spaces, then anywhere; True splits any text so, an integer
        sets the piece length; False keeps the text whole (one prompt, however long: its prefill
        time grows with the square of its length).

        Base models clone a voice: pass voice= (create_voice), or ref_audio= with ref_text= (ICL)
        or x_vector_only_mode=True, as generate_voice_clone takes them.

        word_timestamps=True fills `words` with each word's span (qtts.Word, seconds), timed by the
        model's forced aligner (load option aligner; docs/aligner.md) piece by piece after the audio
        is made (its time is timings.align_ms).

        progress, a callable, receives a qtts.runtime.synthesis.speech.Progress every few frames (the codes are the
        same with or without it)."""
        if progress is not None and not callable(progress):
            raise TypeError(f"progress must be callable, got {type(progress).__name__}")
        req = build_request(self.context, text, RequestOptions.of(locals()), sampling)
        with self.engine.session() as s:
            audio = speech.synthesize(self.context, s, req, progress, self._split.next())
            self._record_split(audio.timings)
            return audio

    def synthesize_batch(self, texts: list[str], *, max_batch: int = 8, **kwargs: Any) -> list[Audio]:
        """synthesize() for several texts at once, stepped together (continuous batching, docs/
        serving.md "Batching"): the same audio per item as synthesize() with the same
        arguments and seed. kwargs are synthesize's (progress excepted); a keyword given as a list
        with one entry per text is per item (seed=[1, 2, 3], speaker=[...]), anything else is
        shared by all."""
        if not isinstance(texts, (list, tuple)):
            raise TypeError(f"texts must be a list of str, got {type(texts).__name__}")
        batch_size("max_batch", max_batch)
        if "progress" in kwargs:
            raise TypeError("synthesize_batch takes no progress callback")
        n = len(texts)
        items = [{k: (v[i] if type(v) is list and len(v) == n else v) for k, v in kwargs.items()} for i in range(n)]
        if not n:
            return []
        # eager jobs decode whole pieces on the engine's session: no streams to pipeline
        with Scheduler(self, max_batch=min(max_batch, n), max_queue=n, pipelined_vocoder=False) as sched:
            jobs = [sched.submit_eager(text, **item) for text, item in zip(texts, items, strict=True)]
            return [job.result() for job in jobs]

    def stream(self, text: str, *, speaker: str | None = None, language: str = "auto",
               instruct: str | None = None, voice: Voice | None = None,
               ref_audio: cloning.AudioSource | np.ndarray | None = None, ref_text: str | None = None,
               x_vector_only_mode: bool = False, seed: int | None = None, split_sentences: SplitSentences = "auto",
               frame_budget: int | str | None = "auto", non_streaming_mode: bool | None = None,
               word_timestamps: bool = False, first_chunk_frames: int = 1, max_chunk_frames: int = 8,
               timings: Timings | None = None, **sampling: Any) -> Iterator[AudioChunk]:
        """AudioChunks as they are generated (the first after one frame). Closing the iterator
        stops the generation; the concatenated chunks equal synthesize()'s samples (long text is
        split as there, split_sentences="auto" by default). Pass a
        Timings to have it filled in (time to first audio included) as the stream runs.
        word_timestamps=True: after each text piece's last chunk comes a chunk without audio whose
        `words` are the piece's (seconds from the stream's start), aligned once that audio is out;
        the next piece waits for it (docs/aligner.md, "Word timestamps of synthesis")."""
        chunking = StreamOptions.of(locals())
        req = build_request(self.context, text, RequestOptions.of(locals()), sampling)
        t = timings if timings is not None else Timings()
        return self._timed(self._held_stream(lambda s: speech.stream(self.context, s, req, chunking, timings=t,
                                                                     vocoder_threads=self._split.next()), t), req, t)

    def stream_text(self, chunks: Iterable[str], *, speaker: str | None = None, language: str = "auto",
                    instruct: str | None = None, voice: Voice | None = None,
                    ref_audio: cloning.AudioSource | np.ndarray | None = None, ref_text: str | None = None,
                    x_vector_only_mode: bool = False, seed: int | None = None,
                    split_sentences: SplitSentences = "auto", frame_budget: int | str | None = "auto",
                    non_streaming_mode: bool | None = False, word_timestamps: bool = False,
                    first_chunk_frames: int = 1, max_chunk_frames: int = 8, timings: Timings | None = None,
                    **sampling: Any) -> Iterator[AudioChunk]:
        """stream() for text that is still being written: `chunks` gives fragments of any size
        (single characters, an LLM's deltas), read in a background thread as they come. Speech
        starts once the first word is complete; a frame that needs a text token not yet given
        waits for it; the end of `chunks` ends the text. The samples are exactly those of
        stream(full text, non_streaming_mode=False) with the same arguments and seed (docs/
        model.md, "Text streamed in"). Closing the iterator or cancel() stops it."""
        if isinstance(chunks, (str, bytes)) or not isinstance(chunks, Iterable):
            raise TypeError(f"chunks must be an iterable of str fragments, got {type(chunks).__name__}")
        feed = TextFeed()
        inner = self._stream_feed(feed, RequestOptions.of(locals()), StreamOptions.of(locals()), timings, sampling)

        def chunks_out() -> Iterator[AudioChunk]:
            speech_text.read_into(feed, chunks)
            try:
                yield from inner
            finally:
                feed.cancel()  # the reader stops after its current fragment
                inner.close()

        return chunks_out()

    async def stream_text_async(self, chunks: AsyncIterable[str], **kwargs: Any) -> AsyncIterator[AudioChunk]:
        """stream_text() for an async iterable of fragments, as an async iterator: the
        generation runs in a thread of its own while the event loop reads the text."""
        if not isinstance(chunks, AsyncIterable):
            raise TypeError(f"chunks must be an async iterable of str fragments, got {type(chunks).__name__}")
        feed = TextFeed()
        timings = kwargs.pop("timings", None)
        opts, chunking = RequestOptions.take(kwargs), StreamOptions.take(kwargs)
        inner = self._stream_feed(feed, opts, chunking, timings, kwargs)
        loop = asyncio.get_running_loop()
        out: asyncio.Queue[Any] = asyncio.Queue()
        stop = threading.Event()

        async def pump() -> None:
            try:
                async for fragment in chunks:
                    feed.put(fragment)
            except Exception as e:  # raised to the consumer by the generation
                feed.end(e)
            else:
                feed.end()

        def run() -> None:
            try:
                for chunk in inner:
                    loop.call_soon_threadsafe(out.put_nowait, chunk)
                    if stop.is_set():
                        break
            except BaseException as e:
                loop.call_soon_threadsafe(out.put_nowait, e)
            finally:
                inner.close()
                loop.call_soon_threadsafe(out.put_nowait, None)

        reader = asyncio.ensure_future(pump())
        worker = threading.Thread(target=run, name="qtts-stream-text", daemon=True)
        worker.start()
        try:
            while (item := await out.get()) is not None:
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            stop.set()
            feed.cancel()
            reader.cancel()
            await asyncio.to_thread(worker.join)

    def _stream_feed(self, feed: TextFeed, opts: RequestOptions, chunking: StreamOptions, timings: Timings | None,
                     sampling: dict[str, Any]) -> Iterator[AudioChunk]:
        """The chunks of text arriving through `feed`, the arguments checked now."""
        if opts.non_streaming_mode:
            raise ValueError("streamed text needs non_streaming_mode=False (the text goes in with the frames)")
        opts = dataclasses.replace(opts, non_streaming_mode=False)
        req = build_request(self.context, STREAMED_TEXT, opts, sampling)
        t = timings if timings is not None else Timings()

        def chunks() -> Iterator[AudioChunk]:
            self._feeds.add(feed)
            try:
                yield from self._held_stream(
                    lambda s: speech_text.stream_text(self.context, s, req, feed, opts.split_sentences, chunking,
                                                      timings=t, vocoder_threads=self._split.next()), t)
            finally:
                self._feeds.discard(feed)

        return self._timed(chunks(), req, t)

    @staticmethod
    def _timed(chunks: Iterator[AudioChunk], req: Request, t: Timings) -> Iterator[AudioChunk]:
        """A stream's chunks, with each piece's words after its audio where the request asked for
        them (runtime/audio/timestamps.py); aligned while the stream is suspended between chunks."""
        return chunks if req.timestamps is None else WordStream(req.timestamps, t).chunks(chunks)

    def _held_stream(self, start: Callable[[SessionHandle], Iterator[AudioChunk]],
                     t: Timings) -> Iterator[AudioChunk]:
        """The chunks of start(session), the engine held from the first chunk until the stream ends
        or is closed; the caller's code runs between chunks (docs/architecture.md, "Layers", rule 2)."""
        with self.engine.session() as s:
            inner = start(s)
            try:
                for chunk in inner:
                    with s.suspended():
                        yield chunk
            finally:
                inner.close()
            self._record_split(t)

    def _record_split(self, t: Timings) -> None:
        """A finished request's stage timings, for the automatic split (pipeline.ThreadSplit)."""
        self._split.record(t.vocoder_threads, t.frames, (t.talker_ms_per_frame + t.predictor_ms_per_frame) * t.frames,
                           t.vocoder_ms_per_frame * t.frames)
        if self._split.vocoder_threads == 0:
            self.engine.release_vocoder_session()

    def cancel(self) -> None:
        """Stop a generation running in another thread after its current frame (a streamed
        text's, also while it waits for text)."""
        self.engine.cancel()
        for feed in list(self._feeds):
            feed.cancel()

    def __repr__(self) -> str:
        if not hasattr(self, "context"):  # __init__ failed before loading
            return f"qtts.Model({str(self.path)!r}, not loaded)"
        if self.closed:
            return f"qtts.Model({str(self.path)!r}, closed)"
        return f"qtts.Model({str(self.path)!r}, variant={self.variant!r}, size={self.size!r}, device={self.device!r})"


def load(model: str | os.PathLike[str], *, n_threads: int | None = None, device: str = "auto",
         convert_type: str = "q8_0", ops: str = "auto", vocoder_threads: int | None = None,
         huge_pages: bool = True, precision: str = "auto", voice_cache: str | os.PathLike[str] | bool = True,
         aligner: str | os.PathLike[str] | Aligner | None = None) -> Model:
    """Load a qtts GGUF file, or a Hugging Face repo id such as "Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice":
    downloaded into the Hugging Face cache (needs the `hub` extra; HF_HUB_OFFLINE is honoured),
    converted once to `convert_type` in the qtts cache ($QTTS_CACHE, default ~/.cache/qtts) and
    reused afterwards. n_threads defaults to the physical cores available; ops picks the audio
    networks' path, vocoder_threads the pipeline's split, huge_pages where the streamed weights
    live, precision the arithmetic, voice_cache where cloned voices are kept and aligner the forced
    aligner of word timestamps (Model)."""
    return open_model(model, LoadOptions.of(locals()), convert_type)  # checked before any download


def open_model(model: str | os.PathLike[str], opts: LoadOptions, convert_type: str = "q8_0") -> Model:
    """load() with its options packed (runtime/settings/options.py): what the command line, the bulk
    runners and Ray's actors call, carrying the options whole."""
    from ...convert.registry import cache_dir, fetch, is_repo_id

    if is_repo_id(model):
        model = fetch(str(model), cache_dir(), convert_type)
    m = Model.__new__(Model)
    m._open(model, opts)
    return m
