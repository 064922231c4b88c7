"""`qtts-cli batch MANIFEST -m MODEL --output-dir DIR`: a manifest of items (JSONL or plain
text) to one audio file each, resumable, on one process, --jobs worker processes or --ray
(the library: qtts.bulk; docs/bulk.md, "How it runs")."""
from __future__ import annotations

import argparse
import json
import signal
import sys
from pathlib import Path
from typing import Any

from ..runtime.settings import options
from ..runtime.settings.options import BATCH, RequestOptions, add_arguments
from .args import CliError, UsageError, checked
from .common import add_load_arguments, check_input_file, model_path
from .speak import _check_output_dir, _need_soundfile, add_sampling_arguments, sampling

MAX_JOBS = 256


def _defaults(args: argparse.Namespace) -> dict[str, Any]:
    """The command line's values for the manifest fields an item leaves out."""
    d: dict[str, Any] = dict(speaker=args.speaker, language=args.language, instruct=args.instruct,
                             seed=args.seed, **sampling(args))
    if args.voice is not None:
        d["voice"] = str(Path(args.voice).resolve())
    if args.frame_budget != "auto":
        d["frame_budget"] = "none" if args.frame_budget is None else args.frame_budget
    if args.timestamps is not None:
        d["word_timestamps"] = True
    return d


def run(args: argparse.Namespace) -> int:
    from ..bulk.manifest import read_manifest

    if args.address is not None and not args.ray:
        raise UsageError("--address goes with --ray")
    check_input_file(args.manifest, "manifest")
    if args.voice is not None:
        check_input_file(args.voice, "--voice")
    manifest = read_manifest(args.manifest, _defaults(args))
    for e in manifest.errors:
        print(f"qtts-cli batch: {args.manifest}: {e}", file=sys.stderr)
    if manifest.errors and args.strict:
        raise CliError(f"{args.manifest}: {len(manifest.errors)} bad line(s); nothing synthesized (--strict)")
    if not manifest.items:
        raise CliError(f"{args.manifest}: no items to synthesize")
    words = any(item.word_timestamps for item in manifest.items)
    if args.aligner is not None and not words:
        raise CliError("--aligner times the words of --timestamps FORMAT (or of items with word_timestamps): add it, "
                       "or drop --aligner")
    _check_output_dir(args.output_dir)
    _need_soundfile()
    # SIGTERM unwinds like an error (its default ends the process on the spot): --jobs workers
    # are stopped and joined, and the exit status is the usual 128 + 15. A worker outlives no
    # parent in any case (bulk/local.py, _die_with_parent).
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    runner = _runner(args, words)
    from ..bulk.run import prepare, run_batch

    out = Path(args.output_dir)
    words_fmt = args.timestamps or "json"
    plan = prepare(manifest.items, out, args.format, args.retry_failed, words_fmt)
    show = not args.quiet and sys.stderr.isatty()
    summary = run_batch(plan, runner, out, args.format, show, words_fmt)
    if not args.quiet:
        bad = f"{len(manifest.errors)} bad manifest line(s) skipped; " if manifest.errors else ""
        print(f"qtts-cli batch: {bad}{summary.format()}", file=sys.stderr)
    if args.json:
        print(json.dumps({**summary.to_dict(), "bad_lines": len(manifest.errors), "items": len(manifest.items),
                          "output_dir": str(out), "jobs": args.jobs, "ray": args.ray}, indent=2))
    return 0 if summary.ok and not manifest.errors else 1


