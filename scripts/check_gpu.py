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
BUILD_WHEELS = ["scikit-build-core~=1.0.0", "setuptools-scm~=10.2", "vcs-versioning", "packaging>=26.2"]
REFERENCE_WHEELS = ["qwen-tts==0.1.1", "transformers==4.57.3", "huggingface_hub<1.0", "tokenizers~=0.22.0",
                    "accelerate==1.12.0", "librosa", "audioread", "decorator", "pooch", "platformdirs",
                    "soxr>=0.3", "soundfile>=0.12", "cffi", "pycparser"]
TEXT = "Hello world, this is a tiny test."
REF_TEXT = "The quick brown fox jumps."
GREEDY = dict(do_sample=False, subtalker_dosample=False, max_new_tokens=21)
# (tiny model, request) for the greedy parity cases: every variant and both clone modes
CASES = [
    ("tiny_custom_voice", dict(speaker="ryan", language="english")),
    ("tiny_custom_voice", dict(speaker="vivian", language="chinese", instruct="Speak happily.")),
    ("tiny_voice_design", dict(instruct="A warm, calm voice.", language="auto")),
    ("tiny_base", dict(x_vector_only_mode=True, language="english")),
    ("tiny_base", dict(x_vector_only_mode=False, language="english")),
]
# Floors of the fast precision's agreement with the reference (exact must match outright).
FAST_FLOORS = {"logits_cosine": 0.999, "codec_snr_db": 25.0}


# -- download ---------------------------------------------------------------------------------
def download(dest: Path, python_version: str) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    pip = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(dest)]
    subprocess.run([*pip, "--no-binary", "libggml-python", GGML], check=True)
    tags = ["--only-binary=:all:", "--python-version", python_version, "--implementation", "cp"]
    for p in ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64"):
        tags += ["--platform", p]
    for spec in dict.fromkeys(RUNTIME_WHEELS + BUILD_WHEELS + REFERENCE_WHEELS):
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
        # the documented GPU install (docs/gpu.md), offline: ggml's sdist with CUDA for this GPU
        cuda_flags = ["-C", "cmake.define.GGML_CUDA=ON", "-C", f"cmake.define.CMAKE_CUDA_ARCHITECTURES={_gpu_arch()}",
                      "-C", "cmake.define.GGML_CUDA_GRAPHS=ON", "-C", "cmake.define.GGML_CUDA_FA=OFF",
                      "-C", "cmake.define.GGML_CUDA_NCCL=OFF"] if cuda_build else []
        sh([*pip, "--target", str(site), "--no-build-isolation", "--no-binary", "libggml-python", GGML, *cuda_flags])
        sh([*pip, "--target", str(site), "--no-build-isolation", str(REPO)])
        sh([*pip, "--target", str(ref_site), *wheels_of("qwen_tts", "transformers", "huggingface_hub", "tokenizers",
                                                         "accelerate", "librosa", "audioread", "decorator", "pooch",
                                                         "platformdirs")])
    return str(site), str(ref_site)


# -- goldens (the reference on the CPU) ---------------------------------------------------------
def _clip(n: int, seed: int):
    import numpy as np

    rng = np.random.default_rng(seed)
    t = np.arange(n) / 24000
    return (0.3 * np.sin(2 * np.pi * (140 + 60 * t) * t) + 0.05 * rng.standard_normal(n)).astype(np.float32)


