"""Text streamed in: how soon speech starts, and whether it keeps up, when the text arrives as an
LLM writes it (docs/model.md, "Text streamed in").

A ~60-word text is cut as an LLM streams it (a word with its leading space, punctuation apart)
and replayed at a fixed rate. Three ways to speak it, on the same model, voice and seed:

* stream: Model.stream(whole text), the text all there at once (the floor);
* stream_text: Model.stream_text over the deltas as they arrive;
* sentences: stream_text fed whole sentences, each when its last delta arrives (the sentence
  buffering other servers do).

Reported: first audio after the first complete word arrived (a word is complete when the delta
after it comes), and the playback gaps: audio played from its first chunk on, a gap being a
chunk that arrives after everything before it has played.

usage: python benchmarks/bench_stream_text.py [--model GGUF] [--threads 2] [--rate 30] [--frames 160]
With no --model, a random-weight 0.6B-Base at Q4_K is built once in the qtts cache (as
`qtts-cli bench speed` builds it) and speaks with an x-vector voice; EOS is masked so that every
run makes the same number of frames.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass

TEXT = ("Sure, here is a short answer. The weather in the city will stay mild this week, with light rain "
        "on Tuesday and clear skies from Thursday on. Evenings get cooler, so take a jacket if you go out late. "
        "On the weekend the temperature climbs again, which is good news for the market by the river, "
        "and for anyone who planned a long walk.")


@dataclass
class Run:
    first_word_s: float        # when the first word was complete (the delta after it arrived)
    first_audio_s: float       # when the first audio chunk came out
    word_to_audio_ms: float
    text_done_s: float         # when the last delta arrived
    audio_s: float             # seconds of audio
    done_s: float              # when the last chunk came out
    gaps: int                  # playback stalls after the start
    gap_total_ms: float
    gap_max_ms: float


def deltas(text: str) -> list[str]:
    """The text as an LLM streams it: each word with the space before it, punctuation apart (about
    the Qwen tokenizer's cut of English; the random models' stand-in vocabulary cuts finer)."""
    out = re.findall(r" ?\w+|[^\w\s]+|\s+", text)
    assert "".join(out) == text
    return out


def first_word_index(parts: list[str]) -> int:
    """The delta whose arrival completes the first word."""
    seen = ""
    for k, p in enumerate(parts):
        seen += p
        if re.search(r"\w[^\w']", seen):
            return k
    return len(parts) - 1


def replay(parts: list[str], rate: float, t0: float, release: list[int] | None = None) -> Iterator[str]:
    """Deltas at `rate` per second from t0; with `release`, joined into fragments given out at
    those delta indices (sentence buffering)."""
    cut = 0
    for k in range(len(parts)):
        delay = t0 + (k + 1) / rate - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        if release is None:
            yield parts[k]
        elif k in release:
            yield "".join(parts[cut:k + 1])
            cut = k + 1


def measure(chunks: Iterator, t0: float, first_word_s: float, text_done_s: float, sample_rate: int) -> Run:
    arrivals: list[tuple[float, float]] = []  # (time, seconds of audio)
    for c in chunks:
        if len(c.samples):
            arrivals.append((time.perf_counter() - t0, len(c.samples) / sample_rate))
    start = arrivals[0][0]
    played_until, gaps = start, []
    for t, dur in arrivals:
        if t > played_until:
            gaps.append(t - played_until)
        played_until = max(played_until, t) + dur
    return Run(first_word_s, start, (start - first_word_s) * 1e3, text_done_s, sum(d for _, d in arrivals),
               arrivals[-1][0], len(gaps), sum(gaps) * 1e3, max(gaps, default=0.0) * 1e3)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", help="a qtts GGUF (default: a random-weight 0.6B-Base at Q4_K)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--vocoder-threads", type=int, default=0)
    ap.add_argument("--rate", type=float, default=30.0, help="deltas per second")
    ap.add_argument("--frames", type=int, default=160, help="frames per run (EOS masked until then)")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()

    import qtts
    from qtts.bench.common import clip, prepare

    path = a.model or str(prepare("0.6B-Base", "q4_k", 0))
    model = qtts.load(path, n_threads=a.threads, vocoder_threads=a.vocoder_threads)
    kw: dict = dict(seed=1, min_new_tokens=a.frames, max_new_tokens=a.frames + 1, frame_budget=None)
    if model.variant == "base":
        kw["voice"] = model.create_voice((clip(3.0), 24000), x_vector_only_mode=True)
    elif model.variant == "custom_voice":
        kw["speaker"] = model.speakers[0]
    else:
        kw["instruct"] = "A clear voice."
    parts = deltas(TEXT)
    k_word = first_word_index(parts)
    ends = [k for k, p in enumerate(parts) if re.search(r"[.!?]\s*$", p)] + [len(parts) - 1]
    list(model.stream("Warm up.", non_streaming_mode=False, **{**kw, "min_new_tokens": 4, "max_new_tokens": 5}))

    if not a.json:
        print(f"{os.path.basename(path)} ({model.variant}), {a.threads} threads, vocoder threads "
              f"{a.vocoder_threads}; {len(TEXT.split())} words as {len(parts)} deltas at {a.rate:g}/s (text done "
              f"at {len(parts) / a.rate:.2f} s; first word complete at {(k_word + 1) / a.rate:.3f} s); "
              f"{a.frames} frames")
        print(f"{'':12} {'first audio s':>14} {'word->audio ms':>15} {'gaps':>5} {'gap total ms':>13} "
              f"{'gap max ms':>11} {'done s':>7} {'load':>5}", flush=True)
    results: dict[str, list[Run]] = {"stream": [], "stream_text": [], "sentences": []}
    for _ in range(a.repeats):
        for name in results:
            t0 = time.perf_counter()
            if name == "stream":
                chunks = model.stream(TEXT, non_streaming_mode=False, **kw)
            else:
                release = None if name == "stream_text" else set(ends)
                chunks = model.stream_text(replay(parts, a.rate, t0, release), **kw)
            r = measure(chunks, t0, 0.0 if name == "stream" else (k_word + 1) / a.rate, len(parts) / a.rate,
                        model.sample_rate)
            results[name].append(r)
            if not a.json:
                w2a = "-" if name == "stream" else f"{r.word_to_audio_ms:.0f}"
                print(f"{name:12} {r.first_audio_s:14.3f} {w2a:>15} {r.gaps:5d} {r.gap_total_ms:13.0f} "
                      f"{r.gap_max_ms:11.0f} {r.done_s:7.2f} {os.getloadavg()[0]:5.2f}", flush=True)
    if a.json:
        print(json.dumps({"model": path, "variant": model.variant, "threads": a.threads,
                          "vocoder_threads": a.vocoder_threads, "rate": a.rate, "deltas": len(parts),
                          "words": len(TEXT.split()), "frames": a.frames, "loadavg": os.getloadavg(),
                          "runs": {k: [asdict(r) for r in v] for k, v in results.items()}}, indent=2))


if __name__ == "__main__":
    main()
