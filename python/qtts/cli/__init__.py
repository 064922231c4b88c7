"""`qtts-cli`: speak text, clone voices, convert checkpoints and inspect model files.

`speak` is the default command, so `qtts-cli -m model.gguf -p "Hello" -o hello.wav` works too.
Base models clone a voice from a reference clip, either on the fly
(`speak --ref-audio ref.wav --ref-text "its transcript"`, or `--x-vector-only` without one) or
once into a voice file (`voice create ... -o me.qvoice`) that `speak --voice me.qvoice` reuses.
"""
from __future__ import annotations

import argparse
import dataclasses
import io
import json
import os
import secrets
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .args import CliError, Parser, UsageError, decode_text, frame_budget
from .args import seed as seed_arg, setting as setting_arg, threads as threads_arg, utf8
from .progress import busy, generation_bar, tensor_log
from ..runtime.text import SPLIT_ABOVE_CHARS
from ..convert.weight_types import WEIGHT_TYPES

if TYPE_CHECKING:  # the CLI imports the library lazily, so that --help and usage errors stay instant
    from ..runtime.cloning import CloneTimings
    from ..runtime.voice import Voice

COMMANDS = ("speak", "voice", "convert", "quantize", "info", "speakers", "languages", "bench")
AUDIO_EXTENSIONS = (".wav", ".flac", ".ogg")


def _convert(args: argparse.Namespace) -> int:
    from ..convert.checkpoint import convert

    with tensor_log(args) as log:
        out = convert(args.hf_dir, args.output, args.type, log=log, n_threads=args.threads)
    if not args.quiet:
        print(f"wrote {out} ({out.stat().st_size / 1e6:.1f} MB)", file=sys.stderr)
    return 0


QUANTIZE_TYPES = WEIGHT_TYPES
QUANTIZE_DESCRIPTION = ("Change the type of the talker and code-predictor weights of a qtts GGUF file; everything "
                        "else stays F32. Quantize from the F32 or BF16 conversion, not from a quantized file.")


def _quantize(args: argparse.Namespace) -> int:
    from ..convert.quantize import quantize

    # every line: each says which type a tensor got and why (fallbacks, --keep)
    log = None if args.quiet else (lambda msg: print(msg, file=sys.stderr))
    before = Path(args.input).stat().st_size if Path(args.input).is_file() else 0
    out = quantize(args.input, args.output, args.type, keep=args.keep, log=log, n_threads=args.threads)
    if not args.quiet:
        after = out.stat().st_size
        print(f"wrote {out} ({args.type}): {before / 1e6:.1f} MB -> {after / 1e6:.1f} MB "
              f"({after / before:.0%})", file=sys.stderr)
    return 0


def _add_quantize_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("input", help="a qtts .gguf file, best the F32 or BF16 conversion")
    p.add_argument("output", help="output .gguf path")
    p.add_argument("type", type=str.lower, choices=QUANTIZE_TYPES,
                   help="type of the talker and code-predictor matrices (K-quant rows that are not whole "
                        "256-value blocks fall back to q8_0 or bf16)")
    p.add_argument("--keep", action="append", default=[], metavar="REGEX=TYPE",
                   help="store the tensors whose name matches REGEX as TYPE instead (repeatable; the last "
                        "match wins), e.g. --keep 'codec_embd=q8_0'")
    p.add_argument("-t", "--threads", type=threads_arg, help="quantization threads (default: the physical cores)")
    p.add_argument("-q", "--quiet", action="store_true", help="no per-tensor lines or summary")
    p.set_defaults(func=_quantize)


def main_quantize(argv: Sequence[str] | None = None) -> int:
    """`qtts-quantize IN OUT TYPE`: the same as `qtts-cli quantize`."""
    p = Parser(prog="qtts-quantize", description=QUANTIZE_DESCRIPTION)
    _add_quantize_arguments(p)
    return _run(p.parse_args(sys.argv[1:] if argv is None else argv), "qtts-quantize")


def _load(args: argparse.Namespace, **kw: Any) -> Any:
    """qtts.load, where a repo id's one-time conversion reports like `convert` does."""
    from .. import load
    from ..convert.registry import cache_dir, fetch, is_repo_id

    model = args.model
    if is_repo_id(model):
        with tensor_log(argparse.Namespace(quiet=getattr(args, "quiet", False), verbose=False)) as log:
            model = fetch(model, cache_dir(), "q8_0", log=log)
    return load(model, **kw)