def goldens(out: Path) -> dict[str, Any]:
    """Tiny checkpoints built by the test suite's fixtures, converted at F32, and the reference's
    greedy codes and waveforms for CASES, its encoder codes and talker prefill logits."""
    import numpy as np
    import torch

    from qtts._reference import install

    install()  # placeholders for the reference's optional audio imports, before qwen_tts
    sys.path.insert(0, str(REPO))
    from qwen_tts import Qwen3TTSModel

    from qtts.convert.checkpoint import convert
    from tests.fixtures.build import ensure_fixtures

    root = ensure_fixtures()
    out.mkdir(parents=True, exist_ok=True)
    refs: dict[str, Any] = {}
    for name in sorted({n for n, _ in CASES}):
        convert(root / name, out / f"{name}-f32.gguf", "f32")
        refs[name] = Qwen3TTSModel.from_pretrained(str(root / name), dtype=torch.float32, device_map="cpu")
    arrays: dict[str, np.ndarray] = {}
    wav = _clip(24000 * 2 + 500, 11)
    arrays["clip"] = wav
    for i, (name, req) in enumerate(CASES):
        ref, codes = refs[name], {}
        decode = ref.model.speech_tokenizer.decode

        def keep(items, codes=codes, decode=decode):
            codes["codes"] = items[0]["audio_codes"].numpy().copy()
            got = decode(items)
            codes["decoded"] = np.asarray(got[0][0], np.float32)
            return got

        ref.model.speech_tokenizer.decode = keep
        with torch.no_grad():
            if name == "tiny_custom_voice":
                wavs, _ = ref.generate_custom_voice(text=TEXT, **req, **GREEDY)
            elif name == "tiny_voice_design":
                wavs, _ = ref.generate_voice_design(text=TEXT, **req, **GREEDY)
            else:
                rt = None if req["x_vector_only_mode"] else REF_TEXT
                wavs, _ = ref.generate_voice_clone(TEXT, language=req["language"], ref_audio=(wav, 24000), ref_text=rt,
                                                   x_vector_only_mode=req["x_vector_only_mode"], **GREEDY)
        del ref.model.speech_tokenizer.decode
        # an in-context clone decodes the reference clip's frames before the new ones, then cuts
        n_ref = 0
        if name == "tiny_base" and not req["x_vector_only_mode"]:
            n_ref = len(ref.create_voice_clone_prompt(ref_audio=(wav, 24000), ref_text=REF_TEXT)[0].ref_code)
        arrays[f"case{i}.codes"] = codes["codes"][n_ref:]
        arrays[f"case{i}.decoded_codes"] = codes["codes"]
        arrays[f"case{i}.decoded"] = codes["decoded"]
        arrays[f"case{i}.wav"] = np.asarray(wavs[0], np.float32)
    enc = _clip(24000 * 5 + 17, 5)
    arrays["encode.clip"] = enc
    with torch.no_grad():
        arrays["encode.codes"] = refs["tiny_base"].model.speech_tokenizer.encode(enc, sr=24000).audio_codes[0].numpy()
    np.savez(out / "goldens.npz", **arrays)
    return {"models": sorted(refs), "cases": len(CASES), "torch": torch.__version__}


# -- parity -------------------------------------------------------------------------------------
def _cos(a, b) -> float:
    import numpy as np

    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-30))


def _snr_db(got, want) -> float:
    import numpy as np

    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    n = min(len(got), len(want))
    err = np.sum((got[:n] - want[:n]) ** 2)
    return float("inf") if err == 0 else float(10 * np.log10(np.sum(want[:n] ** 2) / err))


def _request(name: str, req: dict, m: Any, wav: Any) -> dict[str, Any]:
    if name == "tiny_base":
        rt = None if req["x_vector_only_mode"] else REF_TEXT
        voice = m.create_voice((wav, 24000), rt, x_vector_only_mode=req["x_vector_only_mode"])
        return dict(voice=voice, language=req["language"])
    return dict(req)


def _teacher_forced(m: Any, req: dict, codes: Any) -> list[Any]:
    """The talker's prefill hidden state and logits, then its logits at each frame of `codes` fed
    back (not its own choices)."""
    from qtts.runtime.prompt import build_prompt, resolve_voice

    voice = resolve_voice(m, language=req.get("language", "auto"), speaker=req.get("speaker"),
                          instruct=req.get("instruct"), voice=req.get("voice"))
    out = []
    with m.engine.session() as s:
        p = build_prompt(m, s, TEXT, voice, non_streaming_mode=False)
        n = len(p.embeddings)
        out += list(s.talker_prefill(p.embeddings, n_ctx=n + len(codes)))
        for i, frame in enumerate(codes):
            text = p.trailing[min(i, len(p.trailing) - 1)][None]
            logits, _ = s.talker_step([int(c) for c in frame], text, n + i)
            out.append(logits)
    return out


