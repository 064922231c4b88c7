"""The options that are not generation settings, each declared once: how a model loads
(`LoadOptions`), what a request asks for besides its text and settings (`RequestOptions`), how a
stream cuts its chunks (`StreamOptions`), how a server batches (`BatchOptions`), how it listens
(`ServeOptions`) and how the Wyoming server answers (`WyomingOptions`).

A field declared with `option(...)` carries its type and range or choices, its default, its
check, its help and the qtts-cli commands that take it as a flag (docs/architecture.md,
"Options"). Everything else derives from those declarations: the checks (each option's value is
checked when its group is built, a TypeError or ValueError naming it), the flags of each command
(`add_arguments`, `from_args`), the bulk runners' and Ray's pass-through (they carry the group
whole), the manifest fields and the server's request fields (`manifest`, `server`). The public
methods keep their explicit keyword arguments, the API users know, and pack them once
(`RequestOptions.of(locals())`); tests/qtts/runtime/settings/test_options.py holds their signatures to the
declarations. The generation settings have their own declarations (runtime/settings/config.py).
"""
from __future__ import annotations

import argparse
import dataclasses
import functools
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

from ...aliases import check_aliases, parse_alias
from .config import SEED_LIMIT, check_bool, check_int, check_seed, parse_frame_budget

MAX_THREADS = 1024
MAX_BATCH = 256  # the native core's limit on sequences stepped together
MAX_REPLICAS = 1024  # qtts-cli serve --ray's replicas
MAX_CHUNK_FRAMES = 4096  # the most frames a stream's chunk may take
OPS = ("auto", "native", "portable")
# The arithmetic (docs/kernels.md, "Precision"): "auto" is fast except for an F32 file on the CPU.
PRECISIONS = ("auto", "exact", "fast")

# qtts-cli's commands that load a model and take the load options as flags
SPEAK, SERVE, BATCH, VOICE, BENCH, WYOMING = "speak", "serve", "batch", "voice create", "bench", "wyoming"
ALIGN = "align"  # the forced aligner's command: its threads, device, ops and precision
SERVERS = (SERVE, WYOMING)  # the two servers take the same load, batch and voice options

Parse = Callable[[str], Any]


@dataclass(frozen=True)
class Option:
    """One option's declaration (the metadata of its field)."""
    help: str
    check: Callable[[str, Any], Any] | None = None  # check(name, value) -> the value, or raise naming it
    flags: tuple[str, ...] = ()  # its qtts-cli flags; () derives --name-with-dashes
    commands: frozenset[str] = frozenset()  # the qtts-cli commands that take it as a flag
    parse: Parse | None = None  # the flag's text -> value (then `check`); None: the text itself
    metavar: str | None = None
    negate: bool = False  # a True default turned off by the flag (store_false: --no-huge-pages)
    manifest: str = ""  # a bulk manifest field (JSONL, Ray rows): "text", "path" (a file) or "value"
    server: bool = False  # a field of the server's request body under its own name
    many: bool = False  # a tuple of values: the flag takes one or more, and may be given again

    def flag_names(self, name: str) -> tuple[str, ...]:
        return self.flags or ("--" + name.replace("_", "-"),)


def option(default: Any, help: str, *, check: Callable[[str, Any], Any] | None = None,
           flags: tuple[str, ...] = (), commands: tuple[str, ...] = (), parse: Parse | None = None,
           metavar: str | None = None, negate: bool = False, manifest: str = "", server: bool = False,
           many: bool = False) -> Any:
    """A field of an option group, declared with everything derived from it."""
    return dataclasses.field(default=default, metadata={"option": Option(
        help, check, flags, frozenset(commands), parse, metavar, negate, manifest, server, many)})


# -- checks: each takes the option's name and value and returns the value ---------------------
def choice(*choices: str) -> Callable[[str, Any], Any]:
    def check(name: str, value: Any) -> Any:
        if not isinstance(value, str):
            raise TypeError(f"{name} must be a str, got {type(value).__name__}")
        if value not in choices:
            raise ValueError(f"{name} must be one of {', '.join(choices)}, got {value!r}")
        return value
    check.choices = choices  # type: ignore[attr-defined]
    return check


