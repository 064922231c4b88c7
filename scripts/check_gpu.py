#!/usr/bin/env python3
"""The GPU check (docs/gpu.md): build ggml with CUDA and qtts against it, then hold the GPU path
to the reference on the tiny checkpoints and measure it on full-size random weights, in one run
that writes one JSON and one table.

On a machine with a package registry, once:

    python scripts/check_gpu.py download WHEELS      # the pinned ggml sdist and the wheels below

On the GPU machine (needs no registry; about 8 minutes on 16 cores):

    python scripts/check_gpu.py run --wheels WHEELS --out OUT

`run` builds libggml-python from its sdist with CUDA for this GPU's architecture (CUDA graphs
on) and qtts against it in a virtual environment that sees the system's packages, builds the
tiny checkpoints with the reference's own classes and its goldens there (torch must be
installed; the reference's pinned packages come from WHEELS), checks parity in the exact
precision and measures the fast one, times full-size random models on the GPU and on the CPU of
the same machine, and the official package on the same GPU. Each phase runs in its own process
under one time budget; what did not fit is said in the results. `--device cpu --no-build` runs
the same checks on this machine's CPU with the environment at hand (the CI test of this script).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
GGML = "libggml-python==0.20.2.post1"
# Wheels the GPU machine lacks (checked against its image): qtts's own run-time needs, and the
# reference's pinned stack, which goes into a folder of its own so it shadows nothing of qtts's.
RUNTIME_WHEELS = ["gguf>=0.17", "soundfile>=0.12", "cffi", "pycparser", "soxr>=0.3"]
# The server and its clients for `bench serve` (the GPU image has httpx, anyio and h11)
SERVER_WHEELS = ["fastapi==0.165.0", "starlette==1.10.0", "pydantic==2.14.4", "pydantic-core==2.50.5",
                 "annotated-types==0.8.0", "typing-inspection==0.4.5", "opentelemetry-api==1.45.2", "uvicorn==0.54.0",
                 "python-multipart==0.0.34",
                 "websockets==15.0.1", "openai==3.57.0", "distro", "jiter==0.19.0", "sniffio==1.3.1"]
BUILD_WHEELS = ["scikit-build-core~=1.0.0", "setuptools-scm~=10.2", "vcs-versioning", "packaging>=26.2"]
REFERENCE_WHEELS = ["qwen-tts==0.1.1", "transformers==4.57.3", "huggingface_hub<1.0", "tokenizers~=0.22.0",
                    "accelerate==1.12.0", "librosa", "audioread", "decorator", "pooch", "platformdirs",
                    "soxr>=0.3", "soundfile>=0.12", "cffi", "pycparser"]


# -- download ---------------------------------------------------------------------------------
def download(dest: Path, python_version: str) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    pip = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(dest)]
    subprocess.run([*pip, "--no-binary", "libggml-python", GGML], check=True)
    tags = ["--only-binary=:all:", "--python-version", python_version, "--implementation", "cp"]
    for p in ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64"):
        tags += ["--platform", p]
    for spec in dict.fromkeys(RUNTIME_WHEELS + SERVER_WHEELS + BUILD_WHEELS + REFERENCE_WHEELS):
        subprocess.run([*pip, *tags, spec], check=True)
    print(f"{len(list(dest.iterdir()))} files in {dest}")


# -- build ------------------------------------------------------------------------------------
def _gpu_arch() -> str:
    out = subprocess.run(["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"], capture_output=True,
                         text=True, check=True).stdout.split()[0]
    return out.replace(".", "")


def _wheel(wheels: Path, prefix: str) -> list[str]:
    return [str(p) for p in sorted(wheels.glob(f"{prefix}-*.whl"))]


def build(wheels: Path, work: Path, log: Path, cuda_build: bool = True) -> tuple[str, str]:
    """ggml (CUDA) and qtts built into a folder of their own on top of this interpreter's
    packages (a venv would not see them when this interpreter is itself a venv's), the build
    back end's pinned versions in another, the reference's wheels in a third. Returns (site
    folder, reference site folder)."""
    site, build_site, ref_site = work / "site", work / "build-site", work / "reference-site"
    env = dict(os.environ)
    cuda = Path("/usr/local/cuda/bin")
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), str(cuda), env["PATH"]])
    if (cuda / "nvcc").exists():
        env["CUDACXX"] = str(cuda / "nvcc")
    env["CMAKE_BUILD_PARALLEL_LEVEL"] = str(os.cpu_count() or 4)
    env["PYTHONPATH"] = os.pathsep.join([str(site), str(build_site)])
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--find-links", str(wheels), "--no-cache-dir",
           "--no-deps"]

    def wheels_of(*names: str) -> list[str]:
        return [w for n in names for w in _wheel(wheels, n)]

    with log.open("a") as f:
        def sh(cmd: list[str]) -> None:
            f.write("$ " + " ".join(cmd) + "\n")
            f.flush()
            subprocess.run(cmd, check=True, stdout=f, stderr=subprocess.STDOUT, env=env)

        sh([*pip, "--target", str(build_site), *wheels_of("scikit_build_core", "setuptools_scm", "vcs_versioning",
                                                           "packaging")])
        sh([*pip, "--target", str(site), *wheels_of("gguf", "soundfile", "soxr", "cffi", "pycparser")])
        server = wheels_of(*(w.split("=")[0].replace("-", "_") for w in SERVER_WHEELS))
        if server:  # where the wheels were downloaded with them
            sh([*pip, "--target", str(site), *server])
        # the documented GPU install (docs/gpu.md), offline: ggml's sdist with CUDA for this GPU
        cuda_flags = ["-C", "cmake.define.GGML_CUDA=ON", "-C", f"cmake.define.CMAKE_CUDA_ARCHITECTURES={_gpu_arch()}",
                      "-C", "cmake.define.GGML_CUDA_GRAPHS=ON", "-C", "cmake.define.GGML_CUDA_FA=OFF",
                      "-C", "cmake.define.GGML_CUDA_NCCL=OFF"] if cuda_build else []
        sh([*pip, "--target", str(site), "--no-build-isolation", "--no-binary", "libggml-python", GGML, *cuda_flags])
        sh([*pip, "--target", str(site), "--no-build-isolation", str(REPO)])
        ref = wheels_of("qwen_tts", "transformers", "huggingface_hub", "tokenizers", "accelerate", "librosa",
                        "audioread", "decorator", "pooch", "platformdirs")
        if ref:  # absent where the goldens travel with the run (run --goldens)
            sh([*pip, "--target", str(ref_site), *ref])
    return str(site), str(ref_site)


# -- the run --------------------------------------------------------------------------------------
class Runner:
    def __init__(self, out: Path, work: Path, budget_s: float, phases: set[str] | None) -> None:
        self.out, self.t0, self.budget, self.only = out, time.monotonic(), budget_s, phases
        self.work = work / "phases"  # each phase's own JSON (OUT keeps the few files it returns)
        self.work.mkdir(parents=True, exist_ok=True)
        self.site: str | None = None
        self.ref_site: str | None = None
        self.results: dict[str, Any] = {"started": time.strftime("%Y-%m-%d %H:%M:%S"), "host": platform.node(),
                                        "phases": {}}

    def left(self) -> float:
        return self.budget - (time.monotonic() - self.t0)

    def save(self) -> None:
        (self.out / "check_gpu.json").write_text(json.dumps(self.results, indent=1, default=str))

    def phase(self, name: str, args: list[str], need_s: float, reference: bool = False,
              env: dict[str, str] | None = None) -> Any:
        if self.only is not None and name not in self.only:
            return None
        if self.left() < need_s:
            self.results["phases"][name] = {"skipped": f"{self.left():.0f} s left, {need_s:.0f} s needed"}
            self.save()
            return None
        e = dict(os.environ, **(env or {}))
        e["PYTHONPATH"] = os.pathsep.join(p for p in [self.ref_site if reference else None, self.site, str(REPO),
                                                      e.get("PYTHONPATH")] if p)
        res = self.work / f"{name}.json"
        res.unlink(missing_ok=True)  # a failed phase must not show an earlier run's result
        t = time.monotonic()
        with (self.out / "logs.txt").open("a") as log:
            log.write(f"== {name}\n")
            log.flush()
            try:
                p = subprocess.run([sys.executable, str(Path(__file__).resolve()), *args, "--json", str(res)],
                                   stdout=log, stderr=subprocess.STDOUT, env=e, timeout=max(self.left() - 5, 10))
                rc = p.returncode
            except subprocess.TimeoutExpired:
                rc = "timeout"
        got = json.loads(res.read_text()) if res.exists() else None
        self.results["phases"][name] = {"rc": rc, "seconds": round(time.monotonic() - t, 1), "result": got}
        self.save()
        return got


def _gpu_name() -> str:
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=20).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "none"


def run(a: argparse.Namespace) -> int:
    out = Path(a.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    work = Path(a.work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    r = Runner(out, work, a.budget_s, set(a.phases.split(",")) if a.phases else None)
    r.results.update(gpu=_gpu_name(), cpus=os.cpu_count(), device=a.device)
    if not a.no_build:
        t = time.monotonic()
        try:
            r.site, r.ref_site = build(Path(a.wheels).resolve(), work, out / "build.log", not a.no_cuda_build)
            r.results["build"] = {"seconds": round(time.monotonic() - t, 1), "ok": True}
        except (subprocess.CalledProcessError, OSError) as e:  # a failed step, or no nvidia-smi / nvcc
            r.results["build"] = {"seconds": round(time.monotonic() - t, 1), "ok": False, "error": str(e)}
            r.save()
            print(f"check_gpu: the build failed ({out / 'build.log'}): {e}", file=sys.stderr)
            return 1
        r.save()
    info = r.phase("info", ["info"], 10)
    r.results["qtts"] = info
    if a.goldens:  # made by `goldens` on another machine's CPU: the tiny models and the reference's outputs
        gold = Path(a.goldens).resolve()
    else:
        gold = work / "goldens"
        r.phase("goldens", ["goldens", str(gold)], 60, reference=True)
    threads = min(os.cpu_count() or 1, 16)
    for prec in ("exact", "fast"):
        r.phase(f"parity_{prec}", ["parity", str(gold), "--device", a.device, "--precision", prec, "--ops", a.ops,
                                   "--sampling", a.sampling], 30)
    r.phase("batch_parity_exact", ["batch_parity", str(gold), "--device", a.device, "--precision", "exact"], 20)
    r.phase("ops", ["ops", str(gold), "--device", a.device], 20)
    fr = str(a.frames)
    if a.device != "cpu":
        # serving at scale first (docs/serving.md): the batched eager path, the vocoder's pushes,
        # the server under 10 requests/s, where a stream's first audio goes
        r.phase("batch_0.6B_bf16", ["batch", "0.6B-Base", "bf16", "--device", a.device, "--frames", fr,
                                    "--batches", "1,8,32,64"], 30)
        r.phase("vocoder_0.6B_bf16", ["vocoder", "0.6B-Base", "bf16", "--device", a.device], 20)
        r.phase("batch_ops_0.6B_bf16", ["batch_ops", "0.6B-Base", "bf16", "--device", a.device], 15)
        r.phase("serve_0.6B_bf16", ["serve", "0.6B-Base", "bf16", "--device", a.device, "--frames", fr,
                                    "--batches", "64", "--clients", "60", "--rate", "10", "--duration", "12"], 25)
        r.phase("serve_0.6B_bf16_vocoder_between_steps",
                ["serve", "0.6B-Base", "bf16", "--device", a.device, "--frames", fr, "--batches", "64", "--clients",
                 "60", "--rate", "10", "--duration", "12", "--vocoder", "between-steps"], 25)
        r.phase("first_audio_0.6B_bf16", ["first_audio", "0.6B-Base", "bf16", "--device", a.device], 10)
    if a.device != "cpu" and not _passed(r.results, "parity_exact"):
        # where a difference comes from: the sampling in the frame graph, CUDA-graph capture, or
        # ggml-cuda's op fusion
        exact = ["parity", str(gold), "--device", a.device, "--precision", "exact", "--ops", a.ops]
        r.phase("parity_exact_host_sampling", [*exact, "--sampling", "host"], 20)
        r.phase("parity_exact_no_cuda_graphs", exact, 20, env={"GGML_CUDA_DISABLE_GRAPHS": "1"})
        r.phase("parity_exact_no_fusion", exact, 20, env={"GGML_CUDA_DISABLE_FUSION": "1"})
    r.phase("speed_0.6B_bf16", ["speed", "0.6B-Base", "bf16", "--device", a.device, "-t", "4", "--frames", fr], 90)
    if a.device != "cpu":
        r.phase("speed_0.6B_bf16_exact", ["speed", "0.6B-Base", "bf16", "--device", a.device, "-t", "4",
                                          "--frames", fr, "--precision", "exact"], 45)
        r.phase("speed_1.7B_bf16", ["speed", "1.7B-Base", "bf16", "--device", a.device, "-t", "4", "--frames", fr],
                150)
        r.phase("official_0.6B_bf16", ["official", "0.6B-Base", "--frames", fr], 100, reference=True)
        r.phase("speed_0.6B_q8_0_cpu", ["speed", "0.6B-Base", "q8_0", "--device", "cpu", "-t", str(threads),
                                        "--frames", fr], 90)
        r.phase("speed_0.6B_bf16_no_cuda_graphs", ["speed", "0.6B-Base", "bf16", "--device", a.device, "-t", "4",
                                                   "--frames", fr], 45, env={"GGML_CUDA_DISABLE_GRAPHS": "1"})
    r.results["finished_s"] = round(time.monotonic() - r.t0, 1)
    r.save()
    table = format_table(r.results)
    (out / "check_gpu.md").write_text(table)
    print(table)
    return 0 if all(_passed(r.results, p) for p in ("parity_exact", "parity_fast")) else 1


def _passed(res: dict[str, Any], phase: str) -> bool:
    got = (res["phases"].get(phase) or {}).get("result") or {}
    return bool(got.get("passed"))


def _phases(prof: dict[str, dict[str, float]]) -> str:
    return ", ".join(f"{k} {v.get('compute', 0):.0f} ms / {v.get('graphs', 0):.0f}" for k, v in prof.items())


def format_table(res: dict[str, Any]) -> str:
    ph = res["phases"]
    lines = [f"# GPU check {res['started']}: {res.get('gpu')}, {res.get('cpus')} CPUs", ""]
    if "build" in res:
        lines.append(f"build: {res['build']}")
    for prec in [n[len("parity_"):] for n in ph if n.startswith("parity_")]:
        got = (ph.get(f"parity_{prec}") or {}).get("result")
        if not got:
            lines.append(f"parity {prec}: {ph.get(f'parity_{prec}')}")
            continue
        lines += ["", f"## Parity, precision {prec} ({got['resolved_precision']}, {got['devices']}): "
                      f"{'PASSED' if got['passed'] else 'FAILED'}; encoder codes equal: {got['encoder_codes_equal']}",
                  "", "| case | codes equal | first diff frame | wav max abs | prefill hidden cos / max abs "
                      "| TF logits cos min | TF logits max abs | codec SNR dB |", "|---|---|---|---|---|---|---|---|"]
        for c in got["cases"]:
            req = ", ".join(f"{k}={v}" for k, v in c["request"].items())
            wav = "" if c["wav_max_abs"] is None else f"{c['wav_max_abs']:.2e}"
            at = "" if c["first_differing_frame"] is None else (f"{c['first_differing_frame']} "
                                                                f"(group {c['first_differing_group']})")
            lines.append(f"| {c['model']} ({req}) | {c['codes_equal']} | {at} | {wav} | "
                         f"{c['prefill_hidden_cosine']:.7f} / {c['prefill_hidden_max_abs']:.1e} | "
                         f"{c['logits_cosine_min']:.7f} | {c['logits_max_abs']:.2e} | {c['codec_snr_db']:.1f} |")
        if got.get("sampled"):
            sm = got["sampled"]
            lines += ["", f"Seeded sampling (top-k, {sm['frames']} frames): codes equal to the CPU's "
                          f"{sm['codes_equal']}; scheduler splits per graph {sm['splits_per_graph']}"]
    lines += ["", "## Speed (100 frames unless said; ms per frame)", "",
              "| run | devices | gen | talker | predictor | vocoder | first audio ms | RTF |",
              "|---|---|---|---|---|---|---|---|"]
    for name, p in ph.items():
        got = (p or {}).get("result")
        if not name.startswith(("speed", "official")):
            continue
        if not got:
            lines.append(f"| {name} | {p} | | | | | | |")
        elif name.startswith("official"):
            lines.append(f"| {name} | {got['device']} torch {got['torch']} | {got['generation_ms_per_frame']:.2f} "
                         f"| | | | | |")
        else:
            dev = ", ".join(sorted(set(got.get("devices", {}).values())))
            lines.append(f"| {name} | {dev} {got.get('precision')} | {got['generation_ms_per_frame']:.2f} | "
                         f"{got['talker_ms_per_frame']:.2f} | {got['predictor_ms_per_frame']:.2f} | "
                         f"{got['vocoder_ms_per_frame']:.2f} | {got['time_to_first_audio_ms']:.0f} | "
                         f"{got['rtf']:.3f} |")
    got = (ph.get("batch_parity_exact") or {}).get("result")
    if got:
        lines += ["", f"## Batched against alone, precision {got['precision']}: "
                      f"{'PASSED' if got['passed'] else 'FAILED'}", ""]
        for mm in got["models"]:
            reqs = "; ".join(f"{x['frames']} frames: codes equal {x['codes_equal']}, wav max abs "
                             f"{'-' if x['wav_max_abs'] is None else format(x['wav_max_abs'], '.1e')}"
                             for x in mm["requests"])
            lines.append(f"* {mm['model']} ({', '.join(sorted(set(mm['devices'].values())))}): {reqs}")
    for name in ("serve_0.6B_bf16", "serve_0.6B_bf16_vocoder_between_steps"):
        got = (ph.get(name) or {}).get("result")
        if not got:
            continue
        keys = ("audio_s_per_s", "ms_per_frame", "first_audio_p50_ms", "first_audio_p95_ms", "underruns",
                "completed", "requests")
        voc = "pipelined" if got.get("pipelined_vocoder") else "between steps"
        lines += ["", f"## bench serve ({got['device']}, {got.get('device_description', '')}, vocoder {voc})", "",
                  "| B | " + " | ".join(keys) + " | phases |", "|---|" + "---|" * (len(keys) + 1)]
        lines += [f"| {b} | " + " | ".join("-" if row.get(k) is None else f"{row[k]:.4g}" for k in keys) +
                  f" | {_phases(row.get('profile', {}))} |" for b, row in got["batches"].items()]
    got = (ph.get("first_audio_0.6B_bf16") or {}).get("result")
    if got:
        med = got["median"]
        lines += ["", "## First audio, 0.6B bf16 (median of the runs, ms)", "",
                  "| " + " | ".join(med) + " |", "|" + "---|" * len(med),
                  "| " + " | ".join(f"{v:.1f}" for v in med.values()) + " |"]
    got = (ph.get("batch_0.6B_bf16") or {}).get("result")
    if got:
        lines += ["", f"## Batching (synthesize_batch, {got['frames']} frames each; phases: compute ms, graphs)", "",
                  "| B | wall s | audio s | x real time | ms per step | phases |", "|---|---|---|---|---|---|"]
        lines += [f"| {w['batch']} | {w['wall_s']:.2f} | {w['audio_s']:.1f} | {w['x_real_time']:.1f} | "
                  f"{w['ms_per_step']:.2f} | {_phases(w.get('profile', {}))} |" for w in got["rows"]]
    got = (ph.get("batch_ops_0.6B_bf16") or {}).get("result")
    if got:
        lines += ["", f"## Per op, synthesize_batch of {got['batch']} x {got['frames']} frames (ms, node by node)", ""]
        lines += [f"* {ph}: " + ", ".join(f"{op} {ms:.1f}" for op, ms in ops.items())
                  for ph, ops in got["phases"].items()]
    got = (ph.get("vocoder_0.6B_bf16") or {}).get("result")
    if got:
        lines += ["", "## Vocoder pushes (median ms; graphs, computed nodes, build / alloc / compute ms)", "",
                  "| streams x frames | ms | graphs | nodes | build | alloc | compute |", "|" + "---|" * 7]
        rows = [(f"{x['streams']} x {x['frames']}", x) for x in got["pushes"]]
        e = got["eager"]
        rows += [(f"eager {e['pieces']} x {e['frames']}, {k}", e[k]) for k in ("together", "each_alone")]
        for name, x in rows:
            pl = x["plumbing"]
            lines.append(f"| {name} | {x['ms']:.1f} | {pl.get('graphs', 0):.0f} | {pl.get('nodes', 0):.0f} | "
                         f"{pl.get('build', 0):.1f} | {pl.get('alloc', 0):.1f} | {pl.get('compute', 0):.1f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("download", help="fetch the ggml sdist and the wheels a GPU machine lacks")
    d.add_argument("dest")
    d.add_argument("--python-version", default="3.12")
    r = sub.add_parser("run", help="build, check and measure (the whole GPU check)")
    r.add_argument("--wheels", default="wheels")
    r.add_argument("--out", default="gpu-check")
    r.add_argument("--work", default="/tmp/qtts-gpu-check")
    r.add_argument("--device", default="auto")
    r.add_argument("--ops", default="auto", help="the parity models' path (portable: what a GPU runs)")
    r.add_argument("--sampling", choices=["default", "host", "device"], default="default",
                   help="where the parity models' code predictor samples (device: what a GPU does)")
    r.add_argument("--no-build", action="store_true", help="use this environment's qtts (no CUDA build)")
    r.add_argument("--no-cuda-build", action="store_true", help="build ggml for the CPU only (tries the build here)")
    r.add_argument("--frames", type=int, default=100)
    r.add_argument("--goldens", help="a folder `goldens` wrote (the reference then need not be installed here)")
    r.add_argument("--budget-s", type=float, default=560.0)
    r.add_argument("--phases", help="run only these phases (comma-separated names as in the JSON)")
    for name in ("info", "goldens", "parity", "batch_parity", "speed", "batch", "serve", "first_audio", "official",
                 "vocoder", "batch_ops", "ops"):
        p = sub.add_parser(name, help=argparse.SUPPRESS)
        p.add_argument("--json", required=True)
        if name in ("goldens", "parity", "batch_parity", "ops"):
            p.add_argument("dir")
        if name == "ops":
            p.add_argument("--device", default="cpu")
        if name == "batch_parity":
            p.add_argument("--device", default="auto")
            p.add_argument("--precision", default="exact")
        if name == "parity":
            p.add_argument("--device", default="auto")
            p.add_argument("--precision", default="exact")
            p.add_argument("--ops", default="auto")
            p.add_argument("--sampling", choices=["default", "host", "device"], default="default",
                           help="where the code predictor samples: the host sampler, or in its frame graph "
                                "(default: the device's choice, in the graph off the CPU)")
            p.add_argument("--only", help="the cases of this tiny model only")
        if name in ("speed", "batch", "serve", "first_audio", "official"):
            p.add_argument("release")
            p.add_argument("--frames", type=int, default=100)
        if name in ("vocoder", "batch_ops"):
            p.add_argument("release")
        if name in ("speed", "batch", "serve", "first_audio", "vocoder", "batch_ops"):
            p.add_argument("type")
            p.add_argument("--device", default="auto")
        if name in ("batch", "serve"):
            p.add_argument("--batches", default="1,8,32,64")
        if name == "batch_ops":
            p.add_argument("--batch", type=int, default=64)
            p.add_argument("--frames", type=int, default=8)
        if name == "serve":
            p.add_argument("--vocoder", choices=["auto", "pipelined", "between-steps"], default="auto")
            p.add_argument("--clients", type=int, default=40)
            p.add_argument("--rate", type=float, default=10.0)
            p.add_argument("--duration", type=float, default=8.0)
        if name == "first_audio":
            p.add_argument("--runs", type=int, default=5)
        if name == "speed":
            p.add_argument("--precision", default="auto")
            p.add_argument("-t", "--threads", type=int, default=4)
    a = ap.parse_args(argv)
    if a.cmd == "download":
        download(Path(a.dest), a.python_version)
        return 0
    if a.cmd == "run":
        return run(a)
    import gpu_checks as gc  # beside this script

    if a.cmd == "info":
        import qtts
        from qtts.runtime.engine.engine import build_info

        got: dict[str, Any] = {"qtts": qtts.__file__, **build_info()}
    elif a.cmd == "goldens":
        got = gc.goldens(Path(a.dir))
    elif a.cmd == "parity":
        got = gc.parity(Path(a.dir), a.device, a.precision, a.ops, a.sampling, a.only)
    elif a.cmd == "speed":
        got = gc.speed(a.release, a.type, a.device, a.threads, a.frames, a.precision)
    elif a.cmd == "batch":
        got = gc.batching(a.release, a.type, a.device, a.frames, [int(b) for b in a.batches.split(",")])
    elif a.cmd == "ops":
        got = gc.op_census(Path(a.dir), a.device)
    elif a.cmd == "batch_parity":
        got = gc.batch_parity(Path(a.dir), a.device, a.precision)
    elif a.cmd == "serve":
        got = gc.serve(a.release, a.type, a.device, a.frames, a.clients, a.rate, a.duration,
                       [int(b) for b in a.batches.split(",")],
                       {"auto": None, "pipelined": True, "between-steps": False}[a.vocoder])
    elif a.cmd == "first_audio":
        got = gc.first_audio(a.release, a.type, a.device, a.runs)
    elif a.cmd == "vocoder":
        got = gc.vocoder_pushes(a.release, a.type, a.device)
    elif a.cmd == "batch_ops":
        got = gc.batch_ops(a.release, a.type, a.device, a.batch, a.frames)
    else:
        got = gc.official(a.release, a.frames)
    Path(a.json).write_text(json.dumps(got, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
