"""`qtts-cli bench speed|memory|quality|micro|matmul|ops|serve|batch|align`: the parser; the benchmarks
themselves are the qtts.bench package (docs/performance.md)."""
from __future__ import annotations

import argparse
import importlib
import json
from pathlib import Path
from typing import Any

from ..bench.common import TYPES
from ..bench.serve import BATCHES, parse_batches
from ..runtime.settings.options import BENCH
from .args import checked
from .args import vocoder_threads as vocoder_threads_arg
from .common import add_load_arguments

# command -> (module of qtts.bench, its run and format functions)
COMMANDS = {"speed": ("speed", "run_speed", "format_speed"), "memory": ("memory", "run_memory", "format_memory"),
            "quality": ("quality", "run_quality", "format_quality"), "micro": ("micro", "run_micro", "format_micro"),
            "matmul": ("matmul", "run_matmul", "format_matmul"), "ops": ("ops", "run_ops", "format_ops"),
            "serve": ("serve", "run_serve", "format_serve"), "batch": ("batch", "run_bulk", "format_bulk"),
            "first-audio": ("first_audio", "run_first_audio", "format_first_audio"),
            "align": ("align", "run_align", "format_align")}
RELEASE_HELP = "released configuration to build (default 0.6B-Base)"
DEVICE_HELP = "cpu (default), auto, or a ggml device name: where the model runs, as qtts.load(device=...)"


def _positive(kind: type, name: str) -> Any:
    def check(v: Any) -> Any:
        if not v > 0:
            raise ValueError(f"{name} must be positive, got {v}")
        return v

    return checked(kind, check)


def _tail(p: argparse.ArgumentParser, quiet: str | None = "no per-configuration progress lines") -> None:
    p.add_argument("--json", help="also write the results as JSON to this file")
    if quiet:
        p.add_argument("-q", "--quiet", action="store_true", help=quiet)
    p.set_defaults(func=run)


