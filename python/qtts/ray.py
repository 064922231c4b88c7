"""qtts on Ray Data: `qtts.ray.Synthesizer`, a callable class for `Dataset.map_batches`.

    import ray, qtts.ray
    ds = ray.data.from_items([{"id": "a", "text": "Hello.", "speaker": "ryan", "seed": 1}, ...])
    ds = ds.map_batches(qtts.ray.Synthesizer, fn_constructor_kwargs={"model": "model.gguf"},
                        concurrency=2, batch_size=4, num_cpus=1)

Each actor loads the model once (a path on storage every node sees, or a Hugging Face repo id
through qtts.load's download cache) and runs each batch through the model's continuous batching.
Input columns are the bulk manifest's fields (qtts.bulk.manifest.FIELDS: text, and optionally
id, speaker, language, instruct, voice, ref_audio, ref_text, x_vector_only_mode, seed,
frame_budget and the sampling settings by their qwen-tts names); other columns are ignored.
Output columns, one row per input row: id, audio (float32 samples), sample_rate, frames,
stop_reason, seed, timings (JSON), words (JSON [{"word", "start", "end"}] where the row asked for
word_timestamps, else None; the load option aligner times them) and error (None, or why this
row failed: a bad row never fails the batch). This module imports Ray only inside the actor, so qtts imports without it.
"""
from __future__ import annotations

import json
import math
from typing import Any

import numpy as np

from .bulk.manifest import FIELDS, Item, parse_item
from .bulk.synth import Finished, Synth, describe
from .runtime.aligner.subtitles import word_list
from .runtime.settings import options


def plain(value: Any) -> Any:
    """A Python value from a numpy cell; Arrow's nulls arrive as None, or as NaN in float columns."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


class Synthesizer:
    """map_batches callable: constructor kwargs model, max_batch, qtts.load's keyword arguments
    (n_threads, device, ops, precision, huge_pages, ...: runtime/settings/options.py, LoadOptions) and
    defaults for any manifest field (speaker="ryan", max_new_tokens=600, ...) that a row leaves
    out or null."""

    def __init__(self, model: str, max_batch: int = 8, **kwargs: Any) -> None:
        from .runtime.model.model import open_model

        load_options = options.LoadOptions.take(kwargs)
        defaults = kwargs
        unknown = sorted(k for k in defaults if k not in FIELDS or k in ("id", "text"))
        if unknown:
            raise TypeError(f"unexpected default(s) {', '.join(unknown)}; defaults are manifest fields "
                            f"other than id and text: {', '.join(FIELDS[2:])}")
        self.defaults = defaults
        self._synth = Synth(open_model(model, load_options), max_batch)

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        n = len(next(iter(batch.values()))) if batch else 0
        columns = [k for k in batch if k in FIELDS and k != "id"]
        ids = [str(i) if "id" not in batch or plain(batch["id"][i]) is None else str(plain(batch["id"][i]))
               for i in range(n)]
        out: list[Finished | None] = [None] * n
        items: list[Item] = []
        for i in range(n):  # each row is parsed under its position, so that ids need not be unique here
            try:
                items.append(parse_item({"id": str(i), **{k: plain(batch[k][i]) for k in columns}}, i, None,
                                        self.defaults))
            except (TypeError, ValueError, OSError) as e:
                out[i] = Finished(str(i), None, self._synth.model.sample_rate, error=describe(e))
        for f in self._synth.run(items):
            out[int(f.id)] = f
        rows = [f for f in out if f is not None]
        assert len(rows) == n
        empty = np.zeros(0, np.float32)
        return {
            "id": np.array(ids, dtype=object),
            "audio": _ragged([empty if f.samples is None else f.samples for f in rows]),
            "sample_rate": np.array([f.sample_rate for f in rows], dtype=np.int32),
            "frames": np.array([f.frames for f in rows], dtype=np.int64),
            "stop_reason": np.array([f.stop_reason for f in rows], dtype=object),
            "seed": np.array([f.seed for f in rows], dtype=object),
            "timings": np.array([json.dumps(f.timings) for f in rows], dtype=object),
            "words": np.array([None if f.words is None else json.dumps(word_list(f.words)) for f in rows],
                              dtype=object),
            "error": np.array([f.error for f in rows], dtype=object),
        }


def _ragged(arrays: list[np.ndarray]) -> np.ndarray:
    """An object array of 1-D arrays of different lengths (Ray stores it as a variable-shaped tensor column)."""
    out = np.empty(len(arrays), dtype=object)
    for i, a in enumerate(arrays):
        out[i] = a
    return out