def integer(lo: int, hi: int, *, optional: bool = False) -> Callable[[str, Any], Any]:
    def check(name: str, value: Any) -> Any:
        if value is None and optional:
            return value
        check_int(name, value, lo, hi)
        return value
    check.range = (lo, hi)  # type: ignore[attr-defined]
    return check


def text(*, optional: bool = True) -> Callable[[str, Any], Any]:
    from .generation import check_text

    def check(name: str, value: Any) -> Any:
        check_text(value, name, optional=optional, allow_empty=optional)
        return value
    return check


def boolean(*, optional: bool = False) -> Callable[[str, Any], Any]:
    def check(name: str, value: Any) -> Any:
        if value is None and optional:
            return value
        check_bool(name, value)
        return value
    check.boolean = True  # type: ignore[attr-defined]  # its flag is --name / --no-name
    return check


def _device(name: str, value: Any) -> Any:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, got {type(value).__name__}")
    return value


def _voice_cache(name: str, value: Any) -> Any:
    if not isinstance(value, (bool, str, os.PathLike)):
        raise TypeError(f"{name} must be a bool or a folder path, got {type(value).__name__}")
    return value


def _aligner(name: str, value: Any) -> Any:
    """A forced aligner: a converted .gguf, its repo id, or a loaded qtts.Aligner (any object with
    `align` and `languages`; this module imports no model)."""
    if value is None or isinstance(value, (str, os.PathLike)):
        return value
    if not (callable(getattr(value, "align", None)) and hasattr(value, "languages")):
        raise TypeError(f"{name} must be a path, a repo id or a qtts.Aligner, got {type(value).__name__}")
    return value


def _voice(name: str, value: Any) -> Any:
    from ..audio.voice import Voice

    if value is not None and not isinstance(value, Voice):
        raise TypeError(f"{name} must be a qtts.Voice (from create_voice), got {type(value).__name__}")
    return value


def _split_sentences(name: str, value: Any) -> Any:
    from ..text.text import text_pieces

    text_pieces("x", value)  # its checks of the piece length
    return value


def _frame_budget(name: str, value: Any) -> Any:
    parse_frame_budget(value)  # the one reader's checks; the caller's spelling is kept
    return value


def _seed(name: str, value: Any) -> Any:
    return value if value is None else check_seed(value)


_seed.range = (0, SEED_LIMIT - 1)  # type: ignore[attr-defined]


def _auto_int(text: str) -> int | None:
    """A flag's N or "auto" (None)."""
    if text == "auto":
        return None
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer or 'auto', got {text!r}") from None


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None


G = TypeVar("G", bound="Options")


class Options:
    """An option group: a frozen dataclass whose fields are declared with `option(...)`, each
    checked when the group is built."""
    kind: ClassVar[str] = "option"

    def __post_init__(self) -> None:
        for name, spec in specs_of(type(self)).items():
            if spec.check is not None:
                spec.check(name, getattr(self, name))

    @classmethod
    def of(cls: type[G], values: Mapping[str, Any]) -> G:
        """The group from the declared names found in `values` (a method's locals(), a
        Namespace's vars, keyword arguments); the rest is ignored."""
        return cls(**{k: values[k] for k in specs_of(cls) if k in values})

    @classmethod
    def take(cls: type[G], kwargs: dict[str, Any]) -> G:
        """The group from the declared names in `kwargs`, removed from it (the rest stays)."""
        return cls(**{k: kwargs.pop(k) for k in list(kwargs) if k in specs_of(cls)})

    @classmethod
    def from_args(cls: type[G], args: argparse.Namespace, **given: Any) -> G:
        """The group from a command's parsed flags (each declared option whose flag the command
        took), `given` over them."""
        values = {k: tuple(v) if spec.many and isinstance(v := getattr(args, k), list) else getattr(args, k)
                  for k, spec in specs_of(cls).items() if hasattr(args, k)}
        return cls(**{**values, **given})

    def kwargs(self) -> dict[str, Any]:
        """The options as keyword arguments, by name."""
        return {k: getattr(self, k) for k in specs_of(type(self))}