def _info(args: argparse.Namespace) -> int:
    from ..convert.info import inspect

    info = inspect(args.model)
    print(info.to_json() if args.json else info.format())
    return 0


def _list(args: argparse.Namespace) -> int:
    model = _load(args, device="cpu")
    names = model.speakers if args.command == "speakers" else model.languages
    if not names and args.command == "speakers":  # said on stderr: stdout stays a clean (empty) list
        why = {"base": "it clones a voice from --ref-audio or --voice",
               "voice_design": "describe the voice with --instruct"}.get(model.variant, "")
        print(f"qtts-cli: {args.model}: a {model.variant} model has no speakers" + (f"; {why}" if why else ""),
              file=sys.stderr)
    for name in names:
        print(name)
    return 0


# --- speak -------------------------------------------------------------------------------------

def _read_text(args: argparse.Namespace) -> str:
    if args.prompt is not None:
        return args.prompt
    if args.file is not None and args.file != "-":
        return decode_text(Path(args.file).read_bytes(), f"-f {args.file}")
    if args.file is None and (sys.stdin is None or sys.stdin.isatty()):
        raise CliError("no text: pass -p TEXT, -f FILE or pipe text on stdin")
    return decode_text(sys.stdin.buffer.read(), "stdin")


def _check_output(path: str) -> None:
    """Fail before generation on an output that cannot be written."""
    if path == "-":
        return
    p = Path(path)
    if p.suffix.lower() not in AUDIO_EXTENSIONS:
        raise CliError(f"{path}: unsupported audio extension {p.suffix or '(none)'!r} (use .wav, .flac or .ogg)")
    _check_writable(p)


def _check_writable(p: Path) -> None:
    path = str(p)
    if p.is_dir():
        raise CliError(f"{path} is a directory")
    parent = p.parent
    if not parent.is_dir():
        raise CliError(f"{path}: output directory {str(parent)!r} does not exist")
    if not os.access(parent, os.W_OK) or (p.exists() and not os.access(p, os.W_OK)):
        raise CliError(f"{path}: not writable")


def _check_clone_args(args: argparse.Namespace) -> None:
    """The cloning flags' rules that argparse cannot express, checked before the model loads
    (argparse itself refuses --voice with --ref-audio and --ref-text with --x-vector-only)."""
    if args.ref_audio is None:
        for flag, given in (("--ref-text", args.ref_text is not None), ("--x-vector-only", args.x_vector_only)):
            if given:
                why = " (a --voice file already holds its mode and transcript)" if getattr(args, "voice", None) else ""
                raise CliError(f"{flag} goes with --ref-audio{why}")
        return
    if not args.x_vector_only and not (args.ref_text or "").strip():
        raise CliError("in-context cloning needs the transcript of --ref-audio: give --ref-text TEXT, or use "
                       "--x-vector-only to clone from the speaker embedding alone")
    _check_input_file(args.ref_audio, "--ref-audio")


def _check_input_file(path: str, flag: str) -> None:
    p = Path(path)
    if not p.exists():
        raise CliError(f"{flag} {path}: no such file")
    if p.is_dir():
        raise CliError(f"{flag} {path}: is a directory")


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


def _sampling(args: argparse.Namespace) -> dict[str, Any]:
    s = {k: getattr(args, k) for k in ("temperature", "top_k", "top_p", "repetition_penalty", "max_new_tokens")
         if getattr(args, k) is not None}
    if args.greedy:
        s.update(do_sample=False, subtalker_dosample=False)
    return s


def _progress(args: argparse.Namespace) -> bool:
    return not args.quiet and sys.stderr.isatty()


def _synth(model: Any, text: str, kw: dict[str, Any], show: bool) -> tuple[Any, str, Any]:
    """Eager synthesis: (samples, stop_reason, timings), with a progress bar on a terminal."""
    with generation_bar(show) as progress:
        audio = model.synthesize(text, progress=progress, **kw)
    return audio.samples, audio.stop_reason, audio.timings


def _stream_raw(model: Any, text: str, kw: dict[str, Any], args: argparse.Namespace) -> tuple[None, str, Any]:
    """Stream s16le PCM to stdout as it is generated: (None, stop_reason, timings)."""
    from ..runtime.audio import Timings, pcm16
    from ..runtime.speech import Progress

    timings, out, frames, n, reason = Timings(), sys.stdout.buffer, 0, 0, "eos"
    t0 = time.perf_counter()
    chunks = model.stream(text, timings=timings, **kw)
    with generation_bar(_progress(args)) as progress:
        try:
            for chunk in chunks:
                out.write(pcm16(chunk.samples))
                out.flush()
                frames, n = frames + len(chunk.codes), n + len(chunk.samples)
                reason = chunk.stop_reason or reason
                if progress is not None:  # a stream does not know its frame limit: no ETA
                    progress(Progress(frames, 0, 0, 1, n / model.sample_rate, time.perf_counter() - t0))
        finally:
            chunks.close()
    return None, reason, timings


