"""Download a released Qwen3-TTS checkpoint and convert it to GGUF.

usage: python models/fetch.py REPO_ID [--type f32|bf16|q8_0] [-o DIR]
       python models/fetch.py --list
"""
from __future__ import annotations

import argparse
import sys

from qtts.convert.registry import MODELS, fetch


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("repo_id", nargs="?", help="e.g. Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice")
    p.add_argument("--type", default="q8_0", choices=["f32", "bf16", "q8_0"])
    p.add_argument("-o", "--output-dir", default="models")
    p.add_argument("--list", action="store_true", help="list the released checkpoints")
    args = p.parse_args()
    if args.list or not args.repo_id:
        for r in MODELS.values():
            print(f"{r.repo_id:<40} {r.variant:<13} {r.size}")
        return 0
    print(fetch(args.repo_id, args.output_dir, args.type))
    return 0


if __name__ == "__main__":
    sys.exit(main())
