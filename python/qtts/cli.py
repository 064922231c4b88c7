"""`qtts-cli`: convert checkpoints and inspect model files."""
from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def _convert(args: argparse.Namespace) -> int:
    from .convert import convert

    log = None if args.quiet else (lambda msg: print(msg, file=sys.stderr))
    out = convert(args.hf_dir, args.output, args.type, log=log)
    if not args.quiet:
        print(f"wrote {out} ({out.stat().st_size / 1e6:.1f} MB)", file=sys.stderr)
    return 0


def _info(args: argparse.Namespace) -> int:
    from .inspect import inspect

    info = inspect(args.model)
    print(info.to_json() if args.json else info.format())
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="qtts-cli", description="Qwen3-TTS on ggml")
    sub = p.add_subparsers(dest="command", required=True)

    c = sub.add_parser("convert", help="convert a Hugging Face checkpoint directory into one GGUF file")
    c.add_argument("hf_dir", help="checkpoint directory (config.json, model.safetensors, speech_tokenizer/ ...)")
    c.add_argument("-o", "--output", required=True, help="output .gguf path")
    c.add_argument("--type", default="f32", choices=["f32", "bf16", "q8_0"],
                   help="type of the talker and code-predictor matrices (default: f32)")
    c.add_argument("-q", "--quiet", action="store_true", help="no progress output")
    c.set_defaults(func=_convert)

    i = sub.add_parser("info", help="describe a qtts GGUF model file")
    i.add_argument("model", help="path to a .gguf file")
    i.add_argument("--json", action="store_true", help="print JSON")
    i.set_defaults(func=_info)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except (ValueError, FileNotFoundError, OSError) as e:
        print(f"qtts-cli: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("qtts-cli: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