@functools.cache
def specs_of(cls: type) -> dict[str, Option]:
    """The options a group declares, in declaration order, by name."""
    return {f.name: f.metadata["option"] for f in dataclasses.fields(cls) if "option" in f.metadata}


def defaults_of(cls: type) -> dict[str, Any]:
    return {f.name: f.default for f in dataclasses.fields(cls) if "option" in f.metadata}


def add_arguments(p: argparse._ActionsContainer, cls: type[Options], command: str,
                  defaults: Mapping[str, Any] | None = None) -> None:
    """The flags of `command`: one per option of `cls` that names it, with the declared default
    (or `defaults`' for this command), a type that parses and checks it (a usage error naming the
    flag) and the declared help."""
    for name, spec in specs_of(cls).items():
        if command not in spec.commands:
            continue
        default = (defaults or {}).get(name, defaults_of(cls)[name])
        flags = spec.flag_names(name)
        if spec.negate:
            p.add_argument(*flags, dest=name, action="store_false", default=default, help=spec.help)
            continue
        if spec.check is not None and getattr(spec.check, "boolean", False):
            p.add_argument(*flags, dest=name, action=argparse.BooleanOptionalAction, default=default,
                           help=spec.help)
            continue
        if spec.many:  # each word one value, checked alone; from_args makes the list a tuple
            p.add_argument(*flags, dest=name, action="extend", nargs="+", default=list(default),
                           type=_flag_type(name, spec), metavar=spec.metavar, help=spec.help)
            continue
        choices = getattr(spec.check, "choices", None)
        # with choices, argparse's own "invalid choice" names them; otherwise the declared check
        p.add_argument(*flags, dest=name, default=default, type=None if choices else _flag_type(name, spec),
                       choices=choices,
                       metavar=spec.metavar, help=spec.help)


def _flag_type(name: str, spec: Option) -> Parse:
    def convert(value: str) -> Any:
        parsed = spec.parse(value) if spec.parse is not None else value
        if spec.check is not None:
            try:
                spec.check(name, (parsed,) if spec.many else parsed)
            except (TypeError, ValueError) as e:
                raise argparse.ArgumentTypeError(str(e)) from None
        return parsed
    convert.__name__ = spec.metavar or name
    return convert


# -- the groups ---------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class LoadOptions(Options):
    """How a model is loaded: qtts.load's and Model's keyword arguments (docs/python.md)."""
    n_threads: int | None = option(
        None, "CPU threads (default: the physical cores)", check=integer(1, MAX_THREADS, optional=True),
        flags=("-t", "--threads"), commands=(SPEAK, SERVE, BATCH, VOICE, WYOMING, ALIGN), parse=_int, metavar="N")
    device: str = option(
        "auto", "auto, cpu, or a ggml device name (default: auto)", check=_device,
        commands=(SPEAK, SERVE, BATCH, VOICE, WYOMING, ALIGN))
    ops: str = option(
        "auto", "the audio networks' and the attention's ops: native CPU kernels or portable stock ggml ops "
                "(default: auto, native on the CPU)", check=choice(*OPS),
        commands=(SPEAK, SERVE, BATCH, VOICE, WYOMING, ALIGN))
    precision: str = option(
        "auto", "the arithmetic: exact (F32) or fast (a GPU's TF32/BF16 products where ggml picks them; on a CPU "
                "with AMX the vocoder's convs in BF16); default: auto, fast except for an F32 file on the CPU "
                "(docs/gpu.md)", check=choice(*PRECISIONS),
        commands=(SPEAK, SERVE, BATCH, VOICE, BENCH, WYOMING, ALIGN))
    vocoder_threads: int | None = option(
        None, "pipelined synthesis: the vocoder on N of the threads while the rest generate (0: serial; default "
              "auto: chosen from the first requests' timings)", check=integer(0, MAX_THREADS - 1, optional=True),
        commands=(SPEAK,), parse=_auto_int, metavar="N|auto")
    huge_pages: bool = option(
        True, "keep the streamed weights mapped from the file (shared with other processes) instead of reading "
              "them into huge pages", check=boolean(), flags=("--no-huge-pages",),
        commands=(SPEAK, SERVE, BATCH, WYOMING), negate=True)
    voice_cache: bool | str | os.PathLike[str] = option(
        True, "where encoded reference clips are kept (True: $QTTS_CACHE/voices, False: off)", check=_voice_cache)
    aligner: Any = option(
        None, "the forced aligner that times words (word timestamps, docs/aligner.md): a converted .gguf or a repo "
              "id such as Qwen/Qwen3-ForcedAligner-0.6B, loaded with the model's threads and device",
        check=_aligner, commands=(SPEAK, SERVE, BATCH), metavar="MODEL")


