"""`qtts-cli speak` (the default command): text from -p, -f or stdin to an audio file, one file per
line (--output-dir), or raw PCM streamed to stdout (--raw); with the voice and sampling flags."""
from __future__ import annotations

import argparse
import codecs
import dataclasses
import io
import json
import os
import secrets
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..runtime.settings import config
from ..runtime.settings.options import SPEAK, RequestOptions, add_arguments
from ..runtime.text.text import SPLIT_ABOVE_CHARS
from .args import CliError, decode_text, frame_budget, utf8
from .args import seed as seed_arg
from .args import setting as setting_arg
from .common import add_load_arguments, check_writable, load_model
from .progress import generation_bar
from .voice import add_clone_source, check_clone_args, clone_voice, voice_mode

if TYPE_CHECKING:  # the CLI imports the library lazily, so that --help and usage errors stay instant
    from ..runtime.audio.voice import Voice
    from ..runtime.synthesis.cloning import CloneTimings

AUDIO_EXTENSIONS = (".wav", ".flac", ".ogg")
# The settings --greedy turns off: the one flag of the two networks' do_sample.
GREEDY = ("do_sample", "subtalker_dosample")


def sampling(args: argparse.Namespace) -> dict[str, Any]:
    """The generation settings given on the command line; the model's defaults fill the rest.
    The flags are the settings declared with a flag (runtime/settings/config.py), each flag's dest the
    setting's name (--top-k -> top_k); --greedy turns off sampling in both networks (GREEDY)."""
    s = {k: getattr(args, k) for k, spec in config.SETTING_SPECS.items() if spec.cli and getattr(args, k) is not None}
    if args.greedy:
        s.update(dict.fromkeys(GREEDY, False))
    return s


def _read_text(args: argparse.Namespace) -> str:
    if args.prompt is not None:
        return args.prompt
    if args.file is not None and args.file != "-":
        return decode_text(Path(args.file).read_bytes(), f"-f {args.file}")
    if args.file is None and (sys.stdin is None or sys.stdin.isatty()):
        raise CliError("no text: pass -p TEXT, -f FILE or pipe text on stdin")
    return decode_text(sys.stdin.buffer.read(), "stdin")


def _stdin_fragments() -> Iterator[str]:
    """stdin as it arrives (whatever each read returns, not line by line), decoded as UTF-8
    across the reads' boundaries, a BOM and leading whitespace dropped (as -p's text is
    stripped): --text-stream's source."""
    fd = sys.stdin.fileno()
    decoder = codecs.getincrementaldecoder("utf-8")()
    started = False
    while True:
        data = os.read(fd, 1 << 16)
        try:
            text = decoder.decode(data, final=not data)
        except UnicodeDecodeError as e:
            raise CliError(f"stdin is not UTF-8 text ({e.reason} at byte {e.start} of a read)") from None
        if not started:
            text = text.lstrip("\ufeff").lstrip()
            started = bool(text)
        if text:
            yield text
        if not data:
            return


def _check_text_stream(args: argparse.Namespace) -> None:
    if args.prompt is not None or (args.file is not None and args.file != "-"):
        raise CliError("--text-stream reads the text from stdin: drop -p/-f")
    if args.output_dir is not None:
        raise CliError("--text-stream writes one output: drop --output-dir")
    if sys.stdin is None or sys.stdin.isatty():
        raise CliError("--text-stream needs text piped on stdin")


def _check_output(path: str) -> None:
    """Fail before generation on an output that cannot be written."""
    if path == "-":
        return
    p = Path(path)
    if p.suffix.lower() not in AUDIO_EXTENSIONS:
        raise CliError(f"{path}: unsupported audio extension {p.suffix or '(none)'!r} (use .wav, .flac or .ogg)")
    check_writable(p)


def _check_output_dir(path: str) -> None:
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise CliError(f"--output-dir {path}: not a directory")
    try:
        p.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise CliError(f"--output-dir {path}: cannot create it ({e.strerror or e})") from None
    if not os.access(p, os.W_OK):
        raise CliError(f"--output-dir {path}: not writable")


def _need_soundfile() -> None:
    try:
        import soundfile  # noqa: F401
    except ImportError:
        raise CliError("writing audio files needs soundfile: pip install soundfile (or use --raw)") from None