def add_parser(sub: Any) -> None:
    b = sub.add_parser("bench", help="speed and memory benchmarks on full-size random-weight models")
    bs = b.add_subparsers(dest="bench_command", required=True)
    m = bs.add_parser("micro", help="weight-free micro-benchmarks: sampling, mel, resampling, PCM packing")
    m.add_argument("--repeat", type=int, default=5, help="timed repetitions per case, the best kept (default 5)")
    m.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    _tail(m, quiet=None)
    for name in ("speed", "memory", "quality"):
        p = bs.add_parser(name, help=f"{name} benchmark (each configuration in a fresh process)")
        p.add_argument("--release", default="0.6B-Base", help=RELEASE_HELP)
        p.add_argument("-m", "--model", help="benchmark this GGUF instead of a random-weight build")
        p.add_argument("--types", nargs="+", default=["q8_0", "q4_k"] if name == "speed" else list(TYPES),
                       choices=TYPES, help="weight types to measure, each in a fresh process (default: "
                                           f"{' '.join(['q8_0', 'q4_k'] if name == 'speed' else TYPES)})")
        if name == "quality":
            p.add_argument("--frames", type=int, default=50, help="greedy frames compared (teacher-forced)")
        if name == "memory":
            add_load_arguments(p, BENCH)
        p.add_argument("-t", "--threads", type=int, default=2, help="CPU threads (default 2)")
        p.add_argument("--seed", type=int, default=0, help="seed of the random weights and inputs (default 0)")
        _tail(p)
        if name == "speed":
            p.add_argument("--frames", type=int, default=100, help="frames generated (EOS masked; 12.5 per second)")
            p.add_argument("--device", default="cpu", help=DEVICE_HELP)
            add_load_arguments(p, BENCH)
            p.add_argument("--compare-reference", action="store_true",
                           help="run the official qwen-tts (fp32) on the same weights in this run")
            p.add_argument("--matmul", choices=["native", "ggml"], default="native",
                           help="quantized weight kernels: the native quantized matmul (default) or ggml's mul_mat")
            p.add_argument("--profile", action="store_true",
                           help="stream once more with per-op timing: ops and overhead per phase (qtts.bench.profile)")
            p.add_argument("--vocoder-threads", type=vocoder_threads_arg, default=None, metavar="N|auto",
                           help="the pipelined run's vocoder threads (0: serial only; default auto: the split "
                                "the serial run's stage times suggest)")
            p.add_argument("--no-huge-pages", action="store_true",
                           help="keep the streamed weights mapped from the file (the model's huge_pages=False)")

    p = bs.add_parser("matmul", help="quantized matmul vs ggml's mul_mat on the 0.6B shapes (weights from memory)")
    p.add_argument("--types", nargs="+", default=["q8_0", "q4_k"], choices=["q8_0", "q4_k", "q6_k"],
                   help="weight types (default: q8_0 q4_k)")
    p.add_argument("-t", "--threads", nargs="+", type=int, default=[1, 2], help="thread counts (default: 1 2)")
    p.add_argument("--columns", nargs="+", type=int, default=[1, 2, 4, 8],
                   help="activation columns M, a batch of M sequences (default: 1 2 4 8)")
    p.add_argument("--repeat", type=int, default=20, help="timed runs per measurement, the median kept (default 20)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random weights and inputs (default 0)")
    p.add_argument("--no-huge-pages", action="store_true",
                   help="weights in 4 KiB pages instead of transparent huge pages (the model's huge_pages=False)")
    _tail(p, quiet=None)

    p = bs.add_parser("ops", help="the audio networks' native vs portable ops, in one process")
    p.add_argument("--release", default="0.6B-Base", help=RELEASE_HELP)
    p.add_argument("-m", "--model", help="benchmark this GGUF instead of a random-weight build")
    p.add_argument("--type", default="q8_0", choices=TYPES, help="weight type of the build (default q8_0)")
    p.add_argument("--frames", type=int, default=50, help="12.5 Hz frames of audio per case (default 50)")
    p.add_argument("--repeat", type=int, default=3, help="timed repetitions per path, the best kept (default 3)")
    p.add_argument("-t", "--threads", type=int, default=2, help="CPU threads (default 2)")
    p.add_argument("--device", default="cpu", help=DEVICE_HELP)
    p.add_argument("--seed", type=int, default=0, help="seed of the random weights and inputs (default 0)")
    _tail(p, quiet="no per-case progress lines")

    p = bs.add_parser("serve", help="the HTTP server under streaming clients: throughput, first audio and "
                                    "underruns per batch size")
    p.add_argument("--release", default="0.6B-Base", help=RELEASE_HELP)
    p.add_argument("-m", "--model", help="benchmark this GGUF instead of a random-weight build")
    p.add_argument("--types", nargs="+", default=["q8_0", "q4_k"], choices=TYPES,
                   help="weight types to measure, each in a fresh process (default: q8_0 q4_k)")
    p.add_argument("--batches", type=parse_batches, default=list(BATCHES), metavar="B[,B...]",
                   help="the server's max batch, one live server each (default: 1,2,4,8; on a GPU e.g. 1,8,32,64)")
    p.add_argument("--clients", type=_positive(int, "clients"), default=8,
                   help="streaming requests per batch size (default 8)")
    p.add_argument("--rate", type=_positive(float, "rate"), default=1.0,
                   help="their mean arrival rate in requests/s, a Poisson process (default 1)")
    p.add_argument("--duration", type=_positive(float, "duration"), default=120.0, metavar="SECONDS",
                   help="bound per batch size: requests due later are not sent, streams still open are closed "
                        "(default 120)")
    p.add_argument("--frames", type=_positive(int, "frames"), default=24,
                   help="frames per request (max_new_tokens; 12.5 per second; default 24)")
    p.add_argument("-t", "--threads", type=int, default=2, help="CPU threads (default 2)")
    p.add_argument("--device", default="cpu", help=DEVICE_HELP)
    add_load_arguments(p, BENCH)
    p.add_argument("--pipelined-vocoder", action=argparse.BooleanOptionalAction, default=None,
                   help="the server's vocoder pipelined with the generation or between steps (default: as "
                        "qtts-cli serve, on off the CPU)")
    p.add_argument("--seed", type=int, default=0,
                   help="seed of the random weights, the arrival times and the requests (default 0)")
    _tail(p)

    p = bs.add_parser("first-audio", help="streamed text's first audio over the WebSocket route and over Wyoming")
    p.add_argument("-m", "--model", required=True, help="a CustomVoice GGUF (its speakers are the voices)")
    p.add_argument("--voice", default="ryan", help="the speaker (default ryan)")
    p.add_argument("--repeat", type=_positive(int, "repeat"), default=10,
                   help="measured sessions per route, after one warm-up (default 10)")
    p.add_argument("--frames", type=_positive(int, "frames"), default=40,
                   help="frames per session (max_new_tokens; default 40)")
    p.add_argument("-t", "--threads", type=int, default=2, help="CPU threads (default 2)")
    p.add_argument("--seed", type=int, default=0, help="the sessions' sampling seed (default 0)")
    _tail(p, quiet=None)

    _add_align(bs)

    p = bs.add_parser("batch", help="bulk synthesis: 1 worker, --jobs 2 and --ray with 2 actors")
    p.add_argument("--release", default="0.6B-Base", help=RELEASE_HELP)
    p.add_argument("--type", default="q4_k", choices=TYPES, help="weight type (default q4_k)")
    p.add_argument("-m", "--model", help="benchmark this GGUF (a base model) instead of a random-weight build")
    p.add_argument("--items", type=int, default=100, help="items of about two sentences (default 100)")
    p.add_argument("--frames", type=int, default=60, help="frames per item (EOS masked; default 60 = 4.8 s)")
    p.add_argument("--max-batch", type=int, default=8, help="items stepped together per worker (default 8)")
    p.add_argument("--streams", type=int, default=0, help="measure the batched streaming vocoder with this many "
                                                          "streams instead (and -t threads; docs/serving.md)")
    p.add_argument("-t", "--threads", type=int, default=2, help="CPU threads of --streams (default 2)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random weights and items (default 0)")
    add_load_arguments(p, BENCH)
    _tail(p)