def parity(gold: Path, device: str, precision: str, ops: str = "auto", sampling: str = "default") -> dict[str, Any]:
    """Every case on `device` against the reference's goldens, and the same stages on the CPU's
    portable path (the reference for every device graph) to locate a difference."""
    import numpy as np

    import qtts

    g = dict(np.load(gold / "goldens.npz"))
    wav = g["clip"]
    r: dict[str, Any] = {"device": device, "precision": precision, "cases": []}
    models: dict[str, Any] = {}
    for i, (name, req) in enumerate(CASES):
        if name not in models:
            path = gold / f"{name}-f32.gguf"
            models[name] = (qtts.Model(path, device=device, precision=precision, ops=ops, n_threads=4,
                                       voice_cache=False),
                            qtts.Model(path, device="cpu", ops="portable", n_threads=4, voice_cache=False))
        m, cpu = models[name]
        if sampling != "default":
            with m.engine.session() as s:
                s.native.device_sampling = sampling == "device"
        r["devices"], r["resolved_precision"] = m.devices, m.precision
        kw = _request(name, req, m, wav)
        audio = m.synthesize(TEXT, **kw, **GREEDY)
        want_codes, want_wav = g[f"case{i}.codes"], g[f"case{i}.wav"]
        same = audio.codes.shape == want_codes.shape and bool((audio.codes == want_codes).all())
        diff = audio.codes != want_codes[:len(audio.codes)] if audio.codes.shape == want_codes.shape else None
        first = None if same or diff is None else int(np.argmax(diff.any(axis=1)))
        group = None if first is None else int(np.argmax(diff[first]))
        n = min(len(audio.samples), len(want_wav))
        case = {"model": name, "request": {k: v for k, v in req.items()}, "codes_equal": same,
                "first_differing_frame": first, "first_differing_group": group,
                "wav_max_abs": float(np.abs(audio.samples[:n] - want_wav[:n]).max()) if same else None,
                "wav_len_equal": len(audio.samples) == len(want_wav)}
        # teacher-forced: the talker's logits over the reference's frames, device against CPU
        got = _teacher_forced(m, kw, want_codes)
        ref = _teacher_forced(cpu, kw, want_codes)
        case["prefill_logits_cosine"], case["prefill_hidden_cosine"] = _cos(got[0], ref[0]), _cos(got[1], ref[1])
        case["prefill_hidden_max_abs"] = float(np.abs(got[1] - ref[1]).max())
        got, ref = got[2:], ref[2:]
        case["logits_cosine_min"] = min(_cos(a, b) for a, b in zip(got, ref, strict=True))
        case["logits_max_abs"] = max(float(np.abs(a - b).max()) for a, b in zip(got, ref, strict=True))
        # the codec decoder alone on the codes the reference decoded, against its decode
        with m.engine.session() as s:
            dec = s.decode(g[f"case{i}.decoded_codes"])
        want_dec = g[f"case{i}.decoded"]
        case["codec_snr_db"] = _snr_db(dec, want_dec)
        case["codec_max_abs"] = float(np.abs(dec - want_dec).max()) if dec.shape == want_dec.shape else None
        r["cases"].append(case)
    m = models["tiny_base"][0]
    with m.engine.session() as s:
        enc = s.encode(g["encode.clip"])
    r["encoder_codes_equal"] = enc.shape == g["encode.codes"].shape and bool((enc == g["encode.codes"]).all())
    r["tf32_override"] = os.environ.get("NVIDIA_TF32_OVERRIDE")
    cases = r["cases"]
    if precision == "exact":
        r["passed"] = (r["encoder_codes_equal"] and all(c["codes_equal"] and c["wav_len_equal"]
                                                        and c["wav_max_abs"] <= 1e-4 for c in cases))
    else:
        r["floors"] = FAST_FLOORS
        r["passed"] = all(c["logits_cosine_min"] >= FAST_FLOORS["logits_cosine"]
                          and c["codec_snr_db"] >= FAST_FLOORS["codec_snr_db"] for c in cases)
    return r


# -- speed --------------------------------------------------------------------------------------
def speed(release: str, qtype: str, device: str, threads: int, frames: int, precision: str) -> dict[str, Any]:
    from qtts.bench.common import prepare
    from qtts.bench.speed import speed_worker

    t0 = time.perf_counter()
    gguf = prepare(release, qtype, 0)
    r = speed_worker(str(gguf), threads, frames, 0, device=device, precision=precision)
    r.update(release=release, type=qtype, device_asked=device, threads=threads, prepare_s=time.perf_counter() - t0)
    return r