def _write(samples: Any, sample_rate: int, dest: str) -> None:
    if dest == "-":
        import soundfile as sf

        buf = io.BytesIO()
        sf.write(buf, samples, sample_rate, format="WAV", subtype="PCM_16")
        sys.stdout.buffer.write(buf.getvalue())
        sys.stdout.buffer.flush()
    else:
        from ..runtime.audio import save_audio

        save_audio(dest, samples, sample_rate)


def _speak(args: argparse.Namespace) -> int:
    text = _read_text(args)
    if args.output_dir is not None:
        jobs = [line.strip() for line in text.splitlines() if line.strip()]
        if not jobs:
            raise CliError("no text: the input has no non-empty lines")
        width = max(3, len(str(len(jobs))))
        dests = [str(Path(args.output_dir) / f"{i:0{width}d}.wav") for i in range(1, len(jobs) + 1)]
    else:
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
    _check_clone_args(args)
    voice, clone = None, None
    if args.voice is not None:
        from ..runtime.voice import Voice

        voice = Voice.load(args.voice)  # cheap, and a bad file should not cost a model load

    model = _load(args, n_threads=args.threads, device=args.device)
    if args.ref_audio is not None:
        voice, clone = _clone(model, args)
    elif voice is None and model.variant == "base":
        raise CliError("a base model clones a voice: pass --ref-audio WAV with --ref-text TEXT (or "
                       "--x-vector-only), or --voice FILE from `qtts-cli voice create`")
    seed = secrets.randbits(63) if args.seed is None else args.seed
    kw = dict(speaker=args.speaker, language=args.language, instruct=args.instruct, voice=voice, seed=seed,
              frame_budget=args.frame_budget, **_sampling(args))
    sr = model.sample_rate
    if args.raw and not args.quiet:
        print(f"qtts-cli: raw s16le PCM, {sr} Hz mono on stdout; play it with\n"
              f"  ... | ffplay -f s16le -ar {sr} -ac 1 -nodisp -autoexit -\n"
              f"  ... | aplay -f S16_LE -r {sr} -c 1", file=sys.stderr)
    outputs = []
    for i, (job, dest) in enumerate(zip(jobs, dests)):
        kw["split_sentences"] = False if args.no_split else "auto"
        if args.raw:
            samples, reason, timings = _stream_raw(model, job, kw, args)
        else:
            samples, reason, timings = _synth(model, job, kw, _progress(args))
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
    if args.json:
        report = dict(model=str(model.path), variant=model.variant, device=model.device, sample_rate=sr,
                      speaker=args.speaker, language=args.language, instruct=args.instruct, seed=seed,
                      voice=_voice_report(args, voice, clone), outputs=outputs)
        print(json.dumps(report, indent=2, ensure_ascii=False), file=sys.stderr if to_stdout else sys.stdout)
    return 0


def _clone(model: Any, args: argparse.Namespace) -> tuple[Voice, CloneTimings]:
    """(Voice, CloneTimings) from --ref-audio, made once so every line reuses it; through the
    model's voice cache, as synthesize(ref_audio=...) would."""
    from ..runtime import cloning

    show = not args.quiet and sys.stderr.isatty()
    with busy("encoding the reference clip (speaker embedding, codec)", show):
        return cloning.create_voice(model, args.ref_audio, args.ref_text, args.x_vector_only, model.voice_cache)


def _voice_mode(voice: Voice) -> str:
    return "x_vector_only" if voice.x_vector_only_mode else "icl"


def _voice_report(args: argparse.Namespace, voice: Voice | None, clone: CloneTimings | None) -> dict[str, Any] | None:
    if voice is None:
        return None
    report: dict[str, Any] = dict(mode=_voice_mode(voice), ref_text=voice.ref_text)
    if clone is None:
        return dict(file=args.voice, **report)
    return dict(ref_audio=args.ref_audio, **report, voice_cache=clone.cache,
                speaker_encode_ms=clone.speaker_encode_ms, codec_encode_ms=clone.codec_encode_ms)