def _exit_on_sigterm(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


def _runner(args: argparse.Namespace, words: bool = False) -> Any:
    """The run's runner; `words`: some item asks for word timestamps, so the model loads with
    --aligner (default: the released one), a repo id converted once, here."""
    from ..bulk.local import JobsRunner, LocalRunner, ModelSpec
    from ..runtime.model.model import check_gguf_path
    from .align import DEFAULT_ALIGNER

    if args.ray:
        from ..bulk.rayrun import import_ray

        import_ray()  # a missing extra fails now, not after the model download
    path = model_path(args)
    check_gguf_path(Path(path))
    if args.jobs > 1 or args.ray:  # a bad file is one clear error here, not one per worker
        from ..runtime.engine.engine import Engine

        Engine.metadata(path)
    aligner = model_path(args, args.aligner or DEFAULT_ALIGNER) if words else None
    spec = ModelSpec(path, options.LoadOptions.from_args(args, aligner=aligner))
    if args.ray:
        from ..bulk.rayrun import RayRunner

        return RayRunner(spec, args.jobs, args.max_batch, args.address)
    if args.jobs > 1:
        return JobsRunner(spec, args.jobs, args.max_batch)
    return LocalRunner(spec, args.max_batch)


def add_parser(sub: Any) -> None:
    from ..bulk.results import FORMATS, WORDS_FORMATS
    from ..runtime.settings.config import check_int

    s = sub.add_parser("batch", help="synthesize a manifest of items into one audio file each (resumable)",
                       description="Synthesize every item of MANIFEST (JSONL: one object per line with id, text and "
                                   "optional speaker, language, instruct, voice, ref_audio, ref_text, "
                                   "x_vector_only_mode, seed, frame_budget, word_timestamps and sampling settings; or "
                                   "plain text: one item per non-empty line, its id the line number) into DIR/ID.wav, "
                                   "with DIR/results.jsonl. Rerunning skips the items already done.")
    s.add_argument("manifest", help="the manifest: .jsonl / .json, or plain text (one item per line)")
    s.add_argument("-m", "--model", required=True, help="a qtts .gguf file or a Hugging Face repo id")
    s.add_argument("--output-dir", required=True, metavar="DIR", help="where ID.wav and results.jsonl go")
    s.add_argument("--format", choices=FORMATS, default="wav", help="audio file format (default: wav, 16-bit)")
    s.add_argument("--timestamps", choices=WORDS_FORMATS, metavar="json|srt|vtt",
                   help="also write when each word is spoken to DIR/ID.FORMAT, timed by --aligner (default: "
                        "Qwen/Qwen3-ForcedAligner-0.6B): every item, unless its word_timestamps is false (an item's "
                        "word_timestamps: true without this flag writes json; docs/bulk.md)")
    s.add_argument("--strict", action="store_true", help="a bad manifest line fails the run before any synthesis")
    s.add_argument("--retry-failed", action="store_true", help="also retry the items an earlier run failed on")
    w = s.add_argument_group("workers")
    w.add_argument("--jobs", type=checked(int, lambda v: check_int("--jobs", v, 1, MAX_JOBS)), default=1,
                   help="worker processes (Ray actors with --ray) sharing the model file; -t is split between them")
    w.add_argument("--max-batch", type=checked(int, lambda v: options.batch_size("--max-batch", v)), default=8,
                   help="items stepped together in each worker (continuous batching; default 8)")
    w.add_argument("--ray", action="store_true", help="run through Ray Data (pip install 'qtts[ray]')")
    w.add_argument("--address", help="with --ray: join this Ray cluster (default: start a local one)")
    add_load_arguments(w, BATCH)  # -t is split between the workers; --no-huge-pages shares the mapped weights
    v = s.add_argument_group("defaults for the items (a manifest field overrides them)")
    add_arguments(v, RequestOptions, BATCH)  # --speaker, --language, --instruct
    v.add_argument("--voice", metavar="FILE", help="a voice file from `qtts-cli voice create` (base models)")
    add_sampling_arguments(s, split=False)
    r = s.add_argument_group("reporting")
    r.add_argument("--json", action="store_true", help="print a JSON summary on stdout")
    r.add_argument("-q", "--quiet", action="store_true", help="no progress bar or summary on stderr")
    s.set_defaults(func=run)