def batching(release: str, qtype: str, device: str, frames: int, batches: list[int]) -> dict[str, Any]:
    """Aggregate audio seconds per wall second of synthesize_batch at each batch size (the same
    text per item, its own seed each, EOS masked for `frames` frames)."""
    import qtts
    from qtts.bench.common import clip, prepare, settings

    m = qtts.Model(str(prepare(release, qtype, 0)), device=device, n_threads=4, voice_cache=False)
    voice = m.create_voice((clip(10.0), 24000), None, x_vector_only_mode=True)
    text = "Hello from the benchmark, a sentence of ordinary length."
    m.synthesize_batch([text] * 2, max_batch=2, voice=voice, **settings(4, 0))  # warm-up
    r: dict[str, Any] = {"devices": m.devices, "frames": frames, "rows": []}
    for b in batches:
        kw = {**settings(frames, 0), "seed": list(range(b))}
        t0 = time.perf_counter()
        out = m.synthesize_batch([text] * b, max_batch=b, voice=voice, **kw)
        wall = time.perf_counter() - t0
        audio_s = sum(len(a.samples) for a in out) / m.sample_rate
        r["rows"].append({"batch": b, "wall_s": wall, "audio_s": audio_s, "x_real_time": audio_s / wall,
                          "ms_per_step": wall * 1e3 / frames})
    return r


def official(release: str, frames: int) -> dict[str, Any]:
    """The official package on the same device and weights: bf16, x-vector voice, same frames."""
    import torch

    from qtts._reference import install
    from qtts.bench.common import clip as bench_clip
    from qtts.bench.common import prepare

    install()  # placeholders for the reference's optional audio imports
    from qwen_tts import Qwen3TTSModel

    hf = prepare(release, "bf16", 0).parent / "hf"
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    ref = Qwen3TTSModel.from_pretrained(str(hf), dtype=torch.bfloat16, device_map=dev)
    items = ref.create_voice_clone_prompt(ref_audio=(bench_clip(10.0), 24000), x_vector_only_mode=True)
    prompt = ref._prompt_items_to_voice_clone_prompt(items)
    ids = ref._tokenize_texts([ref._build_assistant_text("Hello from the benchmark, a sentence of ordinary length.")])
    gen = dict(input_ids=ids, ref_ids=[None], voice_clone_prompt=prompt, languages=["auto"], non_streaming_mode=False)
    with torch.inference_mode():
        ref.model.generate(**gen, min_new_tokens=4, max_new_tokens=5)  # warm-up
        if dev == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        codes, _ = ref.model.generate(**gen, min_new_tokens=frames, max_new_tokens=frames + 1)
        if dev == "cuda":
            torch.cuda.synchronize()
        gen_s = time.perf_counter() - t0
    n = int(codes[0].shape[0])
    return {"device": dev, "frames": n, "generation_ms_per_frame": gen_s * 1e3 / n, "torch": torch.__version__}


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
    gold = work / "goldens"
    r.phase("goldens", ["goldens", str(gold)], 60, reference=True)
    threads = min(os.cpu_count() or 1, 16)
    for prec in ("exact", "fast"):
        r.phase(f"parity_{prec}", ["parity", str(gold), "--device", a.device, "--precision", prec, "--ops", a.ops,
                                   "--sampling", a.sampling], 30)
    if a.device != "cpu" and not _passed(r.results, "parity_exact"):
        # where a difference comes from: the sampling in the frame graph, CUDA-graph capture, or
        # ggml-cuda's op fusion
        exact = ["parity", str(gold), "--device", a.device, "--precision", "exact", "--ops", a.ops]
        r.phase("parity_exact_host_sampling", [*exact, "--sampling", "host"], 20)
        r.phase("parity_exact_no_cuda_graphs", exact, 20, env={"GGML_CUDA_DISABLE_GRAPHS": "1"})
        r.phase("parity_exact_no_fusion", exact, 20, env={"GGML_CUDA_DISABLE_FUSION": "1"})
    fr = str(a.frames)
    r.phase("speed_0.6B_bf16", ["speed", "0.6B-Base", "bf16", "--device", a.device, "-t", "4", "--frames", fr], 90)
    if a.device != "cpu":
        r.phase("speed_0.6B_bf16_no_cuda_graphs", ["speed", "0.6B-Base", "bf16", "--device", a.device, "-t", "4",
                                                   "--frames", fr], 45, env={"GGML_CUDA_DISABLE_GRAPHS": "1"})
        r.phase("speed_0.6B_bf16_exact", ["speed", "0.6B-Base", "bf16", "--device", a.device, "-t", "4",
                                          "--frames", fr, "--precision", "exact"], 45)
        r.phase("speed_0.6B_q8_0_cpu", ["speed", "0.6B-Base", "q8_0", "--device", "cpu", "-t", str(threads),
                                        "--frames", fr], 90)
        r.phase("batch_0.6B_bf16", ["batch", "0.6B-Base", "bf16", "--device", a.device, "--frames", fr,
                                    "--batches", "1,8,32,64"], 60)
        r.phase("official_0.6B_bf16", ["official", "0.6B-Base", "--frames", fr], 100, reference=True)
        r.phase("speed_1.7B_bf16", ["speed", "1.7B-Base", "bf16", "--device", a.device, "-t", "4", "--frames", fr],
                150)
    r.results["finished_s"] = round(time.monotonic() - r.t0, 1)
    r.save()
    table = format_table(r.results)
    (out / "check_gpu.md").write_text(table)
    print(table)
    return 0 if all(_passed(r.results, p) for p in ("parity_exact", "parity_fast")) else 1