def _refuse_tty_stdout(what: str) -> None:
    if sys.stdout.isatty():
        raise CliError(f"refusing to write {what} to a terminal; redirect stdout or pipe it into a player")


def _progress(args: argparse.Namespace) -> bool:
    return not args.quiet and sys.stderr.isatty()


def _synth(model: Any, text: str, kw: dict[str, Any], show: bool) -> tuple[Any, str, Any, Any]:
    """Eager synthesis: (samples, stop_reason, timings, words), with a progress bar on a terminal."""
    with generation_bar(show) as progress:
        audio = model.synthesize(text, progress=progress, **kw)
    return audio.samples, audio.stop_reason, audio.timings, audio.words


def _stream_raw(model: Any, text: str | None, kw: dict[str, Any], args: argparse.Namespace
                ) -> tuple[Any, str, Any, Any]:
    """Stream s16le PCM to stdout as it is generated (--raw), or collect the samples:
    (samples or None, stop_reason, timings, words). text None: --text-stream, stdin as it arrives."""
    import numpy as np

    from ..runtime.audio.audio import Timings, pcm16
    from ..runtime.synthesis.speech import Progress

    timings, out, frames, n, reason, words = Timings(), sys.stdout.buffer, 0, 0, "eos", []
    t0 = time.perf_counter()
    if text is None:
        chunks = model.stream_text(_stdin_fragments(), timings=timings, **kw)
    else:
        chunks = model.stream(text, timings=timings, **kw)
    parts = []
    with generation_bar(_progress(args)) as progress:
        try:
            for chunk in chunks:
                words += chunk.words or []
                if not args.raw:
                    parts.append(chunk.samples)
                    continue
                out.write(pcm16(chunk.samples))
                out.flush()
                frames, n = frames + len(chunk.codes), n + len(chunk.samples)
                reason = chunk.stop_reason or reason
                if progress is not None:  # a stream does not know its frame limit: no ETA
                    progress(Progress(frames, 0, 0, 1, n / model.sample_rate, time.perf_counter() - t0))
        finally:
            chunks.close()
    return (None if args.raw else np.concatenate(parts)), reason, timings, words


def _write(samples: Any, sample_rate: int, dest: str) -> None:
    if dest == "-":
        from ..runtime.audio.audio import write_audio

        buf = io.BytesIO()
        write_audio(buf, samples, sample_rate, "WAV", "PCM_16")
        sys.stdout.buffer.write(buf.getvalue())
        sys.stdout.buffer.flush()
    else:
        from ..runtime.audio.audio import save_audio

        save_audio(dest, samples, sample_rate)


def _check_timestamps(args: argparse.Namespace) -> None:
    """--timestamps: one words file for one output, checked before anything loads; --aligner
    goes with it."""
    from ..runtime.aligner.subtitles import format_of

    if not args.timestamps:
        if args.aligner is not None:
            raise CliError("--aligner times the words of --timestamps FILE: add it, or drop --aligner")
        return
    if args.output_dir is not None:
        raise CliError("--timestamps writes the words of one output: drop --output-dir")
    try:
        format_of(args.timestamps)
    except ValueError as e:
        raise CliError(f"--timestamps {e}") from None
    check_writable(Path(args.timestamps))


def _aligner(args: argparse.Namespace) -> str | None:
    """The load option aligner: --aligner (default: the released one) with --timestamps, else none."""
    from .align import DEFAULT_ALIGNER
    from .common import model_path

    return model_path(args, args.aligner or DEFAULT_ALIGNER) if args.timestamps else None


def _write_timestamps(args: argparse.Namespace, words: list[Any]) -> str:
    """The words the model's aligner timed (docs/aligner.md), written to --timestamps."""
    from ..runtime.aligner.subtitles import write_words

    write_words(args.timestamps, words)
    if _progress(args):
        print(f"{args.timestamps}: {len(words)} words timed", file=sys.stderr)
    return str(args.timestamps)


def _voice_report(args: argparse.Namespace, voice: Voice | None, clone: CloneTimings | None) -> dict[str, Any] | None:
    if voice is None:
        return None
    report: dict[str, Any] = dict(mode=voice_mode(voice), ref_text=voice.ref_text)
    if clone is None:
        return dict(file=args.voice, **report)
    return dict(ref_audio=args.ref_audio, **report, voice_cache=clone.cache,
                speaker_encode_ms=clone.speaker_encode_ms, codec_encode_ms=clone.codec_encode_ms)