def _add_align(bs: Any) -> None:
    from ..runtime.settings.options import OPS

    p = bs.add_parser("align", help="word timestamps: the forced aligner's time and memory per clip, against the "
                                    "synthesis of the same audio (each in a fresh process)")
    p.add_argument("-m", "--model", help="benchmark this aligner GGUF instead of a random-weight build")
    p.add_argument("--type", default="q8_0", choices=TYPES, help="weight type of the aligner build (default q8_0)")
    p.add_argument("--tts-model", help="synthesize with this GGUF instead of a random 0.6B-CustomVoice build")
    p.add_argument("--tts-type", default="q4_k", choices=TYPES,
                   help="weight type of the 0.6B-CustomVoice build (default q4_k)")
    p.add_argument("--seconds", nargs="+", type=_positive(float, "seconds"), default=[3.0, 10.0],
                   help="clip lengths, one fresh process each (default: 3 10)")
    p.add_argument("--repeat", type=_positive(int, "repeat"), default=3, help="alignments per clip, the best kept")
    p.add_argument("--ops", default="auto", choices=OPS, help="the aligner's path (default auto: native on the CPU)")
    p.add_argument("-t", "--threads", type=int, default=2, help="CPU threads (default 2)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random weights (default 0)")
    _tail(p)


def run(a: argparse.Namespace) -> int:
    module, runner, fmt = COMMANDS[a.bench_command]
    bench = importlib.import_module(f"qtts.bench.{module}")
    r = getattr(bench, runner)(a)
    print(getattr(bench, fmt)(r))
    if a.json:
        Path(a.json).write_text(json.dumps(r, indent=2) + "\n")
    return 0