def _passed(res: dict[str, Any], phase: str) -> bool:
    got = (res["phases"].get(phase) or {}).get("result") or {}
    return bool(got.get("passed"))


def format_table(res: dict[str, Any]) -> str:
    ph = res["phases"]
    lines = [f"# GPU check {res['started']}: {res.get('gpu')}, {res.get('cpus')} CPUs", ""]
    if "build" in res:
        lines.append(f"build: {res['build']}")
    for prec in ("exact", "fast", "exact_host_sampling", "exact_no_cuda_graphs", "exact_no_fusion"):
        if f"parity_{prec}" not in ph:
            continue
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
    got = (ph.get("batch_0.6B_bf16") or {}).get("result")
    if got:
        lines += ["", f"## Batching (synthesize_batch, {got['frames']} frames each)", "",
                  "| B | wall s | audio s | x real time | ms per step |", "|---|---|---|---|---|"]
        lines += [f"| {w['batch']} | {w['wall_s']:.2f} | {w['audio_s']:.1f} | {w['x_real_time']:.1f} | "
                  f"{w['ms_per_step']:.2f} |" for w in got["rows"]]
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
    r.add_argument("--budget-s", type=float, default=560.0)
    r.add_argument("--phases", help="run only these phases (comma-separated names as in the JSON)")
    for name in ("info", "goldens", "parity", "speed", "batch", "official"):
        p = sub.add_parser(name, help=argparse.SUPPRESS)
        p.add_argument("--json", required=True)
        if name in ("goldens", "parity"):
            p.add_argument("dir")
        if name == "parity":
            p.add_argument("--device", default="auto")
            p.add_argument("--precision", default="exact")
            p.add_argument("--ops", default="auto")
            p.add_argument("--sampling", choices=["default", "host", "device"], default="default",
                           help="where the code predictor samples: the host sampler, or in its frame graph "
                                "(default: the device's choice, in the graph off the CPU)")
        if name in ("speed", "batch", "official"):
            p.add_argument("release")
            p.add_argument("--frames", type=int, default=100)
        if name in ("speed", "batch"):
            p.add_argument("type")
            p.add_argument("--device", default="auto")
        if name == "batch":
            p.add_argument("--batches", default="1,8,32,64")
        if name == "speed":
            p.add_argument("--precision", default="auto")
            p.add_argument("-t", "--threads", type=int, default=4)
    a = ap.parse_args(argv)
    if a.cmd == "download":
        download(Path(a.dest), a.python_version)
        return 0
    if a.cmd == "run":
        return run(a)
    if a.cmd == "info":
        import qtts
        from qtts.runtime.engine import build_info

        got: dict[str, Any] = {"qtts": qtts.__file__, **build_info()}
    elif a.cmd == "goldens":
        got = goldens(Path(a.dir))
    elif a.cmd == "parity":
        got = parity(Path(a.dir), a.device, a.precision, a.ops, a.sampling)
    elif a.cmd == "speed":
        got = speed(a.release, a.type, a.device, a.threads, a.frames, a.precision)
    elif a.cmd == "batch":
        got = batching(a.release, a.type, a.device, a.frames, [int(b) for b in a.batches.split(",")])
    else:
        got = official(a.release, a.frames)
    Path(a.json).write_text(json.dumps(got, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