def run(args: argparse.Namespace) -> int:
    jobs: list[str | None]
    if args.text_stream:  # one job, its text read while it is spoken
        _check_text_stream(args)
        jobs, dests = [None], ["-" if args.raw else args.output]
    elif args.output_dir is not None:
        text = _read_text(args)
        jobs = [line.strip() for line in text.splitlines() if line.strip()]
        if not jobs:
            raise CliError("no text: the input has no non-empty lines")
        width = max(3, len(str(len(jobs))))
        dests = [str(Path(args.output_dir) / f"{i:0{width}d}.wav") for i in range(1, len(jobs) + 1)]
    else:
        text = _read_text(args)
        if not text.strip():
            raise CliError("no text: the input is empty")
        jobs, dests = [text.strip()], ["-" if args.raw else args.output]
    if args.raw:
        _refuse_tty_stdout("raw PCM")
    elif args.output_dir is not None:
        _check_output_dir(args.output_dir)
        _need_soundfile()
    else:
        _check_output(args.output)
        _need_soundfile()
        if args.output == "-":
            _refuse_tty_stdout("audio")
    to_stdout = args.raw or (args.output == "-" and args.output_dir is None)
    _check_timestamps(args)
    check_clone_args(args)
    voice, clone = None, None
    if args.voice is not None:
        from ..runtime.audio.voice import Voice

        voice = Voice.load(args.voice)  # cheap, and a bad file should not cost a model load

    model = load_model(args, aligner=_aligner(args))
    if args.ref_audio is not None:
        voice, clone = clone_voice(model, args)
    elif voice is None and model.variant == "base":
        raise CliError("a base model clones a voice: pass --ref-audio WAV with --ref-text TEXT (or "
                       "--x-vector-only), or --voice FILE from `qtts-cli voice create`")
    seed = secrets.randbits(63) if args.seed is None else args.seed
    kw = dict(speaker=args.speaker, language=args.language, instruct=args.instruct, voice=voice, seed=seed,
              frame_budget=args.frame_budget, split_sentences=False if args.no_split else "auto",
              word_timestamps=bool(args.timestamps), **sampling(args))
    sr = model.sample_rate
    if args.raw and not args.quiet:
        print(f"qtts-cli: raw s16le PCM, {sr} Hz mono on stdout; play it with\n"
              f"  ... | ffplay -f s16le -ar {sr} -ac 1 -nodisp -autoexit -\n"
              f"  ... | aplay -f S16_LE -r {sr} -c 1", file=sys.stderr)
    outputs = []
    for i, (job, dest) in enumerate(zip(jobs, dests, strict=True)):
        if args.raw or args.text_stream:
            samples, reason, timings, words = _stream_raw(model, job, kw, args)
            if not args.raw:
                _write(samples, sr, dest)
        else:
            samples, reason, timings, words = _synth(model, job, kw, _progress(args))
            _write(samples, sr, dest)
        if clone is not None and i == 0:  # the reference was encoded once, ahead of the first line
            timings.speaker_encode_ms, timings.codec_encode_ms = clone.speaker_encode_ms, clone.codec_encode_ms
            timings.voice_cache = clone.cache
        outputs.append(dict(output=dest, text=job, frames=timings.frames, audio_seconds=timings.audio_seconds,
                            stop_reason=reason, timings=dataclasses.asdict(timings)))
        if _progress(args):
            where = "stdout" if dest == "-" else dest
            print(f"{where}: {timings.audio_seconds:.2f} s of audio, {timings.frames} frames, "
                  f"RTF {timings.rtf:.2f}, stop: {reason}", file=sys.stderr)
        if args.timings:
            if len(jobs) > 1:
                print(f"--- {dest}", file=sys.stderr)
            print(timings.format(), file=sys.stderr)
        if reason == "cancelled":
            break
        if args.timestamps:
            outputs[-1]["timestamps"] = _write_timestamps(args, words)
    if args.json:
        report = dict(model=str(model.path), variant=model.variant, device=model.device, sample_rate=sr,
                      speaker=args.speaker, language=args.language, instruct=args.instruct, seed=seed,
                      voice=_voice_report(args, voice, clone), outputs=outputs)
        print(json.dumps(report, indent=2, ensure_ascii=False), file=sys.stderr if to_stdout else sys.stdout)
    return 0


