"""The checks of the GPU check (scripts/check_gpu.py, docs/gpu.md), each run in a process of its
own by check_gpu.py's subcommands: the reference's goldens on the tiny checkpoints, parity on a
device in either precision, speed and batching on full-size random weights, the first audio's
parts, and the official package on the same GPU."""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
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
# The ops docs/gpu.md's Metal table checks against ggml-metal's rules: a census finding another
# one means the table needs a new row
ALIGNER = "tiny_aligner"
CHECKED_OPS = {"MUL_MAT", "ADD", "SUB", "MUL", "RMS_NORM", "NORM", "SOFT_MAX", "SUM_ROWS", "CUMSUM", "MEAN", "ROPE",
               "SWIGLU", "SILU", "GELU_ERF", "ELU", "RELU", "SIGMOID", "TANH", "NEG", "STEP", "SCALE", "CLAMP",
               "SIN", "SQR", "SQRT", "CONCAT", "CPY", "CONT", "GET_ROWS", "SET_ROWS", "ARGSORT", "ARGMAX", "PAD",
               "FILL", "TRI", "IM2COL"}
# Floors of the fast precision's agreement with the reference (exact must match outright).
FAST_FLOORS = {"logits_cosine": 0.999, "codec_snr_db": 25.0}


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
    out_aligner = out / f"{ALIGNER}-f32.gguf"
    try:  # the forced aligner's tiny checkpoint, built with qwen-asr's classes, for the op census
        from tests.fixtures.aligner import ensure_aligner

        convert(ensure_aligner(), out_aligner, "f32")
    except ImportError as e:  # qwen-asr absent here: the census says it left the aligner out
        print(f"goldens: no tiny aligner ({e})", file=sys.stderr)
    enc = _clip(24000 * 5 + 17, 5)
    arrays["encode.clip"] = enc
    with torch.no_grad():
        arrays["encode.codes"] = refs["tiny_base"].model.speech_tokenizer.encode(enc, sr=24000).audio_codes[0].numpy()
    np.savez(out / "goldens.npz", **arrays)
    return {"models": sorted(refs), "cases": len(CASES), "aligner": out_aligner.exists(), "torch": torch.__version__}


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
    from qtts.runtime.synthesis.prompt import build_prompt, resolve_voice

    voice = resolve_voice(m.context, language=req.get("language", "auto"), speaker=req.get("speaker"),
                          instruct=req.get("instruct"), voice=req.get("voice"))
    out = []
    with m.engine.session() as s:
        p = build_prompt(m.context, s, TEXT, voice, non_streaming_mode=False)
        n = len(p.embeddings)
        out += list(s.talker_prefill(p.embeddings, n_ctx=n + len(codes)))
        for i, frame in enumerate(codes):
            text = p.trailing[min(i, len(p.trailing) - 1)][None]
            logits, _ = s.talker_step([int(c) for c in frame], text, n + i)
            out.append(logits)
    return out


def _sampled(m: Any, cpu: Any) -> dict[str, Any]:
    """A seeded sampled request (top-k: on a device the code predictor samples inside its frame
    graph) against the same on the CPU's portable path, and each phase's scheduler splits per
    graph: more than 1 means some op left the device (docs/gpu.md, "Views at an offset")."""
    kw = dict(speaker="ryan", language="english", seed=3, subtalker_top_k=5, subtalker_temperature=0.8,
              max_new_tokens=12)
    with m.engine.session() as s:
        s.set_profiling(True, False)
    try:
        got = m.generate_codes(TEXT, **kw).codes
        with m.engine.session() as s:
            prof = s.profile()
    finally:
        with m.engine.session() as s:
            s.set_profiling(False)
    want = cpu.generate_codes(TEXT, **kw).codes
    phases = {k.partition("/")[0] for k in prof}
    return {"frames": len(got), "codes_equal": got.shape == want.shape and bool((got == want).all()),
            "splits_per_graph": {p: prof.get(f"{p}/:splits", 0) / prof[f"{p}/:graphs"] for p in sorted(phases)
                                 if prof.get(f"{p}/:graphs")}}


