"""The commands on model files: `convert` a checkpoint, `quantize` a GGUF file, `info` about
one, and the `speakers` and `languages` a model knows."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ..convert.weight_types import WEIGHT_TYPES
from .args import threads as threads_arg
from .common import load_model
from .progress import tensor_log

QUANTIZE_DESCRIPTION = ("Change the type of the talker and code-predictor weights of a qtts GGUF file; everything "
                        "else stays F32. Quantize from the F32 or BF16 conversion, not from a quantized file.")


def convert(args: argparse.Namespace) -> int:
    from ..convert.checkpoint import convert as convert_checkpoint

    with tensor_log(args) as log:
        out = convert_checkpoint(args.hf_dir, args.output, args.type, log=log, n_threads=args.threads)
    if not args.quiet:
        print(f"wrote {out} ({out.stat().st_size / 1e6:.1f} MB)", file=sys.stderr)
    return 0


def quantize(args: argparse.Namespace) -> int:
    from ..convert.quantize import quantize as quantize_file

    # every line: each says which type a tensor got and why (fallbacks, --keep)
    log = None if args.quiet else (lambda msg: print(msg, file=sys.stderr))
    before = Path(args.input).stat().st_size if Path(args.input).is_file() else 0
    out = quantize_file(args.input, args.output, args.type, keep=args.keep, log=log, n_threads=args.threads)
    if not args.quiet:
        after = out.stat().st_size
        print(f"wrote {out} ({args.type}): {before / 1e6:.1f} MB -> {after / 1e6:.1f} MB "
              f"({after / before:.0%})", file=sys.stderr)
    return 0


def info(args: argparse.Namespace) -> int:
    from ..convert.info import inspect

    found = inspect(args.model)
    print(found.to_json() if args.json else found.format())
    return 0


def list_names(args: argparse.Namespace) -> int:
    """`speakers` or `languages`, one per line."""
    model = load_model(args, device="cpu", huge_pages=False)  # names only: nothing generated
    names = model.speakers if args.command == "speakers" else model.languages
    if not names and args.command == "speakers":  # said on stderr: stdout stays a clean (empty) list
        why = {"base": "it clones a voice from --ref-audio or --voice",
               "voice_design": "describe the voice with --instruct"}.get(model.variant, "")
        print(f"qtts-cli: {args.model}: a {model.variant} model has no speakers" + (f"; {why}" if why else ""),
              file=sys.stderr)
    for name in names:
        print(name)
    return 0


def add_quantize_arguments(p: argparse.ArgumentParser) -> None:
    """`qtts-cli quantize` and `qtts-quantize` take the same arguments."""
    p.add_argument("input", help="a qtts .gguf file, best the F32 or BF16 conversion")
    p.add_argument("output", help="output .gguf path")
    p.add_argument("type", type=str.lower, choices=WEIGHT_TYPES,
                   help="type of the talker and code-predictor matrices (K-quant rows that are not whole "
                        "256-value blocks fall back to q8_0 or bf16)")
    p.add_argument("--keep", action="append", default=[], metavar="REGEX=TYPE",
                   help="store the tensors whose name matches REGEX as TYPE instead (repeatable; the last "
                        "match wins), e.g. --keep 'codec_embd=q8_0'")
    p.add_argument("-t", "--threads", type=threads_arg, help="quantization threads (default: the physical cores)")
    p.add_argument("-q", "--quiet", action="store_true", help="no per-tensor lines or summary")
    p.set_defaults(func=quantize)


def add_parsers(sub: Any) -> None:
    c = sub.add_parser("convert", help="convert a Hugging Face checkpoint directory into one GGUF file")
    c.add_argument("hf_dir", help="checkpoint directory (config.json, model.safetensors, speech_tokenizer/ ...)")
    c.add_argument("-o", "--output", required=True, help="output .gguf path")
    c.add_argument("--type", default="f32", type=str.lower, choices=WEIGHT_TYPES,
                   help="type of the talker and code-predictor matrices (default: f32); the K-quants use "
                        "the same per-tensor policy as `quantize` and give the same file in one step")
    c.add_argument("-t", "--threads", type=threads_arg, help="K-quant threads (default: the physical cores)")
    c.add_argument("-q", "--quiet", action="store_true", help="no progress output")
    c.add_argument("-v", "--verbose", action="store_true", help="print one line per tensor written")
    c.set_defaults(func=convert)

    add_quantize_arguments(sub.add_parser("quantize", help="change the weight type of a qtts GGUF file",
                                          description=QUANTIZE_DESCRIPTION))

    i = sub.add_parser("info", help="describe a qtts GGUF model file")
    i.add_argument("model", help="path to a .gguf file")
    i.add_argument("--json", action="store_true", help="print JSON")
    i.set_defaults(func=info)

    for name in ("speakers", "languages"):
        x = sub.add_parser(name, help=f"list a model's {name}, one per line")
        x.add_argument("model", help="a qtts .gguf file or a Hugging Face repo id")
        x.set_defaults(func=list_names)
