"""`qtts-cli align AUDIO TEXT -m ALIGNER`: when each word of TEXT is spoken in AUDIO, with
Qwen3-ForcedAligner (docs/aligner.md). Prints one line per word (start, end in seconds, the
word) or writes an .srt, .vtt or .json file; `--compare-reference CHECKPOINT` also runs the
official qwen-asr aligner on the same input and prints where the two differ."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ..runtime.settings.options import ALIGN, LoadOptions
from .args import CliError, utf8
from .common import add_load_arguments, check_input_file, check_writable

DEFAULT_ALIGNER = "Qwen/Qwen3-ForcedAligner-0.6B"


def add_parser(sub: Any) -> None:
    p = sub.add_parser("align", help="word timestamps of a recording and its text (Qwen3-ForcedAligner)",
                       description="When each word of TEXT is spoken in AUDIO. Japanese and Korean need the words "
                                   "split beforehand: give them one per line with --words-file.")
    p.add_argument("audio", help="the recording (any format soundfile reads), at most 180 s")
    p.add_argument("text", type=utf8, nargs="?", help="what is said in it (or --text-file / --words-file)")
    p.add_argument("-m", "--model", default=DEFAULT_ALIGNER,
                   help=f"the aligner: a converted .gguf or a Hugging Face repo id (default: {DEFAULT_ALIGNER}, "
                        "downloaded and converted once)")
    p.add_argument("-l", "--language", help="the text's language (decides the word splitting only)")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--text-file", metavar="FILE", help="read TEXT from a UTF-8 file")
    src.add_argument("--words-file", metavar="FILE", help="the words, one per line, split already")
    out = p.add_mutually_exclusive_group()
    out.add_argument("-o", "--output", metavar="FILE", help="write the words to FILE (.srt, .vtt or .json)")
    out.add_argument("--json", action="store_true", help="print the words as JSON instead of one per line")
    add_load_arguments(p, ALIGN)
    p.add_argument("--compare-reference", metavar="CHECKPOINT",
                   help="also align with the official qwen-asr (needs torch and qwen-asr) from this Hugging Face "
                        "checkpoint directory, and print the differences")
    p.add_argument("-q", "--quiet", action="store_true", help="no timing line on stderr")
    p.set_defaults(func=run)


def _text(args: argparse.Namespace) -> str | list[str]:
    from .args import decode_text

    if args.words_file:
        check_input_file(args.words_file, "--words-file")
        return [w for w in decode_text(Path(args.words_file).read_bytes(), "--words-file").splitlines() if w.strip()]
    if args.text_file:
        check_input_file(args.text_file, "--text-file")
        return decode_text(Path(args.text_file).read_bytes(), "--text-file")
    if args.text is None:
        raise CliError("give the TEXT spoken in AUDIO (or --text-file / --words-file)")
    return str(args.text)


def run(args: argparse.Namespace) -> int:
    from ..runtime.aligner.aligner import load_aligner
    from ..runtime.aligner.subtitles import format_of, to_json, write_words
    from .common import model_path

    check_input_file(args.audio, "AUDIO")
    text = _text(args)
    if args.compare_reference and isinstance(text, list):
        raise CliError("--compare-reference needs TEXT: the reference splits the words itself")
    if args.output:
        format_of(args.output)
        check_writable(Path(args.output))
    opts = LoadOptions.from_args(args)
    with load_aligner(model_path(args), n_threads=opts.n_threads, device=opts.device, ops=opts.ops,
                      precision=opts.precision) as aligner:
        words = aligner.align(args.audio, text, args.language)
        timings = aligner.last_timings
    if args.output:
        write_words(args.output, words)
    elif args.json:
        sys.stdout.write(to_json(words))
    else:
        for w in words:
            print(f"{w.start:8.3f} {w.end:8.3f}  {w.text}")
    if timings and not args.quiet:
        print(f"qtts-cli: {len(words)} words in {timings.total_ms:.0f} ms (log-mel and prompt "
              f"{timings.front_ms:.0f}, encoder {timings.encoder_ms:.0f}, decoder {timings.decoder_ms:.0f})",
              file=sys.stderr)
    if args.compare_reference and isinstance(text, str):
        _compare(args, text, words)
    return 0


def _compare(args: argparse.Namespace, text: str, words: list[Any]) -> None:
    """The official aligner on the same input: its words next to ours, and how many agree. Past 8 s
    of audio its transformers path attends across the encoder's windows, which qtts does not
    (docs/aligner.md, "Reference quirks"): small differences there are that, not a fault."""
    ref = _reference_words(args.compare_reference, args.audio, text, args.language)
    same = sum(1 for a, b in zip(words, ref, strict=False) if (a.text, a.start, a.end) == b)
    worst = max((max(abs(a.start - b[1]), abs(a.end - b[2])) for a, b in zip(words, ref, strict=False)), default=0.0)
    print(f"reference (qwen-asr): {len(ref)} words, {same} with the same span, largest difference {worst:.3f} s")
    for a, b in zip(words, ref, strict=False):
        if (a.text, a.start, a.end) != b:
            print(f"  {a.text}: qtts {a.start:.3f}-{a.end:.3f}, reference {b[1]:.3f}-{b[2]:.3f}")


def _reference_words(checkpoint: str, audio: str, text: str, language: str | None) -> list[tuple]:
    if not Path(checkpoint).is_dir():
        raise CliError(f"--compare-reference {checkpoint}: not a checkpoint directory")
    try:
        import torch

        from .._reference import install

        install()
        from qwen_asr import Qwen3ForcedAligner
    except ImportError as e:
        raise ImportError(f"--compare-reference needs torch and qwen-asr (pip install torch qwen-asr): {e}") from None
    ref = Qwen3ForcedAligner.from_pretrained(checkpoint, dtype=torch.float32, device_map="cpu")
    result = ref.align(audio=audio, text=text, language=language or "English")[0]
    return [(it.text, it.start_time, it.end_time) for it in result]