def op_census(gold: Path, device: str) -> dict[str, Any]:
    """Every computed node of the portable graphs by signature (Session.op_census: op, types,
    and the views its sources are), over each tiny model's requests, a sampled one, a batch and
    the encoders, and the forced aligner's where goldens built it: the list docs/gpu.md's Metal
    table checks."""
    import numpy as np

    import qtts

    clip = np.load(gold / "goldens.npz")["clip"]
    total: dict[str, int] = {}
    # each variant once, the base model's in-context clone (both encoders); nodes run one by one
    for name, req in (CASES[0], CASES[2], CASES[4]):
        m = qtts.Model(gold / f"{name}-f32.gguf", device=device, ops="portable", n_threads=4, voice_cache=False)
        with m.engine.session() as s:
            s.native.device_sampling = True
            s.native.set_op_census(True)
        kw = _request(name, req, m, clip)
        m.synthesize(TEXT, **kw, seed=1, subtalker_top_k=5, max_new_tokens=4)
        m.synthesize_batch([TEXT, "Short."], max_batch=2, **kw, **{**GREEDY, "max_new_tokens": [4, 2]})
        with m.engine.session() as s:
            for sig, n in s.native.op_census().items():
                total[sig] = total.get(sig, 0) + int(n)
        m.close()
    aligner = gold / f"{ALIGNER}-f32.gguf"
    if aligner.exists():  # its audio encoder (several conv chunks, a padded last one) and decoder
        for sig, n in _aligner_census(aligner, device).items():
            total[sig] = total.get(sig, 0) + n
    ops = {sig.split()[0] for sig in total}
    # get_rows operands at an offset not on a 256-byte boundary (ggml-vulkan asserts on them)
    def offsets(sig: str) -> list[int]:
        return [int(src.split("@")[1].split("/")[0]) for src in sig.split("<-")[1].split(",") if "@" in src]

    misaligned = [sig for sig in total if sig.startswith("GET_ROWS") and any(a < 256 for a in offsets(sig))]
    return {"device": device, "census": dict(sorted(total.items())), "unchecked_ops": sorted(ops - CHECKED_OPS),
            "get_rows_misaligned": misaligned, "aligner": aligner.exists()}


def _aligner_census(path: Path, device: str) -> dict[str, int]:
    """The op census of one alignment on `device` (the portable path): a 3.3 s clip's log-mel
    (its values do not matter here) and a two-word prompt."""
    import numpy as np

    import qtts
    from qtts._native import core

    a = qtts.load_aligner(path, device="cpu", n_threads=2)  # the prompt's token ids
    mel = np.random.default_rng(0).standard_normal((int(a.engine.hparams["audio_encoder"]["mel_bins"]), 333))
    s = core.AlignerSession(core.AlignerModel(str(path), device, core.Ops.portable, core.Precision.auto), 2)
    s.set_op_census(True)
    rows = s.encode(mel.astype(np.float32))
    s.timestamp_logits(a.prompt(["Hello", "world"], rows.shape[0]), rows)
    a.close()
    return {sig: int(n) for sig, n in s.op_census().items()}


def parity(gold: Path, device: str, precision: str, ops: str = "auto", sampling: str = "default",
           only: str | None = None) -> dict[str, Any]:
    """Every case (or `only` the cases of one model) on `device` against the reference's
    goldens, and the same stages on the CPU's portable path (the reference for every device
    graph) to locate a difference."""
    import numpy as np

    import qtts

    g = dict(np.load(gold / "goldens.npz"))
    wav = g["clip"]
    r: dict[str, Any] = {"device": device, "precision": precision, "cases": [],
                         "tf32_override_at_start": os.environ.get("NVIDIA_TF32_OVERRIDE")}
    models: dict[str, Any] = {}
    for i, (name, req) in enumerate(CASES):
        if only is not None and name != only:
            continue
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
    if "tiny_base" in models:
        with models["tiny_base"][0].engine.session() as s:
            enc = s.encode(g["encode.clip"])
        r["encoder_codes_equal"] = enc.shape == g["encode.codes"].shape and bool((enc == g["encode.codes"]).all())
    else:
        r["encoder_codes_equal"] = None
    if "tiny_custom_voice" in models:
        r["sampled"] = _sampled(*models["tiny_custom_voice"])
    r["tf32_override"] = os.environ.get("NVIDIA_TF32_OVERRIDE")
    cases = r["cases"]
    if precision == "exact":
        r["passed"] = (r["encoder_codes_equal"] is not False and all(c["codes_equal"] and c["wav_len_equal"]
                                                        and c["wav_max_abs"] <= 1e-4 for c in cases))
    else:
        r["floors"] = FAST_FLOORS
        r["passed"] = all(c["logits_cosine_min"] >= FAST_FLOORS["logits_cosine"]
                          and c["codec_snr_db"] >= FAST_FLOORS["codec_snr_db"] for c in cases)
    return r