def _add_clone_source(g: Any, ref_audio_into: Any, required: bool) -> None:
    """--ref-audio (into its own group, where speak makes it exclude --voice), --ref-text and
    --x-vector-only: shared by speak and voice create."""
    ref_audio_into.add_argument("--ref-audio", metavar="WAV", required=required,
                                help="reference clip of the voice to clone (base models; any format soundfile reads)")
    mode = g.add_mutually_exclusive_group()
    mode.add_argument("--ref-text", type=utf8, metavar="TEXT", help="transcript of --ref-audio, for in-context cloning")
    mode.add_argument("--x-vector-only", action="store_true",
                      help="clone from the speaker embedding alone (no --ref-text needed; a looser likeness)")


def _add_speak(sub: Any) -> None:
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
    v = s.add_argument_group("voice")
    v.add_argument("--speaker", type=utf8, help="speaker name (custom_voice models; see `qtts-cli speakers MODEL`)")
    v.add_argument("--language", type=utf8, default="auto",
                   help="language (default: auto; see `qtts-cli languages MODEL`)")
    v.add_argument("--instruct", type=utf8, help="voice / style instruction (voice_design models, 1.7B custom_voice)")
    # one source for a base model's voice: a voice file, or a clip encoded once for every line
    source = v.add_mutually_exclusive_group()
    source.add_argument("--voice", metavar="FILE", help="a cloned voice from `qtts-cli voice create` (base models)")
    _add_clone_source(v, source, required=False)
    g = s.add_argument_group("sampling (defaults: the model's generation_config)")
    g.add_argument("-s", "--seed", type=seed_arg,
                   help="sampling seed in [0, 2**64) (default: random, reported by --json)")
    g.add_argument("--temperature", type=setting_arg("temperature"),
                   help="talker sampling temperature: lower is steadier, higher more varied (model default 0.9)")
    g.add_argument("--top-k", type=setting_arg("top_k"),
                   help="sample the talker's first codebook from the K most likely codes (0: all)")
    g.add_argument("--top-p", type=setting_arg("top_p"),
                   help="nucleus sampling: the smallest set of codes whose probability reaches P, in (0, 1]")
    g.add_argument("--repetition-penalty", type=setting_arg("repetition_penalty"),
                   help="above 1 discourages repeating first-codebook codes (model default 1.05)")
    g.add_argument("--greedy", action="store_true", help="no sampling, talker and code predictor")
    g.add_argument("--max-new-tokens", type=setting_arg("max_new_tokens"),
                   help="at most this many frames - 1 (12.5 frames per second; at least 2)")
    g.add_argument("--frame-budget", type=frame_budget, default="auto", metavar="N|auto|none",
                   help="runaway guard: the most frames per sentence (default: auto, from the text)")
    g.add_argument("--no-split", action="store_true",
                   help=f"do not synthesize inputs over {SPLIT_ABOVE_CHARS} characters sentence by sentence")
    r = s.add_argument_group("runtime and reporting")
    r.add_argument("-t", "--threads", type=threads_arg, help="CPU threads (default: the physical cores)")
    r.add_argument("--device", default="auto", help="auto, cpu, or a ggml device name (default: auto)")
    r.add_argument("--timings", action="store_true", help="print a timing table on stderr")
    r.add_argument("--json", action="store_true",
                   help="print a JSON report on stdout (on stderr when the audio goes to stdout)")
    r.add_argument("-q", "--quiet", action="store_true", help="no progress or hints on stderr")
    s.set_defaults(func=_speak)


# --- voice create --------------------------------------------------------------------------------

def _voice_create(args: argparse.Namespace) -> int:
    _check_clone_args(args)
    _check_writable(Path(args.output))

    import soundfile as sf

    model = _load(args, n_threads=args.threads, device=args.device)
    voice, clone = _clone(model, args)
    out = voice.save(args.output)
    seconds = sf.info(args.ref_audio).duration  # create_voice read the file: it is audio
    frames = 0 if voice.ref_codes is None else len(voice.ref_codes)
    if not args.quiet:
        mode = "x-vector-only" if voice.x_vector_only_mode else "in-context (ICL)"
        print(f"wrote {out}: {mode} voice from {seconds:.2f} s of reference audio, {frames} reference frames",
              file=sys.stderr)
    if args.json:
        report = dict(output=str(out), model=str(model.path), mode=_voice_mode(voice), ref_audio=args.ref_audio,
                      ref_text=voice.ref_text, reference_seconds=seconds, frames=frames, voice_cache=clone.cache,
                      speaker_encode_ms=clone.speaker_encode_ms, codec_encode_ms=clone.codec_encode_ms,
                      model_fingerprint=voice.model_fingerprint)
        print(json.dumps(report, indent=2, ensure_ascii=False))
    return 0