@dataclass(frozen=True, kw_only=True)
class RequestOptions(Options):
    """What a request asks for besides its text and generation settings: Model.synthesize's,
    stream's and Scheduler.submit's keyword arguments (docs/python.md)."""
    speaker: str | None = option(None, "speaker name (custom_voice models; see `qtts-cli speakers MODEL`)",
                                 check=text(), commands=(SPEAK, BATCH), manifest="text")
    language: str = option("auto", "language (default: auto; see `qtts-cli languages MODEL`)",
                           check=text(optional=False), commands=(SPEAK, BATCH, WYOMING), manifest="text",
                           server=True)
    instruct: str | None = option(None, "voice / style instruction (voice_design models, 1.7B custom_voice)",
                                  check=text(), commands=(SPEAK, BATCH), manifest="text")
    voice: Any = option(None, "a cloned voice (qtts.Voice, from create_voice; base models)", check=_voice,
                        manifest="path")
    ref_audio: Any = option(None, "a reference clip to clone (base models): a path, file object or samples",
                            manifest="path")
    ref_text: str | None = option(None, "the transcript of ref_audio, for in-context cloning", check=text(),
                                  manifest="text", server=True)
    x_vector_only_mode: bool = option(False, "clone from the speaker embedding alone (no transcript)",
                                      check=boolean(), manifest="value", server=True)
    seed: int | None = option(None, "sampling seed in [0, 2**64) (default: random)", check=_seed,
                              manifest="value", server=True)
    split_sentences: Any = option("auto", "split long text into sentences: auto, True, False or a length",
                                  check=_split_sentences)
    frame_budget: int | str | None = option("auto", "runaway guard: the most frames per sentence (auto, N or None)",
                                            check=_frame_budget, manifest="value")
    non_streaming_mode: bool | None = option(None, "prefill the whole text (default: True except for base models)",
                                             check=boolean(optional=True))
    word_timestamps: bool = option(False, "time each word with the model's forced aligner (load option aligner): "
                                          "the result's words, a stream's words after each piece's audio",
                                   check=boolean(), manifest="value", server=True)


@dataclass(frozen=True, kw_only=True)
class StreamOptions(Options):
    """How a stream cuts its chunks: the first after first_chunk_frames frames, later ones
    doubling up to max_chunk_frames, cut short where the listener would run dry (runtime/synthesis/pacing.py)."""
    first_chunk_frames: int = option(1, "frames of a stream's first chunk", check=integer(1, MAX_CHUNK_FRAMES))
    max_chunk_frames: int = option(8, "the most frames a stream's later chunks take",
                                   check=integer(1, MAX_CHUNK_FRAMES))

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.first_chunk_frames > self.max_chunk_frames:
            raise ValueError("need first_chunk_frames <= max_chunk_frames")


def batch_size(name: str, value: Any) -> Any:
    """A batch's size: 1 .. MAX_BATCH sequences."""
    check_int(name, value, 1, MAX_BATCH)
    return value


def _seconds(lo: float, hi: float) -> Callable[[str, Any], Any]:
    def check(name: str, value: Any) -> Any:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"{name} must be a number of seconds, got {type(value).__name__}")
        if not lo <= value <= hi:
            raise ValueError(f"{name} must be in [{lo:g}, {hi:g}] seconds, got {value}")
        return value
    return check


def _float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None