def batch_parity(gold: Path, device: str, precision: str) -> dict[str, Any]:
    """Requests of different lengths through the batch (synthesize_batch: the batched talker
    step, the code predictor's batched frame graph sampling on the device) against each one
    alone on the same device: greedy codes equal, and how far the waveforms are apart."""
    import numpy as np

    import qtts

    g = dict(np.load(gold / "goldens.npz"))
    texts = [TEXT, "Short.", "A longer sentence, with a few more words than the others.", "Two words."]
    r: dict[str, Any] = {"device": device, "precision": precision, "models": []}
    for name, req in (CASES[0], CASES[2], CASES[3]):
        m = qtts.Model(gold / f"{name}-f32.gguf", device=device, precision=precision, n_threads=4,
                       voice_cache=False)
        kw = _request(name, req, m, g["clip"])
        lengths = [21, 8, 15, 5]  # max_new_tokens per request: they leave the batch at different steps
        alone = [m.synthesize(t, **kw, **{**GREEDY, "max_new_tokens": n}) for t, n in zip(texts, lengths, strict=True)]
        batched = m.synthesize_batch(texts, max_batch=len(texts), **kw, **{**GREEDY, "max_new_tokens": lengths})
        rows = []
        for a, b in zip(alone, batched, strict=True):
            same = a.codes.shape == b.codes.shape and bool((a.codes == b.codes).all())
            n = min(len(a.samples), len(b.samples))
            rows.append({"frames": len(a.codes), "codes_equal": same,
                         "wav_max_abs": float(np.abs(a.samples[:n] - b.samples[:n]).max()) if same else None})
        r["models"].append({"model": name, "devices": m.devices, "requests": rows})
    r["passed"] = all(x["codes_equal"] for mm in r["models"] for x in mm["requests"])
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
    text per item, its own seed each, EOS masked for `frames` frames), and where each B's time
    went (bench.profile.plumbing: per phase)."""
    import qtts
    from qtts.bench.common import clip, prepare, settings
    from qtts.bench.profile import plumbing

    m = qtts.Model(str(prepare(release, qtype, 0)), device=device, n_threads=4, voice_cache=False)
    voice = m.create_voice((clip(10.0), 24000), None, x_vector_only_mode=True)
    text = "Hello from the benchmark, a sentence of ordinary length."
    m.synthesize_batch([text] * 2, max_batch=2, voice=voice, **settings(4, 0))  # warm-up
    r: dict[str, Any] = {"devices": m.devices, "frames": frames, "rows": []}
    for b in batches:
        kw = {**settings(frames, 0), "seed": list(range(b))}
        with plumbing(m) as prof:
            t0 = time.perf_counter()
            out = m.synthesize_batch([text] * b, max_batch=b, voice=voice, **kw)
            wall = time.perf_counter() - t0
        audio_s = sum(len(a.samples) for a in out) / m.sample_rate
        r["rows"].append({"batch": b, "wall_s": wall, "audio_s": audio_s, "x_real_time": audio_s / wall,
                          "ms_per_step": wall * 1e3 / frames, "profile": prof})
    return r


def batch_ops(release: str, qtype: str, device: str, batch: int, frames: int) -> dict[str, Any]:
    """Where a batched step's device time goes, per op: synthesize_batch of `batch` requests of
    `frames` frames with the session's per-op profile (graphs run node by node, each synchronized:
    each op's time is its kernels' plus a launch and a sync), the top ops of each phase in ms."""
    import qtts
    from qtts.bench.common import clip, prepare, settings

    m = qtts.Model(str(prepare(release, qtype, 0)), device=device, n_threads=4, voice_cache=False)
    voice = m.create_voice((clip(10.0), 24000), None, x_vector_only_mode=True)
    text = "Hello from the benchmark, a sentence of ordinary length."
    kw = {**settings(frames, 0), "seed": list(range(batch))}
    m.synthesize_batch([text] * batch, max_batch=batch, voice=voice, **kw)  # warm-up: every graph built
    with m.engine.session() as s:
        s.set_profiling(True)
    try:
        m.synthesize_batch([text] * batch, max_batch=batch, voice=voice, **kw)
        with m.engine.session() as s:
            raw = dict(s.profile())
    finally:
        with m.engine.session() as s:
            s.set_profiling(False)
    phases: dict[str, dict[str, float]] = {}
    for key, ms in raw.items():
        phase, _, op = key.partition("/")
        phases.setdefault(phase, {})[op] = round(ms, 3)
    top = {}
    for ph, ops in phases.items():  # the 12 slowest ops, then the compute total and the counts
        timed = sorted(((op, ms) for op, ms in ops.items() if not op.startswith(":")), key=lambda kv: -kv[1])
        top[ph] = {**dict(timed[:12]), **{k: ops[k] for k in (":compute", ":graphs", ":nodes") if k in ops}}
    return {"devices": m.devices, "batch": batch, "frames": frames, "phases": top}


PUSH_SHAPES = ((1, 1), (1, 8), (8, 1), (8, 8), (16, 1), (16, 8), (64, 8))  # (streams, frames)


def vocoder_pushes(release: str, qtype: str, device: str, repeats: int = 3, shapes: Any = PUSH_SHAPES,
                   eager: tuple[int, int] = (64, 50)) -> dict[str, Any]:
    """What a batched vocoder push costs on this device (docs/serving.md, "Batched vocoder"):
    for S streams of F frames each, the median ms of one decode_streams_push and its plumbing
    (graphs, nodes, build/alloc/compute); a lone stream's chunk of up to 8 frames is a replayed
    graph, the rest are built per push. Then `synthesize_batch`'s eager decode of 64 pieces of 50
    frames (`eager`): one push of all on fresh streams against a decode per piece."""
    import numpy as np

    import qtts
    from qtts.bench.common import prepare
    from qtts.bench.profile import plumbing

    m = qtts.Model(str(prepare(release, qtype, 0)), device=device, n_threads=4, voice_cache=False)
    rng = np.random.default_rng(0)

    book = int(m.engine.hparams["codec_decoder"]["codebook_size"])

    def codes(n: int) -> Any:
        return rng.integers(0, book, size=(n, m.engine.num_code_groups)).astype(np.int32)

    def timed(run: Any, repeats: int = repeats) -> dict[str, Any]:
        times: list[float] = []
        prof: dict[str, Any] = {}
        for i in range(repeats + 1):  # the first builds (a replayed graph: once)
            with plumbing(m) as got:
                t0 = time.perf_counter()
                run()
                ms = (time.perf_counter() - t0) * 1e3
            if i:
                times.append(ms)
                prof = got
        return {"ms": float(np.median(times)), "plumbing": prof.get("vocoder", {})}

    rows = []
    for streams, frames in shapes:
        ids = [m.engine.new_stream_id() for _ in range(streams)]
        with m.engine.session() as s:
            for i in ids:
                s.decode_stream_reset(stream=i)

        def push(ids: list[int] = ids, frames: int = frames) -> None:
            with m.engine.session() as s:
                s.decode_streams_push([(i, codes(frames)) for i in ids])

        rows.append({"streams": streams, "frames": frames, **timed(push)})
        with m.engine.session() as s:
            for i in ids:
                s.decode_stream_close(i)
    pieces = [codes(eager[1]) for _ in range(eager[0])]
    ids = [m.engine.new_stream_id() for _ in range(eager[0])]

    def together() -> None:
        with m.engine.session() as s:
            for i in ids:
                s.decode_stream_reset(stream=i)
            s.decode_streams_push(list(zip(ids, pieces, strict=True)))

    def each() -> None:
        with m.engine.session() as s:
            for p in pieces:
                s.decode(p)

    got = {"pieces": eager[0], "frames": eager[1], "together": timed(together, 2), "each_alone": timed(each, 1)}
    with m.engine.session() as s:
        for i in ids:
            s.decode_stream_close(i)
    return {"devices": m.devices, "pushes": rows, "eager": got}


def first_audio(release: str, qtype: str, device: str, runs: int) -> dict[str, Any]:
    """Where a stream's first audio goes: `runs` streams after a warm-up, each with its time to
    the first chunk and its tokenize, prompt and prefill parts; then the first chunk's decode
    and one generated frame alone, and what is left (the stream's own overhead)."""
    import numpy as np

    import qtts
    from qtts.bench.common import clip, prepare, settings

    m = qtts.Model(str(prepare(release, qtype, 0)), device=device, n_threads=4, voice_cache=False)
    voice = m.create_voice((clip(10.0), 24000), None, x_vector_only_mode=True)
    text = "Hello from the benchmark, a sentence of ordinary length."
    m.synthesize(text, voice=voice, **settings(8, 0))  # warm-up: every graph built once
    rows = []
    for i in range(runs):
        t = qtts.Timings()
        t0 = time.perf_counter()
        it = m.stream(text, voice=voice, timings=t, **settings(16, i))
        first = next(it)
        ms = (time.perf_counter() - t0) * 1e3
        for _ in it:
            pass
        rows.append({"first_audio_ms": ms, "first_chunk_frames": len(first.codes), "tokenize_ms": t.tokenize_ms,
                     "prompt_ms": t.prompt_ms, "prefill_ms": t.prefill_ms,
                     "frame_ms": t.talker_ms_per_frame + t.predictor_ms_per_frame})
    codes = m.generate_codes(text, voice=voice, **settings(4, 0)).codes
    decode, pushed = [], []
    with m.engine.session() as s:
        s.decode_stream_reset()
        s.decode_stream_push(codes[:1])  # its graph built once
        builds = s.native.codec_replay_builds
        for _ in range(runs):
            t0 = time.perf_counter()
            s.decode(codes[:1])  # a graph built for the call
            decode.append((time.perf_counter() - t0) * 1e3)
            s.decode_stream_reset()
            t0 = time.perf_counter()
            s.decode_stream_push(codes[:1])  # the stream's first chunk: a replayed graph
            pushed.append((time.perf_counter() - t0) * 1e3)
        builds = s.native.codec_replay_builds - builds
    med = {k: float(np.median([r[k] for r in rows])) for k in rows[0]}
    med["decode_1_frame_built_ms"] = float(np.median(decode))
    med["decode_1_frame_ms"] = float(np.median(pushed))
    med["replay_builds_while_timed"] = builds  # 0: the streams' pushes all replayed
    med["rest_ms"] = med["first_audio_ms"] - sum(med[k] for k in ("tokenize_ms", "prompt_ms", "prefill_ms",
                                                                  "frame_ms", "decode_1_frame_ms"))
    return {"devices": m.devices, "runs": rows, "median": med}


def serve(release: str, qtype: str, device: str, frames: int, clients: int, rate: float, duration: float,
          batches: list[int], pipelined_vocoder: bool | None = None) -> dict[str, Any]:
    """`qtts-cli bench serve`'s measurement (python/qtts/bench/serve.py) on this device: a live
    server per max batch under Poisson-arriving streaming clients."""
    from qtts.bench.common import prepare
    from qtts.bench.serve import serve_worker

    return serve_worker(str(prepare(release, qtype, 0)), 4, frames, 0, clients, rate, duration, batches, device=device,
                        profile=True, pipelined_vocoder=pipelined_vocoder)


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
