"""`qtts-cli voice create`: clone a voice from a reference clip once, into a file that
`speak --voice` reuses; and the cloning flags and checks that `speak --ref-audio` shares."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..runtime.settings.options import VOICE
from .args import CliError, utf8
from .common import add_load_arguments, check_input_file, check_writable, load_model
from .progress import busy

if TYPE_CHECKING:  # the CLI imports the library lazily, so that --help and usage errors stay instant
    from ..runtime.audio.voice import Voice
    from ..runtime.synthesis.cloning import CloneTimings


def add_clone_source(g: Any, ref_audio_into: Any, required: bool) -> None:
    """--ref-audio (into its own group, where speak makes it exclude --voice), --ref-text and
    --x-vector-only: shared by speak and voice create."""
    ref_audio_into.add_argument("--ref-audio", metavar="WAV", required=required,
                                help="reference clip of the voice to clone (base models; any format soundfile reads)")
    mode = g.add_mutually_exclusive_group()
    mode.add_argument("--ref-text", type=utf8, metavar="TEXT", help="transcript of --ref-audio, for in-context cloning")
    mode.add_argument("--x-vector-only", action="store_true",
                      help="clone from the speaker embedding alone (no --ref-text needed; a looser likeness)")


def check_clone_args(args: argparse.Namespace) -> None:
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
    check_input_file(args.ref_audio, "--ref-audio")


def clone_voice(model: Any, args: argparse.Namespace) -> tuple[Voice, CloneTimings]:
    """(Voice, CloneTimings) from --ref-audio, made once so every line reuses it; through the
    model's voice cache, as synthesize(ref_audio=...) would."""
    from ..runtime.synthesis import cloning

    show = not args.quiet and sys.stderr.isatty()
    with busy("encoding the reference clip (speaker embedding, codec)", show):
        return cloning.create_voice(model.context, args.ref_audio, args.ref_text, args.x_vector_only)


def voice_mode(voice: Voice) -> str:
    return "x_vector_only" if voice.x_vector_only_mode else "icl"


def create(args: argparse.Namespace) -> int:
    check_clone_args(args)
    check_writable(Path(args.output))

    import soundfile as sf

    # the encoders only: the talker's weights stay mapped
    model = load_model(args, huge_pages=False)
    voice, clone = clone_voice(model, args)
    out = voice.save(args.output)
    seconds = sf.info(args.ref_audio).duration  # create_voice read the file: it is audio
    frames = 0 if voice.ref_codes is None else len(voice.ref_codes)
    if not args.quiet:
        mode = "x-vector-only" if voice.x_vector_only_mode else "in-context (ICL)"
        print(f"wrote {out}: {mode} voice from {seconds:.2f} s of reference audio, {frames} reference frames",
              file=sys.stderr)
    if args.json:
        report = dict(output=str(out), model=str(model.path), mode=voice_mode(voice), ref_audio=args.ref_audio,
                      ref_text=voice.ref_text, reference_seconds=seconds, frames=frames, voice_cache=clone.cache,
                      speaker_encode_ms=clone.speaker_encode_ms, codec_encode_ms=clone.codec_encode_ms,
                      model_fingerprint=voice.model_fingerprint)
        print(json.dumps(report, indent=2, ensure_ascii=False))
    return 0


def add_parser(sub: Any) -> None:
    v = sub.add_parser("voice", help="cloned-voice files (base models)",
                       description="Cloned-voice files: encode a reference clip once, speak with it often.")
    vsub = v.add_subparsers(dest="voice_command", required=True, metavar="{create}")
    c = vsub.add_parser("create", help="clone a voice from a reference clip into a voice file",
                        description="Clone a voice from a reference clip (base models) into a file for "
                                    "`qtts-cli speak --voice FILE`. In-context cloning (the closer likeness) "
                                    "needs --ref-text, the clip's transcript; --x-vector-only does without.")
    c.add_argument("-m", "--model", required=True, help="a qtts base-model .gguf file or a Hugging Face repo id")
    add_clone_source(c, c, required=True)
    c.add_argument("-o", "--output", required=True, metavar="FILE", help="the voice file to write (e.g. me.qvoice)")
    add_load_arguments(c, VOICE)
    c.add_argument("--json", action="store_true", help="print a JSON summary on stdout")
    c.add_argument("-q", "--quiet", action="store_true", help="no progress or summary on stderr")
    c.set_defaults(func=create)