def _add_voice_arguments(s: argparse.ArgumentParser) -> None:
    v = s.add_argument_group("voice")
    add_arguments(v, RequestOptions, SPEAK)  # --speaker, --language, --instruct
    # one source for a base model's voice: a voice file, or a clip encoded once for every line
    source = v.add_mutually_exclusive_group()
    source.add_argument("--voice", metavar="FILE", help="a cloned voice from `qtts-cli voice create` (base models)")
    add_clone_source(v, source, required=False)


def add_sampling_arguments(s: argparse.ArgumentParser, split: bool = True) -> None:
    """The sampling flags (shared with `batch`, whose items are never split differently: no
    --no-split): one per setting declared with a flag, in declaration order (runtime/settings/config.py)."""
    g = s.add_argument_group("sampling (defaults: the model's generation_config)")
    g.add_argument("-s", "--seed", type=seed_arg,
                   help="sampling seed in [0, 2**64) (default: random; speak --json reports it)")
    for name, spec in config.SETTING_SPECS.items():
        text = spec.help.format(default=spec.default)
        if spec.cli and spec.kind is bool:  # --name / --no-name
            g.add_argument(config.flag_of(name), action=argparse.BooleanOptionalAction, help=text)
        elif spec.cli:
            g.add_argument(config.flag_of(name), type=setting_arg(name), help=text)
        if name == GREEDY[-1]:  # listed where the last setting it sets is declared
            g.add_argument("--greedy", action="store_true", help="no sampling, talker and code predictor")
    g.add_argument("--frame-budget", type=frame_budget, default="auto", metavar="N|auto|none",
                   help="runaway guard: the most frames per sentence (default: auto, from the text)")
    if not split:
        return
    g.add_argument("--no-split", action="store_true",
                   help=f"do not synthesize inputs over {SPLIT_ABOVE_CHARS} characters sentence by sentence")


def add_parser(sub: Any) -> None:
    s = sub.add_parser("speak", help="synthesize speech (the default command)",
                       description="Synthesize speech from -p TEXT, -f FILE or stdin. Base models speak in a "
                                   "cloned voice: --voice FILE (`qtts-cli voice create`), or --ref-audio WAV with "
                                   "--ref-text TEXT (or --x-vector-only).")
    s.add_argument("-m", "--model", required=True, help="a qtts .gguf file or a Hugging Face repo id")
    src = s.add_mutually_exclusive_group()
    src.add_argument("-p", "--prompt", type=utf8, help="the text to speak")
    src.add_argument("-f", "--file", help="read the text from FILE ('-': stdin)")
    dst = s.add_mutually_exclusive_group()
    dst.add_argument("-o", "--output", default="output.wav",
                     help="output .wav/.flac/.ogg, '-' for a WAV on stdout (default: output.wav)")
    dst.add_argument("--output-dir", help="one WAV per non-empty input line: DIR/001.wav, 002.wav ...")
    dst.add_argument("--raw", action="store_true",
                     help="stream raw s16le mono PCM to stdout while generating (pipe into ffplay/aplay)")
    s.add_argument("--text-stream", action="store_true",
                   help="read stdin as it arrives and start speaking while the text is still being written "
                        "(e.g. an LLM client's output piped in); with --raw the audio streams out too")
    _add_voice_arguments(s)
    add_sampling_arguments(s)
    r = s.add_argument_group("runtime and reporting")
    add_load_arguments(r, SPEAK)
    s.add_argument("--timestamps", metavar="FILE",
                   help="also write when each word is spoken to FILE (.srt, .vtt or .json), timed by --aligner "
                        "(default: Qwen/Qwen3-ForcedAligner-0.6B; docs/aligner.md)")
    r.add_argument("--timings", action="store_true", help="print a timing table on stderr")
    r.add_argument("--json", action="store_true",
                   help="print a JSON report on stdout (on stderr when the audio goes to stdout)")
    r.add_argument("-q", "--quiet", action="store_true", help="no progress or hints on stderr")
    s.set_defaults(func=run)