def _alias(text: str) -> tuple[str, str]:
    try:
        return parse_alias(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _uri(name: str, value: Any) -> Any:
    """tcp://HOST:PORT or unix://PATH (the Wyoming convention)."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, got {type(value).__name__}")
    scheme, sep, rest = value.partition("://")
    host, colon, port = rest.rpartition(":")
    if sep and scheme == "unix" and rest:
        return value
    if not (sep and scheme == "tcp" and host and colon and port.isdigit() and int(port) <= 65535):
        raise ValueError(f"{name} must be tcp://HOST:PORT or unix://PATH, got {value!r}")
    return value


def _optional_text(name: str, value: Any) -> Any:
    if value is not None and not isinstance(value, str):
        raise TypeError(f"{name} must be a str, got {type(value).__name__}")
    return value


@dataclass(frozen=True, kw_only=True)
class BatchOptions(Options):
    """How a server batches requests: its Scheduler's limits (None: by the device,
    scheduler.default_limits)."""
    max_batch: int | None = option(
        None, "requests generated together (default: 8 on the CPU, 64 on a GPU or other device)",
        check=integer(1, MAX_BATCH, optional=True), commands=SERVERS, parse=_int, metavar="N")
    max_queue: int | None = option(
        None, "requests waiting beyond --max-batch before more are refused (HTTP 429, a Wyoming error event; "
              "default: 4 times --max-batch)",
        check=integer(0, 4096, optional=True), commands=SERVERS, parse=_int, metavar="N")
    pipelined_vocoder: bool | None = option(
        None, "vocode a step's chunks while the next step generates, on a session of the server's own (default: "
              "on a GPU or other device, off on the CPU, whose cores both stages share)",
        check=boolean(optional=True), commands=SERVERS, parse=None)


@dataclass(frozen=True, kw_only=True)
class ServeOptions(Options):
    """How the server listens and whom it serves (qtts-cli serve; docs/server.md)."""
    host: str = option("127.0.0.1", "address to bind (default: 127.0.0.1, loopback only)", check=_device,
                       commands=(SERVE,))
    port: int = option(8000, "TCP port (default: 8000)", check=integer(0, 65535), commands=(SERVE,), parse=_int)
    api_key: str | None = option(
        None, "require Authorization: Bearer KEY on every route but /health (default: $QTTS_API_KEY)",
        check=_optional_text, commands=(SERVE,))
    voices: str | None = option(
        None, "folder of saved voices, kept across restarts: serve's POST /v1/audio/voices saves there (without it, "
              "in memory only), as does `qtts-cli voice create -o DIR/NAME.qvoice`", check=_optional_text,
        commands=SERVERS, metavar="DIR")
    model_name: str | None = option(
        None, "the model id clients send and /v1/models lists (default: the file name)", check=_optional_text,
        commands=(SERVE,))
    shutdown_timeout: float = option(
        30.0, "on SIGINT/SIGTERM, let requests in flight finish for this long, then cancel them (default: 30)",
        check=_seconds(0, 3600), commands=SERVERS, parse=_float, metavar="SECONDS")
    voice_alias: tuple[tuple[str, str], ...] = option(
        (), "ALIAS=VOICE: a voice name that stands for a speaker, a saved voice or (VoiceDesign) a description; "
            "OpenAI's names have defaults on CustomVoice and VoiceDesign models (docs/integrations.md)",
        check=check_aliases, commands=SERVERS, parse=_alias, metavar="ALIAS=VOICE", many=True)
    lists_without_key: bool = option(
        False, "answer GET /v1/models, /v1/audio/models and /v1/audio/voices without the API key, as clients that "
               "list without it need (Open WebUI); synthesis still needs it", check=boolean(), commands=(SERVE,))
    # clients that are slow or silent (docs/server.md, "Timeouts and limits")
    header_timeout: float = option(
        10.0, "close a connection whose request head has not come within this long, with 408 (default: 10)",
        check=_seconds(0.1, 3600), commands=(SERVE,), parse=_float, metavar="SECONDS")
    body_timeout: float = option(
        60.0, "answer 408 to a request whose body has not come within this long after its head (default: 60)",
        check=_seconds(0.1, 3600), commands=(SERVE,), parse=_float, metavar="SECONDS")
    ws_start_timeout: float = option(
        10.0, "close a WebSocket that has sent no start message within this long (default: 10)",
        check=_seconds(0.1, 3600), commands=(SERVE,), parse=_float, metavar="SECONDS")
    text_idle_timeout: float = option(
        20.0, "end a streamed-text session that has waited this long for its next text, all it sent spoken "
              "and no done (default: 20)", check=_seconds(0.1, 3600), commands=(SERVE,), parse=_float,
        metavar="SECONDS")


@dataclass(frozen=True, kw_only=True)
class WyomingOptions(Options):
    """How the Wyoming server listens and answers (qtts-cli wyoming; docs/integrations.md)."""
    uri: str = option("tcp://127.0.0.1:10200", "where to listen: tcp://HOST:PORT or unix://PATH (default: "
                      "tcp://127.0.0.1:10200, loopback only)", check=_uri, commands=(WYOMING,))
    default_voice: str | None = option(
        None, "the voice of requests that name none (default: the first voice listed)", check=_optional_text,
        commands=(WYOMING,), metavar="VOICE")
    streaming: bool = option(
        True, "offer no streaming synthesis: info says so, and the synthesize that comes with streamed text "
              "(synthesize-start/-chunk/-stop) is answered instead", check=boolean(), flags=("--no-streaming",),
        commands=(WYOMING,), negate=True)


def _replica_range(text: str) -> tuple[int, int]:
    """A flag's MIN:MAX."""
    low, sep, high = text.partition(":")
    try:
        return int(low), int(high)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected MIN:MAX (two integers), got {text!r}") from None