def _add_voice(sub: Any) -> None:
    v = sub.add_parser("voice", help="cloned-voice files (base models)",
                       description="Cloned-voice files: encode a reference clip once, speak with it often.")
    vsub = v.add_subparsers(dest="voice_command", required=True, metavar="{create}")
    c = vsub.add_parser("create", help="clone a voice from a reference clip into a voice file",
                        description="Clone a voice from a reference clip (base models) into a file for "
                                    "`qtts-cli speak --voice FILE`. In-context cloning (the closer likeness) "
                                    "needs --ref-text, the clip's transcript; --x-vector-only does without.")
    c.add_argument("-m", "--model", required=True, help="a qtts base-model .gguf file or a Hugging Face repo id")
    _add_clone_source(c, c, required=True)
    c.add_argument("-o", "--output", required=True, metavar="FILE", help="the voice file to write (e.g. me.qvoice)")
    c.add_argument("-t", "--threads", type=threads_arg, help="CPU threads (default: the physical cores)")
    c.add_argument("--device", default="auto", help="auto, cpu, or a ggml device name (default: auto)")
    c.add_argument("--json", action="store_true", help="print a JSON summary on stdout")
    c.add_argument("-q", "--quiet", action="store_true", help="no progress or summary on stderr")
    c.set_defaults(func=_voice_create)


def build_parser() -> argparse.ArgumentParser:
    from .. import __version__

    p = Parser(prog="qtts-cli", description="Qwen3-TTS on ggml. `speak` is the default command: "
                                "qtts-cli -m MODEL -p TEXT -o out.wav")
    p.add_argument("--version", action="version", version=f"qtts {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="{" + ",".join(COMMANDS) + "}")
    _add_speak(sub)
    _add_voice(sub)

    c = sub.add_parser("convert", help="convert a Hugging Face checkpoint directory into one GGUF file")
    c.add_argument("hf_dir", help="checkpoint directory (config.json, model.safetensors, speech_tokenizer/ ...)")
    c.add_argument("-o", "--output", required=True, help="output .gguf path")
    c.add_argument("--type", default="f32", type=str.lower, choices=WEIGHT_TYPES,
                   help="type of the talker and code-predictor matrices (default: f32); the K-quants use "
                        "the same per-tensor policy as `quantize` and give the same file in one step")
    c.add_argument("-t", "--threads", type=threads_arg, help="K-quant threads (default: the physical cores)")
    c.add_argument("-q", "--quiet", action="store_true", help="no progress output")
    c.set_defaults(func=_convert)
    c.add_argument("-v", "--verbose", action="store_true", help="print one line per tensor written")

    _add_quantize_arguments(sub.add_parser("quantize", help="change the weight type of a qtts GGUF file",
                                           description=QUANTIZE_DESCRIPTION))

    i = sub.add_parser("info", help="describe a qtts GGUF model file")
    i.add_argument("model", help="path to a .gguf file")
    i.add_argument("--json", action="store_true", help="print JSON")
    i.set_defaults(func=_info)

    for name in ("speakers", "languages"):
        x = sub.add_parser(name, help=f"list a model's {name}, one per line")
        x.add_argument("model", help="a qtts .gguf file or a Hugging Face repo id")
        x.set_defaults(func=_list)

    from . import bench  # argparse wiring only; the benchmarks import their dependencies lazily

    bench.add_parser(sub)
    return p


def _with_default_command(argv: list[str]) -> list[str]:
    if argv and argv[0] not in COMMANDS and argv[0] not in ("-h", "--help", "--version"):
        return ["speak", *argv]
    return argv


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    return _run(build_parser().parse_args(_with_default_command(argv)), "qtts-cli")


def _run(args: argparse.Namespace, prog: str) -> int:
    try:
        return int(args.func(args))
    except UsageError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2
    except (CliError, ValueError, TypeError, OSError, RuntimeError, ImportError) as e:
        if isinstance(e, BrokenPipeError):  # the player went away: stop quietly
            _silence_stdout()
            return 0
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130


def _silence_stdout() -> None:
    try:  # keep the interpreter's final flush from raising again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except OSError:
        pass