def _autoscale(name: str, value: Any) -> Any:
    if value is None:
        return value
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise TypeError(f"{name} must be (min, max) replicas, got {value!r}")
    low, high = value
    check_int(f"{name} min", low, 0, MAX_REPLICAS)
    check_int(f"{name} max", high, 1, MAX_REPLICAS)
    if low > high:
        raise ValueError(f"{name} needs min <= max, got {low}:{high}")
    return value



@dataclass(frozen=True, kw_only=True)
class RayServeOptions(Options):
    """How `qtts-cli serve --ray` runs the server on Ray Serve: the cluster, the replicas and how
    Serve's autoscaler adds and removes them (docs/ray-serve.md)."""
    ray: bool = option(
        False, "serve through Ray Serve: replicas of the model behind Serve's HTTP proxy, one per --replicas "
               "(pip install 'qtts[serve]')", check=boolean(), commands=(SERVE,))
    address: str | None = option(
        None, "with --ray: join this Ray cluster (default: start a local Ray instance, stopped at exit)",
        check=_optional_text, commands=(SERVE,))
    replicas: int = option(
        1, "with --ray: replicas of the model, each loading it once with its share of --threads (default 1)",
        check=integer(1, MAX_REPLICAS), commands=(SERVE,), parse=_int, metavar="N")
    autoscale: tuple[int, int] | None = option(
        None, "with --ray: let Serve's autoscaler keep MIN to MAX replicas, by the requests in their queues "
              "(instead of --replicas)", check=_autoscale, commands=(SERVE,), parse=_replica_range, metavar="MIN:MAX")
    target_queued: int = option(
        2, "with --autoscale: requests waiting per replica, beyond the --max-batch it runs, to aim at (default 2)",
        check=integer(0, 4096), commands=(SERVE,), parse=_int, metavar="N")
    upscale_delay_s: float = option(
        30.0, "with --autoscale: how long the queues must ask for more replicas before one is added (default 30)",
        check=_seconds(0, 3600), commands=(SERVE,), parse=_float, metavar="SECONDS")
    downscale_delay_s: float = option(
        600.0, "with --autoscale: how long they must ask for fewer before one is removed (default 600)",
        check=_seconds(0, 86400), commands=(SERVE,), parse=_float, metavar="SECONDS")
    look_back_period_s: float = option(
        30.0, "with --autoscale: the window over which the queue lengths are averaged (default 30)",
        check=_seconds(0.1, 3600), commands=(SERVE,), parse=_float, metavar="SECONDS")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.autoscale is not None and self.replicas != 1:
            raise ValueError("give replicas or autoscale, not both")

    @property
    def most_replicas(self) -> int:
        """The replicas there may be at once (what the threads are shared by)."""
        return self.replicas if self.autoscale is None else self.autoscale[1]
